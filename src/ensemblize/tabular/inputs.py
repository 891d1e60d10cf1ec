"""Input conversion and parameter checks for the tabular estimators; every error names the input.

* :func:`as_frame` — ``X`` as a DataFrame view (arrays get columns ``x0, x1, …``): sparse input,
  MultiIndex columns, non-2-D and complex data are errors saying so;
* :func:`as_target` — ``y`` as a 1-D array; ``(N, 1)`` is flattened with scikit-learn's
  ``DataConversionWarning``; NaN is an error saying "NaN";
* :func:`check_real` — a real hyper-parameter in a half-open range, naming it (on top of
  :func:`ensemblize._checks.check_finite_real`; integers, choices and bools use ``_checks`` directly).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import torch

from ensemblize._checks import check_finite_real
from ensemblize.data.table_columns import column_names

__all__ = ["as_frame", "as_target", "check_real"]


def check_real(value: Any, name: str, *, low: float, low_open: bool, high: float = math.inf) -> float:
    """``value`` as a finite float in ``[low, high)`` (``(low, high)`` with ``low_open``), else an error naming ``name``."""
    v = check_finite_real(value, name=name)
    if v < low or (low_open and v == low) or v >= high:
        lo = "(" if low_open else "["
        raise ValueError(f"{name} must lie in {lo}{low}, {high}), got {value!r}")
    return v


def _reject_sparse(X: Any, name: str) -> None:
    import scipy.sparse

    sparse_frame = isinstance(X, pd.DataFrame) and any(isinstance(d, pd.SparseDtype) for d in X.dtypes)
    if scipy.sparse.issparse(X) or sparse_frame or (isinstance(X, torch.Tensor) and X.is_sparse):
        raise TypeError(
            f"{name} is sparse; sparse input is not supported by this estimator — pass a dense array "
            "(X.toarray()) or a DataFrame"
        )


def as_frame(X: Any, *, name: str) -> pd.DataFrame:
    """A DataFrame view of ``X`` (never modified): DataFrames pass through, arrays get columns ``x0…``."""
    _reject_sparse(X, name)
    if isinstance(X, pd.DataFrame):
        if isinstance(X.columns, pd.MultiIndex):
            raise ValueError(
                f"{name} has MultiIndex columns (e.g. {X.columns[0]!r}); flatten them first, e.g. "
                "X.columns = ['_'.join(map(str, c)) for c in X.columns]"
            )
        column_names(X, name=name)  # duplicates are an error
        return X
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    if isinstance(X, (pd.Series, str, bytes)) or X is None:
        raise TypeError(f"{name} must be a 2-D array or a pandas DataFrame, got {type(X).__name__}")
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got an array of shape {arr.shape}. Reshape your "
            "data with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample."
        )
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} has complex dtype {arr.dtype}; Complex data not supported")
    frame = pd.DataFrame(arr, columns=[f"x{i}" for i in range(arr.shape[1])])
    return frame.infer_objects() if arr.dtype == object else frame


def _check_one_label_type(arr: np.ndarray, *, name: str) -> None:
    """A ValueError when an object target mixes strings with other values (``1`` and ``"Adelie"``)."""
    if not pd.api.types.infer_dtype(arr, skipna=True).startswith("mixed"):  # one kind of label (C speed)
        return
    observed = [v for v in arr if not pd.isna(v)]
    strings = [v for v in observed if isinstance(v, str)]
    others = [v for v in observed if not isinstance(v, str)]
    if strings and others:
        kinds = sorted({type(v).__name__ for v in observed})
        raise ValueError(
            f"Unknown label type: {name} mixes label types {kinds} (e.g. {others[0]!r} and {strings[0]!r}); "
            "make every label a string, or every label a number"
        )


def as_target(y: Any, *, name: str, n: int, x_name: str = "X") -> np.ndarray:
    """``y`` as a 1-D array of ``n`` labels / values; ``(n, 1)`` is flattened with a DataConversionWarning."""
    from sklearn.exceptions import DataConversionWarning

    if y is None:
        raise ValueError(f"this estimator requires y to be passed, but the target y is None ({name})")
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            raise ValueError(f"{name} must be 1-D, got a DataFrame with {y.shape[1]} columns")
        y = y.iloc[:, 0].to_numpy()
        warnings.warn(
            f"A column-vector {name} was passed when a 1d array was expected; it is flattened",
            DataConversionWarning,
            stacklevel=3,
        )
    arr = y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y)
    if arr.dtype.kind in "US" and not isinstance(y, np.ndarray):
        # a list mixing numbers and strings: numpy turns 1 into "1"; keep the values as given, so the
        # mixed label types are refused below as they are in an object array or a Series
        as_given = np.asarray(y, dtype=object)
        if any(not isinstance(v, (str, bytes)) for v in as_given.ravel()):
            arr = as_given
    if arr.ndim == 2 and arr.shape[1] == 1:
        warnings.warn(
            f"A column-vector {name} was passed when a 1d array was expected. Please change the shape "
            "of y to (n_samples,), for example using ravel().",
            DataConversionWarning,
            stacklevel=3,
        )
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n_samples,), got shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries but {x_name} has {n} rows")
    if arr.dtype == object and len(arr):
        inferred = pd.Series(arr).infer_objects()  # numbers held in an object array -> their dtype
        if pd.api.types.is_numeric_dtype(inferred.dtype) and not pd.api.types.is_bool_dtype(inferred.dtype):
            arr = inferred.to_numpy()
        elif pd.api.types.infer_dtype(arr, skipna=True) == "decimal":  # SQL NUMERIC via pd.read_sql
            arr = pd.to_numeric(pd.Series(arr), errors="raise").to_numpy(dtype=np.float64)
        else:
            _check_one_label_type(arr, name=name)
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} has complex dtype {arr.dtype}; Complex data not supported")
    if pd.isna(arr).any():
        raise ValueError(f"{name} has {int(pd.isna(arr).sum())} missing value(s) (NaN)")
    return arr
