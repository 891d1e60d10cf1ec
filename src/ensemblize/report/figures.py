"""Figures drawn from :class:`ensemblize.evaluation.Evaluation` details, one PNG each, written atomically.

Each figure function takes ``{method: Evaluation}`` or ``{method: [Evaluation, one per seed]}`` and a
path, draws every method on one figure and returns the path. Keys such as ``"deep_ensemble s1"``
(method plus seed suffix) are grouped under their method. Several seeds are aggregated the way the
tables aggregate them: metric values in titles and legends are the mean ± std over seeds (std with
ddof=1, as :func:`ensemblize.report.results.summarize`), curves are the mean over seeds, and counts
and score histograms pool every seed's test samples. Titles and legends use the readable names of
:func:`ensemblize.report.style.display_name`.

No figure touches ``pyplot`` or the matplotlib backend: they are built with
:func:`ensemblize.report.style.new_figure` (a ``Figure`` on the Agg canvas).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_rate
from .style import display_name, legend_below, method_color, new_figure, save_figure, styled

__all__ = [
    "save_figure",
    "group_seeds",
    "reliability_figure",
    "risk_coverage_figure",
    "shift_figure",
    "ood_figure",
    "errorbar_figure",
    "selective_risk_coverage_figure",
    "reliability_diagram",
    "shift_plot",
    "ood_histograms",
    "risk_coverage_plot",
    "evaluation_figures",
]

_SEED_KEY = re.compile(r"^(?P<method>.+) s(?P<seed>\d+)$")
#: A selective-risk curve is drawn from this coverage on when the zoom is automatic (below it the
#: risk of a few accepted samples is noise: one error among 3 accepted samples is a risk of 0.33).
MIN_ZOOM_COVERAGE = 0.05


def group_seeds(evals: Mapping[str, Any]) -> dict[str, list[Any]]:
    """``{method: Evaluation | [Evaluation, ...]}`` -> ``{method: [Evaluation, ...]}``.

    Keys ``"<method> s<seed>"`` are merged under ``<method>`` (first-seen order kept). An empty
    mapping or an empty list raises ``ValueError``.
    """
    if not evals:
        raise ValueError("evals is empty: nothing to draw")
    out: dict[str, list[Any]] = {}
    for key, value in evals.items():
        runs = list(value) if isinstance(value, list | tuple) else [value]
        if not runs:
            raise ValueError(f"evals[{key!r}] is an empty list")
        m = _SEED_KEY.match(key)
        out.setdefault(m["method"] if m else key, []).extend(runs)
    return out


def _mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def _fmt_stat(values: Sequence[float], digits: int = 3) -> str:
    mean, std, n = _mean_std(values)
    if n == 0:
        return "—"
    return f"{mean:.{digits}f}" if n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def _seeds_note(runs: Sequence[Any]) -> str:
    return "" if len(runs) == 1 else f" ({len(runs)} seeds)"


# --- reliability -------------------------------------------------------------------------------------


def _pooled_reliability(runs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin confidence, accuracy (count-weighted over seeds) and total count."""
    rels = [r.details["reliability"] for r in runs]
    counts = np.stack([np.asarray(r["count"], dtype=float) for r in rels])
    total = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = (
            np.nansum(counts * np.stack([np.asarray(r["confidence"], dtype=float) for r in rels]), 0) / total
        )
        acc = np.nansum(counts * np.stack([np.asarray(r["accuracy"], dtype=float) for r in rels]), 0) / total
    return conf, acc, total


def reliability_figure(evals: Mapping[str, Any]) -> Any:
    """Reliability diagram per method with the bin-count histogram beneath; returns the Figure.

    Top row: accuracy per confidence bin (bars; bins pooled over seeds), the gap to the mean
    confidence of the bin (red) and the diagonal; the title gives the ECE (mean ± std over seeds, as
    in the tables). Bottom row: samples per bin on a log axis, so a bar drawn from one or two samples
    is visibly a small bin.
    """
    groups = group_seeds(evals)
    with styled():
        fig, axes = new_figure(
            2, len(groups), width=3.0 * len(groups) + 0.4, height=4.4, height_ratios=(3, 1.2), sharex="col"
        )
        for j, (method, runs) in enumerate(groups.items()):
            conf, acc, count = _pooled_reliability(runs)
            n_bins = len(count)
            centers = (np.arange(n_bins) + 0.5) / n_bins
            ok = count > 0
            top, bottom = axes[0][j], axes[1][j]
            top.bar(
                centers[ok], acc[ok], width=1 / n_bins, color=method_color(0), alpha=0.75,
                edgecolor="white", label="accuracy",
            )  # fmt: skip
            top.bar(
                centers[ok], conf[ok] - acc[ok], bottom=acc[ok], width=1 / n_bins, fill=False,
                edgecolor="#d62728", hatch="///", lw=0.6, label="gap to mean confidence",
            )  # fmt: skip
            top.plot([0, 1], [0, 1], "k--", lw=0.8, label="perfect calibration")
            top.set_xlim(0, 1)
            top.set_ylim(0, 1)
            ece = _fmt_stat([r.metrics.get("ece", math.nan) for r in runs])
            top.set_title(f"{display_name(method)}{_seeds_note(runs)}\nECE {ece}")
            bottom.bar(centers[ok], count[ok], width=1 / n_bins, color="#7f7f7f", edgecolor="white")
            bottom.set_yscale("log")
            bottom.set_xlabel("confidence (max p̄)")
            if j == 0:
                top.set_ylabel("accuracy")
                bottom.set_ylabel("samples per bin")
        legend_below(fig, axes[0])
    return fig


def reliability_diagram(evals: Mapping[str, Any], path: str | Path) -> Path:
    """:func:`reliability_figure` written to ``path`` (PNG); returns the path."""
    return save_figure(reliability_figure(evals), path)


# --- risk–coverage -----------------------------------------------------------------------------------


def _mean_curve(runs: Sequence[Any], grid: np.ndarray) -> np.ndarray:
    """Selective risk on ``grid`` (coverage), interpolated per seed and averaged over seeds."""
    curves = []
    for r in runs:
        rc = r.details["risk_coverage"]
        cov, risk = np.asarray(rc["coverage"], dtype=float), np.asarray(rc["risk"], dtype=float)
        order = np.argsort(cov, kind="stable")
        curves.append(np.interp(grid, cov[order], risk[order]))
    return np.mean(curves, axis=0)


def _zoom_range(curves: Sequence[np.ndarray], grid: np.ndarray) -> tuple[float, float]:
    """Coverage from which some curve's risk is non-zero (rounded down to 0.1) and the top risk there."""
    nonzero = [grid[np.argmax(c > 0)] for c in curves if (c > 0).any()]
    lo = math.floor(10 * max(MIN_ZOOM_COVERAGE, min(nonzero, default=0.0) - 0.05)) / 10
    lo = max(lo, MIN_ZOOM_COVERAGE)
    top = max(float(c[grid >= lo].max()) for c in curves)
    return lo, top * 1.08 if top > 0 else 1.0


def risk_coverage_figure(evals: Mapping[str, Any], *, coverage_from: float | None = None) -> Any:
    """Selective risk vs coverage (samples accepted by descending max p̄), mean over seeds.

    The x axis starts where the curves become informative: ``coverage_from``, or automatically just
    before the first coverage at which any method makes an error (every method has zero risk to the
    left; the axis label says so), never below :data:`MIN_ZOOM_COVERAGE`. The legend gives each
    method's AURC (mean ± std over seeds) and sits below the axes.
    """
    groups = group_seeds(evals)
    grid = np.linspace(0.0, 1.0, 401)[1:]
    curves = {m: _mean_curve(runs, grid) for m, runs in groups.items()}
    lo, top = _zoom_range(list(curves.values()), grid)
    if coverage_from is not None:
        lo = check_rate(coverage_from, name="coverage_from")
        top = max(float(c[grid >= lo].max()) for c in curves.values()) * 1.08 or 1.0
    with styled():
        fig, axes = new_figure(width=5.2, height=4.0)
        ax = axes[0][0]
        for i, (method, runs) in enumerate(groups.items()):
            aurc = _fmt_stat([r.metrics.get("aurc", math.nan) for r in runs], 4)
            keep = grid >= lo
            ax.plot(
                grid[keep], curves[method][keep], color=method_color(i), lw=1.4,
                label=f"{display_name(method)}{_seeds_note(runs)} — AURC {aurc}",
            )  # fmt: skip
        ax.set_xlim(lo, 1.0)
        ax.set_ylim(0.0, top)
        ax.set_xlabel(
            "coverage" if lo <= MIN_ZOOM_COVERAGE else f"coverage (from {lo:g}; lower coverage: zero risk)"
        )
        ax.set_ylabel("selective risk (error rate among accepted)")
        ax.set_title("Risk–coverage")
        legend_below(fig, axes, ncols=1)
    return fig


def risk_coverage_plot(evals: Mapping[str, Any], path: str | Path) -> Path:
    """:func:`risk_coverage_figure` written to ``path`` (PNG); returns the path."""
    return save_figure(risk_coverage_figure(evals), path)


# --- shift -------------------------------------------------------------------------------------------

_SHIFT_PANELS = (("accuracy", "accuracy"), ("ece", "ECE"), ("nll", "NLL"))


def shift_figure(evals: Mapping[str, Any]) -> Any:
    """Accuracy, ECE and NLL vs corruption severity (0 = clean), averaged over corruption kinds.

    One line per method (mean over seeds, error bars ± std over seeds when there are several); one
    legend for the figure, below the panels. Methods without shift details are left out.
    """
    groups = {m: runs for m, runs in group_seeds(evals).items() if all(r.details.get("shift") for r in runs)}
    if not groups:
        raise ValueError("no evaluation has shift details (corruptions were not evaluated)")
    with styled():
        fig, axes = new_figure(1, 3, width=10.5, height=3.6)
        for i, (method, runs) in enumerate(groups.items()):
            sev = np.asarray(runs[0].details["shift"]["severity"], dtype=float)
            for ax, (key, _) in zip(axes[0], _SHIFT_PANELS, strict=True):
                vals = np.array([r.details["shift"][key] for r in runs], dtype=float)
                std = vals.std(axis=0, ddof=1) if len(runs) > 1 else None
                ax.errorbar(
                    sev, vals.mean(axis=0), yerr=std, marker="o", ms=4, capsize=3, color=method_color(i),
                    label=f"{display_name(method)}{_seeds_note(runs)}",
                )  # fmt: skip
        for ax, (_, label) in zip(axes[0], _SHIFT_PANELS, strict=True):
            ax.set_xlabel("corruption severity (0 = clean)")
            ax.set_ylabel(label)
        legend_below(fig, axes)
    return fig


def shift_plot(evals: Mapping[str, Any], path: str | Path) -> Path:
    """:func:`shift_figure` written to ``path`` (PNG); returns the path."""
    return save_figure(shift_figure(evals), path)


# --- OOD ---------------------------------------------------------------------------------------------


def ood_figure(evals: Mapping[str, Any], *, bins: int = 25) -> Any:
    """Max-probability histograms (densities) of the in-distribution test set and every OOD set.

    One panel per method; the title gives the max-probability AUROC averaged over the OOD sets
    (mean ± std over seeds), each legend entry that set's own AUROC. Scores are pooled over seeds.
    Legends sit below their panel.
    """
    groups = {m: runs for m, runs in group_seeds(evals).items() if all(r.details.get("ood") for r in runs)}
    if not groups:
        raise ValueError("no evaluation has OOD details (no OOD set was evaluated)")
    edges = np.linspace(0.0, 1.0, bins + 1)
    with styled():
        fig, axes = new_figure(1, len(groups), width=3.4 * len(groups) + 0.4, height=4.2, sharey=False)
        for ax, (method, runs) in zip(axes[0], groups.items(), strict=True):
            names = list(runs[0].details["ood"])
            for k, name in enumerate(names):
                scores = np.concatenate([np.asarray(r.details["ood"][name], dtype=float) for r in runs])
                if name == "id":
                    label = display_name("id")
                else:
                    label = f"{name} — AUROC {_fmt_stat([r.metrics.get(f'ood_{name}_maxprob_auroc', math.nan) for r in runs])}"
                ax.hist(
                    scores, bins=edges, density=True, color=method_color(k),
                    histtype="stepfilled" if name == "id" else "step",
                    alpha=0.35 if name == "id" else 0.95, lw=1.3, label=label,
                )  # fmt: skip
            mean_auroc = _fmt_stat([r.metrics.get("ood_maxprob_auroc", math.nan) for r in runs])
            ax.set_title(
                f"{display_name(method)}{_seeds_note(runs)}\nmax-prob AUROC {mean_auroc} (mean over far-OOD sets)"
            )
            ax.set_xlabel("max probability (confidence)")
            ax.set_ylabel("density")
            ax.set_xlim(0, 1)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False, ncols=1)
    return fig


def ood_histograms(evals: Mapping[str, Any], path: str | Path) -> Path:
    """:func:`ood_figure` written to ``path`` (PNG); returns the path."""
    return save_figure(ood_figure(evals), path)


# --- generic panels used by the experiments -----------------------------------------------------------


def errorbar_figure(
    panels: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float, float]]]]],
    *,
    xlabel: str,
    logx: bool = False,
) -> Any:
    """One panel per ``(ylabel, {series: [(x, mean, std), ...]})``: mean ± std error bars.

    Series names go through :func:`display_name`; one legend for the figure, below the panels.
    With ``logx`` the x axis is logarithmic with ticks at exactly the x values given.
    """
    if not panels:
        raise ValueError("panels is empty: nothing to draw")
    with styled():
        fig, axes = new_figure(1, len(panels), width=3.6 * len(panels) + 0.4, height=3.6)
        for ax, (ylabel, series) in zip(axes[0], panels, strict=True):
            for i, (label, pts) in enumerate(series.items()):
                xs, ms, ss = (list(t) for t in zip(*pts, strict=True)) if pts else ([], [], [])
                ax.errorbar(
                    xs,
                    ms,
                    yerr=ss,
                    marker="o",
                    ms=4,
                    capsize=3,
                    color=method_color(i),
                    label=display_name(label),
                )
            if logx:
                ticks = sorted({float(x) for pts in series.values() for x, _, _ in pts})
                ax.set_xscale("log")
                ax.minorticks_off()
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
        legend_below(fig, axes)
    return fig


def selective_risk_coverage_figure(
    curves: Mapping[tuple[str, Any, str], Sequence[np.ndarray]],
    coverage: np.ndarray,
    *,
    targets: Sequence[float],
    scorings: Sequence[str] = ("w/o SR", "w/ SR"),
    baselines: Sequence[str] = ("SR", "DeepGamblers"),
) -> Any:
    """The selective experiment's grid: one row per scoring, one column per target coverage.

    ``curves[(method, target, scoring)]`` holds one test risk curve per seed on ``coverage``; the
    mean over seeds is drawn. Methods trained without a target (``target is None``) appear in every
    column; the ``baselines`` are dashed and appear in every row. One legend for the whole figure,
    below the grid, so no curve is covered.
    """
    coverage = np.asarray(coverage, dtype=float)
    if not targets:
        raise ValueError("targets is empty")
    methods = list(dict.fromkeys(m for m, _, _ in curves))
    with styled():
        fig, axes = new_figure(
            len(scorings), len(targets), width=3.8 * len(targets) + 0.4, height=3.2 * len(scorings) + 0.8,
            sharey=True,
        )  # fmt: skip
        for i, scoring in enumerate(scorings):
            for j, t in enumerate(targets):
                ax = axes[i][j]
                for (method, target, sc), cs in curves.items():
                    if target not in (t, None) or (sc != scoring and method not in baselines):
                        continue
                    ax.plot(
                        coverage, np.mean(np.asarray(cs, dtype=float), axis=0), lw=1.2,
                        color=method_color(methods.index(method)), ls="--" if method in baselines else "-",
                        label=display_name(method),
                    )  # fmt: skip
                ax.set_title(f"target coverage {t:g}, scoring {scoring}")
                if i == len(scorings) - 1:
                    ax.set_xlabel("coverage")
                if j == 0:
                    ax.set_ylabel("selective risk (test)")
        legend_below(fig, axes)
    return fig


def evaluation_figures(evals: Mapping[str, Any], out: str | Path) -> list[Path]:
    """Every evaluation figure for ``evals`` into folder ``out``; returns the written paths.

    ``evals``: ``{method: Evaluation}`` or ``{method: [Evaluation per seed]}`` (see the module doc):
    pass every seed so the figures aggregate the way the tables do.
    """
    out = Path(out)
    groups = group_seeds(evals)
    runs = [r for rs in groups.values() for r in rs]
    paths = [
        reliability_diagram(groups, out / "reliability.png"),
        risk_coverage_plot(groups, out / "risk_coverage.png"),
    ]
    if any(r.details.get("shift") for r in runs):
        paths.append(shift_plot(groups, out / "shift.png"))
    if any(r.details.get("ood") for r in runs):
        paths.append(ood_histograms(groups, out / "ood_histograms.png"))
    return paths
