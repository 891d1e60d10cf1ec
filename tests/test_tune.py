"""ensemblize.tabular.tuning: Optuna tuning (TPE, pruning on epochs, shared journal storage), tune_csv."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.datasets import make_classification

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)

from ensemblize.tabular.estimators import LoMETabClassifier  # noqa: E402
from ensemblize.tabular.tuning import (  # noqa: E402
    _score,
    _split,
    _storage,
    lometab_search_space,
    parse_duration,
    tune,
    tune_csv,
)

TINY = {"members": 2, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2, "n_networks": 1}
SPACE_KEYS = ("rank", "lr", "dropout")


def _space():
    return {k: v for k, v in lometab_search_space().items() if k in SPACE_KEYS}


def _data(n=240):
    return make_classification(n_samples=n, n_features=5, n_informative=3, random_state=0)


class EpochToy(RegressorMixin, BaseEstimator):
    """Predicts ``quality`` for every row; each epoch's validation RMSE is ``quality``.

    ``fit`` calls ``callbacks`` after each of ``epochs`` epochs and stops when one returns True.
    """

    def __init__(self, quality=0.0, epochs=5, random_state=None):
        self.quality = quality
        self.epochs = epochs
        self.random_state = random_state

    def fit(self, X, y, eval_set=None, callbacks=()):
        self.history_ = []
        for epoch in range(self.epochs):
            record = {"epoch": epoch, "val_rmse": float(self.quality)}
            self.history_.append(record)
            if any(cb(epoch + 1, record, None) is True for cb in callbacks):
                break
        self.epochs_run_ = len(self.history_)
        return self

    def predict(self, X):
        return np.full(len(X), float(self.quality))


class HistoryToy(EpochToy):
    """Same, but ``fit`` takes no callbacks: tuning can only replay ``history_`` afterwards."""

    def fit(self, X, y, eval_set=None):
        return super().fit(X, y, eval_set=eval_set)


def test_tune_lometab_refits_the_best_trial_on_a_validation_split_of_the_training_rows():
    X, y = _data()
    r = tune(LoMETabClassifier(**TINY), X, y, n_trials=3, search_space=_space(), seed=0)
    assert sorted(np.concatenate([r.train_index, r.val_index]).tolist()) == list(range(len(y)))
    assert len(r.val_index) == round(0.2 * len(y))
    assert r.metric == "log_loss" and r.direction == "minimize"
    assert r.trial_numbers == [0, 1, 2]
    table = r.trials_table()
    assert list(table["number"]) == [0, 1, 2] and set(table["state"]) == {"COMPLETE"}
    assert r.best_value == min(table["value"])
    assert set(r.best_params) == set(SPACE_KEYS)
    best = r.best_estimator
    assert {k: best.get_params()[k] for k in SPACE_KEYS} == r.best_params
    assert best.random_state == 0  # None in the estimator -> the tuning seed, the same in every trial
    # the refit is the best trial again: same rows, same seed, same validation score
    refit_score = _score(best, X[r.val_index], y[r.val_index], "log_loss")
    assert refit_score == pytest.approx(r.best_value, abs=1e-12)
    # trials report per-epoch validation log-loss (post hoc until the estimator takes callbacks)
    intermediate = r.study.trials[0].intermediate_values
    assert len(intermediate) >= 1 and all(np.isfinite(v) for v in intermediate.values())


def test_trials_never_refit_on_the_validation_rows_they_are_scored_on():
    X, y = _data()
    r = tune(LoMETabClassifier(**TINY, refit_full=True), X, y, n_trials=2, search_space=_space(), seed=0)
    best = r.best_estimator
    assert best.get_params()["refit_full"] is False and best.refit_epochs_ is None
    # the reported value is the validation score of a model that never trained on those rows
    assert _score(best, X[r.val_index], y[r.val_index], "log_loss") == pytest.approx(r.best_value, abs=1e-12)


def test_pruning_stops_a_trial_through_the_epoch_callback():
    X = np.zeros((50, 2))
    y = np.zeros(50)
    qualities = iter([0.5, 2.0, 0.7, 3.0])

    def space(trial):
        return {"quality": next(qualities)}

    r = tune(
        EpochToy(),
        X,
        y,
        n_trials=4,
        search_space=space,
        pruner=optuna.pruners.ThresholdPruner(upper=1.0),
        refit=True,
    )
    states = [t.state.name for t in r.study.trials]
    assert states == ["COMPLETE", "PRUNED", "COMPLETE", "PRUNED"]
    # pruned trials stopped after their first epoch; completed ones ran all five
    assert [len(t.intermediate_values) for t in r.study.trials] == [5, 1, 5, 1]
    assert r.best_value == pytest.approx(0.5)
    assert r.best_estimator.epochs_run_ == 5


def test_without_callbacks_the_history_is_replayed_and_no_trial_is_pruned():
    X = np.zeros((50, 2))
    y = np.zeros(50)
    qualities = iter([0.5, 2.0])
    r = tune(
        HistoryToy(),
        X,
        y,
        n_trials=2,
        search_space=lambda trial: {"quality": next(qualities)},
        pruner=optuna.pruners.ThresholdPruner(upper=1.0),
        refit=False,
    )
    assert [t.state.name for t in r.study.trials] == ["COMPLETE", "COMPLETE"]
    assert r.study.trials[1].intermediate_values == {i: 2.0 for i in range(5)}
    assert r.best_estimator is None and r.best_value == pytest.approx(0.5)


def test_missing_optuna_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r"pip install ensemblize\[tune\]"):
        tune(LoMETabClassifier(**TINY), *_data(), n_trials=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "n_trials or timeout"),
        ({"n_trials": 0}, ValueError, "n_trials"),
        ({"n_trials": 1, "timeout": -1}, ValueError, "timeout"),
        ({"n_trials": 1, "storage": "x.log"}, ValueError, "study_name"),
        ({"n_trials": 1, "metric": "rmse"}, ValueError, "rmse"),
        ({"n_trials": 1, "metric": "auc"}, ValueError, r"metric must be one of \('auto', .*got 'auc'"),
        ({"n_trials": 1, "val_fraction": 1.5}, ValueError, "val_fraction"),
        ({"n_trials": 1, "search_space": {"depth": None}}, ValueError, "depth"),
        ({"n_trials": 1, "search_space": {"rank": (1, 4)}}, TypeError, "rank"),
        ({"n_trials": 1, "storage": 3, "study_name": "s"}, TypeError, "storage"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        tune(LoMETabClassifier(**TINY), *_data(60), **kwargs)


def test_an_estimator_without_the_lometab_parameters_needs_a_search_space():
    with pytest.raises(ValueError, match="EpochToy.*search_space"):
        tune(EpochToy(), np.zeros((20, 1)), np.zeros(20), n_trials=1)


def test_parse_duration():
    assert parse_duration("10m") == 600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == parse_duration(90) == parse_duration("90") == 90
    assert parse_duration("2.5m") == 150
    for bad in ("", "10x", "m", "0s", "-5m"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    assert parse_duration("1d2h3m4s") == 86400 + 7200 + 180 + 4
    # "1h30" read as 1 h 0 min 30 s (3,630 s), silently; out-of-order or repeated units too
    for bad in ("1h30", "2h15", "30m1h", "1m1m"):
        with pytest.raises(ValueError, match="every number needs its unit, largest first"):
            parse_duration(bad)
    with pytest.raises(ValueError, match="not a duration: '10 20'"):
        parse_duration("10 20")  # was 1,020 s
    assert parse_duration("1h 30m") == 5400


_WORKER = """
import json, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
from sklearn.datasets import make_classification
from ensemblize.tabular.estimators import LoMETabClassifier
from ensemblize.tabular.tuning import lometab_search_space, tune

folder, me = Path(sys.argv[1]), sys.argv[2]
(folder / f"ready-{me}").touch()
deadline = time.monotonic() + 240
while len(list(folder.glob("ready-*"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)  # start together, so that both processes really share the study
X, y = make_classification(n_samples=240, n_features=5, n_informative=3, random_state=0)
space = {k: v for k, v in lometab_search_space().items() if k in ("rank", "lr", "dropout")}
est = LoMETabClassifier(members=2, n_blocks=1, d_block=16, max_epochs=3, patience=2, n_networks=1)
r = tune(est, X, y, n_trials=N_TRIALS, storage=str(folder / "study.log"), study_name="shared",
         search_space=space, refit=False)
print(json.dumps(r.trial_numbers))
"""


def test_two_processes_share_one_journal_study_and_the_best_refits_and_saves(tmp_path):
    n_trials = 8
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_WORKER).replace("N_TRIALS", str(n_trials)))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(i)], stdout=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    ran = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        ran.append(json.loads(out.strip().splitlines()[-1]))
    storage = str(tmp_path / "study.log")
    study = optuna.load_study(study_name="shared", storage=_storage(storage))
    numbers = [t.number for t in study.trials]
    # every trial number exactly once, all finished, and each was run by exactly one process
    assert sorted(numbers) == list(range(len(numbers)))
    assert n_trials <= len(numbers) <= n_trials + 1
    assert all(t.state.is_finished() for t in study.trials)
    assert sorted(ran[0] + ran[1]) == sorted(numbers)
    assert not set(ran[0]) & set(ran[1])
    assert ran[0] and ran[1], f"one process ran no trial: {ran}"
    # joining the finished study runs no trial; it refits the best, which saves and reloads
    X, y = _data()
    space = _space()
    r = tune(LoMETabClassifier(**TINY), X, y, n_trials=n_trials, storage=storage, study_name="shared",
             search_space=space)  # fmt: skip
    assert r.trial_numbers == []
    assert r.best_params == study.best_params
    assert _score(r.best_estimator, X[r.val_index], y[r.val_index], "log_loss") == pytest.approx(
        study.best_value, abs=1e-12
    )
    r.best_estimator.save(tmp_path / "best")
    again = LoMETabClassifier.load(tmp_path / "best")
    np.testing.assert_array_equal(again.predict_proba(X), r.best_estimator.predict_proba(X))


def test_tune_csv_writes_the_model_and_a_report(tmp_path):
    X, y = _data(200)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    frame["colour"] = np.where(X[:, 0] > 0, "red", "blue")
    frame["label"] = np.where(y == 1, "yes", "no")
    csv = tmp_path / "table.csv"
    frame.to_csv(csv, index=False)
    est = LoMETabClassifier(**TINY, random_state=0)
    rep = tune_csv(csv, target="label", out=tmp_path / "out", time_budget=None, n_trials=2, estimator=est)
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} >= {
        "model.safetensors", "model.json", "trials.csv", "report.json", "report.md", "results.json",
        "trials.png", "report.html",
    }  # fmt: skip
    # results.json holds the best estimator's record, like every ensemblize command's
    (record,) = json.loads((out / "results.json").read_text())
    assert record["method"] == "LoMETabClassifier" and record["dataset"] == "table" and record["seed"] == 0
    assert record["metrics"]["accuracy"] == rep["test"]["accuracy"]
    assert record["metrics"]["val_log_loss"] == rep["best_value"] and record["members"] == TINY["members"]
    assert rep["task"] == "classification" and rep["metric"] == "log_loss"
    assert rep["rows_train"] + rep["rows_val"] + rep["rows_test"] == 200 and rep["rows_test"] == 40
    assert rep["trial_states"] == {"COMPLETE": 2}
    assert len(pd.read_csv(out / "trials.csv")) == 2
    assert json.loads((out / "report.json").read_text())["best_params"] == rep["best_params"]
    assert "## Best hyper-parameters" in (out / "report.md").read_text()
    assert (
        "- budget: 2 trials; trials: 2 complete; seconds: " in (out / "report.md").read_text()
    )  # not raw dicts
    # the reported test scores are the saved model's on the held-out rows
    model = LoMETabClassifier.load(out / "model")
    Xf, yf = frame.drop(columns=["label"]), frame["label"]
    _, test = _split(Xf, yf, val_fraction=0.2, seed=0, classify=True)
    assert rep["test"]["accuracy"] == pytest.approx(_score(model, Xf.iloc[test], yf.iloc[test], "accuracy"))
    assert rep["test"]["log_loss"] == pytest.approx(_score(model, Xf.iloc[test], yf.iloc[test], "log_loss"))
    # an earlier tuning result in the folder is replaced with overwrite=True, not mistaken for a run
    again = tune_csv(
        csv, target="label", out=out, time_budget=None, n_trials=1, estimator=est, overwrite=True
    )
    assert again["trial_states"] == {"COMPLETE": 1}


def test_tune_csv_names_a_missing_target(tmp_path):
    csv = tmp_path / "t.csv"
    pd.DataFrame({"a": [1, 2, 3], "b": [0, 1, 0]}).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="'y'"):
        tune_csv(csv, target="y", out=tmp_path / "o", n_trials=1)
    with pytest.raises(
        ValueError, match=r"task must be one of \('auto', 'classification', 'regression'\), got 'ranking'"
    ):
        tune_csv(csv, target="b", out=tmp_path / "o", n_trials=1, task="ranking")
    assert not Path(tmp_path / "o").exists()


def _tiny_csv(path: Path) -> Path:
    X, y = _data(120)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    frame["label"] = np.where(y == 1, "yes", "no")
    frame.to_csv(path, index=False)
    return path


def test_cli_tune_writes_the_model_and_the_report(tmp_path):
    from typer.testing import CliRunner

    from ensemblize.cli import app

    csv = _tiny_csv(tmp_path / "table.csv")
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["tune", str(csv), "--target", "label", "--time", "2m", "--trials", "2", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} >= {
        "model.safetensors", "model.json", "trials.csv", "report.json", "report.md", "results.json",
        "trials.png", "report.html",
    }  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["target"] == "label" and report["budget"] == {"seconds": 120.0, "n_trials": 2}
    assert sum(report["trial_states"].values()) == 2
    assert "best log_loss" in res.output and str(out / "model") in res.output


@pytest.mark.parametrize("budget", ["soon", "0m", "-5s"])
def test_cli_tune_names_a_bad_time_in_one_line(tmp_path, budget):
    from typer.testing import CliRunner

    from ensemblize.cli import app

    csv = _tiny_csv(tmp_path / "table.csv")
    res = CliRunner().invoke(
        app, ["tune", str(csv), "--target", "label", "--time", budget, "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    assert "'--time'" in res.output and "duration" in res.output
    assert not (tmp_path / "o").exists()


def test_cli_tune_refuses_torchrun_instead_of_hanging(tmp_path, monkeypatch):
    """Under torchrun rank 0's first fit waited forever for ranks that had returned."""
    from typer.testing import CliRunner

    from ensemblize.cli import app

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    csv = _tiny_csv(tmp_path / "table.csv")
    res = CliRunner().invoke(app, ["tune", str(csv), "--target", "label", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "does not run under torchrun" in res.output and "--storage" in res.output
    assert not (tmp_path / "o").exists()


def test_lometab_fit_calls_the_epoch_callbacks_and_true_stops_training():
    X, y = _data(120)
    seen = []

    def stop_at_two(epoch, record, model):
        seen.append((epoch, sorted(k for k in record if k in ("val_nll", "val_accuracy")), model))
        return epoch == 2

    est = LoMETabClassifier(**{**TINY, "max_epochs": 6, "patience": 10}, random_state=0)
    est.fit(X, y, callbacks=[stop_at_two])
    assert [e for e, _, _ in seen] == [1, 2]
    assert all(keys == ["val_accuracy", "val_nll"] and model is est.model_ for _, keys, model in seen)
    assert len(est.history_) == 2  # stopped after the second epoch, not the sixth
    ref = LoMETabClassifier(**{**TINY, "max_epochs": 6, "patience": 10}, random_state=0).fit(X, y)
    assert len(ref.history_) == 6
    # the first two epochs are the same training either way
    assert [h["val_loss"] for h in est.history_] == [h["val_loss"] for h in ref.history_[:2]]


class _PruneSecondTrial(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return trial.number == 1


def test_tune_prunes_a_lometab_trial_during_training():
    X, y = _data(160)
    est = LoMETabClassifier(**{**TINY, "max_epochs": 4, "patience": 10}, random_state=0)
    r = tune(est, X, y, n_trials=2, search_space=_space(), pruner=_PruneSecondTrial(), refit=False)
    trials = r.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED"]
    # the live callback reported each epoch of the complete trial; the pruned one stopped after one
    assert [len(t.intermediate_values) for t in trials] == [4, 1]


class _PruneFromStep3(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return trial.last_step is not None and trial.last_step >= 3


def test_tune_pooled_networks_reports_the_first_network_and_refits_them_all():
    """With ``n_networks=2`` a trial reports only the first network's epochs (so step s is that
    network's epoch s in every trial) and is never pruned while a later network trains; the
    refitted best estimator pools both."""
    X, y = _data()
    est = LoMETabClassifier(**{**TINY, "n_networks": 2, "patience": 10})
    r = tune(est, X, y, n_trials=2, search_space=_space(), seed=0, pruner=_PruneFromStep3())
    assert set(r.trials_table()["state"]) == {"COMPLETE"}  # step 3 would be network 1's epoch 0
    for t in r.study.trials:
        assert sorted(t.intermediate_values) == [0, 1, 2]  # 3 epochs of the first network
    assert r.best_estimator.n_networks_ == 2
    assert len(r.best_estimator.history_) == 6
    refit_score = _score(r.best_estimator, X[r.val_index], y[r.val_index], "log_loss")
    assert refit_score == pytest.approx(r.best_value, abs=1e-12)


class FailingToy(EpochToy):
    """Raises ValueError in ``fit`` when ``quality`` is negative (a configuration that cannot train)."""

    def fit(self, X, y, eval_set=None, callbacks=()):
        if self.quality < 0:
            raise ValueError(f"cannot train at quality {self.quality}")
        return super().fit(X, y, eval_set=eval_set, callbacks=callbacks)


def test_a_failing_configuration_is_recorded_and_the_study_goes_on():
    X, y = np.zeros((40, 2)), np.zeros(40)
    qualities = iter([0.5, -1.0, 0.2])
    r = tune(FailingToy(), X, y, n_trials=3, search_space=lambda t: {"quality": next(qualities)}, refit=True)
    assert [t.state.name for t in r.study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert r.best_value == pytest.approx(0.2)


def test_a_study_whose_first_trials_all_fail_stops_early_and_says_why():
    X, y = np.zeros((40, 2)), np.zeros(40)
    with pytest.raises(
        RuntimeError, match="first 3 trials all failed; the first with: .*cannot train at quality -1"
    ):
        tune(FailingToy(), X, y, timeout=600, search_space=lambda t: {"quality": -1.0})


class CountingToy(EpochToy):
    fits = 0

    def fit(self, X, y, eval_set=None, callbacks=()):
        type(self).fits += 1
        return super().fit(X, y, eval_set=eval_set, callbacks=callbacks)


def test_the_best_trials_own_estimator_is_returned_without_a_refit():
    X, y = np.zeros((40, 2)), np.zeros(40)
    qualities = iter([0.5, 0.2, 0.9])
    CountingToy.fits = 0
    r = tune(CountingToy(), X, y, n_trials=3, search_space=lambda t: {"quality": next(qualities)}, refit=True)
    assert CountingToy.fits == 3  # three trials, no fourth fit for the refit
    assert r.best_estimator.quality == 0.2 and r.best_value == pytest.approx(0.2)


class WarningToy(EpochToy):
    """Warns about the data in every fit (same message) and about its own quality (one per value)."""

    def fit(self, X, y, eval_set=None, callbacks=()):
        import warnings

        warnings.warn("column 'id' looks like an identifier", UserWarning, stacklevel=2)
        warnings.warn(f"quality {self.quality}", RuntimeWarning, stacklevel=2)
        if self.quality < 0:
            raise ValueError("cannot train")
        return super().fit(X, y, eval_set=eval_set, callbacks=callbacks)


def test_a_data_warning_is_shown_once_per_study_not_once_per_trial():
    import warnings

    X, y = np.zeros((40, 2)), np.zeros(40)
    qualities = iter([0.5, 0.2, -1.0, 0.2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per message and place
        tune(WarningToy(), X, y, n_trials=4, search_space=lambda t: {"quality": next(qualities)}, refit=False)
    messages = [str(w.message) for w in caught]
    assert messages.count("column 'id' looks like an identifier") == 1
    # each distinct message once, a failing trial's included, in the order they were first issued
    assert [m for m in messages if m.startswith("quality")] == ["quality 0.5", "quality 0.2", "quality -1.0"]


def test_the_users_warning_filters_still_apply_to_trial_warnings():
    import warnings

    X, y = np.zeros((40, 2)), np.zeros(40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", message="column 'id'")
        tune(WarningToy(), X, y, n_trials=2, search_space=lambda t: {"quality": 0.5}, refit=False)
    assert [str(w.message) for w in caught] == ["quality 0.5"]


def test_a_pruned_trial_has_no_value_only_its_last_epoch_score():
    """Optuna stores a pruned trial's last per-epoch score as its value — for a regressor the RMSE of
    the standardised target, ~60x below the raw-unit RMSE of completed trials: the stopped trial looked best."""
    X, y = np.zeros((50, 2)), np.zeros(50)
    qualities = iter([0.5, 2.0, 0.7])
    r = tune(EpochToy(), X, y, n_trials=3, search_space=lambda t: {"quality": next(qualities)},
             pruner=optuna.pruners.ThresholdPruner(upper=1.0), refit=False)  # fmt: skip
    table = r.trials_table()
    assert list(table["state"]) == ["COMPLETE", "PRUNED", "COMPLETE"]
    assert table["value"].isna().tolist() == [False, True, False]
    assert table["last_epoch_score"].tolist() == [0.5, 2.0, 0.7]
    assert table["epochs_reported"].tolist() == [5, 1, 5]


def test_tune_csv_refuses_a_run_folder_and_a_target_of_mostly_single_row_classes(tmp_path):
    csv = _tiny_csv(tmp_path / "t.csv")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    with pytest.raises(ValueError, match="is the run folder of another ensemblize command.*nothing in it"):
        tune_csv(csv, target="label", out=run, n_trials=1)
    assert sorted(p.name for p in run.iterdir()) == ["run.json"]
    frame = pd.read_csv(csv)
    frame["id"] = [f"row{i}" for i in range(len(frame))]
    frame.to_csv(csv, index=False)
    with pytest.raises(ValueError, match="120 distinct values in 120 rows.*--task regression"):
        tune_csv(csv, target="id", out=tmp_path / "o", n_trials=1)
    frame["count"] = np.arange(len(frame)) % 70  # whole numbers, 70 classes in 120 rows
    frame.to_csv(csv, index=False)
    with pytest.raises(ValueError, match="70 distinct values in 120 rows"):
        tune_csv(csv, target="count", out=tmp_path / "o", n_trials=1, task="classification")
    assert not (tmp_path / "o").exists()


def test_tune_csv_warns_on_tiny_splits_and_says_how_to_load(tmp_path):
    X, y = _data(40)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    frame["label"] = y
    frame.to_csv(tmp_path / "t.csv", index=False)
    lines = []
    with pytest.warns(UserWarning, match="only 6 validation and 8 test rows"):
        rep = tune_csv(tmp_path / "t.csv", target="label", out=tmp_path / "o", n_trials=1,
                       estimator=LoMETabClassifier(**TINY), echo=lines.append)  # fmt: skip
    assert "rows: 40 (tuning-train 26, validation 6, test 8)" in lines
    assert (
        rep["load_with"]
        == f"from ensemblize.tabular import LoMETabClassifier; LoMETabClassifier.load({str(tmp_path / 'o' / 'model')!r})"
    )
    assert rep["load_with"] in (tmp_path / "o" / "report.md").read_text()


def test_an_rdb_storage_that_cannot_be_opened_is_one_error_naming_it(tmp_path):
    url = f"sqlite:///{tmp_path}/missing/x.db"
    with pytest.raises(ValueError, match=r"storage 'sqlite:///.*cannot be opened: .*missing does not exist"):
        _storage(url)


def test_progress_prints_one_line_per_trial_with_its_score_and_the_best(capsys, monkeypatch):
    import ensemblize.training.progress as P

    monkeypatch.setattr(P, "interactive", lambda: False)  # a log file: one line per trial
    X, y = np.zeros((50, 2)), np.zeros(50)
    qualities = iter([0.5, 0.2, 0.9])
    space = lambda trial: {"quality": next(qualities), "epochs": 2}  # noqa: E731
    r = tune(EpochToy(), X, y, n_trials=3, search_space=space, metric="rmse", refit=False,
             pruner=optuna.pruners.NopPruner())  # fmt: skip
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tune [")]
    assert [ln.split(";")[0] for ln in lines] == [
        "tune [1/3 trials] trial 0 complete rmse 0.5",
        "tune [2/3 trials] trial 1 complete rmse 0.2",
        "tune [3/3 trials] trial 2 complete rmse 0.9",
    ]
    assert [ln.split("; ")[1] for ln in lines] == ["best rmse 0.5 (trial 0)"] + [
        "best rmse 0.2 (trial 1)"
    ] * 2
    assert r.best_value == pytest.approx(0.2)
    tune(EpochToy(), X, y, n_trials=1, metric="rmse", refit=False, progress=False,
         search_space=lambda trial: {"quality": 0.3})  # fmt: skip
    assert "tune [" not in capsys.readouterr().err
    with pytest.raises(TypeError, match="progress"):
        tune(EpochToy(), X, y, n_trials=1, metric="rmse", progress="yes", search_space=lambda t: {})


def test_a_budget_of_one_trial_runs_the_queued_own_setting():
    """The queued trial (state WAITING) counted against n_trials: n_trials=1 ran nothing and failed."""
    X, y = _data(120)
    own = LoMETabClassifier(**TINY, rank=3, lr=1e-3, dropout=0.2, random_state=0)
    r = tune(own, X, y, n_trials=1, search_space=_space(), progress=False)
    assert [t.state.name for t in r.study.trials] == ["COMPLETE"]
    assert r.best_params == {"rank": 3, "lr": 1e-3, "dropout": 0.2}


def test_the_trials_table_of_a_study_with_no_finished_trial():
    from ensemblize.tabular.tuning import TuneResult

    study = optuna.create_study()
    study.enqueue_trial({"x": 1.0})
    res = TuneResult(study=study, metric="rmse", direction="minimize", best_params={}, best_value=float("nan"),
                     best_estimator=None, train_index=np.arange(0), val_index=np.arange(0))  # fmt: skip
    table = res.trials_table()
    assert list(table["state"]) == ["WAITING"] and table["seconds"].isna().all()


def test_the_first_trial_is_the_estimators_own_setting_when_it_lies_in_the_space():
    X, y = _data(120)
    own = LoMETabClassifier(**TINY, rank=3, lr=1e-3, dropout=0.2, random_state=0)
    storage = optuna.storages.InMemoryStorage()
    r = tune(own, X, y, n_trials=2, search_space=_space(), storage=storage, study_name="s", progress=False)
    first = min(r.study.get_trials(deepcopy=False), key=lambda t: t.number)
    assert first.params == {"rank": 3, "lr": 1e-3, "dropout": 0.2}
    # a second process joining the study does not queue it again
    r2 = tune(own, X, y, n_trials=3, search_space=_space(), storage=storage, study_name="s", progress=False)
    same = [t for t in r2.study.get_trials(deepcopy=False) if t.params == first.params]
    assert len(same) == 1 and len(r2.study.get_trials(deepcopy=False)) == 3
    # outside the space (rank 32 > 16): nothing is queued, the sampler draws every trial
    outside = LoMETabClassifier(**TINY, rank=32, random_state=0)
    r3 = tune(outside, X, y, n_trials=1, search_space=_space(), refit=False, progress=False)
    assert "fixed_params" not in r3.study.trials[0].system_attrs  # drawn, not queued
    assert r3.trials_table()["seconds"].dtype.kind == "f"  # the duration in seconds, not a Timedelta text


class Interrupted(EpochToy):
    def fit(self, X, y, eval_set=None, callbacks=()):
        raise KeyboardInterrupt


def test_ctrl_c_in_a_trial_reaches_the_caller_without_optunas_traceback():
    import logging

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    handler = Keep()
    logging.getLogger("optuna").addHandler(handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            tune(Interrupted(), np.zeros((40, 2)), np.zeros(40), n_trials=2, metric="rmse", progress=False,
                 search_space=lambda t: {"quality": 0.1})  # fmt: skip
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    assert not [r for r in seen if r.exc_info or "failed" in r.getMessage()], [r.getMessage() for r in seen]
    # the filter is gone afterwards: a real failure is still logged
    assert not logging.getLogger("optuna.study._optimize").filters


def test_no_feature_columns_is_refused_before_any_trial():
    with pytest.raises(ValueError, match=r"no feature columns \(shape \(40, 0\)\)"):
        tune(
            EpochToy(), np.zeros((40, 0)), np.zeros(40), n_trials=1, metric="rmse", search_space=lambda t: {}
        )


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"a,b,label,label\n1,2,x,x\n3,4,y,y\n", r"names the column\(s\) \['label'\] more than once"),
        (b"\x00\x01\xff\xfe,\n\x00,\x00,\x00\n\xff\n", "not a readable CSV table"),
        (b'{"a": 1, "label": 2}\n', "looks like JSON"),
        (b"a;b;label\n1;2;x\n3;4;y\n", "looks ';'-separated"),
        (b"label\nx\ny\n", "no feature columns besides the target 'label'"),
        (b"", "is empty"),
    ],
)
def test_tune_csv_names_what_is_wrong_with_the_file(tmp_path, content, match):
    from ensemblize.tabular.tuning import TableFileError

    csv = tmp_path / "t.csv"
    csv.write_bytes(content)
    with pytest.raises(TableFileError, match=match):  # the file is wrong, not --target
        tune_csv(csv, target="label", out=tmp_path / "o", n_trials=1)
    assert not (tmp_path / "o").exists()


def test_tune_csv_holds_out_against_a_second_writer_and_records_its_environment(tmp_path):
    from ensemblize.report.html import render_report
    from ensemblize.run_folder import writer_lock

    csv = _tiny_csv(tmp_path / "t.csv")
    out = tmp_path / "o"
    est = LoMETabClassifier(**TINY, random_state=0)
    with (
        writer_lock(out),
        pytest.raises(ValueError, match=r"^--out .*another process \(pid \d+\) is writing"),
    ):
        tune_csv(csv, target="label", out=out, time_budget=None, n_trials=1, estimator=est)
    rep = tune_csv(csv, target="label", out=out, time_budget=None, n_trials=1, estimator=est)
    assert (out / "environment.json").is_file() and "torch" in (out / "environment.json").read_text()
    page = render_report(out)
    assert "ensemblize tune — o" in page and "Recorded by the run (environment.json)" in page
    assert "- budget: 1 trial; trials: 1 complete" in (out / "report.md").read_text()
    assert rep["trial_states"] == {"COMPLETE": 1}


def test_a_run_that_fails_leaves_no_folder_behind(tmp_path):
    csv = _tiny_csv(tmp_path / "t.csv")
    bad = LoMETabClassifier(**TINY, random_state=0, batch_size=0)  # every trial fails: nothing to refit
    with pytest.raises((RuntimeError, ValueError)):
        tune_csv(csv, target="label", out=tmp_path / "o", time_budget=None, n_trials=1, estimator=bad,
                 )  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_cli_tune_usage_errors_and_ctrl_c(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import ensemblize.tabular.tuning as T
    from ensemblize.cli import app

    csv = tmp_path / "t.csv"
    csv.write_text("a,label,label\n1,x,x\n")
    res = CliRunner().invoke(app, ["tune", str(csv), "--target", "label", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "TABLE" in res.output and "more than once" in res.output, res.output
    good = _tiny_csv(tmp_path / "good.csv")
    res = CliRunner().invoke(
        app, ["tune", str(good), "--target", "label", "--study-name", "x", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "--storage" in res.output, res.output

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(T, "tune_csv", interrupted)
    res = CliRunner().invoke(app, ["tune", str(good), "--target", "label", "--out", str(tmp_path / "o")])
    assert res.exit_code == 130 and "interrupted: nothing was written to --out" in res.output
    assert "Traceback" not in res.output

    def interrupted_while_writing(*args, **kwargs):
        raise T.InterruptedWhileWriting("x")

    monkeypatch.setattr(T, "tune_csv", interrupted_while_writing)
    res = CliRunner().invoke(app, ["tune", str(good), "--target", "label", "--out", str(tmp_path / "o")])
    assert res.exit_code == 130 and "may be incomplete (run again with --overwrite)" in res.output
