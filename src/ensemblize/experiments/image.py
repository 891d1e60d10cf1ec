"""Image experiments (σN-Ens paper): method comparison, τ sweep, ensemble size, fine-tuning, λ sweep.

Commands (``ensemblize experiment NAME``), all on ``--dataset digits`` by default (``cifar10`` /
``cifar100`` with ``--data-root``; same code path, ``--device cuda`` where available):

* ``compare`` — single, temperature-scaled single, deep ensemble, BatchEnsemble, Packed-Ensembles
  and σN-Ens with the same backbone and epoch budget, every metric of the evaluation suite;
* ``tau-sweep`` — σN-Ens over a log grid of τ at fixed λ: accuracy–ECE and NLL–ECE frontiers,
  diversity vs τ, owners-per-feature heatmap (layer × τ);
* ``members`` — σN-Ens and Packed-Ensembles for M ∈ {2, 4, 8, 16} at a fixed backbone width;
* ``finetune`` — a trained single model converted with :func:`ensemblize.sigma_ensemble` and
  fine-tuned with the regulariser, against the single model, σN-Ens from scratch and the deep ensemble;
* ``lambda`` — σN-Ens over λ at fixed τ.

Every model goes through :func:`ensemblize.runner.run_method` (training, checkpoint, evaluation);
each record also carries validation metrics (``val_accuracy``, ``val_nll``, ``val_ece``) so that any
choice among settings is made on validation, never test. Each command writes ``results.json``,
``table.md`` (mean ± std over seeds) and its figures into ``--out`` and prints the table.

Evaluation presets (``--eval``, see :func:`eval_spec`): ``full`` (every corruption kind on the
whole test set, every far-OOD set), ``reduced`` (:data:`REDUCED_CORRUPTIONS` on at most 200 test
images, all severities, every far-OOD set) and ``tiny`` (tests).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from ..evaluation.names import HEADLINE_METRICS

__all__ = [
    "COMMANDS",
    "REDUCED_CORRUPTIONS",
    "HEADLINE",
    "eval_spec",
    "parse_floats",
    "parse_ints",
    "group_stats",
    "frontier_points",
    "pareto_front",
    "owners_matrix",
    "layer_sharing",
    "setting_label",
    "markdown_table",
    "members_figure",
]

#: Corruption kinds of the ``reduced`` evaluation preset (one per CIFAR-10-C family + two more).
REDUCED_CORRUPTIONS = ("gaussian_noise", "gaussian_blur", "contrast", "pixelate", "elastic_transform")

#: Metrics printed by every command (all metrics are in results.json).
HEADLINE = list(HEADLINE_METRICS)


# --- small helpers (pure, unit-tested) ------------------------------------------------------------


def parse_floats(text: str, *, name: str) -> list[float]:
    """``"0.05,0.1"`` -> ``[0.05, 0.1]``; every value must be finite and > 0."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise typer.BadParameter(f"--{name} must be comma-separated numbers, got {text!r}") from e
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise typer.BadParameter(f"--{name} must be a non-empty list of positive numbers, got {text!r}")
    return values


def parse_ints(text: str, *, name: str, minimum: int = 0) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; every value must be an integer ≥ ``minimum``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise typer.BadParameter(f"--{name} must be comma-separated integers, got {text!r}") from e
    if not values or any(v < minimum for v in values):
        raise typer.BadParameter(f"--{name} must be a non-empty list of integers ≥ {minimum}, got {text!r}")
    return values


def eval_spec(preset: str):
    """The :class:`~ensemblize.evaluation.EvalSpec` of an ``--eval`` preset: full, reduced or tiny."""
    from ensemblize.evaluation import EvalSpec

    if preset == "full":
        return EvalSpec()
    if preset == "reduced":
        return EvalSpec(corruptions=REDUCED_CORRUPTIONS, corruption_samples=200)
    if preset == "tiny":
        return EvalSpec(
            corruptions=("gaussian_noise",), severities=(1, 5), corruption_samples=40, ood=("gaussian",)
        )
    raise typer.BadParameter(f"--eval must be one of full, reduced, tiny; got {preset!r}")


def group_stats(
    records: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], Any], metric: str
) -> dict[Any, tuple[float, float, int]]:
    """Group ``records`` by ``key(record)`` and give ``(mean, std, n)`` of ``metric`` over each group.

    ``metric`` is looked up in ``record["metrics"]``, then in the record itself (``params``,
    ``train_seconds``); non-finite values are skipped; std uses ddof=1 (0 for a single value).
    Groups keep first-appearance order.
    """
    import numpy as np

    groups: dict[Any, list[float]] = {}
    for r in records:
        v = r["metrics"].get(metric, r.get(metric, math.nan))
        groups.setdefault(key(r), [])
        if v is not None and math.isfinite(float(v)):
            groups[key(r)].append(float(v))
    out = {}
    for k, vals in groups.items():
        a = np.asarray(vals, dtype=float)
        if a.size == 0:
            out[k] = (math.nan, math.nan, 0)
        else:
            out[k] = (float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0, int(a.size))
    return out


def frontier_points(
    records: Sequence[Mapping[str, Any]], *, param: str, x: str, y: str
) -> list[tuple[float, float, float, float, float]]:
    """One point per value of the spec parameter ``param`` (e.g. ``"tau"``), sorted by it:
    ``(param, mean x, std x, mean y, std y)`` over seeds."""
    key = lambda r: float(r["spec"][param])  # noqa: E731
    sx, sy = group_stats(records, key, x), group_stats(records, key, y)
    return [(p, sx[p][0], sx[p][1], sy[p][0], sy[p][1]) for p in sorted(sx)]


def pareto_front(points: Sequence[tuple[float, float]], *, minimize: tuple[bool, bool]) -> list[int]:
    """Indices of the non-dominated points (a point is dominated when another is at least as good in
    both coordinates and strictly better in one); ``minimize`` says the direction of each coordinate."""
    signs = [1.0 if m else -1.0 for m in minimize]
    pts = [(signs[0] * a, signs[1] * b) for a, b in points]
    keep = []
    for i, (a, b) in enumerate(pts):
        dominated = any((c <= a and d <= b) and (c < a or d < b) for j, (c, d) in enumerate(pts) if j != i)
        if not dominated:
            keep.append(i)
    return keep


def setting_label(param: str, value: float) -> str:
    """``sigma_tau=0p05`` for τ = 0.05: the label names the checkpoint file, so no ``.`` in it
    (:func:`ensemblize.checkpoint.save_checkpoint` would read ``.05_seed0`` as a suffix)."""
    return f"sigma_{param}={value:g}".replace(".", "p")


def layer_sharing(model: Any) -> list[dict[str, Any]]:
    """Per σNorm layer of ``model``: :meth:`ensemblize.diversity.LayerSharing.to_dict` (name, mean owners, ...)."""
    from ensemblize.diversity import sharing

    return [s.to_dict() for s in sharing(model)]


def owners_matrix(
    records: Sequence[Mapping[str, Any]], *, param: str = "tau"
) -> tuple[list[str], list[float], Any]:
    """The owners-per-feature heatmap: ``(layer names, sorted param values, (layers, values) array)``
    of the mean over seeds of each layer's mean owners per feature (records carry ``sharing``)."""
    import numpy as np

    values = sorted({float(r["spec"][param]) for r in records})
    layers = [d["name"] for d in records[0]["sharing"]]
    acc = np.zeros((len(layers), len(values)))
    count = np.zeros(len(values))
    for r in records:
        j = values.index(float(r["spec"][param]))
        names = [d["name"] for d in r["sharing"]]
        if names != layers:
            raise ValueError(f"records have different σNorm layers: {names} vs {layers}")
        acc[:, j] += [d["mean_owners"] for d in r["sharing"]]
        count[j] += 1
    return layers, values, acc / count[None, :]


def markdown_table(
    records: Sequence[Mapping[str, Any]],
    *,
    metrics: Sequence[str],
    by: Sequence[str] = ("method",),
    digits: int = 4,
) -> str:
    """A markdown table, one row per group of ``by`` keys: mean ± std over seeds (n seeds) per metric,
    then parameters and train seconds."""
    from ensemblize.report.results import summarize

    summary = summarize(records, by=by)
    cols = [*by, "n", *metrics, "params", "train_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for s in summary:
        row = [str(s[k]) for k in by] + [str(s["n"])]
        for m in [*metrics, "params", "train_seconds"]:
            mean, std, n = s["stats"].get(m, (math.nan, math.nan, 0))
            if n == 0 or not math.isfinite(mean):
                row.append("—")
            elif m == "params":
                row.append(f"{mean:,.0f}")
            elif m == "train_seconds":
                row.append(f"{mean:.1f} ± {std:.1f}")
            else:
                row.append(f"{mean:.{digits}f} ± {std:.{digits}f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# --- shared machinery ------------------------------------------------------------------------------


def _load(dataset: str, seed: int, root: Path | None, *, heldout: bool = False):
    """``(splits, extra_ood)`` for one seed; ``heldout`` (digits only) trains on 0–5, 6–9 are near-OOD."""
    from ensemblize.data.images import load_images
    from ensemblize.data.ood import held_out_classes

    if heldout:
        if dataset != "digits":
            raise typer.BadParameter(f"--heldout is only available for digits, not {dataset!r}")
        near = held_out_classes(seed)
        return near.splits, {"heldout": near.x_ood}
    return load_images(dataset, seed=seed, root=root), None


def _val_metrics(model, splits, *, device: str) -> dict[str, float]:
    """Accuracy, NLL and ECE on the validation split (for choices made on validation)."""
    from ensemblize import metrics as M
    from ensemblize.training import predict

    p = predict(model, splits.x_val, device=device).detach().cpu().double().numpy()
    y = splits.y_val.numpy()
    return {
        "val_accuracy": float(M.accuracy(p, y)),
        "val_nll": float(M.nll(p, y)),
        "val_ece": float(M.ece(p, y, n_bins=15)),
    }


def _run(spec, splits, *, train, seed, evals, out, extra_ood, device, model=None) -> tuple[dict, Any]:
    """run_method + validation metrics + σNorm sharing; returns (record dict, RunOutcome)."""
    from ensemblize.runner import run_method

    t0 = time.perf_counter()
    outcome = run_method(
        spec,
        splits,
        train=train,
        seed=seed,
        eval_spec=evals,
        out=out,
        extra_ood=extra_ood,
        model=model,
        progress=False,
        device=device,
    )
    outcome.record.metrics.update(_val_metrics(outcome.model, splits, device=device))
    rec = outcome.record.to_dict()
    if spec.method == "sigma":
        rec["sharing"] = layer_sharing(outcome.model)
    m = rec["metrics"]
    typer.echo(
        f"  {spec.name} seed={seed}: acc {m['accuracy']:.4f} nll {m['nll']:.4f} ece {m['ece']:.4f} "
        f"({time.perf_counter() - t0:.0f}s)",
        err=True,
    )
    return rec, outcome


def _setup(out: Path, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)


def _finish(
    out: Path, records: list[dict], *, metrics: Sequence[str], command: str, settings: dict, start: float
) -> str:
    """Write results.json, table.md and run.json; print and return the table."""
    from ensemblize.checkpoint import atomic_write_json, atomic_write_text
    from ensemblize.report.results import format_table, write_results

    write_results(out, records)
    present = [m for m in metrics if any(m in r["metrics"] for r in records)]
    table = markdown_table(records, metrics=present)
    atomic_write_text(out / "table.md", table + "\n")
    atomic_write_json(
        out / "run.json",
        {"command": command, **settings, "wall_seconds": time.perf_counter() - start},
    )
    text = format_table(records, metrics=present, by=("method",))
    typer.echo(text)
    return text


def _model_kwargs(width: int | None) -> dict[str, Any]:
    return {} if width is None else {"width": width}


def _errorbar_panels(
    panels: Sequence[tuple[str, Mapping[str, list[tuple[float, float, float]]]]],
    path: Path,
    *,
    xlabel: str,
    logx: bool = False,
) -> Path:
    """One panel per ``(ylabel, {series: [(x, mean, std), ...]})``, mean ± std error bars."""
    import matplotlib.pyplot as plt

    from ensemblize.report.figures import save_figure

    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, (ylabel, series) in zip(axes[0], panels, strict=True):
        for label, pts in series.items():
            xs, ms, ss = zip(*pts, strict=True) if pts else ((), (), ())
            ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=3, label=label)
        if logx:
            ticks = sorted({float(x) for pts in series.values() for x, _, _ in pts})
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


# --- options shared by every command ---------------------------------------------------------------

_DATASET = typer.Option("digits", "--dataset", help="digits, cifar10 or cifar100.")
_ROOT = typer.Option(None, "--data-root", help="Folder with the extracted CIFAR archive.")
_MODEL = typer.Option("resnet_small", "--model", help="Backbone: resnet_small, resnet18, wrn28, vit_small.")
_WIDTH = typer.Option(None, "--width", min=1, help="Backbone base width (default: the backbone's own).")
_EPOCHS = typer.Option(
    15, "--epochs", min=1, help="Training epochs per model (same budget for every method)."
)
_SEEDS = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds (data split, init, batch order).")
_DEVICE = typer.Option("cpu", "--device", help="torch device, e.g. cuda.")
_THREADS = typer.Option(1, "--threads", min=1, help="torch intra-op threads.")


def _train(epochs: int):
    from ensemblize.runner import TrainConfig

    return TrainConfig(epochs=epochs)


# --- compare ---------------------------------------------------------------------------------------


def compare(
    dataset: str = _DATASET,
    data_root: Path | None = _ROOT,
    model: str = _MODEL,
    width: int | None = _WIDTH,
    epochs: int = _EPOCHS,
    seeds: str = _SEEDS,
    members: int = typer.Option(4, "--members", min=2, help="Ensemble size M of every ensemble."),
    tau: float = typer.Option(
        5.0, "--tau", help="σN-Ens τ (default job's value, chosen on digits validation)."
    ),
    lam: float = typer.Option(0.5, "--lam", help="σN-Ens λ (default job's value)."),
    methods: str = typer.Option(
        "single,temp_scaled,deep,batchensemble,packed,sigma", "--methods", help="Comma-separated subset."
    ),
    evaluation: str = typer.Option("full", "--eval", help="Evaluation preset: full, reduced, tiny."),
    out: Path = typer.Option(Path("runs/image-compare"), "--out", help="Output folder."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """Every method, same backbone and budget: the full evaluation suite, mean ± std over seeds."""
    from ensemblize.report.figures import evaluation_figures
    from ensemblize.runner import METHODS, MethodSpec

    start = time.perf_counter()
    seed_list = parse_ints(seeds, name="seeds")
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [m for m in chosen if m not in METHODS]
    if bad or not chosen:
        raise typer.BadParameter(f"--methods: unknown {bad}; choose from {list(METHODS)}")
    labels = {"deep": "deep_ensemble", "sigma": "sigma_ens"}
    kw = _model_kwargs(width)
    specs = [
        MethodSpec(
            m,
            model=model,
            members=members if m not in ("single", "temp_scaled") else 1,
            tau=tau,
            lam=lam,
            label=labels.get(m),
            model_kwargs=kw,
        )
        for m in chosen
    ]
    _setup(out, threads)
    evals = eval_spec(evaluation)
    records: list[dict] = []
    first: dict[str, Any] = {}
    for seed in seed_list:
        splits, extra = _load(dataset, seed, data_root)
        for spec in specs:
            rec, outcome = _run(
                spec,
                splits,
                train=_train(epochs),
                seed=seed,
                evals=evals,
                out=out,
                extra_ood=extra,
                device=device,
            )
            records.append(rec)
            if seed == seed_list[0]:
                first[spec.name] = outcome.evaluation
            from ensemblize.report.results import write_results

            write_results(out, records)
    evaluation_figures(first, out)
    _severity_figure(records, out / "severity_ece.png")
    severities = [f"corr_ece_s{s}" for s in range(1, 6)]
    _finish(
        out,
        records,
        metrics=HEADLINE,
        command="compare",
        settings={
            "dataset": dataset,
            "model": model,
            "width": width,
            "epochs": epochs,
            "seeds": seed_list,
            "members": members,
            "tau": tau,
            "lam": lam,
            "eval": evaluation,
        },
        start=start,
    )
    from ensemblize.checkpoint import atomic_write_text

    atomic_write_text(
        out / "table_severity.md",
        markdown_table(records, metrics=["ece", *[s for s in severities if s in records[0]["metrics"]]])
        + "\n",
    )


def _severity_figure(records: list[dict], path: Path) -> Path | None:
    """ECE and accuracy vs corruption severity (0 = clean), mean ± std over seeds, per method."""
    if "corr_ece_s1" not in records[0]["metrics"]:
        return None
    sev = sorted(int(k[len("corr_ece_s") :]) for k in records[0]["metrics"] if k.startswith("corr_ece_s"))
    key = lambda r: r["method"]  # noqa: E731
    panels = []
    for metric in ("ece", "accuracy", "nll"):
        stats = [group_stats(records, key, metric)] + [
            group_stats(records, key, f"corr_{metric}_s{s}") for s in sev
        ]
        series = {
            m: [(x, st[m][0], st[m][1]) for x, st in zip([0, *sev], stats, strict=True)] for m in stats[0]
        }
        panels.append((metric, series))
    return _errorbar_panels(panels, path, xlabel="corruption severity (0 = clean)")


# --- tau / lambda sweeps ---------------------------------------------------------------------------


def _sweep(
    *,
    param: str,
    values: list[float],
    fixed: dict[str, float],
    dataset: str,
    data_root: Path | None,
    model: str,
    width: int | None,
    epochs: int,
    seed_list: list[int],
    members: int,
    evals,
    out: Path,
    device: str,
) -> list[dict]:
    from ensemblize.report.results import write_results
    from ensemblize.runner import MethodSpec

    records: list[dict] = []
    for seed in seed_list:
        splits, extra = _load(dataset, seed, data_root)
        for v in values:
            knobs = {**fixed, param: v}
            spec = MethodSpec(
                "sigma",
                model=model,
                members=members,
                label=setting_label(param, v),
                model_kwargs=_model_kwargs(width),
                **knobs,
            )
            rec, _ = _run(
                spec,
                splits,
                train=_train(epochs),
                seed=seed,
                evals=evals,
                out=out,
                extra_ood=extra,
                device=device,
            )
            rec[param] = v
            records.append(rec)
            write_results(out, records)
    # order records by parameter value for the tables
    records.sort(key=lambda r: (float(r["spec"][param]), r["seed"]))
    return records


SWEEP_METRICS = [
    "accuracy",
    "nll",
    "ece",
    "corr_ece",
    "ood_maxprob_auroc",
    "ood_mi_auroc",
    "disagreement",
    "pairwise_kl",
    "mutual_information",
    "owners_per_feature",
    "val_accuracy",
    "val_nll",
    "val_ece",
]


def _sweep_figures(records: list[dict], out: Path, *, param: str, symbol: str) -> list[Path]:
    """Frontiers (accuracy–ECE, NLL–ECE, param labelled), diversity vs param, owners heatmap."""
    import matplotlib.pyplot as plt
    import numpy as np

    from ensemblize.report.figures import save_figure

    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, y in zip(axes, ("accuracy", "nll"), strict=True):
        pts = frontier_points(records, param=param, x="ece", y=y)
        front = set(pareto_front([(p[1], p[3]) for p in pts], minimize=(True, y == "nll")))
        for i, (p, mx, sx, my, sy) in enumerate(pts):
            ax.errorbar(
                mx, my, xerr=sx, yerr=sy, marker="o", color="tab:red" if i in front else "tab:blue", capsize=2
            )
            ax.annotate(f"{symbol}={p:g}", (mx, my), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.plot(
            [pts[i][1] for i in sorted(front, key=lambda i: pts[i][1])],
            [pts[i][3] for i in sorted(front, key=lambda i: pts[i][1])],
            "r--",
            lw=0.8,
        )
        ax.set_xlabel("ECE (test)")
        ax.set_ylabel(f"{y} (test)")
        ax.set_title(f"{y}–ECE frontier (red: non-dominated)", fontsize=9)
        ax.grid(alpha=0.3)
    paths.append(save_figure(fig, out / "frontier.png"))

    key = lambda r: float(r["spec"][param])  # noqa: E731
    panels = []
    for metric in ("disagreement", "pairwise_kl", "mutual_information", "owners_per_feature"):
        st = group_stats(records, key, metric)
        panels.append((metric, {"σN-Ens": [(x, *st[x][:2]) for x in sorted(st)]}))
    paths.append(_errorbar_panels(panels, out / "diversity.png", xlabel=symbol, logx=True))

    layers, values, mat = owners_matrix(records, param=param)
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(values), 0.6 + 0.32 * len(layers)))
    im = ax.imshow(mat, aspect="auto", cmap="viridis", vmin=0, vmax=records[0]["members"])
    for i in range(mat.shape[0]):
        for j in range(mat.shape[1]):
            ax.text(j, i, f"{mat[i, j]:.1f}", ha="center", va="center", fontsize=7, color="w")
    ax.set_xticks(np.arange(len(values)), [f"{v:g}" for v in values])
    ax.set_yticks(np.arange(len(layers)), layers, fontsize=7)
    ax.set_xlabel(symbol)
    ax.set_title("mean owners per feature (gate > 0.5)", fontsize=9)
    fig.colorbar(im, ax=ax)
    paths.append(save_figure(fig, out / "owners_heatmap.png"))
    return paths


def tau_sweep(
    dataset: str = _DATASET,
    data_root: Path | None = _ROOT,
    model: str = _MODEL,
    width: int | None = _WIDTH,
    epochs: int = _EPOCHS,
    seeds: str = _SEEDS,
    members: int = typer.Option(4, "--members", min=2, help="Ensemble size M."),
    taus: str = typer.Option("0.05,0.1,0.25,0.5,1,2,5", "--taus", help="Comma-separated τ grid."),
    lam: float = typer.Option(0.5, "--lam", help="Fixed λ."),
    evaluation: str = typer.Option("reduced", "--eval", help="Evaluation preset: full, reduced, tiny."),
    out: Path = typer.Option(Path("runs/image-tau-sweep"), "--out", help="Output folder."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """σN-Ens over τ at fixed λ: frontiers, diversity and owners per feature per layer."""
    start = time.perf_counter()
    seed_list = parse_ints(seeds, name="seeds")
    values = parse_floats(taus, name="taus")
    _setup(out, threads)
    records = _sweep(
        param="tau",
        values=values,
        fixed={"lam": lam},
        dataset=dataset,
        data_root=data_root,
        model=model,
        width=width,
        epochs=epochs,
        seed_list=seed_list,
        members=members,
        evals=eval_spec(evaluation),
        out=out,
        device=device,
    )
    _sweep_figures(records, out, param="tau", symbol="τ")
    _finish(
        out,
        records,
        metrics=SWEEP_METRICS,
        command="tau-sweep",
        start=start,
        settings={
            "dataset": dataset,
            "model": model,
            "width": width,
            "epochs": epochs,
            "seeds": seed_list,
            "members": members,
            "taus": values,
            "lam": lam,
            "eval": evaluation,
        },
    )


def lambda_sweep(
    dataset: str = _DATASET,
    data_root: Path | None = _ROOT,
    model: str = _MODEL,
    width: int | None = _WIDTH,
    epochs: int = _EPOCHS,
    seeds: str = _SEEDS,
    members: int = typer.Option(4, "--members", min=2, help="Ensemble size M."),
    lams: str = typer.Option("0.05,0.2,0.5,2,8", "--lams", help="Comma-separated λ grid."),
    tau: float = typer.Option(5.0, "--tau", help="Fixed τ."),
    evaluation: str = typer.Option("reduced", "--eval", help="Evaluation preset: full, reduced, tiny."),
    out: Path = typer.Option(Path("runs/image-lambda"), "--out", help="Output folder."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """σN-Ens over λ at fixed τ: final metrics, diversity and owners per feature."""
    start = time.perf_counter()
    seed_list = parse_ints(seeds, name="seeds")
    values = parse_floats(lams, name="lams")
    _setup(out, threads)
    records = _sweep(
        param="lam",
        values=values,
        fixed={"tau": tau},
        dataset=dataset,
        data_root=data_root,
        model=model,
        width=width,
        epochs=epochs,
        seed_list=seed_list,
        members=members,
        evals=eval_spec(evaluation),
        out=out,
        device=device,
    )
    _sweep_figures(records, out, param="lam", symbol="λ")
    key = lambda r: float(r["spec"]["lam"])  # noqa: E731
    panels = []
    for metric in ("accuracy", "nll", "ece", "ood_maxprob_auroc"):
        st = group_stats(records, key, metric)
        panels.append((metric, {"σN-Ens": [(x, *st[x][:2]) for x in sorted(st)]}))
    _errorbar_panels(panels, out / "metrics_vs_lambda.png", xlabel="λ", logx=True)
    _finish(
        out,
        records,
        metrics=SWEEP_METRICS,
        command="lambda",
        start=start,
        settings={
            "dataset": dataset,
            "model": model,
            "width": width,
            "epochs": epochs,
            "seeds": seed_list,
            "members": members,
            "lams": values,
            "tau": tau,
            "eval": evaluation,
        },
    )


# --- ensemble size -----------------------------------------------------------------------------------


def members_sweep(
    dataset: str = _DATASET,
    data_root: Path | None = _ROOT,
    model: str = _MODEL,
    width: int | None = _WIDTH,
    epochs: int = _EPOCHS,
    seeds: str = _SEEDS,
    sizes: str = typer.Option("2,4,8,16", "--sizes", help="Comma-separated ensemble sizes M."),
    tau: float = typer.Option(5.0, "--tau", help="σN-Ens τ."),
    lam: float = typer.Option(0.5, "--lam", help="σN-Ens λ."),
    alpha: float = typer.Option(2.0, "--alpha", help="Packed-Ensembles width factor α (fixed for every M)."),
    evaluation: str = typer.Option("reduced", "--eval", help="Evaluation preset: full, reduced, tiny."),
    out: Path = typer.Option(Path("runs/image-members"), "--out", help="Output folder."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """σN-Ens and Packed-Ensembles (fixed α, γ = 1, fixed backbone width) for every M: metrics vs M."""
    from ensemblize.report.results import write_results
    from ensemblize.runner import MethodSpec

    start = time.perf_counter()
    seed_list = parse_ints(seeds, name="seeds")
    ms = parse_ints(sizes, name="sizes", minimum=2)
    _setup(out, threads)
    evals = eval_spec(evaluation)
    kw = _model_kwargs(width)
    records: list[dict] = []
    for seed in seed_list:
        splits, extra = _load(dataset, seed, data_root)
        for m in ms:
            for spec in (
                MethodSpec(
                    "sigma", model=model, members=m, tau=tau, lam=lam, label=f"sigma_M={m}", model_kwargs=kw
                ),
                MethodSpec(
                    "packed", model=model, members=m, alpha=alpha, label=f"packed_M={m}", model_kwargs=kw
                ),
            ):
                rec, _ = _run(
                    spec,
                    splits,
                    train=_train(epochs),
                    seed=seed,
                    evals=evals,
                    out=out,
                    extra_ood=extra,
                    device=device,
                )
                records.append(rec)
                write_results(out, records)
    records.sort(key=lambda r: (r["spec"]["method"], r["members"], r["seed"]))
    members_figure(records, out / "metrics_vs_members.png", alpha=alpha)
    _finish(
        out,
        records,
        metrics=[*HEADLINE, "member_accuracy", "val_accuracy", "val_nll"],
        command="members",
        start=start,
        settings={
            "dataset": dataset,
            "model": model,
            "width": width,
            "epochs": epochs,
            "seeds": seed_list,
            "sizes": ms,
            "tau": tau,
            "lam": lam,
            "alpha": alpha,
            "eval": evaluation,
        },
    )


def members_figure(records: Sequence[Mapping[str, Any]], path: Path, *, alpha: float) -> Path:
    """Accuracy, NLL, ECE, OOD AUROC and member accuracy vs M (mean ± std over seeds), σN-Ens and Packed."""
    key = lambda r: (r["spec"]["method"], r["members"])  # noqa: E731
    panels = []
    for metric in ("accuracy", "nll", "ece", "ood_maxprob_auroc", "member_accuracy"):
        st = group_stats(records, key, metric)
        series = {
            name: [(k[1], *st[k][:2]) for k in sorted(st) if k[0] == meth]
            for meth, name in (("sigma", "σN-Ens"), ("packed", f"Packed (α={alpha:g})"))
        }
        panels.append((metric, series))
    return _errorbar_panels(panels, path, xlabel="M", logx=True)


# --- fine-tune a pretrained single model ---------------------------------------------------------------


def finetune(
    dataset: str = _DATASET,
    data_root: Path | None = _ROOT,
    model: str = _MODEL,
    width: int | None = _WIDTH,
    epochs: int = _EPOCHS,
    seeds: str = _SEEDS,
    members: int = typer.Option(4, "--members", min=2, help="Ensemble size M."),
    finetune_epochs: int = typer.Option(
        3, "--finetune-epochs", min=1, help="Fine-tuning epochs after conversion."
    ),
    finetune_lr: float = typer.Option(0.01, "--finetune-lr", help="Fine-tuning peak learning rate (cosine)."),
    tau: float = typer.Option(5.0, "--tau", help="σN-Ens τ."),
    lam: float = typer.Option(0.5, "--lam", help="σN-Ens λ."),
    heldout: bool = typer.Option(
        False, "--heldout/--no-heldout", help="digits: train on 0–5 and add 6–9 as near-OOD set 'heldout'."
    ),
    evaluation: str = typer.Option("full", "--eval", help="Evaluation preset: full, reduced, tiny."),
    out: Path = typer.Option(Path("runs/image-finetune"), "--out", help="Output folder."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """Convert a trained single model with ez.sigma_ensemble, fine-tune briefly with the regulariser,
    compare with the single model, σN-Ens from scratch and the deep ensemble."""
    from dataclasses import replace

    from ensemblize import sigma_ensemble
    from ensemblize.report.results import write_results
    from ensemblize.runner import MethodSpec

    start = time.perf_counter()
    seed_list = parse_ints(seeds, name="seeds")
    _setup(out, threads)
    evals = eval_spec(evaluation)
    kw = _model_kwargs(width)
    train = _train(epochs)
    ft_train = replace(train, epochs=finetune_epochs, lr=finetune_lr)
    records: list[dict] = []
    for seed in seed_list:
        splits, extra = _load(dataset, seed, data_root, heldout=heldout)
        run = functools.partial(
            _run, splits=splits, seed=seed, evals=evals, out=out, extra_ood=extra, device=device
        )
        single_rec, single = run(MethodSpec("single", model=model, members=1, model_kwargs=kw), train=train)
        records.append(single_rec)
        converted = sigma_ensemble(single.model.model.cpu(), members=members, seed=seed)
        ft_spec = MethodSpec(
            "sigma", model=model, members=members, tau=tau, lam=lam, label="sigma_finetuned", model_kwargs=kw
        )
        ft_rec, _ = run(ft_spec, train=ft_train, model=converted)
        ft_rec["pretrain_seconds"] = single_rec["train_seconds"]
        ft_rec["finetune_seconds"] = ft_rec["train_seconds"]
        ft_rec["train_seconds"] = single_rec["train_seconds"] + ft_rec["finetune_seconds"]
        records.append(ft_rec)
        for spec in (
            MethodSpec(
                "sigma",
                model=model,
                members=members,
                tau=tau,
                lam=lam,
                label="sigma_scratch",
                model_kwargs=kw,
            ),
            MethodSpec("deep", model=model, members=members, label="deep_ensemble", model_kwargs=kw),
        ):
            rec, _ = run(spec, train=train)
            records.append(rec)
        write_results(out, records)
    key = lambda r: r["method"]  # noqa: E731
    panels = []
    for metric in ("accuracy", "nll", "ece", "ood_maxprob_auroc", "ood_mi_auroc"):
        st = group_stats(records, key, metric)
        panels.append((metric, {k: [(i, *st[k][:2])] for i, k in enumerate(st)}))
    _errorbar_panels(panels, out / "finetune.png", xlabel="method (index)")
    metrics = ["accuracy", "nll", "ece", "corr_ece", "ood_maxprob_auroc", "ood_entropy_auroc", "ood_mi_auroc"]
    if heldout:
        metrics += ["ood_heldout_maxprob_auroc", "ood_heldout_mi_auroc"]
    metrics += ["disagreement", "mutual_information", "val_nll"]
    _finish(
        out,
        records,
        metrics=metrics,
        command="finetune",
        start=start,
        settings={
            "dataset": dataset,
            "model": model,
            "width": width,
            "epochs": epochs,
            "seeds": seed_list,
            "members": members,
            "finetune_epochs": finetune_epochs,
            "finetune_lr": finetune_lr,
            "tau": tau,
            "lam": lam,
            "heldout": heldout,
            "eval": evaluation,
        },
    )
    ft = group_stats(records, key, "finetune_seconds")
    typer.echo(
        f"fine-tune seconds (mean): {ft.get('sigma_finetuned', (math.nan,))[0]:.1f}; "
        f"σN-Ens from scratch: {group_stats(records, key, 'train_seconds')['sigma_scratch'][0]:.1f}"
    )


COMMANDS = {
    "compare": compare,
    "tau-sweep": tau_sweep,
    "members": members_sweep,
    "finetune": finetune,
    "lambda": lambda_sweep,
}
