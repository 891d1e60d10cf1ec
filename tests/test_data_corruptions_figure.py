"""The corruption-grid figure is written as a real PNG with one row per kind."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ensemblize.report.corruption_grid import plot_corruption_grid


def test_grid_png_for_gray_and_colour(tmp_path):
    gray = np.random.default_rng(0).random((1, 8, 8))
    out = plot_corruption_grid(gray, tmp_path / "sub" / "gray.png", kinds=["fog", "contrast"], dpi=50)
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > img.size[1]  # 2 rows × 6 columns
    colour = np.random.default_rng(1).random((3, 16, 16))
    out = plot_corruption_grid(colour, tmp_path / "colour.png", kinds=["saturate", "pixelate", "fog"], dpi=50)
    with Image.open(out) as img:
        assert img.format == "PNG"
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "colour.png",
        "gray.png",
        "sub",
    ]  # no temp files left
    with pytest.raises(ValueError, match="saturate"):
        plot_corruption_grid(gray, tmp_path / "bad.png", kinds=["saturate"])
    with pytest.raises(ValueError, match="one \\(C, H, W\\) image"):
        plot_corruption_grid(gray[None], tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
