"""Gradient-boosted tree baselines (XGBoost, CatBoost) on the same splits and arrays as the networks.

Both take the preprocessed matrices of :func:`ensemblize.data.tabular.prepare` — numeric features
quantile-transformed, categoricals one-hot (CatBoost gets the same one-hot matrix rather than its
native categorical handling, so that every method sees identical inputs) — and the same target
conventions: standardised regression targets, class indices ``0..C-1``. Predictions come back in
the library's conventions: probabilities ``(N, C)`` for classification, ``(N,)`` on the
standardised scale for regression.

Training uses early stopping on the validation split: learning rate 0.05, at most 4,000 rounds,
stopping after 50 rounds without improvement of the validation loss (RMSE / log-loss), and the best
round is kept (issue 11's benchmark protocol).
One thread each by default (``n_jobs`` / ``thread_count``): on a small shared machine XGBoost with
two contended threads ran about 20x slower than with one.
The other hyperparameters are **default-tuned** — sensible library-style defaults written below —
*not* the per-dataset tuned settings of the TabM paper, so expect slightly worse numbers than the
paper's tuned GBDTs. ``params`` overrides any of them (and ``max_rounds`` / ``early_stopping_rounds``),
and the task settings the wrapper chooses (:data:`_TASK_SETTINGS`): a regressor's objective / loss and
every model's validation metric; a classifier's objective stays (``predict_proba`` returns its
probabilities). A CatBoost key it does not take, or an XGBoost key it ignores, is a ValueError.

:class:`GBDTClassifier` / :class:`GBDTRegressor` wrap :func:`fit_gbdt` as scikit-learn estimators on
**raw DataFrames**, with exactly the network estimators' input rules and preprocessing
(:class:`ensemblize.tabular.table_pipeline.TablePipeline`: missing values imputed with indicators,
categoricals one-hot with a missing category, stable column meaning, datetimes as seconds, the same
seeded validation split or ``eval_set``), so the benchmark compares models, not preprocessing.

Both libraries are optional: ``pip install ensemblize[gbdt]``.
"""

from __future__ import annotations

import difflib
import inspect
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ensemblize._checks import check_bool, check_choice, check_instance, check_int
from ensemblize.data.tables import TASKS
from ensemblize.tabular.inputs import check_real
from ensemblize.tabular.table_pipeline import TablePipeline, estimator_init

__all__ = [
    "GBDT_KINDS",
    "DEFAULT_PARAMS",
    "GBDTModel",
    "fit_gbdt",
    "predict_gbdt",
    "GBDTClassifier",
    "GBDTRegressor",
]

GBDT_KINDS = ("xgboost", "catboost")

DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "xgboost": {
        "max_rounds": 4000,
        "early_stopping_rounds": 50,
        "learning_rate": 0.05,
        "max_depth": 6,
        "min_child_weight": 1.0,
        "subsample": 0.8,
        "colsample_bytree": 0.8,
        "reg_lambda": 1.0,
        "tree_method": "hist",
        "n_jobs": 1,
    },
    "catboost": {
        "max_rounds": 4000,
        "early_stopping_rounds": 50,
        "learning_rate": 0.05,
        "depth": 6,
        "l2_leaf_reg": 3.0,
        "thread_count": 1,
    },
}
"""The default-tuned settings (not the paper's tuned ones); ``max_rounds`` is the round budget."""


@dataclass
class GBDTModel:
    """A fitted booster plus what is needed to predict in the library's conventions.

    Attributes:
        kind: ``"xgboost"`` or ``"catboost"``.
        task: ``"regression"``, ``"binclass"`` or ``"multiclass"``.
        model: the library's fitted estimator (``xgboost.XGBRegressor`` / ``XGBClassifier`` or
            ``catboost.CatBoostRegressor`` / ``CatBoostClassifier``).
        n_classes: number of classes (None for regression).
        best_iteration: the round kept by early stopping (0-based).
        train_seconds: wall-clock seconds of ``fit``.
        params: the merged parameters actually used.
    """

    kind: str
    task: str
    model: Any
    n_classes: int | None
    best_iteration: int
    train_seconds: float
    params: dict[str, Any] = field(default_factory=dict)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Probabilities ``(N, C)`` for classification; standardised-scale outputs ``(N,)`` for regression."""
        return predict_gbdt(self, X)


def _import(kind: str) -> Any:
    name = {"xgboost": "xgboost", "catboost": "catboost"}[kind]
    try:
        return __import__(name)
    except ImportError as exc:
        raise ImportError(
            f"{kind} is not installed; it is an optional extra: pip install ensemblize[gbdt]"
        ) from exc


def _check_xy(X: Any, y: Any, *, task: str, part: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"X_{part} must be 2-D (N, D), got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number) or X.dtype == bool:
        raise TypeError(f"X_{part} must be a numeric array (the preprocessed matrix), got dtype {X.dtype}")
    if y.shape != (X.shape[0],):
        raise ValueError(f"y_{part} must have shape ({X.shape[0]},), got {y.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"X_{part} contains NaN or inf; preprocess (impute) first")
    if task == "regression":
        if not np.issubdtype(y.dtype, np.floating):
            raise TypeError(f"regression y_{part} must be float (standardised target), got dtype {y.dtype}")
        if not np.isfinite(y).all():
            raise ValueError(f"y_{part} contains NaN or inf")
    elif not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
        raise ValueError(f"classification y_{part} must hold class indices 0..C-1, got dtype {y.dtype}")
    return X, y


def fit_gbdt(
    kind: str,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_val: np.ndarray,
    y_val: np.ndarray,
    *,
    task: str,
    seed: int,
    params: dict[str, Any] | None = None,
    n_classes: int | None = None,
    refit_full: bool = False,
) -> GBDTModel:
    """Fit an XGBoost or CatBoost model with early stopping on ``(X_val, y_val)``.

    ``refit_full=True``: after early stopping has chosen the round count, fit a new model on training
    + validation rows for that many rounds (no early stopping; the LoMETab estimators' ``refit_full``
    for boosting). Its validation scores are then on rows it trained on.

    Args:
        kind: ``"xgboost"`` or ``"catboost"``.
        X_train, X_val: preprocessed float matrices ``(N, D)``.
        y_train, y_val: standardised float targets (regression) or int class indices.
        task: ``"regression"``, ``"binclass"`` or ``"multiclass"``.
        seed: the library's random seed.
        params: overrides of :data:`DEFAULT_PARAMS` (library keyword names, plus ``max_rounds``
            and ``early_stopping_rounds``).
        n_classes: number of classes (default: ``max label + 1`` over train and val; 2 for binclass).

    Returns:
        a :class:`GBDTModel`; ``.predict(X)`` gives probabilities ``(N, C)`` or outputs ``(N,)``.

    Raises:
        ImportError: the library is missing (``pip install ensemblize[gbdt]``).
        ValueError / TypeError: unknown kind or task, bad shapes or dtypes, labels out of range.
    """
    check_choice(kind, GBDT_KINDS, name="kind")
    check_choice(task, TASKS, name="task")
    seed = check_int(seed, name="seed", minimum=0)
    refit_full = check_bool(refit_full, name="refit_full")
    check_instance(params, (dict, type(None)), name="params", what="a dict or None")
    X_train, y_train = _check_xy(X_train, y_train, task=task, part="train")
    X_val, y_val = _check_xy(X_val, y_val, task=task, part="val")
    if X_val.shape[1] != X_train.shape[1]:
        raise ValueError(f"X_val has {X_val.shape[1]} columns but X_train has {X_train.shape[1]}")
    if task != "regression":
        seen = int(max(y_train.max(), y_val.max())) + 1
        if n_classes is None:
            n_classes = 2 if task == "binclass" else seen
        if task == "binclass" and n_classes != 2:
            raise ValueError(f"binclass needs n_classes=2, got {n_classes}")
        if seen > n_classes:
            raise ValueError(f"labels go up to {seen - 1} but n_classes={n_classes}")
        if task == "multiclass" and n_classes < 3:
            raise ValueError(f"multiclass needs n_classes >= 3, got {n_classes}")
        absent = sorted(set(range(n_classes)) - set(np.unique(y_train).tolist()))
        if absent:
            raise ValueError(f"classes {absent} never occur in y_train; every class 0..{n_classes - 1} must")
    else:
        n_classes = None

    merged = {**DEFAULT_PARAMS[kind], **(params or {})}
    lib = _import(kind)
    rounds = int(merged.pop("max_rounds"))
    patience = int(merged.pop("early_stopping_rounds"))
    start = time.perf_counter()
    if kind == "xgboost":
        model, best = _fit_xgboost(
            lib, X_train, y_train, X_val, y_val, task, int(seed), merged, rounds, patience
        )
    else:
        model, best = _fit_catboost(
            lib, X_train, y_train, X_val, y_val, task, int(seed), merged, rounds, patience
        )
    if refit_full:
        x_all, y_all = np.concatenate([X_train, X_val]), np.concatenate([y_train, y_val])
        model = _refit(lib, kind, task, x_all, y_all, int(seed), merged, int(best) + 1)
    seconds = time.perf_counter() - start
    used = {**merged, "max_rounds": rounds, "early_stopping_rounds": patience, "refit_full": refit_full}
    return GBDTModel(kind, task, model, n_classes, int(best), seconds, used)


def _refit(lib, kind, task, X, y, seed, params, rounds):
    """The same booster fitted on ``(X, y)`` for exactly ``rounds`` rounds, without early stopping."""
    if kind == "xgboost":
        model = _xgb_model(lib, task, seed, params, n_estimators=rounds)
        model.fit(X, y, verbose=False)
    else:
        model = _cb_model(lib, task, seed, params, iterations=rounds)
        model.fit(X, y)
    return model


def _fit_xgboost(xgb, X_tr, y_tr, X_va, y_va, task, seed, params, rounds, patience):
    native = sorted(set(params) & set(_XGB_NATIVE))
    if native:  # the default under the scikit-learn name won without a word
        raise ValueError(
            f"xgboost params {native} would be overridden by this wrapper's defaults for "
            + ", ".join(f"{_XGB_NATIVE[k]!r}" for k in native)
            + ": pass them under those names"
        )
    # verbosity 1: warnings only; an unused (misspelt) parameter is turned into an error below
    model = _xgb_model(xgb, task, seed, params, n_estimators=rounds, early_stopping_rounds=patience)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X_tr, y_tr, eval_set=[(X_va, y_va)], verbose=False)
    for w in caught:
        text = str(w.message)
        if "are not used" in text:
            unused = re.findall(r'"([^"]+)"', text)
            raise ValueError(
                f"xgboost does not know the params {unused}; check their spelling (xgboost's names)"
            )
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model, model.best_iteration


#: per engine: the task settings the wrapper chooses (``params`` may override them for regression, and
#: the validation metric for every task; a classifier's objective must give the probabilities it returns)
_TASK_SETTINGS = {
    "xgboost": {
        "regression": {"objective": "reg:squarederror", "eval_metric": "rmse"},
        "binclass": {"objective": "binary:logistic", "eval_metric": "logloss"},
        "multiclass": {"objective": "multi:softprob", "eval_metric": "mlogloss"},
    },
    "catboost": {
        "regression": {"loss_function": "RMSE"},
        "binclass": {"loss_function": "Logloss"},
        "multiclass": {"loss_function": "MultiClass"},
    },
}
_OBJECTIVE_KEYS = ("objective", "loss_function")


#: regression objectives that need a positive (or count) target, per engine: the wrapper trains on the
#: standardised target, which has negative values (CatBoost's are matched before any ``:`` parameter)
_POSITIVE_TARGET_OBJECTIVES = {
    "xgboost": frozenset({"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft"}),
    "catboost": frozenset({"Poisson", "Tweedie"}),
}


def _task_settings(kind: str, task: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The wrapper's task settings of ``kind`` updated by ``params``; a classifier's objective is fixed,
    and a regressor's may not need a positive target."""
    own = _TASK_SETTINGS[kind][task]
    objective = own.get("objective", own.get("loss_function"))
    given = {k: params[k] for k in _OBJECTIVE_KEYS if k in params}  # CatBoost takes either name
    if task != "regression":
        fixed = sorted(k for k, v in given.items() if v != objective)
        if fixed:
            raise ValueError(
                f"params {fixed}: a {kind} classifier trains with {objective!r} here (predict_proba "
                "returns its probabilities); only a regressor's objective may be changed"
            )
    else:
        names = {
            k: (v.split(":")[0] if kind == "catboost" else v) for k, v in given.items() if isinstance(v, str)
        }
        positive = sorted(k for k, name in names.items() if name in _POSITIVE_TARGET_OBJECTIVES[kind])
        if positive:
            raise ValueError(
                f"params {positive} = {given[positive[0]]!r} needs a positive target, but the regressor trains "
                "on the standardised target (mean 0, std 1); use an objective for real-valued targets"
            )
    if "objective" in given and "loss_function" in own:  # CatBoost's alias replaces the wrapper's loss
        own = {k: v for k, v in own.items() if k != "loss_function"}
    return {**own, **params}


def _xgb_model(xgb, task, seed, params, **rounds):
    """An unfitted XGBoost model for ``task`` (objective and metric, which ``params`` may override for
    regression), seeded, with ``rounds`` settings."""
    kwargs = {"random_state": seed, "verbosity": 1, **rounds, **_task_settings("xgboost", task, params)}
    return (xgb.XGBRegressor if task == "regression" else xgb.XGBClassifier)(**kwargs)


def _cb_model(cb, task, seed, params, **rounds):
    """An unfitted CatBoost model for ``task`` (loss, which ``params`` may override for regression),
    seeded and silent, with ``rounds`` settings. A key CatBoost does not take is a ValueError."""
    cls = cb.CatBoostRegressor if task == "regression" else cb.CatBoostClassifier
    known = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(params) - known)
    if unknown:
        hints = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
        hint = "; ".join(f"{k!r}: did you mean {m[0]!r}?" for k, m in hints.items() if m)
        raise ValueError(
            f"catboost does not know the params {unknown}; check their spelling (catboost's names)"
            + (f" — {hint}" if hint else "")
        )
    own = {"random_seed": seed, "verbose": False, "allow_writing_files": False, **rounds}
    return cls(**{**own, **_task_settings("catboost", task, params)})


def _fit_catboost(cb, X_tr, y_tr, X_va, y_va, task, seed, params, rounds, patience):
    model = _cb_model(
        cb, task, seed, params, iterations=rounds, early_stopping_rounds=patience, use_best_model=True
    )
    model.fit(X_tr, y_tr, eval_set=(X_va, y_va))
    return model, model.get_best_iteration()


def predict_gbdt(model: GBDTModel, X: np.ndarray) -> np.ndarray:
    """Predict with a :class:`GBDTModel` (the best early-stopping round).

    Returns probabilities ``(N, C)`` (float64, rows sum to 1) for classification and ``(N,)``
    outputs on the standardised target scale for regression.
    """
    check_instance(model, GBDTModel, name="model")
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (N, D), got shape {X.shape}")
    n_features = model.model.n_features_in_ if model.kind == "xgboost" else len(model.model.feature_names_)
    if X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} columns but the model was fitted on {n_features}")
    if model.task == "regression":
        return np.asarray(model.model.predict(X), dtype=np.float64).reshape(-1)
    return np.asarray(model.model.predict_proba(X), dtype=np.float64)


# ------------------------------------------------------------------------------------------------
# scikit-learn estimators on raw tables
# ------------------------------------------------------------------------------------------------
_OWN_SETTINGS = {
    "learning_rate": "learning_rate",
    "max_rounds": "max_rounds",
    "early_stopping_rounds": "early_stopping_rounds",
    "n_estimators": "max_rounds",
    "iterations": "max_rounds",
    "random_state": "random_state",
    "random_seed": "random_state",
    # the engines' aliases of the same settings: passed in params they were ignored (xgboost's ``eta``
    # lost to the estimator's learning_rate) or changed the model behind ``seed_`` (``seed``)
    "eta": "learning_rate",
    "seed": "random_state",
    "num_boost_round": "max_rounds",
    "num_trees": "max_rounds",
    "od_wait": "early_stopping_rounds",
}
"""``params`` keys the estimator sets itself (and their aliases), and the estimator argument that sets each."""
_XGB_NATIVE = {"lambda": "reg_lambda", "nthread": "n_jobs"}
"""xgboost's native names of settings :data:`DEFAULT_PARAMS` sets under the scikit-learn name, which wins."""


class _GBDTEstimator(TablePipeline):
    """XGBoost / CatBoost on raw tables; use :class:`GBDTClassifier` or :class:`GBDTRegressor`."""

    __init__ = estimator_init(
        {
            "kind": "xgboost",
            "learning_rate": 0.05,
            "max_rounds": 4000,
            "early_stopping_rounds": 50,
            "params": None,
            "refit_full": False,
            "val_fraction": 0.2,
            "impute": True,
            "random_state": None,
        }
    )

    def _validate_params(self) -> None:
        clash = sorted(set(self.params or {}) & set(_OWN_SETTINGS))
        if clash:
            raise ValueError(
                f"params {clash} are the estimator's own hyper-parameters and would be ignored there: pass "
                + ", ".join(f"{_OWN_SETTINGS[k]}=..." for k in clash)
                + " to the estimator instead"
            )
        check_choice(self.kind, GBDT_KINDS, name="kind")
        check_real(self.learning_rate, "learning_rate", low=0.0, low_open=True)
        check_int(self.max_rounds, name="max_rounds", minimum=1)
        check_int(self.early_stopping_rounds, name="early_stopping_rounds", minimum=1)
        check_instance(self.params, (dict, type(None)), name="params", what="a dict or None")
        check_bool(self.refit_full, name="refit_full")
        self._validate_pipeline_params()

    def fit(self, X: Any, y: Any, eval_set: tuple[Any, Any] | None = None):
        """Fit on a raw ``X`` / ``y``; ``eval_set=(X_val, y_val)`` (else a ``val_fraction`` split) early-stops.

        Fitted attributes: ``preprocessor_``, ``booster_`` (a :class:`GBDTModel`), ``best_iteration_``,
        ``train_seconds_``, ``seed_``, ``n_features_in_``, ``classes_`` (classifier).
        """
        self._validate_params()
        self._forget_fit()
        frame, yarr = self._check_fit_input(X, y)
        self.seed_ = seed = self._seed()
        x_tr, t_tr, x_va, t_va = self._preprocess(frame, yarr, eval_set, seed)
        settings = {
            **(self.params or {}),
            "learning_rate": float(self.learning_rate),
            "max_rounds": int(self.max_rounds),
            "early_stopping_rounds": int(self.early_stopping_rounds),
        }
        n_classes = None if self._regression else len(self.classes_)
        self.booster_ = fit_gbdt(
            self.kind,
            x_tr,
            t_tr,
            x_va,
            t_va,
            task=self._task,
            seed=seed,
            params=settings,
            n_classes=n_classes,
            refit_full=self.refit_full,
        )
        self.best_iteration_ = self.booster_.best_iteration
        self.train_seconds_ = self.booster_.train_seconds
        return self

    def _booster_output(self, X: Any) -> np.ndarray:
        x = self._transform_for_predict(X, fitted="booster_")  # NotFittedError before booster_ is read
        return predict_gbdt(self.booster_, x)


class GBDTClassifier(ClassifierMixin, _GBDTEstimator):
    """XGBoost (``kind="xgboost"``) or CatBoost (``"catboost"``) classifier on raw tables.

    Hyper-parameters (keyword-only): kind ("xgboost"), learning_rate (0.05), max_rounds (4000),
    early_stopping_rounds (50), params (None: :data:`DEFAULT_PARAMS` overrides, library names),
    refit_full (False: True refits on training + validation rows for the early-stopped round count),
    val_fraction (0.2), impute (True), random_state (None). ``predict_proba`` -> float64 ``(N, C)``
    rows summing to 1 (columns in ``classes_`` order); ``predict`` -> labels.
    """

    _regression = False

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, float64 ``(N, C)``, renormalised so rows sum to 1."""
        p = self._booster_output(X)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Labels ``classes_[argmax p]``, shape ``(N,)``."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]


class GBDTRegressor(RegressorMixin, _GBDTEstimator):
    """XGBoost or CatBoost regressor on raw tables, trained on the standardised target.

    Same hyper-parameters as :class:`GBDTClassifier`; ``predict`` returns target units ``(N,)``.
    """

    _regression = True

    def predict(self, X: Any) -> np.ndarray:
        """Predictions in the original target units, shape ``(N,)``."""
        z = self._booster_output(X)
        return self.preprocessor_.inverse_transform_target(z)
