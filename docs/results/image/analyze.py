"""Tables and claim numbers of docs/results/image.md from the run folders of the image experiments.

Reads the ``results.json`` of each ``ensemblize experiment`` run (or, for a run still in progress,
its finished jobs under ``jobs/``) and prints markdown: mean ± std tables over seeds
(:func:`ensemblize.experiments.image_report.markdown_table`), per-seed paired differences, Spearman
correlations, least-squares ECE-vs-severity slopes, Pareto fronts and gate statistics at
initialisation and at the end of training (rebuilt from the seed as ``runner.run_method`` does, and
loaded from the saved checkpoints). Only test metrics already in the records are read; nothing is
chosen on test here.

Usage::

    .venv/bin/python docs/results/image/analyze.py --dataset digits --root runs/image-regen/digits
    .venv/bin/python docs/results/image/analyze.py --dataset mnist1d --train-size 1000 \
        --root runs/image-regen/mnist1d --compare runs/search/mnist1d-compare
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from ensemblize.data.datasets import load_dataset
from ensemblize.experiments.image_report import (
    SWEEP_METRICS,
    group_stats,
    markdown_table,
    owners_matrix,
    pareto_front,
)
from ensemblize.runner import MethodSpec, build_method, load_method

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from select_sigma_default import _gates as all_gates  # noqa: E402
from select_sigma_default import gate_stats, ks_distance, left_initial  # noqa: E402

SEVERITIES = range(1, 6)


def records_of(folder: Path) -> list[dict]:
    """The run's records (results.json when the run finished, else its finished jobs), each tagged
    with ``_folder`` and ``_ckpt`` (its checkpoint name) and, from a job file, ``_details``."""
    rows = []
    if (folder / "results.json").is_file():
        rows = json.loads((folder / "results.json").read_text())
    details = {}
    for path in sorted((folder / "jobs").glob("*.json")) if (folder / "jobs").is_dir() else []:
        job = json.loads(path.read_text())
        for r in job["records"]:
            details[(r["method"], r["seed"])] = job.get("extras", {}).get("evaluation", {}).get("details")
            if not (folder / "results.json").is_file():
                rows.append(r)
    for r in rows:
        r.update(_folder=str(folder), _ckpt=r["method"], _details=details.get((r["method"], r["seed"])))
    return rows


def borrowed(records: list[dict], method: str, label: str, *, reduced: bool = False, **spec) -> list[dict]:
    """``method``'s records of another run (compare) relabelled ``label`` for a sweep table; ``spec``
    must match the record's (the same configuration, so the same trained model). ``reduced``: the
    table's runs used the reduced evaluation, so the shift metrics (``corr_*``, full evaluation in
    compare) are dropped — they were measured on other shifts and samples."""
    out = []
    for r in records:
        if r["method"] != method:
            continue
        for k, v in spec.items():
            if not math.isclose(float(r["spec"][k]), float(v)):
                raise ValueError(f"{method} seed {r['seed']}: spec {k} = {r['spec'][k]}, not {v}")
        metrics = {k: v for k, v in r["metrics"].items() if not (reduced and k.startswith("corr_"))}
        out.append({**r, "method": label, "metrics": metrics})
    return out


def ms(values, fmt: str = ".4f") -> str:
    """``mean ± std`` (ddof 1) of ``values``."""
    a = np.asarray(values, dtype=float)
    return f"{a.mean():{fmt}} ± {a.std(ddof=1):{fmt}}" if a.size > 1 else f"{a.mean():{fmt}}"


def by_seed(records: list[dict], method: str, metric: str) -> dict[int, float]:
    """``{seed: metric}`` of ``method``'s records."""
    return {
        r["seed"]: float(r["metrics"].get(metric, r.get(metric, math.nan)))
        for r in records
        if r["method"] == method
    }


def paired(records: list[dict], a: str, b: str, metric: str) -> str:
    """Per-seed differences a − b of ``metric`` (same seed = same split and initialisation)."""
    x, y = by_seed(records, a, metric), by_seed(records, b, metric)
    seeds = sorted(set(x) & set(y))
    return ", ".join(f"{x[s] - y[s]:+.4f}" for s in seeds)


class Data:
    """Splits per (seed, heldout), loaded once."""

    def __init__(self, dataset: str, train_size: int | None) -> None:
        self.dataset, self.train_size, self.cache = dataset, train_size, {}

    def splits(self, seed: int, heldout: bool = False):
        key = (seed, heldout)
        if key not in self.cache:
            bench = load_dataset(self.dataset, seed=seed, heldout=heldout, train_size=self.train_size)
            self.cache[key] = bench.splits
        return self.cache[key]


def gate_rows(folder: Path, records: list[dict], data: Data, heldout: bool = False) -> list[dict]:
    """Per σN-Ens record of a from-scratch run: gate statistics at initialisation and at the end."""
    out = []
    for r in records:
        spec = r.get("spec", {})
        if spec.get("method") != "sigma" or r["method"] == "sigma_finetuned":
            continue
        splits = data.splits(r["seed"], heldout)
        torch.manual_seed(r["seed"])  # as runner.run_method before build_method
        init_model = build_method(MethodSpec(**spec), splits)
        path = Path(r.get("_folder", folder)) / "models" / f"{r.get('_ckpt', r['method'])}_seed{r['seed']}"
        if not path.with_name(path.name + ".json").is_file():
            continue
        end_model, _, _ = load_method(path, splits)
        g0, g1 = all_gates(init_model), all_gates(end_model)
        row = {
            "method": r["method"],
            "seed": r["seed"],
            "init": gate_stats(init_model),
            "end": gate_stats(end_model),
            "ks": ks_distance(g0, g1),
            "flipped": float(((g0 >= 0.5) != (g1 >= 0.5)).float().mean()),
            "std0": float(g0.std()),
            "std1": float(g1.std()),
        }
        row["left"] = left_initial(row)
        out.append(row)
    return out


def gate_table(rows: list[dict]) -> str:
    """Mean ± std over seeds per setting of the gate statistics."""
    lines = [
        "| setting | n | owners init → end | spread init → end | gate std init → end | KS | flipped "
        "| binary end | left (seeds) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    settings = list(dict.fromkeys(r["method"] for r in rows))
    for s in settings:
        g = [r for r in rows if r["method"] == s]

        def col(f, fmt=".3f", g=g):
            return ms([f(r) for r in g], fmt)

        lines.append(
            f"| {s} | {len(g)} | {col(lambda r: r['init']['owners'], '.2f')} → {col(lambda r: r['end']['owners'], '.2f')} "
            f"| {col(lambda r: r['init']['spread'])} → {col(lambda r: r['end']['spread'])} "
            f"| {col(lambda r: r['std0'])} → {col(lambda r: r['std1'])} | {col(lambda r: r['ks'])} "
            f"| {col(lambda r: r['flipped'])} | {col(lambda r: r['end']['binary'])} "
            f"| {sum(r['left'] for r in g)}/{len(g)} |"
        )
    return "\n".join(lines)


def severity_slopes(records: list[dict], method: str) -> list[float]:
    """Least-squares slope of ECE over severities 1–5 (mean over kinds), one per seed."""
    out = []
    for r in sorted((r for r in records if r["method"] == method), key=lambda r: r["seed"]):
        y = [r["metrics"][f"corr_ece_s{s}"] for s in SEVERITIES]
        out.append(float(np.polyfit(list(SEVERITIES), y, 1)[0]))
    return out


def spearman_per_seed(records: list[dict], param: str, metric: str) -> str:
    """Spearman(param, metric) over the sweep, one per seed."""
    seeds = sorted({r["seed"] for r in records})
    vals = []
    for s in seeds:
        rs = [r for r in records if r["seed"] == s]
        rho = spearmanr([float(r["spec"][param]) for r in rs], [r["metrics"][metric] for r in rs]).statistic
        vals.append(f"{rho:+.2f}")
    return " / ".join(vals)


def fronts(records: list[dict], param: str) -> str:
    """Non-dominated settings (means over seeds) on accuracy–ECE and NLL–ECE."""
    key = lambda r: float(r["spec"][param])  # noqa: E731
    acc, nll_, ece_ = (group_stats(records, key, m) for m in ("accuracy", "nll", "ece"))
    xs = sorted(acc)
    f1 = pareto_front([(acc[x][0], ece_[x][0]) for x in xs], minimize=(False, True))
    f2 = pareto_front([(nll_[x][0], ece_[x][0]) for x in xs], minimize=(True, True))
    val = group_stats(records, key, "val_nll")
    best = min(xs, key=lambda x: val[x][0])
    return (
        f"non-dominated {param} on accuracy–ECE: {[xs[i] for i in f1]}; on NLL–ECE: {[xs[i] for i in f2]}; "
        f"validation-NLL choice: {param} = {best:g} ({val[best][0]:.4f})"
    )


def conf_minus_acc(records: list[dict]) -> dict[str, str]:
    """Mean confidence − accuracy (test) per method, from the reliability bins of the job details."""
    out = {}
    for m in dict.fromkeys(r["method"] for r in records):
        vals = []
        for r in records:
            rel = (r.get("_details") or {}).get("reliability") if r["method"] == m else None
            if rel:
                conf, count = np.asarray(rel["confidence"], float), np.asarray(rel["count"], float)
                ok = count > 0
                vals.append(float((conf[ok] * count[ok]).sum() / count.sum()) - r["metrics"]["accuracy"])
        if vals:
            out[m] = ms(vals)
    return out


COMPARE_TABLES = {
    "Clean and selective": ["accuracy", "nll", "ece", "brier", "aurc", "eaurc", "augrc"],
    "Shift (ECE per severity; `ece` = clean)": [
        "corr_accuracy",
        "corr_nll",
        "corr_ece",
        "ece",
        *(f"corr_ece_s{s}" for s in SEVERITIES),
    ],
    "OOD (far-OOD AUROC, mean over sets)": ["ood_maxprob_auroc", "ood_entropy_auroc", "ood_mi_auroc"],
    "Diversity": [
        "disagreement",
        "pairwise_kl",
        "mutual_information",
        "member_accuracy",
        "member_nll",
        "owners_per_feature",
    ],
}
SWEEP_TABLES = [
    ["accuracy", "nll", "ece", "corr_ece", "ood_maxprob_auroc", "ood_mi_auroc", "val_nll", "val_ece"],
    ["disagreement", "pairwise_kl", "mutual_information", "owners_per_feature", "member_accuracy"],
]


def section(title: str) -> None:
    print(f"\n## {title}\n")


def present(records: list[dict], metrics: list[str]) -> list[str]:
    return [m for m in metrics if any(m in r["metrics"] for r in records)]


def table(records: list[dict], metrics: list[str], digits: int = 4) -> None:
    print(markdown_table(records, metrics=present(records, metrics), digits=digits) + "\n")


def report_compare(folder: Path, data: Data) -> None:
    recs = records_of(folder)
    section(f"compare ({folder}, {len(recs)} records)")
    for title, metrics in COMPARE_TABLES.items():
        print(f"{title}:\n")
        table(recs, metrics, 3 if title.startswith("Shift") else 4)
    if not recs:
        return
    for a, b in (("sigma_ens", "deep_ensemble"), ("sigma_ens", "single"), ("deep_ensemble", "single")):
        for m in ("accuracy", "nll", "ece", "corr_ece", "ood_maxprob_auroc", "ood_mi_auroc"):
            print(f"- paired {a} − {b} {m}: {paired(recs, a, b, m)}")
    methods = list(dict.fromkeys(r["method"] for r in recs))
    for m in methods:
        if "corr_ece_s1" in recs[0]["metrics"]:
            sl = severity_slopes(recs, m)
            print(
                f"- ECE slope per severity {m}: "
                + " / ".join(f"{v:.4f}" for v in sl)
                + f" (mean {np.mean(sl):.4f})"
            )
    nll = {m: by_seed(recs, m, "nll") for m in ("single", "deep_ensemble", "sigma_ens")}
    if all(nll.values()):
        seeds = sorted(nll["sigma_ens"])
        fr = [
            (nll["single"][s] - nll["sigma_ens"][s]) / (nll["single"][s] - nll["deep_ensemble"][s])
            for s in seeds
        ]
        print(
            "- fraction of the single→deep NLL gap closed by σN-Ens per seed: "
            + ", ".join(f"{f:+.3f}" for f in fr)
            + f"; mean ± std {ms(fr, '.3f')}"
        )
    print(f"- confidence − accuracy: {conf_minus_acc(recs)}")
    print("\nGates of σN-Ens (init → end):\n")
    print(gate_table(gate_rows(folder, recs, data)))


def report_sweep(folders: list[Path], data: Data, param: str, extra: list[dict]) -> None:
    folder = folders[0]
    recs = [r for f in folders for r in records_of(f)]
    section(
        f"{param} sweep ({', '.join(map(str, folders))}: {len(recs)} records + {len(extra)} from compare)"
    )
    if not recs:
        return
    recs = sorted(recs + extra, key=lambda r: (float(r["spec"][param]), r["seed"]))
    for metrics in SWEEP_TABLES:
        table(recs, metrics)
    for m in (
        "owners_per_feature",
        "mutual_information",
        "disagreement",
        "pairwise_kl",
        "accuracy",
        "nll",
        "ece",
        "ood_maxprob_auroc",
    ):
        print(f"- Spearman({param}, {m}) per seed: {spearman_per_seed(recs, param, m)}")
    print("- " + fronts(recs, param))
    if extra:
        ref = extra[0]["method"]
        for label in dict.fromkeys(r["method"] for r in recs):
            if label != ref:
                diffs = "; ".join(
                    f"{m} {paired(recs, label, ref, m)}" for m in ("accuracy", "nll", "ece", "corr_ece")
                )
                print(f"- paired {label} − {ref}: {diffs}")
    layers, values, mat = owners_matrix(recs, param=param)
    print(f"\nOwners per feature, layer × {param} (mean over seeds):\n")
    print("| layer | " + " | ".join(f"{v:g}" for v in values) + " |")
    print("|---|" + "---|" * len(values))
    for name, row in zip(layers, mat, strict=True):
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    print("\nGates (init → end):\n")
    print(gate_table(gate_rows(folder, recs, data)))


def report_plain(
    folders: list[Path], data: Data, title: str, metrics: list[str], extra: list[dict], **kw
) -> None:
    folder = folders[0]
    recs = [r for f in folders for r in records_of(f)]
    section(f"{title} ({', '.join(map(str, folders))}: {len(recs)} records + {len(extra)} from compare)")
    if not recs:
        return
    recs = recs + extra
    if title == "members":
        recs = sorted(recs, key=lambda r: (r["spec"]["method"], r["members"], r["seed"]))
    table(recs, metrics)
    if "sigma_finetuned" in {r["method"] for r in recs}:
        for m in (
            "accuracy",
            "nll",
            "ece",
            "ood_maxprob_auroc",
            "ood_mi_auroc",
            "ood_heldout_maxprob_auroc",
            "ood_heldout_mi_auroc",
        ):
            if m in recs[0]["metrics"]:
                for other in ("sigma_finetuned", "deep_ensemble"):
                    print(f"- paired sigma_scratch − {other} {m}: {paired(recs, 'sigma_scratch', other, m)}")
        ft = [r["finetune_seconds"] for r in recs if r["method"] == "sigma_finetuned"]
        sc = [r["train_seconds"] for r in recs if r["method"] == "sigma_scratch"]
        print(f"- fine-tune seconds {ms(ft, '.1f')} vs σN-Ens from scratch {ms(sc, '.1f')}")
        single = [r for r in recs if r["method"] == "single"]
        print(f"- single model here vs compare's: {[round(r['metrics']['nll'], 6) for r in single]}")
    print("\nGates (init → end):\n")
    print(gate_table(gate_rows(folder, recs, data, **kw)))


HEADLINE = ["accuracy", "nll", "ece", "ood_maxprob_auroc", "disagreement"]
FINETUNE = [*SWEEP_METRICS[:6], "disagreement", "mutual_information", "owners_per_feature", "val_nll"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--train-size", type=int, default=None)
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--compare", type=Path, default=None, help="compare run folder (default ROOT/compare)")
    p.add_argument("--tau", type=float, default=0.32, help="compare's σN-Ens τ")
    p.add_argument("--lam", type=float, default=0.35, help="compare's σN-Ens λ")
    a = p.parse_args()
    torch.set_num_threads(1)
    data = Data(a.dataset, a.train_size)
    root = a.root
    cmp_folder = a.compare or root / "compare"
    report_compare(cmp_folder, data)
    cmp = records_of(cmp_folder)
    t, lam = a.tau, a.lam

    def found(names) -> list[Path]:
        return [root / n for n in names if (root / n).is_dir()]

    # the λ sweep at τ = 1 borrows its λ = 0.35 point from the τ sweep (same configuration and seed)
    tau1 = [r for f in found(["tau-sweep"]) for r in records_of(f)]
    sweeps = {
        ("tau-sweep", "tau-sweep-extra", "tau-sweep-0p5"): (
            "tau",
            borrowed(cmp, "sigma_ens", f"sigma_tau={t:g}".replace(".", "p"), reduced=True, tau=t, lam=lam),
        ),
        ("lambda", "lambda-lo"): (
            "lam",
            borrowed(cmp, "sigma_ens", f"sigma_lam={lam:g}".replace(".", "p"), reduced=True, tau=t, lam=lam),
        ),
        ("lambda-tau1",): (
            "lam",
            [
                {**r, "method": f"sigma_lam={lam:g}".replace(".", "p")}
                for r in tau1
                if r["method"] == "sigma_tau=1" and math.isclose(float(r["spec"]["lam"]), lam)
            ],
        ),
        ("lambda-tau5",): ("lam", []),
    }

    for names, (param, extra) in sweeps.items():
        if found(names):
            report_sweep(found(names), data, param, extra)
    members = borrowed(cmp, "sigma_ens", "sigma_M=4", reduced=True, members=4, tau=t, lam=lam)
    members += borrowed(cmp, "packed", "packed_M=4", reduced=True, members=4, alpha=2.0)
    member_runs = found(["members", "members2", "members8", "members16"])
    if member_runs:
        metrics = [*HEADLINE, "member_accuracy", "owners_per_feature"]
        report_plain(member_runs, data, "members", metrics, members)
    scratch = borrowed(cmp, "sigma_ens", "sigma_scratch", tau=t, lam=lam)
    scratch += borrowed(cmp, "deep_ensemble", "deep_ensemble")
    for name in ("finetune-lite", "finetune-lite2", "finetune"):
        if (root / name).is_dir():
            report_plain(
                [root / name], data, name, FINETUNE, scratch if name.startswith("finetune-lite") else []
            )
    if (root / "finetune-heldout").is_dir():
        metrics = [*FINETUNE[:3], "ood_heldout_maxprob_auroc", "ood_heldout_mi_auroc", *FINETUNE[4:8]]
        report_plain([root / "finetune-heldout"], data, "finetune --heldout", metrics, [], heldout=True)


if __name__ == "__main__":
    main()
