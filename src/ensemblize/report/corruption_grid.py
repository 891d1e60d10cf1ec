"""Figure: one image under every corruption kind × severity (a visual check of the CIFAR-10-C set)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..data.corruptions import CORRUPTIONS, _as_batch, corrupt, parse_corruptions

__all__ = ["plot_corruption_grid"]


def plot_corruption_grid(
    image: np.ndarray | torch.Tensor,
    path: str | os.PathLike,
    *,
    kinds: Sequence[str] | None = None,
    seed: int = 0,
    reference_size: int = 32,
    dpi: int = 100,
) -> Path:
    """Save a PNG grid: rows are corruption kinds, columns the clean image and severities 1..5.

    Args:
        image: one ``(C, H, W)`` image (``C`` in {1, 3}) in [0, 1] pixels.
        path: where the PNG goes (written atomically; parent folders are created).
        kinds: corruption kinds to show; ``None`` shows every kind in
            :data:`~ensemblize.data.corruptions.CORRUPTIONS` that applies to the image (``saturate``
            is skipped for grayscale). Naming ``saturate`` for a grayscale image raises ``ValueError``.
        seed, reference_size: passed to :func:`~ensemblize.data.corruptions.corrupt`.
        dpi: resolution of the saved figure.

    Returns:
        The path written.
    """
    from .style import new_figure, save_figure, styled

    x, single = _as_batch(image)
    if not single:
        raise ValueError(f"image must be one (C, H, W) image, got shape {tuple(np.shape(image))}")
    x = x[0]
    channels = x.shape[0]
    if kinds is None:
        kinds = tuple(k for k in CORRUPTIONS if not (k == "saturate" and channels != 3))
    else:
        kinds = parse_corruptions(kinds)
    rows = [[x] + [corrupt(x, k, s, seed, reference_size=reference_size) for s in range(1, 6)] for k in kinds]

    with styled():
        fig, axes = new_figure(len(kinds), 6, width=6 * 1.3, height=len(kinds) * 1.3)
        _draw_grid(axes, kinds, rows, channels)
    return save_figure(fig, path, dpi=dpi)


def _draw_grid(axes, kinds: Sequence[str], rows: list, channels: int) -> None:
    for r, (kind, images) in enumerate(zip(kinds, rows, strict=True)):
        for col, img in enumerate(images):
            ax = axes[r, col]
            if channels == 1:
                ax.imshow(img[0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
            else:
                ax.imshow(img.transpose(1, 2, 0), vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if r == 0:
                ax.set_title("clean" if col == 0 else f"severity {col}", fontsize=8)
            if col == 0:
                ax.set_ylabel(kind, fontsize=7)
