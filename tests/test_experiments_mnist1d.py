"""`--dataset mnist1d` through the image experiments: signal backbones, 1-D shifts and OOD sets, train size."""

import json
import math

import pytest
from typer.testing import CliRunner

from ensemblize.data.shifts1d import SIGNAL_SHIFTS
from ensemblize.experiments.image import eval_spec

TINY = ["--dataset", "mnist1d", "--train-size", "100", "--epochs", "1", "--width", "4", "--seeds", "0"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ENSEMBLIZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mnist1d_cache"))


def _invoke(command, out, *args):
    from ensemblize.cli import app

    result = CliRunner().invoke(app, ["experiment", command, *TINY, "--out", str(out), *args])
    return result, (json.loads((out / "results.json").read_text()) if result.exit_code == 0 else None)


def test_presets_use_the_signal_shifts():
    assert eval_spec("full", "mnist1d").corruptions == SIGNAL_SHIFTS
    assert eval_spec("reduced", "mnist1d").corruptions == SIGNAL_SHIFTS
    assert eval_spec("tiny", "mnist1d").corruptions == ("gaussian_noise",)


@pytest.mark.slow
def test_compare_on_mnist1d_end_to_end(tmp_path):
    result, rows = _invoke(
        "compare", tmp_path / "c", "--eval", "tiny", "--methods", "single,packed,sigma", "--members", "2"
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert [r["method"] for r in rows] == ["single", "packed", "sigma_ens"]
    assert {r["dataset"] for r in rows} == {"mnist1d"} and {r["spec"]["model"] for r in rows} == {"resnet1d"}
    for r in rows:
        for key in ("accuracy", "nll", "corr_accuracy_s1", "corr_ece_s5", "ood_gaussian_maxprob_auroc"):
            assert math.isfinite(r["metrics"][key]), (r["method"], key)


@pytest.mark.slow
def test_finetune_heldout_on_mnist1d(tmp_path):
    result, rows = _invoke(
        "finetune", tmp_path / "f", "--eval", "tiny", "--heldout", "--finetune-epochs", "1"
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert all(math.isfinite(r["metrics"]["ood_heldout_maxprob_auroc"]) for r in rows)


def test_an_image_model_on_mnist1d_is_refused(tmp_path):
    result, _ = _invoke("compare", tmp_path / "x", "--eval", "tiny", "--model", "resnet_small")
    assert result.exit_code != 0 and "must be one of resnet1d, transformer1d" in result.output
