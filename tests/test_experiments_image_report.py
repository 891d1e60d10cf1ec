"""Content of the τ-sweep figures of :mod:`ensemblize.experiments.image_report`: labels, one series
per τ value, no overlapping text, no grid on the heatmap, and no ``pyplot``."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from ensemblize.experiments import image_report as R

TAUS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
LAYERS = ("block0.norm", "block1.norm", "head.norm")


def _records(members: int = 4) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for tau, seed in itertools.product(TAUS, (0, 1)):
        # nearly equal ECE/accuracy for neighbouring τ: text labels at the points would collide
        ece = 0.05 + 0.001 * tau + 0.0005 * seed
        metrics = {
            "ece": ece,
            "accuracy": 0.9 - 0.001 * tau + 0.0005 * seed,
            "nll": 0.3 + 0.002 * tau,
            "disagreement": 0.1 * tau,
            "pairwise_kl": 0.2 * tau,
            "mutual_information": 0.05 * tau,
            "owners_per_feature": members * (1 - tau),
        }
        sharing = [{"name": n, "mean_owners": float(rng.uniform(1, members))} for n in LAYERS]
        out.append({"spec": {"tau": tau}, "metrics": metrics, "sharing": sharing, "members": members})
    return out


def test_frontier_figure_has_labels_and_one_series_per_tau():
    fig = R.frontier_figure(_records(), param="tau", symbol="τ")
    axes = fig.axes
    assert [ax.get_xlabel() for ax in axes] == ["ECE (test)", "ECE (test)"]
    assert [ax.get_ylabel() for ax in axes] == ["accuracy (test)", "NLL (test)"]
    for ax in axes:
        labels = [lab for lab in ax.get_legend_handles_labels()[1] if lab.startswith("τ")]
        assert labels == [f"τ = {t:g}" for t in TAUS]
        assert len(ax.containers) == len(TAUS)  # one errorbar point per τ value
        assert not ax.texts  # τ is in the legend and the colour, never an annotation at the point
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert [t for t in texts if t.startswith("τ")] == [f"τ = {t:g}" for t in TAUS]
    assert len(texts) == len(TAUS) + 1 and any(t.startswith("Pareto front") for t in texts)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes)


def test_owners_figure_cells_labels_and_no_overlapping_text():
    recs = _records()
    fig = R.owners_figure(recs, param="tau", symbol="τ")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "τ" and ax.get_ylabel() == "σNorm layer"
    assert not any(line.get_visible() for line in ax.get_xgridlines() + ax.get_ygridlines())
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{t:g}" for t in TAUS]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(LAYERS)
    _, _, mat = R.owners_matrix(recs, param="tau")
    assert [t.get_text() for t in ax.texts] == [f"{v:.1f}" for v in mat.ravel()]
    assert "owners" in fig.axes[1].get_ylabel()  # the colour bar says what the colour is
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)


def test_sweep_figures_write_three_pngs_without_pyplot(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    paths = R.sweep_figures(_records(), tmp_path, param="tau", symbol="τ")
    assert [p.name for p in paths] == ["frontier.png", "diversity.png", "owners_heatmap.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    assert "matplotlib.pyplot" not in sys.modules


def test_owners_matrix_rejects_mismatched_layers():
    recs = _records()
    recs[1]["sharing"] = recs[1]["sharing"][:-1]
    with pytest.raises(ValueError, match="different σNorm layers"):
        R.owners_matrix(recs, param="tau")
