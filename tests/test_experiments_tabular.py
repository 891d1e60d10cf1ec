"""Tabular experiments: the method runner, the rank table, and the three commands end to end (tiny budget)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ensemblize.data.tabular import evaluate_predictions, load_table, prepare
from ensemblize.experiments import tabular as T


@pytest.fixture(scope="module")
def tiny_binary():
    ds = load_table("sklearn/breast_cancer")
    rows = np.random.default_rng(0).choice(ds.n_rows, size=160, replace=False)
    ds = ds.subset(rows)
    # keep it small and fast: 5 numeric columns
    ds.X = ds.X.iloc[:, :5]
    ds.numeric = list(ds.X.columns)
    return prepare(ds, seed=0)


@pytest.fixture(scope="module")
def tiny_regression():
    ds = load_table("sklearn/diabetes")
    ds = ds.subset(np.arange(150))
    return prepare(ds, seed=0)


# --- rank table -----------------------------------------------------------------------------


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
        _rec("b", "x", 0, accuracy=0.8), _rec("b", "y", 0, accuracy=0.9), _rec("b", "z", 0, accuracy=0.7),
        # classification "c": only x and y ran, tie
        _rec("c", "x", 0, accuracy=0.5), _rec("c", "y", 0, accuracy=0.5),
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
    md = T.rank_table_markdown(ranks)
    assert "| z | 2.25 | 2 | 1.5 | 3 | — |" in md
    scores = T.score_table_markdown(records)
    assert "| x | 0.1500 ± 0.0707 | 0.8000 ± 0.0000 | 0.5000 ± 0.0000 |" in scores


def test_budget_config_and_bad_input(tiny_binary):
    small = T.budget_config("quick", 100)
    large = T.budget_config("quick", 20_000)
    assert (small["max_epochs"], large["max_epochs"]) == (80, 40)
    assert T.budget_config("full", 100, rank=8)["rank"] == 8
    with pytest.raises(ValueError, match="bogus"):
        T.budget_config("quick", 100, bogus=1)
    with pytest.raises(ValueError, match="'huge'"):
        T.budget_config("huge", 100)
    with pytest.raises(ValueError, match="'forest'"):
        T.run_tabular_method("forest", tiny_binary, seed=0, budget="tiny")
    with pytest.raises(TypeError, match="seed"):
        T.run_tabular_method("mlp", tiny_binary, seed=1.5, budget="tiny")


# --- the runner -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", T.METHODS)
def test_runner_every_method_binary(tiny_binary, method):
    if method == "catboost":
        pytest.importorskip("catboost")
    if method == "xgboost":
        pytest.importorskip("xgboost")
    rec = T.run_tabular_method(method, tiny_binary, seed=0, budget="tiny")
    m = rec.metrics
    for key in ("accuracy", "roc_auc", "val_accuracy", "val_roc_auc"):
        assert 0.0 <= m[key] <= 1.0, (key, m)
    # accuracy is a multiple of 1/n_test
    n_test = len(tiny_binary.y_test)
    assert m["accuracy"] * n_test == pytest.approx(round(m["accuracy"] * n_test))
    ensemble = method in ("lometab", "tabm", "additive", "sigma")
    assert ("pairwise_kl" in m) == ensemble and ("disagreement" in m) == ensemble
    if ensemble:
        assert rec.members == 4 and m["pairwise_kl"] >= 0 and 0 <= m["disagreement"] <= 1
    else:
        assert rec.members == 1
    assert rec.params > 0 and rec.train_seconds >= 0 and rec.dataset == tiny_binary.name


def test_runner_values_match_predictions(tiny_regression):
    """The recorded test RMSE is the RMSE of the ensemble mean of the model's own member outputs."""
    from ensemblize.tabular.gbdt import fit_gbdt

    rec = T.run_tabular_method("xgboost", tiny_regression, seed=3, budget="tiny")
    model = fit_gbdt("xgboost", tiny_regression.X_train, tiny_regression.y_train, tiny_regression.X_val,
                     tiny_regression.y_val, task="regression", seed=3,
                     params={"max_rounds": 20, "early_stopping_rounds": 5})  # fmt: skip
    want = evaluate_predictions("regression", tiny_regression.y_test, model.predict(tiny_regression.X_test))
    assert rec.metrics["rmse"] == pytest.approx(want["rmse"])
    assert rec.params == model.best_iteration + 1


def test_runner_regression_deterministic_and_parameter_counts(tiny_regression):
    a = T.run_tabular_method("lometab", tiny_regression, seed=1, budget="tiny", keep_history=True)
    b = T.run_tabular_method("lometab", tiny_regression, seed=1, budget="tiny")
    assert a.metrics == b.metrics
    assert set(a.metrics) == {"rmse", "ambiguity", "val_rmse", "val_ambiguity"}
    assert len(a.extra["history"]) == a.extra["epochs"] <= 3
    # the best epoch's validation RMSE is what the restored model scores on validation
    assert a.metrics["val_rmse"] == pytest.approx(
        a.extra["history"][a.extra["best_epoch"]]["val_rmse"], rel=1e-5
    )
    mlp = T.run_tabular_method("mlp", tiny_regression, seed=1, budget="tiny")
    assert "ambiguity" not in mlp.metrics and mlp.members == 1
    # rank r adapters: lometab has 2·K·r·(d_in + d_out) more parameters per layer than the shared MLP layer
    lo = T.run_tabular_method("lometab", tiny_regression, seed=1, budget="tiny", rank=3, max_epochs=1)
    lo1 = T.run_tabular_method("lometab", tiny_regression, seed=1, budget="tiny", rank=1, max_epochs=1)
    assert lo.params > lo1.params


# --- commands end to end --------------------------------------------------------------------


@pytest.mark.slow
def test_cli_bench_grid_diversity_end_to_end(tmp_path):
    from typer.testing import CliRunner

    from ensemblize.cli import app

    runner = CliRunner()
    out = tmp_path / "bench"
    res = runner.invoke(app, ["experiment", "tabular-bench", "--datasets", "concrete", "--methods", "mlp,xgboost",
                              "--seeds", "0,1", "--budget", "tiny", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "results.json").read_text())
    assert sorted((r["method"], r["seed"]) for r in rows) == [
        ("mlp", 0),
        ("mlp", 1),
        ("xgboost", 0),
        ("xgboost", 1),
    ]
    assert all(r["dataset"] == "concrete" and math.isfinite(r["metrics"]["rmse"]) for r in rows)
    md = (out / "tables.md").read_text()
    assert "## Average rank" in md and "concrete (RMSE ↓)" in md

    bad = runner.invoke(app, ["experiment", "tabular-bench", "--methods", "forest", "--out", str(out)])
    assert bad.exit_code != 0 and "forest" in bad.output

    out = tmp_path / "grid"
    res = runner.invoke(app, ["experiment", "tabular-grid", "--dataset", "concrete", "--ranks", "1,2",
                              "--scales", "0.1,1", "--budget", "tiny", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "grid_summary.json").read_text())
    rows = json.loads((out / "results.json").read_text())
    best = min(rows, key=lambda r: r["metrics"]["val_rmse"])  # chosen on validation, not test
    assert (summary["best_on_val"]["rank"], summary["best_on_val"]["init_scale"]) == (
        best["rank"],
        best["init_scale"],
    )
    amb = [r["metrics"]["ambiguity"] for r in rows]
    assert summary["orders_of_magnitude"] == pytest.approx(math.log10(max(amb) / min(amb)))
    assert (out / "grid.png").stat().st_size > 0

    out = tmp_path / "div"
    res = runner.invoke(app, ["experiment", "tabular-diversity", "--dataset", "credit", "--methods", "lometab,additive",
                              "--epochs", "2", "--budget", "tiny", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "diversity_summary.json").read_text())
    assert len(summary["lometab"]["curve_mean"]) == 2
    assert summary["additive_over_lometab_last_quarter"] == pytest.approx(
        summary["additive"]["last_quarter_mean"] / summary["lometab"]["last_quarter_mean"]
    )
    assert (out / "diversity.png").stat().st_size > 0
