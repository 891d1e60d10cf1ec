"""Figures are checked for content: axes labels, titles, legend entries, number of series, the values
they draw (seed aggregation), and that no legend overlaps an axes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ensemblize.report import figures as F
from ensemblize.report.style import display_name, figure_bytes, new_figure
from report_fixtures import OOD_SETS, make_evals, make_evaluation


def _legend_texts(fig) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def _draw(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _assert_no_legend_over_axes(fig):
    renderer = _draw(fig)
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for leg in legends:
        box = leg.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (leg, ax.get_title())


def test_display_names():
    assert display_name("deep_ensemble") == "Deep ensemble"
    assert display_name("sigma_ens") == "σN-Ens"
    assert display_name("deep_ensemble s0") == "Deep ensemble (seed 0)"
    assert display_name("my_method") == "my_method"
    with pytest.raises(TypeError, match="method name"):
        display_name(3)


def test_group_seeds_merges_seed_suffixed_keys():
    a, b, c = make_evaluation(0), make_evaluation(1), make_evaluation(2)
    groups = F.group_seeds({"deep_ensemble s0": a, "deep_ensemble s1": b, "single": c})
    assert list(groups) == ["deep_ensemble", "single"]
    assert groups["deep_ensemble"] == [a, b]
    with pytest.raises(ValueError, match="empty"):
        F.group_seeds({})
    with pytest.raises(ValueError, match="'single'"):
        F.group_seeds({"single": []})


def test_reliability_figure_content():
    evals = make_evals(seeds=2)
    fig = F.reliability_figure(evals)
    assert len(fig.axes) == 6  # 3 methods × (diagram + count histogram)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("Single model (2 seeds)\nECE ")
    assert any(t.startswith("σN-Ens (2 seeds)") for t in titles)
    # the ECE in the title is the mean ± std over seeds, as in the tables
    eces = [e.metrics["ece"] for e in evals["single"]]
    assert f"ECE {np.mean(eces):.3f} ± {np.std(eces, ddof=1):.3f}" in titles[0]
    labels = {ax.get_ylabel() for ax in fig.axes}
    assert {"accuracy", "samples per bin"} <= labels
    assert all(
        ax.get_xlabel() == "confidence (max p̄)" for ax in fig.axes if ax.get_ylabel() == "samples per bin"
    )
    assert set(_legend_texts(fig)) == {"accuracy", "gap to mean confidence", "perfect calibration"}
    # the count histogram pools both seeds: its bar heights sum to 2 × 300 test samples
    counts = [ax for ax in fig.axes if ax.get_ylabel() == "samples per bin"][0]
    assert sum(p.get_height() for p in counts.patches) == pytest.approx(600)
    assert counts.get_yscale() == "log"
    _assert_no_legend_over_axes(fig)


def test_risk_coverage_figure_content_and_mean_curve():
    evals = make_evals(seeds=2)
    fig = F.risk_coverage_figure(evals)
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 3
    texts = _legend_texts(fig)
    assert len(texts) == 3 and all("AURC" in t for t in texts)
    aurc = [e.metrics["aurc"] for e in evals["deep_ensemble"]]
    assert f"Deep ensemble (2 seeds) — AURC {np.mean(aurc):.4f} ± {np.std(aurc, ddof=1):.4f}" in texts
    assert ax.get_ylabel().startswith("selective risk")
    assert ax.get_xlabel().startswith("coverage")
    # the plotted line is the mean over seeds of the per-seed curves
    line = ax.get_lines()[0]
    x, y = line.get_xdata(), line.get_ydata()
    ref = np.mean(
        [
            np.interp(x, e.details["risk_coverage"]["coverage"], e.details["risk_coverage"]["risk"])
            for e in evals["single"]
        ],
        axis=0,
    )
    np.testing.assert_allclose(y, ref)
    _assert_no_legend_over_axes(fig)


def test_risk_coverage_zooms_on_informative_range():
    ev = make_evaluation(0)
    cov = np.linspace(0.01, 1, 100)
    risk = np.where(cov < 0.8, 0.0, (cov - 0.8) * 0.1)  # flat zero risk up to 80 % coverage
    ev.details["risk_coverage"] = {"coverage": cov, "risk": risk}
    fig = F.risk_coverage_figure({"single": ev})
    (ax,) = fig.axes
    lo, hi = ax.get_xlim()
    assert lo == pytest.approx(0.7) and hi == 1.0
    assert ax.get_ylim()[1] == pytest.approx(0.02 * 1.08, rel=0.02)
    assert "zero risk" in ax.get_xlabel()
    fig = F.risk_coverage_figure({"single": ev}, coverage_from=0.0)
    assert fig.axes[0].get_xlim()[0] == 0.0
    with pytest.raises(ValueError, match=r"coverage_from must lie in \[0, 1\), got 1.5"):
        F.risk_coverage_figure({"single": ev}, coverage_from=1.5)
    with pytest.raises(TypeError, match="coverage_from must be a real number"):
        F.risk_coverage_figure({"single": ev}, coverage_from="0.5")


def test_shift_figure_content():
    evals = make_evals(seeds=2)
    fig = F.shift_figure(evals)
    assert [ax.get_ylabel() for ax in fig.axes] == ["accuracy", "ECE", "NLL"]
    assert all(ax.get_xlabel() == "corruption severity (0 = clean)" for ax in fig.axes)
    assert _legend_texts(fig) == ["Single model (2 seeds)", "Deep ensemble (2 seeds)", "σN-Ens (2 seeds)"]
    for ax in fig.axes:
        assert len(ax.containers) == 3  # one error-bar series per method
    # the accuracy line of the single model is the mean of both seeds
    acc = fig.axes[0].containers[0].lines[0].get_ydata()
    ref = np.mean([e.details["shift"]["accuracy"] for e in evals["single"]], axis=0)
    np.testing.assert_allclose(acc, ref)
    _assert_no_legend_over_axes(fig)
    with pytest.raises(ValueError, match="shift"):
        F.shift_figure({"single": make_evaluation(0, shift=False)})


def test_ood_figure_content():
    evals = make_evals(seeds=1)
    fig = F.ood_figure(evals)
    assert len(fig.axes) == 3
    for ax, (method, runs) in zip(fig.axes, evals.items(), strict=True):
        assert ax.get_ylabel() == "density"
        assert ax.get_xlabel() == "max probability (confidence)"
        assert f"AUROC {runs[0].metrics['ood_maxprob_auroc']:.3f}" in ax.get_title()
        assert ax.get_title().startswith(display_name(method))
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert texts[0] == "in-distribution (test)"
        assert len(texts) == 1 + len(OOD_SETS)
        for name, text in zip(OOD_SETS, texts[1:], strict=True):
            assert text == f"{name} — AUROC {runs[0].metrics[f'ood_{name}_maxprob_auroc']:.3f}"
        # densities: each histogram integrates to 1 over [0, 1]
        for patch in ax.patches:
            x, y = patch.get_xy().T
            area = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))  # shoelace
            assert area == pytest.approx(1.0, rel=1e-6)
    _assert_no_legend_over_axes(fig)


def test_errorbar_and_selective_grid_legends_outside():
    fig = F.errorbar_figure(
        [
            (
                "ECE",
                {
                    "sigma_ens": [(0.1, 0.2, 0.01), (1.0, 0.3, 0.02)],
                    "single": [(0.1, 0.4, 0.0), (1.0, 0.5, 0.0)],
                },
            )
        ],
        xlabel="τ",
        logx=True,
    )
    assert _legend_texts(fig) == ["σN-Ens", "Single model"]
    assert fig.axes[0].get_xscale() == "log"
    _assert_no_legend_over_axes(fig)
    cov = np.linspace(0.01, 1, 50)
    curves = {
        ("SR", None, "w/ SR"): [cov * 0.1, cov * 0.12],
        ("SelectiveNet", 0.5, "w/o SR"): [cov * 0.2],
        ("SelectiveNet", 0.5, "w/ SR"): [cov * 0.15],
        ("SYNC-SMP(γ=2)", 0.5, "w/ SR"): [cov * 0.05],
    }
    fig = F.selective_risk_coverage_figure(curves, cov, targets=[0.5, 0.7])
    assert len(fig.axes) == 4
    assert _legend_texts(fig) == ["Softmax response", "SelectiveNet", "SYNC-SMP(γ=2)"]
    top_left = fig.axes[0]  # target 0.5, w/o SR: SR baseline + SelectiveNet
    assert len(top_left.get_lines()) == 2
    np.testing.assert_allclose(top_left.get_lines()[0].get_ydata(), cov * 0.11)
    _assert_no_legend_over_axes(fig)


def test_evaluation_figures_writes_pngs(tmp_path):
    paths = F.evaluation_figures(make_evals(seeds=1), tmp_path)
    assert [p.name for p in paths] == [
        "reliability.png",
        "risk_coverage.png",
        "shift.png",
        "ood_histograms.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    only_clean = {"single": make_evaluation(0, shift=False, ood=False)}
    assert [p.name for p in F.evaluation_figures(only_clean, tmp_path / "c")] == [
        "reliability.png",
        "risk_coverage.png",
    ]


def test_import_switches_no_backend():
    code = (
        "import matplotlib; matplotlib.use('svg'); import ensemblize.report.figures, ensemblize.report.html; "
        "import sys; assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
        "assert 'matplotlib.pyplot' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_figure_bytes_names_a_bad_format():
    fig, _ = new_figure(width=2, height=2)
    assert figure_bytes(fig, fmt="svg").startswith(b"<?xml")
    with pytest.raises(ValueError, match=r"fmt must be one of \('png', 'svg'\), got 'jpg'"):
        figure_bytes(fig, fmt="jpg")
