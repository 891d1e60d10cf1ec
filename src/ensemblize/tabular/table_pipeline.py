"""What every tabular estimator does around its model: raw-table input, validation split, preprocessing.

:class:`TablePipeline` is the scikit-learn base of the network estimators
(:mod:`ensemblize.tabular.estimator_base`) and the GBDT wrappers (:mod:`ensemblize.tabular.gbdt`), so
all of them read a raw DataFrame by the same rules:

1. ``X``: a pandas DataFrame (numbers, strings, bools, categories, datetimes, NaN) or a 2-D array
   (columns ``x0, x1, …``); never modified; sparse input and MultiIndex columns are errors saying so.
   ``y`` of shape ``(N, 1)`` is flattened with scikit-learn's ``DataConversionWarning``.
2. validation rows: ``eval_set=(X_val, y_val)``, or a seeded ``val_fraction`` split (stratified for
   classification where every class fits; a class seen on one row always stays in training —
   :func:`ensemblize.tabular.holdout.holdout_indices`).
3. :class:`ensemblize.data.table_preprocessing.TabularPreprocessor` fitted on the training rows
   (``impute=True`` by default: median + missing indicator / missing category; column kinds fixed so
   a column keeps its meaning whatever dtype it arrives in later; datetimes as seconds).

Subclasses set ``_regression`` and store ``impute``, ``random_state`` and ``val_fraction``.
"""

from __future__ import annotations

import inspect
from numbers import Integral
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from ensemblize._checks import check_bool, check_int
from ensemblize.data.table_preprocessing import TabularPreprocessor
from ensemblize.tabular.holdout import holdout_indices
from ensemblize.tabular.inputs import as_frame, as_target, check_real

__all__ = ["TablePipeline", "estimator_init"]


def estimator_init(defaults: dict[str, Any]):
    """An ``__init__`` taking exactly ``defaults``' names as keyword-only arguments and storing them.

    scikit-learn reads an estimator's hyper-parameters from its ``__init__`` signature; this builds
    that signature once from a dict (shown by ``help``/``inspect``), so the estimator families share
    one list of training parameters instead of repeating it. Unknown names and positional
    arguments are a TypeError, as with a hand-written keyword-only ``__init__``.
    """
    kind = inspect.Parameter.KEYWORD_ONLY
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, kind, default=value) for name, value in defaults.items()]
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for name in defaults:
            setattr(self, name, bound.arguments[name])

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    return __init__


def _align_columns(frame: pd.DataFrame, columns: list[str], *, name: str, fitted_as: str) -> pd.DataFrame:
    """``frame``'s columns matched to the fitted ``columns`` (strings) by name, in the fitted order.

    Names compare as strings, so integer column names (which scikit-learn's own name check skips)
    are matched by name too: a reordered frame is put back in order, never read by position. (At
    ``predict``, scikit-learn's check runs first and rejects string names in another order —
    "Feature names must be in the same order as they were in fit" — as ``check_estimator``
    requires; ``eval_set`` and integer names reach this function and are reordered.) A frame
    whose names are not the fitted ones is read by position only when none of them is a fitted name
    (e.g. a frame built from an array after fitting on an array); a partial match is a ValueError
    naming the missing and unexpected columns.
    """
    names = [str(c) for c in frame.columns]
    if names == columns:
        return frame if all(isinstance(c, str) for c in frame.columns) else frame.set_axis(names, axis=1)
    if set(names) == set(columns):  # (names are unique: as_frame checked them)
        return frame.set_axis(names, axis=1)[columns]
    missing = [c for c in columns if c not in names]
    unexpected = [c for c in names if c not in columns]
    if len(missing) == len(columns):
        return frame.set_axis(columns, axis=1)  # no shared name: by position
    raise ValueError(
        f"{name} does not match the columns of {fitted_as}: missing {missing}, unexpected {unexpected}"
    )


class TablePipeline(BaseEstimator):
    """Input checks, validation split and preprocessing shared by the tabular estimators (module docstring)."""

    _regression: ClassVar[bool] = False

    def _validate_pipeline_params(self) -> None:
        check_real(self.val_fraction, "val_fraction", low=0.0, low_open=True, high=1.0)
        check_bool(self.impute, name="impute")
        if self.random_state is not None and not isinstance(self.random_state, np.random.RandomState):
            rs = check_int(self.random_state, name="random_state (None, a RandomState or an int)", minimum=0)
            if rs > 2**32 - 1:  # scikit-learn's seed range (a modulo used to make 2**31 train exactly as 0)
                raise ValueError(
                    f"random_state (None, a RandomState or an int) must be <= 2**32 - 1, got {rs}"
                )

    # -- scikit-learn glue ---------------------------------------------------------------------
    def __sklearn_tags__(self):
        """scikit-learn tags: string / categorical columns are accepted; NaN unless ``impute=False``."""
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = bool(self.impute)
        tags.non_deterministic = self.random_state is None
        return tags

    def _forget_fit(self) -> None:
        """Delete the attributes of an earlier fit (those ending in ``_``; parameters never do), so a
        refit that fails part-way leaves an unfitted estimator rather than a mix of two fits."""
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("__")]:
            delattr(self, attr)

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, Integral) and not isinstance(rs, bool):
            return int(rs)  # in [0, 2**32 - 1]: _validate_pipeline_params
        from sklearn.utils import check_random_state

        return int(check_random_state(rs).randint(2**31 - 1))

    @property
    def _task(self) -> str:
        if self._regression:
            return "regression"
        return "binclass" if len(self.classes_) == 2 else "multiclass"

    # -- fit -----------------------------------------------------------------------------------
    def _check_fit_input(self, X: Any, y: Any) -> tuple[pd.DataFrame, np.ndarray]:
        frame = as_frame(X, name="X")
        n = len(frame)
        yarr = as_target(y, name="y", n=n)
        if n < 2:
            raise ValueError(f"X must have at least 2 rows, got n_samples = {n}")
        if frame.shape[1] == 0:
            raise ValueError(f"0 feature(s) (shape=({n}, 0)) while a minimum of 1 is required.")
        probe = frame if isinstance(X, pd.DataFrame) else np.empty((1, frame.shape[1]))
        validate_data(self, probe, reset=True, skip_check_array=True)  # n_features_in_, feature_names_in_
        if any(not isinstance(c, str) for c in frame.columns):
            frame = frame.rename(columns=str)
        if self._regression:
            _check_regression_target(yarr, name="a regression target y")
        if not self._regression:
            from sklearn.utils.multiclass import type_of_target

            if np.issubdtype(yarr.dtype, np.floating) and not np.isfinite(yarr).all():
                raise ValueError("y holds NaN or infinity; class labels must be finite")

            kind = type_of_target(yarr)
            if kind not in ("binary", "multiclass"):
                raise ValueError(f"Unknown label type: {kind!r}; y must hold class labels for a classifier")
            self.classes_ = np.unique(yarr)
            if len(self.classes_) < 2:
                raise ValueError(f"y has a single class {self.classes_.tolist()}; need at least 2 classes")
        return frame, yarr

    def _validation_split(self, frame, yarr, eval_set, seed):
        if eval_set is not None:
            if not isinstance(eval_set, (tuple, list)) or len(eval_set) != 2:
                raise TypeError(f"eval_set must be a pair (X_val, y_val), got {type(eval_set).__name__}")
            va_frame = self._frame_for_eval(eval_set[0], frame)
            if len(va_frame) == 0:
                raise ValueError("eval_set X has 0 rows; early stopping needs at least 1 validation row")
            return (
                frame,
                yarr,
                va_frame,
                as_target(eval_set[1], name="eval_set y", n=len(va_frame), x_name="eval_set X"),
            )
        n = len(frame)
        n_val = max(1, int(round(self.val_fraction * n)))
        if n - n_val < 2:
            raise ValueError(
                f"X has {n} rows; holding out val_fraction={self.val_fraction} ({n_val} row(s)) for "
                f"validation leaves {n - n_val} training row(s), fewer than 2; pass more rows or "
                "eval_set=(X_val, y_val)"
            )
        try:  # a class seen on one row stays in training (it could never be predicted otherwise)
            tr_idx, va_idx = holdout_indices(yarr, n_holdout=n_val, seed=seed, classify=not self._regression)
        except ValueError as err:
            raise ValueError(
                f"val_fraction={self.val_fraction}: {err}; pass eval_set=(X_val, y_val)"
            ) from None
        return frame.iloc[tr_idx], yarr[tr_idx], frame.iloc[va_idx], yarr[va_idx]

    def _frame_for_eval(self, X_val: Any, train_frame: pd.DataFrame) -> pd.DataFrame:
        frame = as_frame(X_val, name="eval_set X")
        if frame.shape[1] != train_frame.shape[1]:
            raise ValueError(f"eval_set X has {frame.shape[1]} features, but X has {train_frame.shape[1]}")
        if not isinstance(X_val, pd.DataFrame):
            return frame.set_axis(list(train_frame.columns), axis=1)
        return _align_columns(frame, list(train_frame.columns), name="eval_set X", fitted_as="X")

    def _encode_y(self, y: np.ndarray, *, name: str) -> np.ndarray:
        """Target -> int64 class indices or float32 standardised values, errors naming ``name``."""
        if self._regression:
            _check_regression_target(y, name=f"{name} (regression)")
            if not np.isfinite(y.astype(np.float64)).all():
                raise ValueError(f"{name} contains inf")
            return self.preprocessor_.transform_target(y)
        lookup = {v: i for i, v in enumerate(self.classes_.tolist())}
        unknown = [v for v in pd.unique(y).tolist() if v not in lookup]
        if unknown:
            raise ValueError(
                f"{name} has label {unknown[0]!r} that is not among the training classes {self.classes_.tolist()}"
            )
        return np.fromiter((lookup[v] for v in y.tolist()), dtype=np.int64, count=len(y))

    # -- predict -------------------------------------------------------------------------------
    def _frame_for_predict(self, X: Any) -> pd.DataFrame:
        frame = as_frame(X, name="X")
        probe = frame if isinstance(X, pd.DataFrame) else np.empty((1, frame.shape[1]))
        validate_data(self, probe, reset=False, skip_check_array=True)  # feature names / count
        if len(frame) == 0:
            raise ValueError(f"X has 0 rows (shape {frame.shape}); predicting needs at least 1 sample")
        columns = self.preprocessor_.columns_
        if not isinstance(X, pd.DataFrame):
            return frame.set_axis(columns, axis=1)  # an array: by position
        return _align_columns(frame, columns, name="X", fitted_as="the training X")

    @staticmethod
    def _index(X: Any) -> pd.Index | None:
        return X.index if isinstance(X, pd.DataFrame) else None

    def _preprocess(self, frame: pd.DataFrame, yarr: np.ndarray, eval_set: Any, seed: int):
        """Split, fit ``preprocessor_`` on the training rows and encode both parts.

        Returns ``(x_train, t_train, x_val, t_val)``: float32 feature matrices and int64 class
        indices / float32 standardised targets.
        """
        tr_frame, y_tr, va_frame, y_va = self._validation_split(frame, yarr, eval_set, seed)
        if not self.impute:  # counted over what the caller passed, before the split hides some rows
            _refuse_missing(frame, name="X")
            if eval_set is not None:
                _refuse_missing(va_frame, name="eval_set X")
        prep = TabularPreprocessor(task=self._task, seed=seed, impute=bool(self.impute))
        prep.fit(tr_frame, y_tr if self._regression else None)  # warnings under the user's filters
        self.preprocessor_ = prep
        if prep.n_features_out_ == 0:
            raise ValueError(f"every column is constant on the training rows: dropped {prep.dropped_}")
        val_name = "eval_set y" if eval_set is not None else "y"
        return (
            prep.transform(tr_frame),
            self._encode_y(y_tr, name="y"),
            prep.transform(va_frame),
            self._encode_y(y_va, name=val_name),
        )

    def _transform_for_predict(self, X: Any, *, fitted: str) -> np.ndarray:
        """Checked, preprocessed prediction rows ``(N, n_features_out_)`` float32."""
        check_is_fitted(self, fitted)
        return self.preprocessor_.transform(self._frame_for_predict(X), warn_unknown=True)


def _check_regression_target(y: np.ndarray, *, name: str) -> None:
    """TypeError unless ``y`` holds real numbers (integers or floats; not bool, complex, dates or durations)."""
    kind = y.dtype.kind
    if kind in "iuf":
        return
    if kind == "m":
        raise TypeError(
            f"Unknown label type: {name} holds durations ({y.dtype}); a duration's number depends on its "
            "unit, which predictions could not carry: convert it to numbers in a unit you choose, e.g. "
            "y.dt.total_seconds()"
        )
    hint = "; convert text with pd.to_numeric" if kind in "OUS" else ""
    raise TypeError(f"Unknown label type: {name} must be numeric, got dtype {y.dtype}{hint}")


def _refuse_missing(frame: pd.DataFrame, *, name: str) -> None:
    """With ``impute=False``: a ValueError naming every column of ``frame`` holding a missing value,
    with its count over all of ``frame``'s rows."""
    counts = {str(c): int(n) for c, n in frame.isna().sum().items() if n}
    if counts:
        raise ValueError(
            f"missing values (NaN) in column(s) {list(counts)} of {name} (counts {counts}); impute=True "
            "fills them (numeric: training median plus a missing indicator; categorical: a missing category)"
        )
