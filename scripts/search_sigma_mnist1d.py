"""Search σN-Ens's own knobs on the MNIST-1D VALIDATION split (issue 10, item 6) with Optuna TPE.

Every trial trains exactly as ``ensemblize experiment compare --dataset mnist1d --train-size 1000
--epochs 20`` trains its σN-Ens row: ``load_dataset("mnist1d", seed=s, train_size=1000)``,
``torch.manual_seed(s)``, ``runner.build_method(MethodSpec("sigma", model="resnet1d", members=4, ...))``
(``ez.sigma_ensemble``), then ``runner.train_method`` (``ez.training.fit``: SGD lr 0.05, momentum 0.9,
coupled weight decay 5e-4 with the standard no-decay groups, cosine, batch 64, 20 epochs, no early
stopping). It is scored on the validation split only — NLL, accuracy and ECE of p̄ — the test split is
never touched. Gate statistics at initialisation and at the end are those of
``scripts/select_sigma_default.py`` (spread, owners per feature, histogram, KS, flipped).

Knobs (the method's own; everything else is the experiment's recipe):

* ``noise`` ∈ [0, 1] — std of the gate-logit initialisation noise;
* ``tau`` ∈ [0.1, 10] (log) and ``lam`` ∈ [0.01, 20] (log) — the softmax-temperature regulariser;
* ``gate_lr_scale`` ∈ [0.1, 30] (log) — the gate logits' learning rate as a multiple of lr;
* ``norms`` ∈ {all, no_stem, last_stage} — which norm layers become σNorm (``runner.SIGMA_NORMS``).

Stage 1: ``--trials`` TPE trials on seed 0 (the current default is enqueued first, as a reference).
Stage 2: the ``--top`` configurations with the lowest seed-0 validation NLL and the ``--top-left`` lowest
among those whose gates left their initial distribution, on seeds 1 and 2 (ordered by :func:`candidates`).
Choice: the lowest mean validation NLL over seeds 0-2 among configurations whose gates left their
initial distribution on every seed (``select_sigma_default.left_initial``: KS ≥ 0.5 and
spread_end ≥ 2·spread_init); the unconstrained best is reported too.

Usage (one thread; every run appended to ``--out`` so an interrupted search resumes)::

    .venv/bin/python scripts/search_sigma_mnist1d.py --trials 30 --out runs/sigma_search/mnist1d.jsonl
    .venv/bin/python scripts/search_sigma_mnist1d.py --report --out runs/sigma_search/mnist1d.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from select_sigma_default import (
    STAT_HEADER,
    _ms,
    left_initial,
    owners_lines,
    parse_common,
    stat_cells,
    train_and_score,
)  # noqa: E402

from ensemblize.data.datasets import load_dataset  # noqa: E402
from ensemblize.runner import SIGMA_NORMS, MethodSpec, TrainConfig  # noqa: E402

KNOBS = ("noise", "tau", "lam", "gate_lr_scale", "norms")
#: The library default before this search (digits-chosen), enqueued as trial 0.
REFERENCE = {"noise": 0.5, "tau": 1.0, "lam": 5.0, "gate_lr_scale": 1.0, "norms": "all"}


def run_config(cfg: dict, seed: int, *, epochs: int, train_size: int) -> dict:
    """Train σN-Ens with ``cfg`` as the compare experiment does; validation metrics + gate statistics."""
    splits = load_dataset("mnist1d", seed=seed, train_size=train_size).splits
    spec = MethodSpec("sigma", model="resnet1d", members=4, label="sigma_ens", **cfg)
    row = train_and_score(spec, splits, TrainConfig(epochs=epochs), seed=seed)
    return {**cfg, **row, "train_size": train_size}


def key_of(row: dict) -> tuple:
    """The configuration of a row (rounded so JSON round trips compare equal)."""
    return tuple(round(row[k], 10) if isinstance(row[k], float) else row[k] for k in KNOBS)


def load(path: Path) -> list[dict]:
    """Every row of the JSONL file (none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_config(rows: list[dict]) -> dict[tuple, dict[int, dict]]:
    """``{config: {seed: row}}``."""
    out: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(key_of(r), {})[r["seed"]] = r
    return out


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _say(r: dict) -> None:
    cfg = " ".join(f"{k}={r[k]:.3g}" if isinstance(r[k], float) else f"{k}={r[k]}" for k in KNOBS)
    print(
        f"{time.strftime('%H:%M:%S')} seed {r['seed']} {cfg}: nll {r['val_nll']:.4f} acc {r['val_accuracy']:.4f} "
        f"ece {r['val_ece']:.4f} ks {r['ks']:.3f} spread {r['init']['spread']:.3f}->{r['end']['spread']:.3f} "
        f"owners {r['init']['owners']:.2f}->{r['end']['owners']:.2f} left={left_initial(r)} "
        f"({r['train_seconds']:.0f}s)",
        flush=True,
    )


def stage1(a: argparse.Namespace, path: Path) -> None:
    """TPE on seed 0 until ``a.trials`` trials are recorded or the wall clock passes ``a.stop_at``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {
        "noise": optuna.distributions.FloatDistribution(0.0, 1.0),
        "tau": optuna.distributions.FloatDistribution(0.1, 10.0, log=True),
        "lam": optuna.distributions.FloatDistribution(0.01, 20.0, log=True),
        "gate_lr_scale": optuna.distributions.FloatDistribution(0.1, 30.0, log=True),
        "norms": optuna.distributions.CategoricalDistribution(SIGMA_NORMS),
    }
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=a.sampler_seed))
    done = [r for r in load(path) if r["seed"] == 0 and r.get("stage") == 1]
    for r in done:  # resume: the recorded trials are the study's history
        study.add_trial(
            optuna.trial.create_trial(
                params={k: r[k] for k in KNOBS}, distributions=dists, value=r["val_nll"]
            )
        )
    if not done:
        study.enqueue_trial(REFERENCE)
    for _ in range(len(done), a.trials):
        if a.stop_at and time.strftime("%H:%M", time.gmtime()) >= a.stop_at:
            print(f"stage 1 stopped at {a.stop_at} UTC after {len(study.trials)} trials", flush=True)
            return
        trial = study.ask(dists)
        cfg = dict(trial.params)
        r = {
            **run_config(cfg, 0, epochs=a.epochs, train_size=a.train_size),
            "stage": 1,
            "trial": trial.number,
        }
        study.tell(trial, r["val_nll"])
        _append(path, r)
        _say(r)


def candidates(rows: list[dict], top: int, top_left: int) -> list[tuple]:
    """The ``top`` lowest seed-0 validation NLLs and the ``top_left`` lowest among runs whose gates left.

    Ordered for a run that may be cut short: the best that left, the best overall, then the other
    ones that left, then the other best ones, each by seed-0 NLL.
    """
    first = sorted((r for r in rows if r["seed"] == 0 and r.get("stage") == 1), key=lambda r: r["val_nll"])
    overall = [key_of(r) for r in first[:top]]
    left = [key_of(r) for r in first if left_initial(r)][:top_left]
    order = [*left[:1], *overall[:1], *left[1:], *overall[1:]]
    return list(dict.fromkeys(order))


def stage2(a: argparse.Namespace, path: Path) -> None:
    """The candidates on the other seeds, one configuration at a time (``--stop-at`` ends it early)."""
    rows = load(path)
    have = by_config(rows)
    for key in candidates(rows, a.top, a.top_left):
        for seed in map(int, a.seeds.split(",")):
            if seed in have.get(key, {}):
                continue
            if a.stop_at and time.strftime("%H:%M", time.gmtime()) >= a.stop_at:
                print(f"stage 2 stopped at {a.stop_at} UTC", flush=True)
                return
            cfg = dict(zip(KNOBS, key, strict=True))
            r = {**run_config(cfg, seed, epochs=a.epochs, train_size=a.train_size), "stage": 2}
            _append(path, r)
            _say(r)


def mean_nll(runs: dict[int, dict]) -> float:
    """Mean validation NLL over the seeds run."""
    return sum(r["val_nll"] for r in runs.values()) / len(runs)


def choose(rows: list[dict], seeds: int = 3, *, constrained: bool = True) -> tuple | None:
    """Lowest mean validation NLL among configurations run on ``seeds`` seeds (that left on every seed)."""
    groups = by_config(rows)
    ok = [
        k
        for k, runs in groups.items()
        if len(runs) >= seeds and (not constrained or all(left_initial(r) for r in runs.values()))
    ]
    return min(ok, key=lambda k: mean_nll(groups[k])) if ok else None


def _cells(key: tuple, runs: dict[int, dict]) -> list[str]:
    noise, tau, lam, scale, norms = key
    return [f"{noise:.3f}", f"{tau:.3g}", f"{lam:.3g}", f"{scale:.3g}", norms, *stat_cells(runs)]


HEADER = f"| noise | τ | λ | gate lr × | norms | {STAT_HEADER} |\n" + "|---" * 15 + "|"


def _table(groups: dict[tuple, dict[int, dict]], keys: list[tuple]) -> list[str]:
    return [HEADER, *("| " + " | ".join(_cells(k, groups[k])) + " |" for k in keys)]


def _gate_section(title: str, runs: dict[int, dict]) -> list[str]:
    return ["", title, "", *owners_lines(runs)]


def report(path: Path) -> str:
    """Markdown: every stage-1 trial, the stage-2 table, the choice and its gate statistics."""
    rows = load(path)
    groups = by_config(rows)
    seed0 = {k: {0: v[0]} for k, v in groups.items() if 0 in v}
    order = sorted(seed0, key=lambda k: seed0[k][0]["val_nll"])
    lines = [f"### Stage 1: {len(order)} TPE trials on seed 0, by validation NLL", "", *_table(seed0, order)]
    multi = sorted((k for k, v in groups.items() if len(v) > 1), key=lambda k: mean_nll(groups[k]))
    lines += ["", "### Stage 2: candidates on seeds 0–2 (mean ± std), by mean validation NLL", ""]
    lines += _table(groups, multi)
    best, free = choose(rows), choose(rows, constrained=False)
    for title, key in (("Chosen default (gates left on every seed)", best), ("Unconstrained best", free)):
        if key is None:
            lines += ["", f"### {title}: none", ""]
            continue
        cfg = ", ".join(
            f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
            for k, v in zip(KNOBS, key, strict=True)
        )
        lines += _gate_section(f"### {title}: {cfg} (val NLL {mean_nll(groups[key]):.4f})", groups[key])
    return "\n".join(lines) + "\n"


def gap_fraction(results: Path, *, sigma: str = "sigma_ens", deep: str = "deep_ensemble") -> str:
    """Per seed and mean ± std: (NLL_single − NLL_σN) / (NLL_single − NLL_deep) from a compare ``results.json``."""
    data = json.loads(results.read_text())
    records = data["records"] if isinstance(data, dict) else data
    nlls = {(r["method"], r["seed"]): r["metrics"]["nll"] for r in records}
    seeds = sorted({s for m, s in nlls if m == sigma})
    fractions = []
    lines = [
        "| seed | NLL single | NLL deep | NLL σN-Ens | fraction of the gap closed |",
        "|---|---|---|---|---|",
    ]
    for s in seeds:
        single, d, sig = nlls[("single", s)], nlls[(deep, s)], nlls[(sigma, s)]
        fractions.append((single - sig) / (single - d))
        lines.append(f"| {s} | {single:.4f} | {d:.4f} | {sig:.4f} | {fractions[-1]:.3f} |")
    lines.append(f"| mean ± std | | | | {_ms(fractions, '.3f')} |")
    return "\n".join(lines) + "\n"


#: (column, record key, format) of :func:`compare_table`.
COLUMNS = (
    ("accuracy", "accuracy", ".4f"),
    ("NLL", "nll", ".4f"),
    ("ECE", "ece", ".4f"),
    ("shifted ECE", "corr_ece", ".4f"),
    ("OOD AUROC (max p)", "ood_maxprob_auroc", ".4f"),
    ("OOD AUROC (MI)", "ood_mi_auroc", ".4f"),
    ("val NLL", "val_nll", ".4f"),
)


def compare_table(results: Path) -> str:
    """Markdown: mean ± std over seeds per method of a compare ``results.json``, with params and train s."""
    data = json.loads(results.read_text())
    methods: dict[str, list[dict]] = {}
    for r in data:
        methods.setdefault(r["method"], []).append(r)
    head = ["method", "seeds", *(c for c, _, _ in COLUMNS), "params", "train s"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m, rs in methods.items():
        cells = [m, ",".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))]
        cells += [
            _ms([r["metrics"][k] for r in rs], f) if k in rs[0]["metrics"] else "–" for _, k, f in COLUMNS
        ]
        cells += [f"{rs[0]['params']:,}", _ms([r["train_seconds"] for r in rs], ".1f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--top-left", type=int, default=3)
    p.add_argument("--seeds", default="1,2", help="stage-2 seeds (seed 0 is stage 1's)")
    p.add_argument("--train-size", type=int, default=1000)
    p.add_argument("--sampler-seed", type=int, default=0)
    p.add_argument("--stop-at", default="", help="UTC HH:MM after which no new run starts")
    p.add_argument("--stage", choices=("1", "2", "both"), default="both")
    p.add_argument(
        "--gap", default="", help="print the table and NLL-gap fractions of a compare results.json and exit"
    )
    a = parse_common(p, epochs=20, out="runs/sigma_search/mnist1d.jsonl")
    path = Path(a.out)
    if a.gap:
        print(compare_table(Path(a.gap)) + "\n" + gap_fraction(Path(a.gap)), end="")
        return
    if a.report:
        print(report(path), end="")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if a.stage in ("1", "both"):
        stage1(a, path)
    if a.stage in ("2", "both"):
        stage2(a, path)


if __name__ == "__main__":
    main()
