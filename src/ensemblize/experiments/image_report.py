"""Tables and figures of the image experiments (:mod:`ensemblize.experiments.image`), from records.

Pure helpers, unit-tested against hand-computed values: :func:`group_stats` (mean ± std per group),
:func:`frontier_points` and :func:`pareto_front` (the τ / λ frontiers), :func:`owners_matrix` (the
owners-per-feature heatmap), :func:`markdown_table`; and the figures each experiment draws
(severity curves, sweep frontiers / diversity / heatmap, metrics vs M) through
:mod:`ensemblize.report.figures`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SWEEP_METRICS",
    "group_stats",
    "frontier_points",
    "pareto_front",
    "setting_label",
    "layer_sharing",
    "owners_matrix",
    "markdown_table",
    "errorbar_panels",
    "severity_figure",
    "frontier_figure",
    "owners_figure",
    "sweep_figures",
    "members_figure",
]


# --- small helpers (pure, unit-tested) ------------------------------------------------------------


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
    from ensemblize.sigma.gate_sharing import sharing

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
    from ensemblize.report.results import failed_note, summarize

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
            row[-1] += failed_note(s, m)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def errorbar_panels(
    panels: Sequence[tuple[str, Mapping[str, list[tuple[float, float, float]]]]],
    path: Path,
    *,
    xlabel: str,
    logx: bool = False,
) -> Path:
    """One panel per ``(ylabel, {series: [(x, mean, std), ...]})``, mean ± std error bars
    (:func:`ensemblize.report.figures.errorbar_figure`), written to ``path``."""
    from ensemblize.report.figures import errorbar_figure, save_figure

    return save_figure(errorbar_figure(panels, xlabel=xlabel, logx=logx), path)


def severity_figure(records: list[dict], path: Path) -> Path | None:
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
    return errorbar_panels(panels, path, xlabel="corruption severity (0 = clean)")


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


_FRONTIER_LABELS = {"accuracy": "accuracy (test)", "nll": "NLL (test)"}


def frontier_figure(records: Sequence[Mapping[str, Any]], *, param: str, symbol: str) -> Any:
    """Accuracy–ECE and NLL–ECE frontiers, one point (mean ± std over seeds) per value of ``param``.

    Each value is its own legend entry and colour (no text annotations, so no label can collide);
    non-dominated points are drawn as filled squares and joined by a dashed Pareto front, dominated
    ones as hollow circles. One legend for the figure, below the panels. Returns the Figure.
    """
    from ensemblize.report.style import legend_below, method_color, new_figure, styled

    with styled():
        fig, axes = new_figure(1, 2, width=9, height=3.9)
        for ax, y in zip(axes[0], ("accuracy", "nll"), strict=True):
            pts = frontier_points(records, param=param, x="ece", y=y)
            front = set(pareto_front([(p[1], p[3]) for p in pts], minimize=(True, y == "nll")))
            for i, (p, mx, sx, my, sy) in enumerate(pts):
                on = i in front
                ax.errorbar(
                    [mx], [my], xerr=[sx], yerr=[sy], marker="s" if on else "o", ms=6, capsize=2,
                    color=method_color(i), mfc=method_color(i) if on else "white", mew=1.3,
                    ls="none", label=f"{symbol} = {p:g}",
                )  # fmt: skip
            order = sorted(front, key=lambda i: pts[i][1])
            ax.plot(
                [pts[i][1] for i in order], [pts[i][3] for i in order], "k--", lw=0.8,
                label="Pareto front (filled: non-dominated)",
            )  # fmt: skip
            ax.set_xlabel("ECE (test)")
            ax.set_ylabel(_FRONTIER_LABELS[y])
            ax.set_title(f"{_FRONTIER_LABELS[y].split(' ')[0]} vs ECE, per {symbol}")
        legend_below(fig, axes, ncols=min(len(pts) + 1, 5))
    return fig


def owners_figure(records: Sequence[Mapping[str, Any]], *, param: str, symbol: str) -> Any:
    """Heatmap of the mean owners per feature (gate > 0.5) of every σNorm layer (rows) per value of
    ``param`` (columns), mean over seeds (:func:`owners_matrix`); each cell is written in a colour
    that contrasts with its fill. Returns the Figure."""
    import numpy as np

    from ensemblize.report.style import new_figure, styled

    layers, values, mat = owners_matrix(records, param=param)
    members = records[0]["members"]
    with styled():
        fig, axes = new_figure(width=2.2 + 0.8 * len(values), height=1.2 + 0.3 * len(layers))
        ax = axes[0][0]
        ax.grid(False)
        im = ax.imshow(mat, aspect="auto", cmap="viridis", vmin=0, vmax=members)
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                dark = mat[i, j] < 0.6 * members
                ax.text(
                    j, i, f"{mat[i, j]:.1f}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black",
                )  # fmt: skip
        ax.set_xticks(np.arange(len(values)), [f"{v:g}" for v in values])
        ax.set_yticks(np.arange(len(layers)), layers, fontsize=7)
        ax.set_xlabel(symbol)
        ax.set_ylabel("σNorm layer")
        ax.set_title("Mean owners per feature (gate > 0.5)")
        fig.colorbar(im, ax=ax, label=f"owners (of M = {members})")
    return fig


def sweep_figures(records: list[dict], out: Path, *, param: str, symbol: str) -> list[Path]:
    """Frontiers (:func:`frontier_figure`), diversity vs param, owners heatmap (:func:`owners_figure`)."""
    from ensemblize.report.figures import save_figure

    paths = [save_figure(frontier_figure(records, param=param, symbol=symbol), out / "frontier.png")]
    key = lambda r: float(r["spec"][param])  # noqa: E731
    panels = []
    for metric in ("disagreement", "pairwise_kl", "mutual_information", "owners_per_feature"):
        st = group_stats(records, key, metric)
        panels.append((metric.replace("_", " "), {"σN-Ens": [(x, *st[x][:2]) for x in sorted(st)]}))
    positive = all(key(r) > 0 for r in records)  # a λ sweep may include λ = 0: no log axis then
    paths.append(errorbar_panels(panels, out / "diversity.png", xlabel=symbol, logx=positive))
    fig = owners_figure(records, param=param, symbol=symbol)
    paths.append(save_figure(fig, out / "owners_heatmap.png"))
    return paths


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
    return errorbar_panels(panels, path, xlabel="M", logx=True)
