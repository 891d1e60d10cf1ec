"""Tabular experiments: the job (public estimators, scores), the rank tables, the three experiments (tiny)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ensemblize.evaluation.tabular import evaluate_predictions
from ensemblize.experiments import tabular as T
from ensemblize.experiments import tabular_methods as TM
from ensemblize.experiments.jobs import Execution, OptionError

TINY = {"budget": "tiny", "max_rows": 150, "split_seed": 0}
QUIET = Execution(quiet=True)


# --- rank tables ----------------------------------------------------------------------------


def _rec(dataset, method, seed, **metrics):
    return {"method": method, "dataset": dataset, "seed": seed, "members": 1, "params": 1,
            "train_seconds": 0.0, "metrics": metrics}  # fmt: skip


def test_average_ranks_hand_computed_with_ties():
    records = [
        # regression "a": mean RMSE x = 0.15, y = 0.20, z = 0.15 (tie between x and z, from different seeds)
        _rec("a", "x", 0, rmse=0.1), _rec("a", "x", 1, rmse=0.2),
        _rec("a", "y", 0, rmse=0.2), _rec("a", "y", 1, rmse=0.2),
        _rec("a", "z", 0, rmse=0.15), _rec("a", "z", 1, rmse=0.15),
        # classification "b": mean accuracy x = 0.8, y = 0.9, z = 0.7 (higher is better)
        _rec("b", "x", 0, accuracy=0.8, log_loss=0.3), _rec("b", "y", 0, accuracy=0.9, log_loss=0.5),
        _rec("b", "z", 0, accuracy=0.7, log_loss=0.2),
        # classification "c": only x and y ran, tie
        _rec("c", "x", 0, accuracy=0.5, log_loss=0.7), _rec("c", "y", 0, accuracy=0.5, log_loss=0.6),
    ]  # fmt: skip
    ranks = T.average_ranks(records)
    assert ranks["per_dataset"]["a"] == {"x": 1.5, "y": 3.0, "z": 1.5}
    assert ranks["per_dataset"]["b"] == {"x": 2.0, "y": 1.0, "z": 3.0}
    assert ranks["per_dataset"]["c"] == {"x": 1.5, "y": 1.5}
    assert ranks["average"] == pytest.approx(
        {"x": (1.5 + 2 + 1.5) / 3, "y": (3 + 1 + 1.5) / 3, "z": (1.5 + 3) / 2}
    )
    assert list(ranks["average"]) == ["x", "y", "z"]  # best first: 1.667, 1.833, 2.25
    assert ranks["n_datasets"] == {"x": 3, "y": 3, "z": 2}
    assert "| z | 2.25 | 2 | 1.5 | 3 | — |" in T.rank_table_markdown(ranks)
    scores = T.score_table_markdown(records)
    assert "| x | 0.1500 ± 0.0707 | 0.8000 ± 0.0000 | 0.5000 ± 0.0000 |" in scores
    # log-loss is ranked on its own (lower is better) and only where it was measured
    ll = T.average_ranks(records, metric="log_loss")
    assert ll["per_dataset"] == {"b": {"x": 2.0, "y": 3.0, "z": 1.0}, "c": {"x": 2.0, "y": 1.0}}
    assert ll["average"] == pytest.approx({"x": 2.0, "y": 2.0, "z": 1.0})
    assert "b (log-loss ↓)" in T.score_table_markdown(records, metric="log_loss")
    with pytest.raises(ValueError, match="'auc'"):
        T.average_ranks(records, metric="auc")


def test_cost_table_sums_cpu_seconds():
    recs = [
        dict(_rec("a", "x", s, rmse=0.1), cpu_seconds=c, train_seconds=w)
        for s, c, w in ((0, 2.0, 1.0), (1, 4.0, 3.0))
    ]
    assert "| x | 2 | 1 | 1 | 2.0 | 3.0 | 6.0 |" in T.cost_table_markdown(recs)
    small = [
        dict(_rec("a", "x", s, rmse=0.1), cpu_seconds=c, train_seconds=0.2) for s, c in ((0, 0.11), (1, 0.21))
    ]
    small.append(dict(_rec("a", "x", 2, rmse=0.1), train_seconds=0.2))  # no cpu_seconds recorded
    assert "| x | 3 | 1 | 1 | 0.20 | 0.16 | 0.32 (1 fit(s) not timed) |" in T.cost_table_markdown(small)
    big = [dict(_rec("a", "x", s, rmse=0.1), cpu_seconds=3368.0, train_seconds=4000.0) for s in (0, 1)]
    assert "| 4,000 | 3,368 | 6,736 |" in T.cost_table_markdown(big)


def test_budget_config_and_bad_input():
    assert TM.budget_config("full", 100) == {"gbdt_rounds": 4000, "gbdt_patience": 50}  # estimator defaults
    small, large = TM.budget_config("quick", 100), TM.budget_config("quick", 20_000)
    assert (small["max_epochs"], large["max_epochs"]) == (80, 40)
    assert TM.budget_config("full", 100, rank=8)["rank"] == 8
    with pytest.raises(ValueError, match="bogus"):
        TM.budget_config("quick", 100, bogus=1)
    with pytest.raises(ValueError, match="'huge'"):
        TM.budget_config("huge", 100)
    with pytest.raises(ValueError, match="'forest'"):
        TM.tabular_job(method="forest", dataset="concrete", seed=0, **TINY)
    with pytest.raises(TypeError, match="seed"):
        TM.tabular_job(method="mlp", dataset="concrete", seed=1.5, **TINY)


# --- the job ----------------------------------------------------------------------------------


def _runnable(method):
    why = TM.method_available(method)
    if why is not None:
        pytest.skip(why)


@pytest.mark.parametrize("method", TM.METHODS)
def test_job_every_method_binary(method):
    _runnable(method)
    (rec,) = TM.tabular_job(method=method, dataset="breast_cancer", seed=0, **TINY)
    m = rec["metrics"]
    for key in ("accuracy", "roc_auc", "val_accuracy", "val_roc_auc"):
        assert 0.0 <= m[key] <= 1.0, (key, m)
    assert m["log_loss"] > 0 and m["val_log_loss"] > 0
    n_test = len(TM.load_split("breast_cancer", split_seed=0, max_rows=150).test.y)
    assert n_test == 30  # 20 % of 150
    assert m["accuracy"] * n_test == pytest.approx(round(m["accuracy"] * n_test))
    ensemble = method in TM.ENSEMBLE_METHODS
    assert ("pairwise_kl" in m) == ensemble and ("disagreement" in m) == ensemble
    assert rec["members"] == (2 if ensemble else 1)
    assert rec["params"] > 0 and rec["train_seconds"] >= 0 and rec["cpu_seconds"] > 0
    assert (rec["dataset"], rec["task"], rec["budget"]) == ("breast_cancer", "binclass", "tiny")


def test_job_scores_are_the_public_estimators_own():
    """The record is what a user gets: LoMETabRegressor(...).fit(train, eval_set=val) scored on test."""
    from ensemblize.tabular import LoMETabRegressor

    (rec,) = TM.tabular_job(method="lometab", dataset="concrete", seed=1, keep_history=True, **TINY)
    sp = TM.load_split("concrete", split_seed=0, max_rows=150)
    est = LoMETabRegressor(random_state=1, **rec["setting"]).fit(
        sp.train.X, sp.train.y, eval_set=(sp.val.X, sp.val.y)
    )
    std = float(np.std(sp.train.y.to_numpy()))
    want = math.sqrt(np.mean((est.predict(sp.test.X) - sp.test.y.to_numpy()) ** 2)) / std
    assert rec["metrics"]["rmse"] == pytest.approx(want, rel=1e-9)
    members = est.predict_members(sp.test.X) / std
    assert rec["metrics"]["ambiguity"] == pytest.approx(
        np.mean((members - members.mean(1, keepdims=True)) ** 2)
    )
    assert rec["setting"] == {"members": 2, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2, "n_networks": 1,
                              "n_bins": 8, "impute": True}  # fmt: skip
    assert len(rec["history"]) == rec["epochs"] <= 3
    # deterministic: the same spec gives the same record (timing aside)
    (again,) = TM.tabular_job(method="lometab", dataset="concrete", seed=1, **TINY)
    assert again["metrics"] == rec["metrics"]


def test_job_gbdt_scores_are_the_public_estimators_own():
    """The GBDT record is what a user gets: GBDTRegressor(kind=...).fit(train, eval_set=val) scored on test."""
    pytest.importorskip("xgboost")
    from ensemblize.data.table_preprocessing import prepare
    from ensemblize.tabular.gbdt import GBDTRegressor, fit_gbdt

    (rec,) = TM.tabular_job(method="xgboost", dataset="concrete", seed=3, **TINY)
    sp = TM.load_split("concrete", split_seed=0, max_rows=150)
    setting = {"max_rounds": 20, "early_stopping_rounds": 5, "learning_rate": 0.05}
    est = GBDTRegressor(kind="xgboost", random_state=3, **setting).fit(
        sp.train.X, sp.train.y, eval_set=(sp.val.X, sp.val.y)
    )
    std = float(np.std(sp.train.y.to_numpy()))
    want = math.sqrt(np.mean((est.predict(sp.test.X) - sp.test.y.to_numpy()) ** 2)) / std
    assert rec["metrics"]["rmse"] == pytest.approx(want, rel=1e-9)
    assert rec["params"] == est.best_iteration_ + 1 and rec["members"] == 1
    assert rec["setting"] == setting and rec["rounds"] == est.best_iteration_ + 1  # seeds share the setting
    # the same numbers as the booster on the preprocessed matrices (the route before the estimators)
    p = prepare(sp, seed=0)
    model = fit_gbdt(
        "xgboost", p.X_train, p.y_train, p.X_val, p.y_val, task="regression", seed=3, params=setting
    )
    assert rec["params"] == model.best_iteration + 1
    assert rec["metrics"]["rmse"] == pytest.approx(
        evaluate_predictions("regression", p.y_test, model.predict(p.X_test))["rmse"], rel=1e-6
    )


def test_job_gbdt_classifier_scores_are_the_public_estimators_own():
    pytest.importorskip("catboost")
    from ensemblize.tabular.gbdt import GBDTClassifier

    (rec,) = TM.tabular_job(method="catboost", dataset="hpc", seed=1, **TINY)
    sp = TM.load_split("hpc", split_seed=0, max_rows=150)
    est = GBDTClassifier(kind="catboost", random_state=1, max_rounds=20, early_stopping_rounds=5).fit(
        sp.train.X, sp.train.y, eval_set=(sp.val.X, sp.val.y)
    )
    y = np.searchsorted(est.classes_, sp.test.y.to_numpy())
    want = evaluate_predictions("multiclass", y, est.predict_proba(sp.test.X))
    assert rec["metrics"]["log_loss"] == pytest.approx(want["log_loss"], rel=1e-9)
    assert rec["metrics"]["accuracy"] == want["accuracy"]
    # params counts trees: one per class per kept round
    assert rec["params"] == (est.best_iteration_ + 1) * len(est.classes_) and rec["task"] == "multiclass"


# --- experiments ---------------------------------------------------------------------------------


def test_bench_runs_jobs_writes_tables_and_resumes(tmp_path):
    pytest.importorskip("xgboost")
    out = tmp_path / "bench"
    kw = {"datasets": ["concrete"], "methods": ["mlp", "xgboost"], "seeds": [0, 1], "budget": "tiny",
          "max_rows": 150, "out": out}  # fmt: skip
    recs = T.tabular_bench(**kw, execution=QUIET)
    assert [(r["method"], r["seed"]) for r in recs] == [
        ("mlp", 0),
        ("mlp", 1),
        ("xgboost", 0),
        ("xgboost", 1),
    ]
    assert json.loads((out / "results.json").read_text()) == recs
    md = (out / "tables.md").read_text()
    assert "concrete (RMSE ↓)" in md and "### Mean rank on rmse" in md and "## Cost" in md
    ranks = json.loads((out / "ranks.json").read_text())["ranks"]
    assert set(ranks["rmse"]["average"]) == {"mlp", "xgboost"}
    files = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()}
    assert len(files) == 4
    again = T.tabular_bench(**kw, execution=Execution(quiet=True, resume=True))
    assert again == recs  # read back, not recomputed
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()} == files
    with pytest.raises(ValueError, match="--out .* already holds a run"):
        T.tabular_bench(**kw, execution=QUIET)  # a finished run is not silently redone


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"methods": ["forest"]}, "--methods"),
        ({"datasets": ["nope"]}, "--datasets"),
        ({"budget": "huge"}, "--budget"),
        ({"seeds": [0, 0]}, "--seeds"),
        ({"max_rows": 3}, "--max-rows"),
    ],
)
def test_bench_bad_options_are_named_before_any_work(tmp_path, kwargs, option):
    with pytest.raises(OptionError, match=option):
        T.tabular_bench(**{"budget": "tiny", "out": tmp_path / "o", **kwargs}, execution=QUIET)
    assert not (tmp_path / "o").exists()


def test_lite_preset_is_one_table():
    assert T.BUDGET_TABLES["lite"] == ("concrete",)
    jobs = T.bench_jobs(
        datasets=T._tables(None, "lite"), methods=["lometab"], seeds=[0], split_seed=0, budget="lite"
    )
    assert [j.params["dataset"] for j in jobs] == ["concrete"]


def test_grid_best_cell_is_chosen_on_validation(tmp_path):
    out = tmp_path / "grid"
    rows = T.tabular_grid(dataset="concrete", ranks=[1, 2], scales=[0.1, 1.0], budget="tiny", max_rows=150,
                          out=out, execution=QUIET)  # fmt: skip
    assert [r["method"] for r in rows] == ["lometab[r=1,σ=0.1]", "lometab[r=1,σ=1]", "lometab[r=2,σ=0.1]",
                                           "lometab[r=2,σ=1]"]  # fmt: skip
    assert [(r["setting"]["rank"], r["setting"]["init_scale"]) for r in rows] == [
        (1, 0.1),
        (1, 1.0),
        (2, 0.1),
        (2, 1.0),
    ]
    summary = json.loads((out / "grid_summary.json").read_text())
    best = min(rows, key=lambda r: r["metrics"]["val_rmse"])  # validation, not test
    assert (summary["best_on_val"]["rank"], summary["best_on_val"]["init_scale"]) == (
        best["setting"]["rank"], best["setting"]["init_scale"]
    )  # fmt: skip
    amb = [r["metrics"]["ambiguity"] for r in rows]
    assert summary["orders_of_magnitude"] == pytest.approx(math.log10(max(amb) / min(amb)))
    assert (out / "grid.png").stat().st_size > 0


def test_diversity_curves_per_epoch(tmp_path):
    out = tmp_path / "div"
    rows = T.tabular_diversity(dataset="credit", methods=["lometab", "additive"], epochs=2, budget="tiny",
                               max_rows=200, out=out, execution=QUIET)  # fmt: skip
    assert all(len(r["history"]) == 2 for r in rows)  # all epochs run, no early stop
    summary = json.loads((out / "diversity_summary.json").read_text())
    want = [r["history"][e]["val_pairwise_kl"] for r in rows[:1] for e in range(2)]
    assert summary["lometab"]["curve_mean"] == pytest.approx(want)
    assert summary["additive_over_lometab_last_quarter"] == pytest.approx(
        summary["additive"]["last_quarter_mean"] / summary["lometab"]["last_quarter_mean"]
    )
    assert (out / "diversity.png").stat().st_size > 0
    with pytest.raises(ValueError, match="val_pairwise_kl"):
        T.diversity_curves([{"method": "x", "history": [{"val_loss": 1.0}]}], key="val_pairwise_kl")


def test_experiments_are_plain_functions():
    import inspect
    import sys

    import ensemblize.experiments.tabular  # noqa: F401

    assert "typer" not in {m.split(".")[0] for m in vars(T) if isinstance(getattr(T, m), type(sys))}
    for fn in T.EXPERIMENTS.values():
        for p in inspect.signature(fn).parameters.values():
            assert p.kind is p.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
            assert type(p.default).__module__ in ("builtins", "pathlib") or p.default is None, (fn, p)


def test_progress_lines_show_validation_scores_never_test():
    rec = {
        "metrics": {"accuracy": 0.91, "log_loss": 0.25, "val_accuracy": 0.88, "val_log_loss": 0.31},
        "cpu_seconds": 2.0,
    }
    line = T._describe([rec])
    assert line == "val accuracy 0.8800, val log_loss 0.3100, CPU 2.0 s"
    reg = {"metrics": {"rmse": 0.5, "val_rmse": 0.4}, "cpu_seconds": 1.5}
    assert T._describe([reg]) == "val rmse 0.4000, CPU 1.5 s"


@pytest.mark.parametrize("method", TM.GBDT_METHODS)
def test_make_estimator_gives_the_gbdts_the_benchmark_setting(method):
    est, setting = TM.make_estimator(method, "regression", seed=3, cfg=TM.budget_config("full", 100))
    assert setting == {"max_rounds": 4000, "early_stopping_rounds": 50, "learning_rate": 0.05}
    params = est.get_params()
    assert params["kind"] == method and params["random_state"] == 3 and params["impute"] is True
    assert {k: params[k] for k in setting} == setting


def test_a_layer_override_that_contradicts_the_method_is_refused():
    """``overrides={"layer": ...}`` on method lometab was dropped silently: the fit was the default's."""
    cfg = TM.budget_config("full", 100, layer="batchensemble")
    with pytest.raises(
        ValueError, match="layer='batchensemble' conflicts with method 'lometab'.*'batchensemble' instead"
    ):
        TM.make_estimator("lometab", "regression", seed=0, cfg=cfg)
    est, _ = TM.make_estimator("batchensemble", "regression", seed=0, cfg=cfg)  # consistent: accepted
    assert est.get_params()["layer"] == "batchensemble"


def test_a_failed_seed_is_never_averaged_away():
    """A diverged seed (NaN score) used to vanish: the mean of the surviving seeds ranked first."""
    from ensemblize.experiments.tabular_tables import average_ranks, score_table_markdown
    from ensemblize.report.results import format_table

    def rec(method, seed, acc, ds="d1"):
        return {"method": method, "dataset": ds, "seed": seed, "members": 1, "params": 1, "train_seconds": 1.0,
                "metrics": {"accuracy": acc}}  # fmt: skip

    recs = [rec("A", 0, float("nan")), rec("A", 1, 0.99), rec("B", 0, 0.9), rec("B", 1, 0.9)]
    recs += [
        rec("C", 0, float("nan")),
        rec("C", 1, float("nan")),
        rec("A", 0, 0.5, "d2"),
        rec("C", 0, 0.6, "d2"),
    ]
    ranks = average_ranks(recs)
    assert ranks["per_dataset"]["d1"] == {"A": 2.5, "B": 1.0, "C": 2.5}  # both failed: the shared last ranks
    assert ranks["n_datasets"]["C"] == 2  # an all-failed table still counts against it
    assert "| A | failed (1 seed(s) finite) |" in score_table_markdown(recs)
    assert "0.9900 (1 of 2 failed)" in format_table(recs)


def test_the_first_timed_fit_of_a_process_is_warmed_up_untimed():
    """One-time start-up costs (imports, torch's first calls) no longer land in the first fit's CPU s."""
    from ensemblize.experiments import tabular_methods as tm

    tm._warm_up.cache_clear()
    for seed in (0, 1):
        tm.tabular_job(method="lometab", dataset="concrete", seed=seed, budget="tiny", max_rows=200)
    info = tm._warm_up.cache_info()
    assert info.misses == 1 and info.hits == 1  # one warm-up per method and task, then reused


def test_the_sigma_mlp_job_is_warmed_up_untimed_too(monkeypatch):
    """σN-MLP has no estimator; its warm-up runs the job's own code path once on a synthetic table."""
    from ensemblize.experiments import tabular_methods as tm

    tm._warm_up.cache_clear()
    calls = []
    real = tm._sigma_job
    monkeypatch.setattr(
        tm, "_sigma_job", lambda prepared, **kw: calls.append(prepared.name) or real(prepared, **kw)
    )
    for seed in (0, 1):
        rec = tm.tabular_job(method="sigma", dataset="concrete", seed=seed, budget="tiny", max_rows=200)[0]
        assert rec["cpu_seconds"] > 0
    assert calls == ["warm-up", "concrete", "concrete"]  # one untimed warm-up, then the two timed jobs


def test_grid_best_cell_breaks_validation_accuracy_ties_by_log_loss():
    from ensemblize.experiments.tabular import grid_summary

    def rec(val_acc, val_ll, test_acc):
        return {
            "metrics": {
                "accuracy": test_acc,
                "val_accuracy": val_acc,
                "val_log_loss": val_ll,
                "pairwise_kl": 0.1,
            }
        }

    recs = [rec(0.9, 0.5, 0.9), rec(0.9375, 0.604, 0.917), rec(0.9375, 0.383, 0.95), rec(0.8, 0.7, 0.8)]
    best = grid_summary(recs, [1, 2], [0.5, 4], dataset="t")["best_on_val"]
    assert (best["rank"], best["init_scale"], best["test_accuracy"]) == (2, 0.5, 0.95)


def test_sigma_trains_with_the_task_estimators_budget(monkeypatch):
    """σN-Ens read the classifier's defaults: on regression at budget full it had 80 epochs, the other
    networks 200, unannounced."""
    import ensemblize.tabular.train as train_module
    from ensemblize.tabular.estimators import LoMETabClassifier, LoMETabRegressor

    seen = {}

    class Stop(Exception):
        pass

    def fake_train_model(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(train_module, "train_model", fake_train_model)
    for dataset, est in (("concrete", LoMETabRegressor()), ("breast_cancer", LoMETabClassifier())):
        prepared = TM._prepared(dataset, 0, 200)
        with pytest.raises(Stop):
            TM._sigma_job(prepared, seed=0, cfg=TM.budget_config("full", 128), keep_history=False)
        assert (seen["max_epochs"], seen["patience"]) == (est.max_epochs, est.patience), dataset


def test_jobs_carry_the_estimator_defaults_and_a_process_with_others_refuses(monkeypatch):
    """A resumed folder reused fits of earlier defaults (the key did not change when a default did)."""
    import warnings

    digest = TM.defaults_digest()
    assert len(digest) == 12 and int(digest, 16) >= 0
    (job,) = T.bench_jobs(datasets=["concrete"], methods=["xgboost"], seeds=[0], split_seed=0, budget="tiny")
    assert job.params["defaults"] == digest
    (rec,) = TM.tabular_job(method="xgboost", dataset="concrete", seed=0, defaults=digest, **TINY)
    assert rec["defaults"] == digest
    with pytest.raises(RuntimeError, match="other-digest.*one version"):
        TM.tabular_job(method="xgboost", dataset="concrete", seed=0, defaults="other-digest", **TINY)
    # a default change changes every tabular job's key, so --resume re-runs instead of mixing
    monkeypatch.setattr(TM, "defaults_digest", lambda: "000000000000")
    monkeypatch.setattr(T, "defaults_digest", lambda: "000000000000")
    (changed,) = T.bench_jobs(
        datasets=["concrete"], methods=["xgboost"], seeds=[0], split_seed=0, budget="tiny"
    )
    assert changed.key != job.key
    # merged folders whose records disagree are announced
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T._warn_mixed_defaults([rec, {**rec, "seed": 1}, {**rec, "defaults": None}])  # one digest: silent
    with pytest.warns(UserWarning, match="'xgboost' records were fitted with different estimator defaults"):
        T._warn_mixed_defaults([rec, {**rec, "defaults": "000000000000"}])
