"""GBDT refit_full: after early stopping, a booster fitted on training + validation rows for the chosen
round count — what the LoMETab regressor does by default, so the benchmark can give the GBDTs the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ensemblize.tabular.gbdt import DEFAULT_PARAMS, GBDTClassifier, GBDTRegressor, fit_gbdt


@pytest.mark.parametrize("kind", ["xgboost", "catboost"])
def test_refit_full_equals_a_booster_fitted_by_hand_on_all_rows_for_the_chosen_rounds(kind):
    lib = pytest.importorskip(kind)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 4))
    y = X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=240)
    Xtr, ytr, Xva, yva = X[:180], y[:180], X[180:], y[180:]
    params = {"max_rounds": 200, "early_stopping_rounds": 10}
    plain = fit_gbdt(kind, Xtr, ytr, Xva, yva, task="regression", seed=0, params=params)
    refit = fit_gbdt(kind, Xtr, ytr, Xva, yva, task="regression", seed=0, params=params, refit_full=True)
    assert refit.best_iteration == plain.best_iteration and refit.params["refit_full"] is True
    rounds = plain.best_iteration + 1
    settings = {
        k: v for k, v in DEFAULT_PARAMS[kind].items() if k not in ("max_rounds", "early_stopping_rounds")
    }
    if kind == "xgboost":
        by_hand = lib.XGBRegressor(
            objective="reg:squarederror", n_estimators=rounds, random_state=0, **settings
        )
        by_hand.fit(X, y, verbose=False)
        assert by_hand.get_booster().num_boosted_rounds() == rounds
    else:
        by_hand = lib.CatBoostRegressor(loss_function="RMSE", iterations=rounds, random_seed=0, verbose=False,
                                        allow_writing_files=False, **settings)  # fmt: skip
        by_hand.fit(X, y)
        assert by_hand.tree_count_ == rounds
    np.testing.assert_allclose(refit.predict(X), by_hand.predict(X), rtol=0, atol=1e-6)
    assert not np.allclose(refit.predict(X), plain.predict(X))  # it did train on the validation rows


def test_the_estimators_take_refit_full_and_refuse_a_non_bool():
    pytest.importorskip("xgboost")
    rng = np.random.default_rng(1)
    X = pd.DataFrame(rng.normal(size=(120, 3)), columns=list("abc"))
    y = (X["a"] > 0).astype(int)
    est = GBDTClassifier(
        kind="xgboost", max_rounds=30, early_stopping_rounds=5, refit_full=True, random_state=0
    )
    proba = est.fit(X, y).predict_proba(X)
    assert proba.shape == (120, 2) and est.booster_.params["refit_full"] is True
    plain = GBDTClassifier(kind="xgboost", max_rounds=30, early_stopping_rounds=5, random_state=0).fit(X, y)
    assert plain.best_iteration_ == est.best_iteration_  # the same early-stopped round count ...
    assert not np.allclose(plain.predict_proba(X), proba)  # ... fitted again on more rows
    with pytest.raises(TypeError, match="refit_full"):
        GBDTRegressor(kind="xgboost", refit_full="yes").fit(X, X["b"])
