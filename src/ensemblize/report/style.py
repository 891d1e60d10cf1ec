"""The one look every ensemblize figure shares: readable method names, colours, sizes, legends.

Figures are built on :class:`matplotlib.figure.Figure` with the Agg canvas directly, so importing
this module (or drawing a figure) never switches the caller's matplotlib backend and never touches
``pyplot``'s global figure list.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._checks import check_choice, check_instance
from ..checkpoint import atomic_write_bytes

__all__ = [
    "METHOD_NAMES",
    "display_name",
    "method_color",
    "new_figure",
    "styled",
    "legend_below",
    "figure_bytes",
    "save_figure",
    "RC",
]

#: Internal method / label name -> the name a reader sees. Unknown names are shown as they are.
METHOD_NAMES: dict[str, str] = {
    "single": "Single model",
    "temp_scaled": "Single + temperature scaling",
    "deep": "Deep ensemble",
    "deep_ensemble": "Deep ensemble",
    "batchensemble": "BatchEnsemble",
    "packed": "Packed-Ensembles",
    "sigma": "σN-Ens",
    "sigma_ens": "σN-Ens",
    "lometab": "LoMETab",
    "tabm": "TabM",
    "additive": "Additive low-rank",
    "mlp": "MLP",
    "xgboost": "XGBoost",
    "catboost": "CatBoost",
    "SR": "Softmax response",
    "DeepGamblers": "Deep Gamblers",
    "SelectiveNet": "SelectiveNet",
    "id": "in-distribution (test)",
}

#: matplotlib rc settings applied to every figure built by :func:`new_figure`.
RC: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 110,
}

_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
_SEED_SUFFIX = re.compile(r"^(?P<name>.+?) s(?P<seed>\d+)$")


def display_name(name: str) -> str:
    """The reader-facing name of a method or label: ``deep_ensemble`` -> ``Deep ensemble``.

    A trailing seed suffix (``"deep_ensemble s0"``, as some run folders label checkpoints) becomes
    ``"Deep ensemble (seed 0)"``. Names not in :data:`METHOD_NAMES` are returned unchanged.
    """
    check_instance(name, str, name="method name")
    if name in METHOD_NAMES:
        return METHOD_NAMES[name]
    m = _SEED_SUFFIX.match(name)
    if m and m["name"] in METHOD_NAMES:
        return f"{METHOD_NAMES[m['name']]} (seed {m['seed']})"
    return name


def method_color(index: int) -> str:
    """The colour of the ``index``-th series (a fixed, colour-blind-friendly-ish cycle)."""
    return _PALETTE[index % len(_PALETTE)]


def styled() -> Any:
    """A context manager applying :data:`RC` while a figure is drawn (global rcParams restored after)."""
    import matplotlib

    return matplotlib.rc_context(RC)


def new_figure(
    nrows: int = 1,
    ncols: int = 1,
    *,
    width: float,
    height: float,
    height_ratios: Sequence[float] | None = None,
    sharex: bool | str = False,
    sharey: bool | str = False,
) -> tuple[Any, Any]:
    """A ``(Figure, axes[nrows][ncols])`` pair with the shared style and an Agg canvas attached.

    ``width``/``height`` are inches for the whole figure. The rc settings in :data:`RC` apply to
    the artists created now; the caller's global ``matplotlib.rcParams`` are left as they were.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with styled():
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)
        gridspec_kw = {"height_ratios": list(height_ratios)} if height_ratios is not None else None
        axes = fig.subplots(
            nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey, gridspec_kw=gridspec_kw
        )
    for ax in axes.flat:
        _apply_axes_style(ax)
    return fig, axes


def _apply_axes_style(ax: Any) -> None:
    ax.grid(True, alpha=RC["grid.alpha"])
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.tick_params(labelsize=RC["xtick.labelsize"])
    ax.xaxis.label.set_fontsize(RC["axes.labelsize"])
    ax.yaxis.label.set_fontsize(RC["axes.labelsize"])


def legend_below(fig: Any, axes: Any, *, ncols: int | None = None) -> Any:
    """One legend for the whole figure, outside and below every axes, so it covers no curve.

    Entries are collected from every axes (duplicates by label dropped, first-seen order kept).
    Returns the legend, or ``None`` when no axes has a labelled artist.
    """
    handles, labels = [], []
    for ax in getattr(axes, "flat", axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    if not labels:
        return None
    ncols = ncols or min(len(labels), 4)
    return fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)


def figure_bytes(fig: Any, *, fmt: str = "png", dpi: int = 110) -> bytes:
    """Render ``fig`` (any matplotlib Figure) to PNG or SVG bytes."""
    check_choice(fmt, ("png", "svg"), name="fmt")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def save_figure(fig: Any, path: str | Path, *, dpi: int = 110) -> Path:
    """Render ``fig`` to PNG in memory and write it atomically to ``path``; returns the path.

    A figure created through ``pyplot`` is closed (released from pyplot's figure list) afterwards;
    pyplot is never imported here.
    """
    data = figure_bytes(fig, fmt="png", dpi=dpi)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)
    return atomic_write_bytes(path, data)
