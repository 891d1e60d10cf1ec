"""Figures drawn from :class:`ensemblize.evaluation.Evaluation` details, one PNG each, written atomically.

Each function takes ``{method: Evaluation}`` and a path, draws every method on one figure and
returns the path. matplotlib runs on the Agg backend (no display needed).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..checkpoint import atomic_write_bytes  # noqa: E402

__all__ = [
    "save_figure",
    "reliability_diagram",
    "shift_plot",
    "ood_histograms",
    "risk_coverage_plot",
    "evaluation_figures",
]


def save_figure(fig: Any, path: str | Path, *, dpi: int = 110) -> Path:
    """Render ``fig`` to PNG in memory and write it atomically; closes the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def reliability_diagram(evals: Mapping[str, Any], path: str | Path) -> Path:
    """Accuracy vs confidence per bin (markers sized by count) for every method, with the diagonal."""
    fig, axes = plt.subplots(1, len(evals), figsize=(3.2 * len(evals), 3.2), squeeze=False)
    for ax, (method, ev) in zip(axes[0], evals.items(), strict=True):
        rel = ev.details["reliability"]
        conf, acc, count = (np.asarray(rel[k], dtype=float) for k in ("confidence", "accuracy", "count"))
        ok = count > 0
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.bar(
            conf[ok], acc[ok] - conf[ok], bottom=conf[ok], width=0.03, color="tab:red", alpha=0.4, label="gap"
        )
        ax.scatter(conf[ok], acc[ok], s=10 + 60 * count[ok] / max(1, count.max()), color="tab:blue", zorder=3)
        ax.set_title(f"{method}\nECE {ev.metrics['ece']:.3f}", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
    axes[0][0].set_ylabel("accuracy")
    return save_figure(fig, path)


def shift_plot(evals: Mapping[str, Any], path: str | Path) -> Path:
    """Accuracy, ECE and NLL vs corruption severity (0 = clean), averaged over corruption kinds."""
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for method, ev in evals.items():
        shift = ev.details.get("shift")
        if not shift:
            continue
        for ax, key in zip(axes, ("accuracy", "ece", "nll"), strict=True):
            ax.plot(shift["severity"], shift[key], marker="o", label=method)
    for ax, key in zip(axes, ("accuracy", "ECE", "NLL"), strict=True):
        ax.set_xlabel("corruption severity")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def ood_histograms(evals: Mapping[str, Any], path: str | Path) -> Path:
    """Max-probability histograms: in-distribution test vs every OOD set, one panel per method."""
    fig, axes = plt.subplots(1, len(evals), figsize=(3.4 * len(evals), 3.0), squeeze=False)
    bins = np.linspace(0, 1, 26)
    for ax, (method, ev) in zip(axes[0], evals.items(), strict=True):
        ood = ev.details.get("ood", {})
        for name, conf in ood.items():
            ax.hist(
                conf,
                bins=bins,
                histtype="step" if name != "id" else "stepfilled",
                alpha=0.9 if name != "id" else 0.3,
                density=True,
                label=name,
            )
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("max probability")
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def risk_coverage_plot(evals: Mapping[str, Any], path: str | Path) -> Path:
    """Selective risk (error among accepted) vs coverage, samples accepted by descending max p̄."""
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    for method, ev in evals.items():
        rc = ev.details["risk_coverage"]
        ax.plot(rc["coverage"], rc["risk"], label=f"{method} (AURC {ev.metrics['aurc']:.4f})")
    ax.set_xlabel("coverage")
    ax.set_ylabel("selective risk")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def evaluation_figures(evals: Mapping[str, Any], out: str | Path) -> list[Path]:
    """Every evaluation figure for ``evals`` into folder ``out``; returns the written paths."""
    out = Path(out)
    paths = [
        reliability_diagram(evals, out / "reliability.png"),
        risk_coverage_plot(evals, out / "risk_coverage.png"),
    ]
    if any(ev.details.get("shift") for ev in evals.values()):
        paths.append(shift_plot(evals, out / "shift.png"))
    if any(ev.details.get("ood") for ev in evals.values()):
        paths.append(ood_histograms(evals, out / "ood_histograms.png"))
    return paths
