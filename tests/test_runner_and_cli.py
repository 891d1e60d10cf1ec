"""The default job, the shared runner, temperature scaling and `ensemblize evaluate`, end to end."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ensemblize.metrics as M
from ensemblize.calibration import TemperatureScaled, fit_temperature
from ensemblize.data import load_digits
from ensemblize.evaluation import EvalSpec, evaluate_classifier, evaluate_probs
from ensemblize.runner import MethodSpec, TrainConfig, load_method, run_method


def test_fit_temperature_recovers_a_known_temperature():
    g = torch.Generator().manual_seed(0)
    true_logits = 3 * torch.randn(4000, 5, generator=g)
    labels = torch.multinomial(torch.softmax(true_logits, -1), 1, generator=g).squeeze(1)
    # a model that is overconfident by a factor 2.5: the fitted T must undo it
    t = fit_temperature(2.5 * true_logits, labels)
    assert t == pytest.approx(2.5, rel=0.08)
    wrapped = TemperatureScaled(torch.nn.Identity(), t)
    assert torch.allclose(wrapped(2.5 * true_logits), 2.5 * true_logits / t)
    with pytest.raises(ValueError, match="temperature"):
        TemperatureScaled(torch.nn.Identity(), 0.0)
    with pytest.raises(ValueError, match="outside"):
        fit_temperature(true_logits, labels + 10)


def test_evaluate_probs_matches_the_metric_functions():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(50, 3))
    y = rng.integers(0, 4, 50)
    got = evaluate_probs(p, y)
    assert got["nll"] == pytest.approx(M.nll(p, y))
    assert got["ece"] == pytest.approx(M.ece(p, y, n_bins=15))
    conf = p.mean(1).max(1)
    assert got["aurc"] == pytest.approx(M.aurc(conf, (p.mean(1).argmax(1) != y).astype(float)))
    assert got["mutual_information"] == pytest.approx(M.mutual_information(p))
    # tensors give the same numbers; a missing member axis or (N, 1) labels are named, not an AxisError
    assert evaluate_probs(torch.tensor(p), torch.tensor(y)) == got
    with pytest.raises(ValueError, match=r"member_probs must have shape \(N, M, C\)"):
        evaluate_probs(p.mean(1), y)
    with pytest.raises(ValueError, match="labels must be 1-D"):
        evaluate_probs(p, y[:, None])


@pytest.fixture(scope="module")
def digits():
    return load_digits(seed=0)


@pytest.mark.slow
def test_runner_checkpoint_round_trip_and_full_evaluation(tmp_path, digits):
    small = replace(digits, x_test=digits.x_test[:60], y_test=digits.y_test[:60])
    spec = MethodSpec("sigma", members=2, tau=1.0, lam=0.5, model_kwargs={"width": 4})
    outcome = run_method(
        spec,
        small,
        train=TrainConfig(epochs=1, batch_size=128),
        seed=0,
        out=tmp_path,
        eval_spec=EvalSpec(
            corruptions=("gaussian_noise", "contrast"), severities=(1, 5), ood=("gaussian", "photos")
        ),
    )
    m = outcome.record.metrics
    for key in (
        "accuracy",
        "nll",
        "ece",
        "brier",
        "corr_accuracy_s5",
        "ood_photos_mi_auroc",
        "aurc",
        "owners_per_feature",
    ):
        assert key in m and math.isfinite(m[key]), key
    assert outcome.record.members == 2 and outcome.record.params > 0
    # the checkpoint rebuilds a module that predicts identically
    module, loaded_spec, meta = load_method(tmp_path / "models" / "sigma_seed0", small)
    assert loaded_spec == spec and meta["seed"] == 0
    again = evaluate_classifier(module, small, spec=EvalSpec.none())
    assert again.metrics["nll"] == pytest.approx(m["nll"], abs=1e-9)
    # a checkpoint from a different model is refused
    with pytest.raises(ValueError, match="classes"):
        load_method(tmp_path / "models" / "sigma_seed0", load_digits(seed=0, classes=[0, 1]))


@pytest.mark.slow
def test_temp_scaled_method_fits_on_validation(digits):
    spec = MethodSpec("temp_scaled", model_kwargs={"width": 4})
    out = run_method(spec, digits, train=TrainConfig(epochs=1), seed=1, eval_spec=EvalSpec.none())
    assert isinstance(out.model, TemperatureScaled)
    with torch.no_grad():
        logits = out.model.eval().model(digits.x_val)
    assert out.record.extra["temperature"] == pytest.approx(fit_temperature(logits, digits.y_val), rel=1e-6)


@pytest.mark.slow
def test_cli_run_and_evaluate_end_to_end(tmp_path):
    from ensemblize.cli import app

    runner = CliRunner()
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "run",
            "--out",
            str(out),
            "--seed",
            "3",
            "--epochs",
            "1",
            "--members",
            "2",
            "--ood",
            "gaussian,heldout",
            "--no-evaluate",
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in rows] == ["single", "deep_ensemble", "sigma_ens"]
    for r in rows:
        assert {"method", "dataset", "seed", "members", "params", "train_seconds", "metrics"} <= set(r)
        assert r["seed"] == 3 and 0 <= r["metrics"]["accuracy"] <= 1
    assert rows[1]["members"] == 2 and rows[0]["members"] == 1
    assert (out / "reliability.png").stat().st_size > 1000
    assert "report.html" in json.loads((out / "manifest.json").read_text())["files"]  # written before it
    assert "status: complete (manifest.json written with this report)" in (out / "report.html").read_text()
    assert "Recorded by the run (environment.json)" in (out / "report.html").read_text()
    assert "torch_threads" in json.loads((out / "environment.json").read_text())
    assert "accuracy" in res.output and "sigma_ens" in res.output
    claims = json.loads((out / "claims.json").read_text())  # the paper's claims, judged on this run
    assert len(claims) == 4 and all(c["verdict"] in ("supported", "refuted") for c in claims)  # one pair
    assert "Claims and verdicts" in (out / "report.html").read_text() and "σN-Ens has a lower" in res.output
    assert "claims.json" in json.loads((out / "manifest.json").read_text())["files"]
    res = runner.invoke(app, ["evaluate", str(out), "--ood", "uniform"])
    assert res.exit_code == 0, res.output
    assert f"{out / 'evaluation.json'}\n" in res.output  # every written file is named
    assert f"{out / 'reliability.png'} (replaced)" in res.output
    from ensemblize.run_folder import read_manifest

    assert "evaluation.json" in read_manifest(out)["files"]  # the manifest was rewritten, still verified
    assert f"{out / 'report.html'} (replaced)" in res.output  # evaluate rewrites the run's report
    assert "Re-evaluation (ensemblize evaluate)" in (out / "report.html").read_text()
    assert "Summary</h2>" in (out / "report.html").read_text()  # the run's own summary stays
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0 and f"wrote {out / 'report.html'}" in res.output
    assert "status: complete (manifest.json written with this report)" in (out / "report.html").read_text()
    assert "evaluation.json" in read_manifest(out)["files"]  # rewritten, still verified
    ev = json.loads((out / "evaluation.json").read_text())
    assert len(ev) == 3 and "ood_heldout_maxprob_auroc" in ev[0]["metrics"] and "corr_ece" in ev[0]["metrics"]
    assert [r["method"] for r in ev] == ["single", "deep_ensemble", "sigma_ens"]  # the run's order, not a-z
    for r in ev:  # the headline is far-OOD only (uniform here); the held-out classes are near-OOD, apart
        m = r["metrics"]
        assert m["ood_maxprob_auroc"] == m["ood_uniform_maxprob_auroc"]
        assert m["ood_near_maxprob_auroc"] == m["ood_heldout_maxprob_auroc"]
    # the held-out-class task has 6 classes; the evaluation reuses the trained weights exactly
    trained = {r["method"]: r["metrics"]["accuracy"] for r in rows}
    assert {r["method"]: r["metrics"]["accuracy"] for r in ev} == pytest.approx(trained)
    # without --ood, evaluate uses the run's own far-OOD sets (gaussian), so its numbers compare with the
    # run's; it used every set of the dataset under the same column names
    with pytest.warns(UserWarning, match="--data-root .* was not used: the run's datasets \\(digits\\)"):
        res = runner.invoke(app, ["evaluate", str(out), "--out", str(tmp_path / "again"), "-q", "--data-root",
                                  str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    again = json.loads((tmp_path / "again" / "evaluation.json").read_text())[0]["metrics"]
    assert "ood_gaussian_maxprob_auroc" in again and "ood_uniform_maxprob_auroc" not in again
    # another run folder as --out is refused before any work (its manifest would stop matching)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text("{}")
    res = runner.invoke(app, ["evaluate", str(out), "--out", str(tmp_path / "other"), "-q"])
    assert res.exit_code == 2 and "'--out'" in res.output and "another" in res.output, res.output
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["manifest.json"]  # nothing written
    # so is a non-empty folder without an earlier evaluation (a tune result's report.html was replaced)
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "report.html").write_text("the tune's page")
    res = runner.invoke(app, ["evaluate", str(out), "--out", str(tmp_path / "tuned"), "-q"])
    flat = " ".join(res.output.replace("│", " ").split())
    assert (
        res.exit_code == 2 and "'--out'" in flat and "is not empty and holds no earlier evaluation" in flat
    ), flat
    assert (tmp_path / "tuned" / "report.html").read_text() == "the tune's page"
    # a folder inside the run (the run's manifest would miss its files) and a file are refused up front
    for bad, why in ((out / "eval", "inside the run folder"), (out / "results.json", "existing file")):
        res = runner.invoke(app, ["evaluate", str(out), "--out", str(bad), "-q"])
        assert res.exit_code == 2 and "'--out'" in res.output and why in res.output, res.output
    assert not (out / "eval").exists()
    res = runner.invoke(app, ["evaluate", str(out), "--out", str(out), "-q", "--ood", "uniform"])
    assert res.exit_code == 0, res.output  # the run folder itself, spelled as --out, is fine
    # the evaluation folder gets its own report, and `ensemblize report` renders it again
    page = (tmp_path / "again" / "report.html").read_text()
    assert "ensemblize evaluate — again" in page and "Re-evaluation (ensemblize evaluate)" in page
    assert "an evaluation folder" in page and "No results.json" not in page
    res = runner.invoke(app, ["report", str(tmp_path / "again")])
    assert res.exit_code == 0 and "Re-evaluation" in (tmp_path / "again" / "report.html").read_text()


def test_evaluate_defaults_to_the_runs_own_ood_sets_and_names_a_run_without_checkpoints(tmp_path):
    from ensemblize.cli import app
    from ensemblize.evaluate_run import _recorded_far_ood, evaluate_run

    assert _recorded_far_ood({"experiment": "run", "far_ood": ["gaussian"]}, "digits") == ("gaussian",)
    assert _recorded_far_ood({"experiment": "compare", "evaluation": "tiny"}, "digits") == ("gaussian",)
    assert _recorded_far_ood({"experiment": "compare", "evaluation": "full"}, "digits") is None
    assert _recorded_far_ood({"experiment": "tabular-bench"}, "digits") is None
    (tmp_path / "run.json").write_text(json.dumps({"config": {"experiment": "tabular-bench"}}))
    with pytest.raises(
        FileNotFoundError, match="is a 'tabular-bench' run, which saves no image-model"
    ) as info:
        evaluate_run(tmp_path)
    assert "ensemblize run --out" not in str(
        info.value
    )  # the old advice led to --overwrite, replacing the run
    assert CliRunner().invoke(app, ["evaluate", str(tmp_path)]).exit_code == 2


def test_cli_rejects_bad_values(tmp_path):
    from ensemblize.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["run", "--out", str(tmp_path), "--ood", "nonsense", "--epochs", "1"])
    assert res.exit_code != 0 and "nonsense" in str(res.exception) + res.output
    res = runner.invoke(app, ["run", "--out", str(tmp_path / "o"), "--ood", "gaussian,gaussian"])
    assert res.exit_code == 2 and "repeated values" in res.output and not (tmp_path / "o").exists()
    res = runner.invoke(app, ["evaluate", str(tmp_path / "missing")])
    assert res.exit_code != 0


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (["--tau", "0"], "--tau", "> 0"),
        (["--lam", "-1"], "--lam", "≥ 0"),
        (["--seed", "-1"], "--seed", "≥ 0"),
        (["--model", "resnet50"], "--model", "resnet_small"),
        (["--members", "1"], "--members", "≥ 2"),
        (["--ood", "gaussian,nonsense"], "--ood", "heldout"),
    ],
)
def test_run_options_are_checked_before_any_work(tmp_path, args, option, allowed):
    import time

    from ensemblize.cli import app

    out = tmp_path / "run"
    start = time.perf_counter()
    res = CliRunner().invoke(app, ["run", "--out", str(out), *args])
    assert time.perf_counter() - start < 1.0
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    assert f"Invalid value for '{option}'" in res.output and allowed in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_run_refuses_an_existing_file_and_a_used_folder(tmp_path):
    from ensemblize.cli import app

    target = tmp_path / "results.txt"
    target.write_text("keep me")
    res = CliRunner().invoke(app, ["run", "--out", str(target)])
    assert res.exit_code == 2 and "existing file" in res.output and "Traceback" not in res.output
    assert target.read_text() == "keep me"
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.md").write_text("x")
    for extra in ([], ["--overwrite"], ["--resume"]):
        res = CliRunner().invoke(app, ["run", "--out", str(used), *extra])
        flat = " ".join(res.output.replace("│", " ").split())
        assert (
            res.exit_code == 2
            and "is not an ensemblize run folder" in flat
            and "nothing in it was changed" in flat
        )
        assert sorted(p.name for p in used.iterdir()) == ["notes.md"]  # a user's folder is never emptied


def test_cli_is_the_only_typer_module_and_covers_every_experiment():
    import re
    from pathlib import Path

    import ensemblize
    from ensemblize.cli import COMMANDS
    from ensemblize.experiments import discover

    root = Path(ensemblize.__file__).parent
    importers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(r"^\s*(import typer|from typer)", p.read_text(), flags=re.M)
    )
    assert importers == ["cli.py"]
    assert set(discover()) | {"run"} == set(COMMANDS)


def test_evaluate_refuses_a_run_without_a_complete_manifest(tmp_path):
    from ensemblize.cli import app

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "single_seed0.json").write_text("{}")
    res = CliRunner().invoke(app, ["evaluate", str(tmp_path)])
    assert (
        res.exit_code == 2 and "Invalid value for 'RUN_DIR'" in res.output and "manifest.json" in res.output
    )
    assert not (tmp_path / "evaluation.json").exists()


@pytest.mark.slow
def test_quiet_run_prints_nothing(tmp_path):
    from ensemblize.cli import app

    out = tmp_path / "q"
    args = ["run", "--out", str(out), "--epochs", "1", "--members", "2", "--no-evaluate", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.output == "" and (out / "manifest.json").is_file()


def test_evaluate_rebuilds_the_test_data_of_every_dataset_and_names_bad_options(tmp_path):
    """MNIST-1D runs (and held-out-class runs) are evaluated on their own test data; CIFAR needs
    --data-root; a bad --ood, --seed or RUN_DIR is one line naming the option."""
    from ensemblize.cli import app
    from ensemblize.evaluate_run import _benchmark

    bench, near = _benchmark({"dataset": "mnist1d", "seed": 0, "num_classes": 10}, None)
    assert bench.modality == "signal" and bench.splits.num_classes == 10 and near is None
    bench, near = _benchmark({"dataset": "mnist1d", "seed": 0, "num_classes": 6}, None)
    assert bench.splits.num_classes == 6 and set(near) == {"heldout"}
    with pytest.raises(ValueError, match="root"):
        _benchmark({"dataset": "cifar10", "seed": 0, "num_classes": 10}, None)
    runner = CliRunner()
    res = runner.invoke(app, ["evaluate", str(tmp_path / "missing")])
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "is not a folder" in flat and "Traceback" not in res.output
    res = runner.invoke(app, ["evaluate", str(tmp_path), "--seed", "-3"])
    assert res.exit_code == 2 and "'--seed'" in res.output


def test_the_first_method_a_process_trains_is_not_charged_the_start_up(digits, monkeypatch):
    """The first job's train_seconds held ~3 s of one-time imports (the first optimiser's torch._dynamo)."""
    from ensemblize.training import warm_up as W

    W.warm_up.cache_clear()
    order = []
    import ensemblize.runner as runner

    monkeypatch.setattr(runner, "warm_up", lambda: order.append("warm-up") or W.warm_up())
    real_train = runner.train_method
    monkeypatch.setattr(runner, "train_method", lambda *a, **k: order.append("train") or real_train(*a, **k))
    spec = MethodSpec("single", model_kwargs={"width": 4})
    run_method(spec, digits, train=TrainConfig(epochs=1), seed=1, eval_spec=EvalSpec.none())
    assert order == ["warm-up", "train"] and W.warm_up.cache_info().currsize == 1
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun it would join the group's collectives: skipped
    W.warm_up.cache_clear()
    import sys

    monkeypatch.setattr(
        sys.modules["ensemblize.training.fit"],
        "fit",
        lambda *a, **k: pytest.fail("warm_up trained under torchrun"),
    )
    W.warm_up()
    monkeypatch.delenv("WORLD_SIZE")
    W.warm_up.cache_clear()
    import random

    import numpy as np

    monkeypatch.undo()
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())  # noqa: NPY002
    W.warm_up()  # trains, and leaves every random state as it was
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])  # noqa: NPY002


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--members", "10000000"],
        ["experiment", "compare", "--members", "100000", "--methods", "sigma"],
        ["experiment", "members", "--sizes", "2,5000"],
        ["experiment", "selective", "--members", "100000", "--quick"],
    ],
)
def test_too_many_members_is_refused_before_any_training(tmp_path, args):
    """--members 10000000 trained the single model first, then died in a 60-line traceback."""
    from typer.testing import CliRunner

    from ensemblize.cli import app

    out = tmp_path / "never"
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 2 and "at most 4096" in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_the_tables_and_methods_named_in_the_help_exist():
    from ensemblize.cli import _TABLE_EXAMPLES, _TABULAR_METHODS
    from ensemblize.data.tables import BENCHMARK_TABLES
    from ensemblize.experiments.tabular_methods import METHODS

    assert set(_TABLE_EXAMPLES) <= set(BENCHMARK_TABLES)
    assert tuple(_TABULAR_METHODS) == tuple(METHODS)


def test_every_command_takes_out_and_seed():
    """The design's contract: every command takes ``--out DIR`` and ``--seed`` (experiments that run
    several seeds take ``--seeds``, and ``--seed`` as the same option)."""
    from ensemblize.cli import COMMANDS, app

    for name, (_, options) in COMMANDS.items():
        flags = {f for key, opt in options.items() for f in (opt.flag_for(key), *opt.aliases)}
        assert {"--out", "--seed"} <= flags, name
    res = CliRunner().invoke(app, ["experiment", "selective", "--seed", "-1"])
    assert res.exit_code == 2 and "'--seeds'" in res.output and "-1" in res.output
