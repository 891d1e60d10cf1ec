"""ensemblize.tabular.gbdt: XGBoost / CatBoost baselines on the TabM-preprocessed arrays."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from ensemblize.data.table_preprocessing import prepare
from ensemblize.data.tables import load_benchmark, load_table
from ensemblize.evaluation.tabular import evaluate_predictions
from ensemblize.tabular.gbdt import DEFAULT_PARAMS, GBDTModel, fit_gbdt, predict_gbdt

pytest.importorskip("xgboost")
pytest.importorskip("catboost")

FAST = {"max_rounds": 300, "learning_rate": 0.1}


@pytest.fixture(scope="module")
def concrete():
    return prepare(load_benchmark("concrete"), seed=0)


@pytest.fixture(scope="module")
def breast_cancer():
    return prepare(load_benchmark("breast_cancer"), seed=0)


@pytest.fixture(scope="module")
def wine():
    return prepare(load_table("sklearn/wine"), seed=0)


@pytest.mark.parametrize("kind", ["xgboost", "catboost"])
def test_regression_beats_constant_predictor(kind, concrete):
    p = concrete
    model = fit_gbdt(kind, p.X_train, p.y_train, p.X_val, p.y_val, task="regression", seed=0, params=FAST)
    pred = model.predict(p.X_test)
    assert pred.shape == (len(p.y_test),) and pred.dtype == np.float64
    rmse = evaluate_predictions("regression", p.y_test, pred)["rmse"]
    const = evaluate_predictions("regression", p.y_test, np.full(len(p.y_test), p.y_train.mean()))["rmse"]
    assert const > 0.9  # the standardised scale
    assert rmse < 0.5 * const, (rmse, const)


@pytest.mark.parametrize("kind", ["xgboost", "catboost"])
def test_binary_classification_beats_constant_predictor(kind, breast_cancer):
    p = breast_cancer
    model = fit_gbdt(kind, p.X_train, p.y_train, p.X_val, p.y_val, task="binclass", seed=0, params=FAST)
    proba = predict_gbdt(model, p.X_test)
    assert proba.shape == (len(p.y_test), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    got = evaluate_predictions("binclass", p.y_test, proba)
    majority = np.mean(p.y_test == np.bincount(p.y_train).argmax())
    assert got["accuracy"] > majority + 0.2 and got["roc_auc"] > 0.95, got


@pytest.mark.parametrize("kind", ["xgboost", "catboost"])
def test_multiclass_beats_constant_predictor(kind, wine):
    p = wine
    model = fit_gbdt(kind, p.X_train, p.y_train, p.X_val, p.y_val, task="multiclass", seed=0, params=FAST)
    proba = model.predict(p.X_test)
    assert proba.shape == (len(p.y_test), 3) and model.n_classes == 3
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    majority = np.mean(p.y_test == np.bincount(p.y_train).argmax())
    assert evaluate_predictions("multiclass", p.y_test, proba)["accuracy"] > majority + 0.4


def test_early_stopping_keeps_best_round_and_is_deterministic(concrete):
    p = concrete
    params = {"max_rounds": 2000, "learning_rate": 0.3, "early_stopping_rounds": 10}
    a = fit_gbdt("xgboost", p.X_train, p.y_train, p.X_val, p.y_val, task="regression", seed=0, params=params)
    b = fit_gbdt("xgboost", p.X_train, p.y_train, p.X_val, p.y_val, task="regression", seed=0, params=params)
    built = a.model.get_booster().num_boosted_rounds()
    assert built == a.best_iteration + 1 + 10 < 2000  # stopped 10 rounds after the best one
    np.testing.assert_array_equal(a.predict(p.X_test), b.predict(p.X_test))
    # the prediction is the best round's, not the last round's
    best_only = a.model.predict(p.X_val, iteration_range=(0, a.best_iteration + 1))
    np.testing.assert_allclose(a.predict(p.X_val), best_only, rtol=1e-6)
    assert (
        a.params["early_stopping_rounds"] == 10
        and a.params["max_depth"] == DEFAULT_PARAMS["xgboost"]["max_depth"]
    )
    assert isinstance(a, GBDTModel) and a.train_seconds > 0


def test_missing_library_names_the_extra(monkeypatch, concrete):
    p = concrete
    monkeypatch.setitem(__import__("sys").modules, "catboost", None)
    with pytest.raises(ImportError, match=r"pip install ensemblize\[gbdt\]"):
        fit_gbdt("catboost", p.X_train, p.y_train, p.X_val, p.y_val, task="regression", seed=0)


def test_bad_inputs_are_named(concrete, wine):
    p = concrete
    args = (p.X_train, p.y_train, p.X_val, p.y_val)
    with pytest.raises(ValueError, match="'lightgbm'"):
        fit_gbdt("lightgbm", *args, task="regression", seed=0)
    with pytest.raises(ValueError, match="'ranking'"):
        fit_gbdt("xgboost", *args, task="ranking", seed=0)
    bad = p.X_train.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X_train contains NaN"):
        fit_gbdt("xgboost", bad, p.y_train, p.X_val, p.y_val, task="regression", seed=0)
    with pytest.raises(ValueError, match="X_val has"):
        fit_gbdt("xgboost", p.X_train, p.y_train, p.X_val[:, :3], p.y_val, task="regression", seed=0)
    with pytest.raises(ValueError, match="class indices"):
        fit_gbdt("xgboost", *args, task="binclass", seed=0)
    w = wine
    with pytest.raises(ValueError, match=r"classes \[2\] never occur"):
        keep = w.y_train < 2
        fit_gbdt("xgboost", w.X_train[keep], w.y_train[keep], w.X_val, w.y_val, task="multiclass", seed=0)
    model = fit_gbdt("xgboost", *args, task="regression", seed=0, params={"max_rounds": 5})
    with pytest.raises(ValueError, match="columns"):
        model.predict(p.X_test[:, :2])


# ------------------------------------------------------------------------------------------------
# scikit-learn estimators on raw tables
# ------------------------------------------------------------------------------------------------
def _raw_frame(n=400, seed=0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "z": rng.exponential(size=n),
            "city": rng.choice(["a", "b", "c"], n).astype(object),
            "flag": rng.random(n) < 0.4,
        }
    )
    X.loc[::11, "z"] = np.nan
    X.loc[::13, "city"] = None
    return X


def test_protocol_defaults_are_issue_11s():
    from ensemblize.tabular import GBDTClassifier

    assert DEFAULT_PARAMS["xgboost"]["max_rounds"] == DEFAULT_PARAMS["catboost"]["max_rounds"] == 4000
    assert DEFAULT_PARAMS["xgboost"]["learning_rate"] == DEFAULT_PARAMS["catboost"]["learning_rate"] == 0.05
    p = GBDTClassifier().get_params()
    assert (p["learning_rate"], p["max_rounds"], p["early_stopping_rounds"], p["impute"]) == (
        0.05,
        4000,
        50,
        True,
    )


@pytest.mark.parametrize("kind", ["xgboost", "catboost"])
def test_raw_frames_with_nan_and_categoricals(kind):
    from ensemblize.tabular import GBDTClassifier, GBDTRegressor

    X = _raw_frame()
    y = np.where(X["x"] + (X["city"] == "b") > 0.2, "yes", "no")
    clf = GBDTClassifier(kind=kind, max_rounds=60, random_state=0).fit(X, y)
    assert clf.preprocessor_.indicators_ == ["z"] and clf.preprocessor_.categories_["city"][-1] == "<missing>"
    p = clf.predict_proba(X)
    assert p.dtype == np.float64 and np.abs(p.sum(1) - 1).max() <= 1e-12
    assert clf.score(X, y) > 0.85 and 0 <= clf.best_iteration_ < 60
    # the same column read the same way whatever its dtype at predict time
    np.testing.assert_array_equal(clf.predict_proba(X.assign(flag=X["flag"].astype(int))), p)
    target = X["x"].to_numpy() * 5 + 100
    reg = GBDTRegressor(kind=kind, max_rounds=100, random_state=0).fit(X, target)
    rmse = np.sqrt(np.mean((reg.predict(X) - target) ** 2))
    assert rmse < 0.5 * target.std()
    with pytest.raises(ValueError, match="kind"):
        GBDTRegressor(kind="lightgbm").fit(X, target)
    with pytest.raises(ValueError, match="NaN.*z"):
        GBDTRegressor(kind=kind, impute=False).fit(X, target)


@pytest.mark.parametrize(
    ("random_state", "error"), [("0", TypeError), (True, TypeError), (1.5, TypeError), (-1, ValueError)]
)
def test_bad_random_state_or_params_are_named(random_state, error):
    from ensemblize.tabular import GBDTRegressor

    X = _raw_frame()
    target = X["x"].to_numpy()
    with pytest.raises(error, match=rf"random_state.*got {re.escape(repr(random_state))}"):
        GBDTRegressor(max_rounds=5, random_state=random_state).fit(X, target)
    with pytest.raises(TypeError, match="params must be a dict or None, got list"):
        GBDTRegressor(max_rounds=5, params=[1]).fit(X, target)
    # None, an int >= 0 and a RandomState are all accepted
    for ok in (None, 0, np.int64(7), np.random.RandomState(0)):
        GBDTRegressor(max_rounds=5, random_state=ok).fit(X, target)


@pytest.mark.parametrize("cls_name", ["GBDTClassifier", "GBDTRegressor"])
def test_sklearn_check_estimator_passes_in_full(cls_name):
    import warnings

    from sklearn.utils import estimator_checks as E

    import ensemblize.tabular as tabular

    cls = getattr(tabular, cls_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = E.check_estimator(cls(max_rounds=30, random_state=0), on_fail=None, on_skip=None)
    assert not [(r["check_name"], repr(r["exception"])) for r in results if r["status"] == "failed"]


def test_params_naming_an_estimator_argument_or_an_unknown_xgboost_key_are_errors():
    pytest.importorskip("xgboost")
    from ensemblize.tabular.gbdt import GBDTClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=80), "b": rng.choice(["x", "y"], 80)})
    y = (X["a"] > 0).astype(int)
    for key, arg in (
        ("learning_rate", "learning_rate"),
        ("max_rounds", "max_rounds"),
        ("n_estimators", "max_rounds"),
        ("eta", "learning_rate"),  # xgboost's alias: it used to lose to learning_rate without a word
        ("seed", "random_state"),  # it used to change the model behind seed_
        ("num_boost_round", "max_rounds"),
    ):
        with pytest.raises(ValueError, match=rf"params \['{key}'\] are the estimator's own.*pass {arg}="):
            GBDTClassifier(kind="xgboost", max_rounds=5, params={key: 3}).fit(X, y)
    with pytest.raises(ValueError, match=r"xgboost does not know the params \['max_dpeth'\]"):
        GBDTClassifier(kind="xgboost", max_rounds=5, random_state=0, params={"max_dpeth": 2}).fit(X, y)
    GBDTClassifier(kind="xgboost", max_rounds=5, random_state=0, params={"max_depth": 2}).fit(X, y)
    # xgboost's native "lambda" lost to the wrapper's default reg_lambda without a word
    with pytest.raises(ValueError, match=r"params \['lambda'\] would be overridden .*'reg_lambda'"):
        GBDTClassifier(kind="xgboost", max_rounds=5, random_state=0, params={"lambda": 50.0}).fit(X, y)


def test_a_regressors_objective_may_be_changed_and_misspelt_catboost_params_are_named():
    """``params`` overrides the wrapper's task settings for regression (it raised the engines'
    "multiple values for keyword argument" TypeError); a classifier's objective is fixed (its
    probabilities); a CatBoost key it does not take is named with the nearest spelling."""
    from sklearn.datasets import load_diabetes, load_iris

    from ensemblize.tabular.gbdt import GBDTClassifier, GBDTRegressor

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    X, y = X[:150], y[:150]
    xgb = GBDTRegressor(
        kind="xgboost", params={"objective": "reg:absoluteerror", "eval_metric": "mae"}, max_rounds=20
    )
    assert xgb.fit(X, y).booster_.model.get_params()["objective"] == "reg:absoluteerror"
    cb = GBDTRegressor(kind="catboost", params={"loss_function": "MAE"}, max_rounds=20).fit(X, y)
    assert cb.booster_.model.get_params()["loss_function"] == "MAE"
    with pytest.raises(
        ValueError, match=r"catboost does not know the params \['max_dept'\].*did you mean 'max_depth'"
    ):
        GBDTRegressor(kind="catboost", params={"max_dept": 5}, max_rounds=20).fit(X, y)
    with pytest.raises(
        ValueError, match=r"params \['loss_function'\] = 'Tweedie:variance_power=1.5' needs a positive"
    ):
        GBDTRegressor(
            kind="catboost", params={"loss_function": "Tweedie:variance_power=1.5"}, max_rounds=20
        ).fit(X, y)
    Xi, yi = load_iris(return_X_y=True, as_frame=True)
    cb = GBDTClassifier(
        kind="catboost", params={"objective": "MultiClass"}, max_rounds=5
    )  # its alias, same loss
    assert cb.fit(Xi, yi).predict_proba(Xi).shape == (150, 3)
    with pytest.raises(
        ValueError, match=r"params \['objective'\]: a xgboost classifier trains with 'multi:softprob'"
    ):
        GBDTClassifier(kind="xgboost", params={"objective": "multi:softmax"}, max_rounds=20).fit(Xi, yi)
