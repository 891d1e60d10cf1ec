"""Raw-table edge cases a new user meets: number columns of dtype object, integer column names,
duplicate names, literal "<missing>" values, tiny validation splits, JSON-unfriendly parameters,
shared tuning studies made for another job, rare classes, and the ``tune`` command's errors."""

from __future__ import annotations

import datetime as dt
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor
from tabular_fixtures import TINY
from tabular_fixtures import mixed_frame as _frame


# ------------------------------------------------------------------------------------------ columns
def test_an_object_column_of_numbers_is_numeric_not_one_category_per_value():
    X, y = _frame()
    plain = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    as_object = X.assign(a=X["a"].astype(object))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no identifier warning for a continuous column
        boxed = LoMETabClassifier(**TINY, random_state=0).fit(as_object, y)
    assert boxed.preprocessor_.categorical_ == ["s"]
    np.testing.assert_array_equal(boxed.predict_proba(as_object), plain.predict_proba(X))
    # strings stay categories: they are never parsed as numbers here (and a warning says so)
    from ensemblize.data.table_preprocessing import NumericTextWarning

    with pytest.warns(NumericTextWarning, match=r"\('a': \d+ levels, 100% numbers"):
        strings = LoMETabClassifier(**TINY, random_state=0).fit(X.assign(a=X["a"].round(1).astype(str)), y)
    assert "a" in strings.preprocessor_.categorical_


def test_a_complex_column_is_an_error_naming_it():
    X, y = _frame()
    with pytest.raises(ValueError, match="column 'p' has complex dtype"):
        LoMETabClassifier(**TINY).fit(X.assign(p=np.ones(len(X)) * 1j), y)
    # at predict too: its imaginary part was dropped with only numpy's ComplexWarning
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    numeric = est.preprocessor_.numeric_[0]
    for values in (X[numeric] + 5j, (X[numeric] + 5j).astype(object)):
        with pytest.raises(ValueError, match=rf"column '{numeric}' has complex values"):
            est.predict_proba(X.assign(**{numeric: values}))


def test_integer_column_names_are_matched_by_name_at_predict_and_in_eval_set():
    X, y = _frame()
    Xi = X.set_axis([0, 1, 2], axis=1)
    est = LoMETabClassifier(**TINY, random_state=0).fit(Xi, y, eval_set=(Xi[[2, 0, 1]].iloc[:30], y[:30]))
    ref = LoMETabClassifier(**TINY, random_state=0).fit(Xi, y, eval_set=(Xi.iloc[:30], y[:30]))
    np.testing.assert_array_equal(est.predict_proba(Xi), ref.predict_proba(Xi))
    np.testing.assert_array_equal(est.predict_proba(Xi[[1, 0, 2]]), est.predict_proba(Xi))
    with pytest.raises(ValueError, match=r"does not match the columns.*missing \['2'\], unexpected \['7'\]"):
        est.predict_proba(Xi.set_axis([0, 1, 7], axis=1))
    # a frame sharing no name with the fitted (array) columns is read by position, as before
    arr = LoMETabClassifier(**TINY, random_state=0).fit(X[["a", "b"]].to_numpy(), y)
    np.testing.assert_array_equal(
        arr.predict_proba(pd.DataFrame(X[["a", "b"]].to_numpy())), arr.predict_proba(X[["a", "b"]].to_numpy())
    )


def test_eval_set_columns_are_named_as_eval_set_and_duplicates_are_refused():
    X, y = _frame()
    with pytest.raises(ValueError, match=r"eval_set X does not match the columns of X: missing \['a'\]"):
        LoMETabClassifier(**TINY).fit(X, y, eval_set=(X.rename(columns={"a": "z"}), y))
    with pytest.raises(ValueError, match=r"X has duplicate column names \['a'\]"):
        LoMETabClassifier(**TINY).fit(pd.concat([X, X[["a"]]], axis=1), y)


def test_a_literal_missing_marker_is_its_own_category():
    n = 40
    y = np.arange(n) % 2
    X = pd.DataFrame({"c": ["<missing>"] * 12 + [None] * 12 + ["a"] * 16, "x": np.arange(n, dtype=float)})
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    assert est.preprocessor_.categories_["c"] == ["<<missing>", "a", "<missing>"]
    only_literal = LoMETabClassifier(**TINY, random_state=0).fit(X.fillna("a"), y)
    one = pd.DataFrame({"c": ["<missing>"], "x": [3.0]})
    blank = pd.DataFrame({"c": [None], "x": [3.0]})
    assert not np.array_equal(only_literal.predict_proba(one), only_literal.predict_proba(blank))


# ------------------------------------------------------------------------------------------ targets
def test_an_object_target_of_integers_is_read_as_integers():
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, pd.Series(y, dtype=object))
    assert est.classes_.dtype.kind == "i"
    ref = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), ref.predict_proba(X))


def test_too_few_rows_say_what_the_validation_split_took():
    X, y = _frame(3)
    with pytest.raises(ValueError, match=r"X has 2 rows; holding out val_fraction=0.2 \(1 row\(s\)\)"):
        LoMETabRegressor(**TINY).fit(X.iloc[:2], [0.0, 1.0])
    with pytest.raises(ValueError, match="at least 3 training rows, got 2 after the validation rows"):
        LoMETabRegressor(**TINY).fit(X, [0.0, 1.0, 2.0])


def test_temperature_on_a_single_class_validation_split_stays_one_and_small_splits_warn():
    X, y = _frame()
    with pytest.warns(UserWarning, match="hold a single class.*keeping T = 1"):
        est = LoMETabClassifier(**TINY, random_state=0, calibration="temperature").fit(
            X, y, eval_set=(X.iloc[:2], [0, 0])
        )
    assert est.temperature_ == 1.0
    with pytest.warns(UserWarning, match="fitted on only 6 validation rows"):
        LoMETabClassifier(**TINY, random_state=0, calibration="temperature").fit(
            X, y, eval_set=(X.iloc[:6], [0, 1, 0, 1, 0, 1])
        )


def test_save_takes_a_torch_device_and_names_labels_json_cannot_hold(tmp_path):
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0, device=torch.device("cpu")).fit(X, y)
    back = LoMETabClassifier.load(est.save(tmp_path / "m"))
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    days = np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[us]")[y]
    dated = LoMETabClassifier(**TINY, random_state=0).fit(X, days)
    back = LoMETabClassifier.load(dated.save(tmp_path / "d"))
    assert back.classes_.dtype == days.dtype
    np.testing.assert_array_equal(back.predict(X), dated.predict(X))
    assert back.predict(X.iloc[:1])[0] in days
    odd = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    odd.classes_ = np.array([dt.date(2020, 1, 1), dt.date(2020, 1, 2)], dtype=object)
    with pytest.raises(ValueError, match="cannot save class labels of type date"):
        odd.save(tmp_path / "o")
    assert not (tmp_path / "o.json").exists()


# ------------------------------------------------------------------------------------------ tuning
optuna = pytest.importorskip("optuna")


def _space():
    from ensemblize.tabular.tuning import lometab_search_space

    return {k: v for k, v in lometab_search_space().items() if k in ("lr", "dropout")}


def test_a_shared_study_refuses_a_job_it_was_not_made_for(tmp_path):
    from ensemblize.tabular import tune

    X, y = _frame(80)
    journal = str(tmp_path / "journal.log")
    first = tune(LoMETabClassifier(**TINY), X, y, n_trials=1, search_space=_space(), storage=journal,
                 study_name="s", refit=False)  # fmt: skip
    assert first.study.user_attrs["ensemblize.tune"]["metric"] == "log_loss"
    with pytest.raises(ValueError, match=r"another tuning job \(metric: study 'log_loss' vs now 'accuracy'"):
        tune(LoMETabClassifier(**TINY), X, y, n_trials=2, metric="accuracy", search_space=_space(),
             storage=journal, study_name="s")  # fmt: skip
    with pytest.raises(ValueError, match="estimator: study .*LoMETabClassifier' vs now .*LoMETabRegressor'"):
        tune(LoMETabRegressor(**TINY), X, X["a"] * 100, n_trials=2, search_space=_space(), storage=journal,
             study_name="s")  # fmt: skip
    with pytest.raises(ValueError, match="data: study '80x3:"):
        tune(LoMETabClassifier(**TINY), X.iloc[:60], y[:60], n_trials=2, search_space=_space(),
             storage=journal, study_name="s")  # fmt: skip
    # a fixed setting of the estimator differs: the best trial's refit would be another model
    with pytest.raises(ValueError, match=r"estimator_params.max_epochs: study 3 vs now 1\)"):
        tune(LoMETabClassifier(**{**TINY, "max_epochs": 1}), X, y, n_trials=2, search_space=_space(),
             storage=journal, study_name="s")  # fmt: skip
    # where a process runs and how loudly it reports do not make another study
    again = tune(LoMETabClassifier(**TINY, verbose=True), X, y, n_trials=2, search_space=_space(),
                 storage=journal, study_name="s", refit=False)  # fmt: skip
    assert len(again.study.trials) == 2  # the same job joins and adds one trial
    # an empty study made beforehand with the wrong direction (optuna create-study defaults to
    # minimize) was optimised the wrong way round: accuracy minimised, its worst trial refitted
    import optuna

    from ensemblize.tabular.tuning import _storage

    made = str(tmp_path / "made.log")
    optuna.create_study(study_name="e", storage=_storage(made), direction="minimize")
    with pytest.raises(
        ValueError,
        match=r"study 'e' optimises in direction 'minimize', but metric 'accuracy' needs 'maximize'",
    ):
        tune(LoMETabClassifier(**TINY), X, y, n_trials=1, metric="accuracy", search_space=_space(),
             storage=made, study_name="e")  # fmt: skip


def test_a_class_seen_once_stays_in_the_tuning_training_rows():
    from ensemblize.tabular.tuning import _split

    X, y = _frame(60)
    labels = np.where(y == 1, "yes", "no").astype(object)
    labels[7] = "rare"
    for seed in range(8):
        tr, va = _split(X, labels, val_fraction=0.25, seed=seed, classify=True)
        assert 7 in tr and 7 not in va and len(va) == 15
        assert sorted(np.concatenate([tr, va]).tolist()) == list(range(60))
    # without such a class the split is what it always was (stratified train_test_split)
    from sklearn.model_selection import train_test_split

    tr, va = _split(X, y, val_fraction=0.25, seed=3, classify=True)
    want_tr, want_va = train_test_split(np.arange(60), test_size=15, random_state=3, stratify=y)
    np.testing.assert_array_equal(tr, np.sort(want_tr))
    np.testing.assert_array_equal(va, np.sort(want_va))


@pytest.mark.parametrize(
    ("values", "task"),
    [
        (np.arange(60) % 30, "regression"),  # 30 whole-number values
        (np.arange(60) % 12, "classification"),
        (np.arange(60) % 2 * 1.0, "classification"),  # 0.0 / 1.0 floats are labels
        (np.linspace(0, 1, 60), "regression"),
        (np.where(np.arange(60) % 2, "yes", "no"), "classification"),
    ],
)
def test_tune_task_inference_rule(values, task):
    from ensemblize.tabular.tuning import _infer_task, _task_rule

    y = pd.Series(values)
    assert _infer_task(y, target="t", task="auto") == task
    assert _task_rule(y, task).startswith(f"task: {task} (target has")


def test_cli_tune_errors_are_one_line_and_say_the_task(tmp_path):
    from typer.testing import CliRunner

    from ensemblize.cli import app

    def run(*args):
        return CliRunner().invoke(
            app, ["tune", *map(str, args), "--trials", "1", "--out", str(tmp_path / "o")]
        )

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    header = tmp_path / "header.csv"
    header.write_text("a,b\n")
    single = tmp_path / "single.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "x", "x"]}).to_csv(single, index=False)
    fractional = tmp_path / "fractional.csv"
    pd.DataFrame({"a": np.arange(30.0), "b": np.linspace(0, 1, 30)}).to_csv(fractional, index=False)
    cases = [
        (run(empty, "--target", "a"), "is empty"),
        (run(header, "--target", "b"), "has a header but no data rows"),
        (run(single, "--target", "b"), "has a single value 'x'"),
        (run(fractional, "--target", "b", "--task", "classification"), "holds fractional numbers"),
    ]
    for res, message in cases:
        assert res.exit_code in (1, 2), res.output
        flat = " ".join(res.output.replace("│", " ").split())  # the error box wraps lines
        assert message in flat and "Traceback" not in res.output
        assert not isinstance(res.exception, (ValueError, TypeError))
    assert not (tmp_path / "o").exists()
    res = CliRunner().invoke(app, ["tune", "--help"])
    assert "--storage" in res.output and "--study-name" in res.output


def test_tune_csv_announces_the_task_and_scores_test_rows_of_unseen_classes(tmp_path):
    from ensemblize.tabular.tuning import _test_scores

    X, y = _frame(80)
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    scores = _test_scores(est, X.iloc[:10], np.r_[y[:9], 5], "classification", y)
    assert scores["test_rows_of_unseen_classes"] == 1 and "log_loss" not in scores
    assert np.isfinite(scores["log_loss_seen_classes"]) and 0 <= scores["accuracy"] <= 0.9
    frame = X.assign(label=np.where(y == 1, "yes", "no"))
    frame.to_csv(tmp_path / "t.csv", index=False)
    from ensemblize.tabular.tuning import tune_csv

    lines = []
    with pytest.warns(UserWarning, match="only 13 validation and 16 test rows"):
        rep = tune_csv(tmp_path / "t.csv", target="label", out=tmp_path / "o", time_budget=None, n_trials=1,
                       estimator=LoMETabClassifier(**TINY), echo=lines.append)  # fmt: skip
    assert len(lines) == 2 and lines[0].startswith("task: classification (target has 2 distinct")
    assert lines[1] == "rows: 80 (tuning-train 51, validation 13, test 16)"
    assert json.loads((tmp_path / "o" / "report.json").read_text())["task"] == rep["task"]


def test_a_datetime_column_changing_time_zone_awareness_warns_and_the_fitted_awareness_is_saved(tmp_path):
    from ensemblize.data.table_preprocessing import TabularPreprocessor

    rng = np.random.default_rng(0)
    n = 60
    when = pd.Timestamp("2021-01-01", tz="US/Eastern") + pd.to_timedelta(rng.integers(0, 10**7, n), unit="s")
    X = pd.DataFrame({"when": when, "x": rng.normal(size=n)})
    y = np.arange(n) % 2
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same instants in another zone: no warning, same rows
        np.testing.assert_array_equal(
            est.predict_proba(X.assign(when=X["when"].dt.tz_convert("Asia/Tokyo"))), est.predict_proba(X)
        )
    with pytest.warns(UserWarning, match="'when' was time-zone aware in the training rows but is naive now"):
        est.predict_proba(X.assign(when=X["when"].dt.tz_localize(None)))
    back = LoMETabClassifier.load(est.save(tmp_path / "m"))
    assert back.preprocessor_.time_zones_ == {"when": True}
    # a preprocessor saved before awareness was recorded loads and does not warn
    prep = est.preprocessor_
    config = {k: v for k, v in prep.config().items() if k != "time_zones"}
    old = TabularPreprocessor.from_state(config, prep.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old.transform(X.assign(when=X["when"].dt.tz_localize(None)))


def test_cli_tune_refuses_an_earlier_result_unless_overwrite(tmp_path):
    from typer.testing import CliRunner

    from ensemblize.cli import app
    from ensemblize.tabular.tuning import tune_csv

    X, y = _frame(80)
    X.assign(label=np.where(y == 1, "yes", "no")).to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "o"
    tune_csv(tmp_path / "t.csv", target="label", out=out, time_budget=None, n_trials=1,
             estimator=LoMETabClassifier(**TINY))  # fmt: skip
    (out / "mine.txt").write_text("keep")
    before = (out / "model.json").read_bytes()
    res = CliRunner().invoke(app, ["tune", str(tmp_path / "t.csv"), "--target", "label", "--trials", "1",
                                   "--out", str(out)])  # fmt: skip
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "already holds a tuning result" in flat and "--overwrite" in flat
    assert (out / "model.json").read_bytes() == before
    with pytest.raises(ValueError, match="already holds a tuning result"):
        tune_csv(tmp_path / "t.csv", target="label", out=out, n_trials=1, estimator=LoMETabClassifier(**TINY))
    tune_csv(tmp_path / "t.csv", target="label", out=out, time_budget=None, n_trials=1, seed=1,
             estimator=LoMETabClassifier(**TINY), overwrite=True)  # fmt: skip
    assert json.loads((out / "report.json").read_text())["budget"]["n_trials"] == 1
    assert (out / "mine.txt").read_text() == "keep"


def _rewritten(tmp_path, est, change, name):
    """``est`` saved, one metadata field changed by ``change(meta)`` and the metadata hash recomputed (what
    a foreign writer or a hand edit that re-hashes produces): the hashes pass, the content disagrees."""
    from ensemblize.checkpoint import _meta_hash

    stem = est.save(tmp_path / name).with_suffix("")
    meta_path = stem.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    change(meta)
    meta["meta_sha256"] = _meta_hash(meta)
    meta_path.write_text(json.dumps(meta))
    return stem


def test_load_refuses_saved_parts_that_disagree(tmp_path):
    """Such files loaded: 2 classes over 3 outputs, parameters naming 9 members on a 2-member network,
    a target std of "abc" or 0 (every prediction rescaled)."""
    X, y = _frame()
    y3 = (X["a"] > 0.5).astype(int).to_numpy() + y
    clf = LoMETabClassifier(**TINY, random_state=0).fit(X, y3)
    reg = LoMETabRegressor(**TINY, random_state=0).fit(X, X["a"].to_numpy() * 3)
    cases = [
        (clf, lambda m: m.__setitem__("classes", [0, 1]), "2 outputs|3 outputs, not the 2 saved classes"),
        (clf, lambda m: m.__setitem__("classes", [0, 1, 2, 3]), "3 outputs, not the 4 saved classes"),
        (clf, lambda m: m["params"].__setitem__("members", 9), r"disagree on \['members'\].*9 vs 2"),
        (
            reg,
            lambda m: m["preprocessor"].__setitem__("target_std", "abc"),
            "target_std must be a finite number",
        ),
        (reg, lambda m: m["preprocessor"].__setitem__("target_std", 0.0), "target_std must be > 0"),
        (reg, lambda m: m["model"].__setitem__("n_out", 2), "2 outputs, not a regressor's 1"),
    ]
    for i, (est, change, match) in enumerate(cases):
        stem = _rewritten(tmp_path, est, change, f"m{i}")
        with pytest.raises(ValueError, match=match):
            type(est).load(stem)
    # untouched files load and predict as before
    np.testing.assert_array_equal(
        LoMETabClassifier.load(clf.save(tmp_path / "ok")).predict_proba(X), clf.predict_proba(X)
    )


# ------------------------------------------------------------------------------ state across calls
def test_set_params_after_fit_does_not_change_what_save_writes(tmp_path):
    """The file holds the fitted network and the parameters it was fitted with; the unapplied change is
    named in a warning (it used to write a different layer, or a file that could not load)."""
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    proba = est.predict_proba(X)
    est.set_params(layer="additive", members=4)
    with pytest.warns(UserWarning, match=r"\['layer', 'members'\] were changed by set_params after fit"):
        stem = est.save(tmp_path / "m")
    back = LoMETabClassifier.load(stem)
    assert (back.get_params()["layer"], back.get_params()["members"]) == ("lome", 2)
    np.testing.assert_array_equal(back.predict_proba(X), proba)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a loaded estimator saved again: nothing changed, no warning
        back.save(tmp_path / "again")


def test_a_refit_that_fails_leaves_the_estimator_unfitted_not_half_refitted():
    from sklearn.exceptions import NotFittedError

    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, np.where(y == 1, "yes", "no"))
    labels = np.where(y == 1, "cat", "dog")
    bad_eval = (X.iloc[:4], ["cat", "dog", "cat", "bird"])  # a validation label never seen in training
    with pytest.raises(ValueError, match="'bird'"):
        est.fit(X, labels, eval_set=bad_eval)
    assert not hasattr(est, "model_") and not hasattr(est, "temperature_")  # nothing of the first fit left
    with pytest.raises(NotFittedError):
        est.predict(X)  # it used to give the new labels from the old network


def test_a_list_target_mixing_numbers_and_strings_is_refused_like_an_object_array():
    X, y = _frame()
    mixed = [1 if v else "a" for v in y]
    for target in (mixed, np.asarray(mixed, dtype=object), pd.Series(mixed, dtype=object)):
        with pytest.raises(ValueError, match=r"mixes label types \['int', 'str'\]"):
            LoMETabClassifier(**TINY).fit(X, target)  # a list used to become the strings '1' and 'a'


def test_an_unhashable_cell_is_named_at_predict_and_in_eval_set():
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    odd = X.assign(s=[{"k": 1}] * len(X))
    with pytest.raises(TypeError, match=r"column 's' holds a dict cell"):
        est.predict(odd)
    with pytest.raises(TypeError, match=r"column 's' holds a dict cell"):
        LoMETabClassifier(**TINY).fit(X, y, eval_set=(odd, y))


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40])
def test_random_state_outside_sklearns_range_is_an_error_and_large_seeds_do_not_wrap(bad):
    X, y = _frame(n=40)
    with pytest.raises(
        ValueError, match=rf"random_state \(None, a RandomState or an int\) must be .*got {bad}"
    ):
        LoMETabClassifier(**TINY, random_state=bad).fit(X, y)
    # 2**31 used to be reduced modulo 2**31 and train exactly as random_state=0
    assert LoMETabClassifier(**TINY, random_state=2**31).fit(X, y).seed_ == 2**31


def test_tune_csv_checks_out_and_storage_before_tuning_and_keeps_class_codes_as_written(tmp_path):
    from ensemblize.tabular.tuning import tune_csv

    X, y = _frame(120)
    frame = X.assign(code=np.where(y == 1, "01", "10"))
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    afile = tmp_path / "afile"
    afile.write_text("x")
    kw = dict(
        target="code", time_budget=None, n_trials=1, estimator=LoMETabClassifier(**TINY, random_state=0)
    )
    # refused at once, not after the budget is spent (it used to fail writing the result)
    with pytest.raises(
        ValueError, match=r"--out .*afile.* cannot be created: .*afile is a file, not a folder"
    ):
        tune_csv(csv, out=afile / "sub", **kw)
    with pytest.raises(ValueError, match=r"storage journal file .*cannot be created"):
        tune_csv(csv, out=tmp_path / "o1", storage=str(afile / "j.log"), study_name="s", **kw)
    with pytest.raises(ValueError, match=r"storage journal file .* is an existing folder"):
        tune_csv(csv, out=tmp_path / "o2", storage=str(tmp_path), study_name="s", **kw)
    with pytest.raises(ValueError, match=r"is an existing file that is not an Optuna journal"):
        tune_csv(csv, out=tmp_path / "o3", storage=str(csv), study_name="s", **kw)
    assert csv.read_text().startswith("a,b,s,code")  # untouched
    # class codes that look like numbers keep their spelling ("01" used to become the label 1)
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "notes.md").write_text("| stray table |\n|---|\n| 0.99 |\n")  # the user's own file
    tune_csv(csv, out=tmp_path / "ok", **kw)
    model = LoMETabClassifier.load(tmp_path / "ok" / "model")
    assert model.classes_.tolist() == ["01", "10"]
    page = (tmp_path / "ok" / "report.html").read_text()
    assert "notes.md" not in page and "stray table" not in page  # the report shows the tuning's files only
    # one number written two ways ("1" and "1.0") is one class: kept as written it became two
    spelled = np.where(y == 1, np.where(np.arange(len(y)) % 2 == 0, "1", "1.0"), "2")
    frame.assign(code=spelled).to_csv(csv, index=False)
    tune_csv(csv, out=tmp_path / "two", **kw)
    assert LoMETabClassifier.load(tmp_path / "two" / "model").classes_.tolist() == [1.0, 2.0]
