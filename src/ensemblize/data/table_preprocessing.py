"""The TabM feature / target preprocessing for raw tables, fitted on the training rows only.

:class:`TabularPreprocessor` turns a raw DataFrame (numbers, strings, bools, categories, datetimes,
missing values) into a float32 matrix ``(N, n_numeric_ + Σ cat_cardinalities_)``:

1. **Column kinds** (:mod:`ensemblize.data.table_columns`), fixed at fit time so that a column keeps
   its meaning whatever dtype it arrives in later: numeric columns (numbers; datetimes as seconds
   since 1970; timedeltas as seconds) and categorical columns (bool / number / string categories).
   A column is numeric or categorical by :func:`ensemblize.data.tables.detect_column_types`.
2. **Missing values** (``impute=True``, the default): a numeric NaN is replaced by the column's
   training median, and every numeric column with at least one NaN in the training rows (not all)
   gets a *missing-indicator* feature, 1 where the value was missing. A categorical NaN is its own
   category, :data:`MISSING_CATEGORY`, when the training rows had one (otherwise, at predict time,
   an unseen category). ``impute=False``: any NaN is a ValueError naming the columns and saying "NaN".
3. **Numeric features**: the *noisy quantile transform*. A copy of the training matrix gets Gaussian
   noise with per-feature standard deviation ``noise · min(1, std_j)`` (``noise = 1e-3``; the
   ``noise_hint`` rule of Yandex's ``delu.tabular.NoisyQuantileTransformer``; it only breaks ties
   and is never added at transform time), then scikit-learn's
   ``QuantileTransformer(output_distribution="normal", n_quantiles=max(min(n_train // 30, 1000), 10),
   subsample=10**9, random_state=seed)`` is fitted on it. Only its ``quantiles_`` and
   ``references_`` arrays are kept; :func:`quantile_normal_transform` re-applies scikit-learn's
   interpolation (tested equal to scikit-learn).
4. **Categorical features**: one-hot over the categories seen in training (canonical strings,
   sorted); a category never seen in training gives an **all-zero** block.
5. **Output layout**: the quantile-transformed numeric columns (``numeric_`` order), then one
   one-hot block per categorical column (``categorical_`` order), then one width-1 block per
   missing indicator (``indicators_`` order). ``cat_cardinalities_`` lists the block widths.
6. Constant columns (≤ 1 distinct training value) are dropped and recorded in ``dropped_``; a
   column unique on every training row that is not a float, datetime or timedelta column (an identifier) gives an
   :class:`IdentifierColumnWarning` naming it (from 20 training rows on; an integer column only when
   its values are a dense run or its name says identifier, e.g. ``subject_id``, ``rownames``); a text
   column of ISO 8601 (or year-first slashed) dates gives a :class:`DateStringWarning` (it is read as
   categories unless parsed first); a categorical column with at least 50 levels, more than a fifth of
   the training rows (free text, names), a :class:`ManyLevelsWarning`. At
   predict time (``transform(..., warn_unknown=True)``) categories never seen in training give an
   :class:`UnknownCategoryWarning` naming the columns, and a missing value in a numeric column that
   had none in training (filled with the median, no indicator) an :class:`UnseenMissingValueWarning`. An ``object`` column of integers is read as
   integer codes (categories); with more than 20 of them it gives an :class:`IntegerCategoryWarning`.
   A text column with more than 20 levels, at least 90 % of whose values parse as numbers and not
   all as integers (decimals written as text, perhaps with a marker such as ``"."`` for missing),
   gives a :class:`NumericTextWarning`: it is read as categories, as every string is.
7. **Targets**: regression targets are standardised with the training mean and (population) std
   (a target whose standardisation overflows float64 is a ValueError); classification labels become
   ``0..C-1`` in sorted order.

Its state is a JSON config plus two float arrays (:meth:`TabularPreprocessor.state_dict`), saved
with safetensors + JSON — no pickle. :func:`prepare` splits a table, fits on train and transforms all.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemblize._checks import check_finite_real, check_int, user_stacklevel
from ensemblize.data.table_columns import (
    CATEGORY_KINDS,
    NUMERIC_KINDS,
    category_kind,
    category_values,
    column_names,
    iso_date_strings,
    numeric_kind,
    numeric_values,
    time_zone_aware,
)
from ensemblize.data.tables import TableSplits, TabularDataset, _check_task, detect_column_types, split

__all__ = [
    "MISSING_CATEGORY",
    "IdentifierColumnWarning",
    "UnknownCategoryWarning",
    "UnseenMissingValueWarning",
    "DateStringWarning",
    "ManyLevelsWarning",
    "IntegerCategoryWarning",
    "NumericTextWarning",
    "TabularPreprocessor",
    "PreparedTable",
    "prepare",
    "quantile_normal_transform",
    "as_table_frame",
]

MISSING_CATEGORY = "<missing>"
"""The category a missing categorical value becomes (with ``impute=True``)."""
_BOUNDS_THRESHOLD = 1e-7  # scikit-learn's QuantileTransformer constant
_STATE_VERSION = 2
_ID_MIN_ROWS = 20
#: how an unseen missing value is named in an UnknownCategoryWarning (no missing value in training)
_MISSING_UNSEEN = "a missing value (none in training)"
#: more distinct values than this in an object column of integers (read as codes) gets a warning
_MANY_INTEGER_LEVELS = 20
_MAX_COLUMNS = 1_000_000  # bound on sizes read from a saved config


class IdentifierColumnWarning(UserWarning):
    """A feature column is unique on every training row (an ID): it cannot generalise."""


_NUMBERS_AS_TEXT_KINDS = ("string", "mixed", "mixed-integer", "mixed-integer-float")
"""``pd.api.types.infer_dtype`` kinds of a categorical column that may hold numbers as text, or numbers
beside text markers (:meth:`TabularPreprocessor._warn_numeric_text`)."""


class ManyLevelsWarning(UserWarning):
    """A categorical feature column has a level for more than a fifth of the training rows (free text)."""


#: the fewest levels for which :class:`ManyLevelsWarning` is given
_MANY_LEVELS = 50


class DateStringWarning(UserWarning):
    """A feature column holds ISO 8601 date strings, read as categories: parse it to use it as a time."""


class IntegerCategoryWarning(UserWarning):
    """An ``object`` column of integers with many distinct values is read as categories (integer codes)."""


class NumericTextWarning(UserWarning):
    """A text column whose values are mostly decimal numbers (``"6.745"``) is read as categories."""


class UnknownCategoryWarning(UserWarning):
    """Rows to predict hold a categorical value never seen in training: its one-hot block is all zero."""


class UnseenMissingValueWarning(UserWarning):
    """Rows to predict hold a missing value in a numeric column that had none in training: it is filled
    with the training median, and the model has no missing indicator for that column."""


def quantile_normal_transform(X: np.ndarray, quantiles: np.ndarray, references: np.ndarray) -> np.ndarray:
    """Apply a fitted ``QuantileTransformer(output_distribution="normal")`` from its arrays.

    ``X`` (N, D) float; ``quantiles`` (Q, D) = the transformer's ``quantiles_``; ``references`` (Q,)
    = its ``references_``. Returns (N, D) float64 equal to scikit-learn's ``transform``: per column
    ``u = ½·(interp(x, q, r) − interp(−x, −q[::-1], −r[::-1]))`` (the mean of the upward and the
    downward interpolation, which matters for repeated quantiles), ``u = 0`` where
    ``x − 1e-7 < q[0]``, ``u = 1`` where ``x + 1e-7 > q[-1]``, then ``Φ⁻¹(u)`` clipped to
    ``[Φ⁻¹(1e-7 − ε), Φ⁻¹(1 − (1e-7 − ε))]``.
    """
    from scipy.special import ndtri

    X = np.asarray(X, dtype=np.float64)
    q = np.asarray(quantiles, dtype=np.float64)
    r = np.asarray(references, dtype=np.float64)
    if X.ndim != 2 or q.ndim != 2 or q.shape[1] != X.shape[1] or r.shape != (q.shape[0],):
        raise ValueError(f"shapes do not fit: X {X.shape}, quantiles {q.shape}, references {r.shape}")
    out = np.empty_like(X)
    for j in range(X.shape[1]):  # a loop over features; each step is vectorised over samples
        x, qj = X[:, j], q[:, j]
        u = 0.5 * (np.interp(x, qj, r) - np.interp(-x, -qj[::-1], -r[::-1]))
        u[x + _BOUNDS_THRESHOLD > qj[-1]] = 1.0
        u[x - _BOUNDS_THRESHOLD < qj[0]] = 0.0
        out[:, j] = u
    low = ndtri(_BOUNDS_THRESHOLD - np.spacing(1))
    high = ndtri(1 - (_BOUNDS_THRESHOLD - np.spacing(1)))  # not -low: 1 - t rounds
    with np.errstate(divide="ignore"):
        return np.clip(ndtri(out), low, high)


def as_table_frame(X: Any, *, name: str = "X") -> pd.DataFrame:
    """``X`` as a DataFrame with string column names (never modified; arrays get columns ``x0, x1, …``).

    Raises TypeError for sparse input and anything not 2-D tabular, ValueError for MultiIndex or
    duplicate column names.
    """
    import scipy.sparse

    if scipy.sparse.issparse(X):
        raise TypeError(
            f"{name} is a sparse matrix; sparse input is not supported — pass a dense array "
            "(X.toarray()) or a DataFrame"
        )
    if isinstance(X, pd.DataFrame):
        if isinstance(X.columns, pd.MultiIndex):
            raise ValueError(
                f"{name} has MultiIndex columns {list(X.columns)[:3]}…; flatten them first, e.g. "
                "X.columns = ['_'.join(map(str, c)) for c in X.columns]"
            )
        if any(isinstance(X[c].dtype, pd.SparseDtype) for c in X.columns):
            raise TypeError(
                f"{name} has sparse columns; sparse input is not supported — use X.sparse.to_dense()"
            )
        frame = X
    elif isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {X.shape}")
        frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    else:
        raise TypeError(f"{name} must be a pandas DataFrame or a 2-D NumPy array, got {type(X).__name__}")
    names = column_names(frame, name=name)
    if any(not isinstance(c, str) for c in frame.columns):
        frame = frame.set_axis(names, axis=1)  # a new frame; the caller's keeps its names
    return frame


#: column names that say "identifier": ``id``, ``idx``, ``idno``, ``rownames``, ``subject_id``, ``row.id``,
#: ``index`` alone (not ``price_index``), a CSV's saved index (``Unnamed: 0``, ``Unnamed: 0.1``), and camel
#: case ``CustomerID`` / ``customerIds``
_ID_TOKEN = re.compile(
    r"(?:^|[_\W])(?:id|ids|idx|idno|rownames?|row_?ids?|uuid|guid)$|^(?:index|unnamed: ?\d+(?:\.\d+)?)$",
    re.IGNORECASE,
)
_ID_CAMEL = re.compile(r"[a-z]{2}(?:ID|Id)s?$")


def _id_like(col: pd.Series, *, numeric: bool) -> bool:
    """Whether an all-distinct column looks like a row identifier. Any non-numeric one does; an integer
    one when its values form a dense run (``max − min + 1 ≤ 3·n``, e.g. 1…N split into parts) or its
    name says so (:data:`_ID_TOKEN`, :data:`_ID_CAMEL`: row numbers of a sampled table are no dense run), since integer
    measurements (incomes, weights, populations) are often all distinct on a small table too."""
    if not numeric:
        return True
    if isinstance(col.name, str) and (_ID_TOKEN.search(col.name) or _ID_CAMEL.search(col.name)):
        return True
    values = col.to_numpy(dtype=np.float64)
    return float(values.max() - values.min() + 1) <= 3 * len(values)


class TabularPreprocessor:
    """The TabM feature / target preprocessing for raw tables, fitted on the training split only.

    ``transform(X)`` returns float32 ``(N, n_features_out_)``: the quantile-transformed numeric
    columns, the one-hot blocks, then the missing indicators (see the module docstring for each step;
    nothing here mutates the caller's data).

    Args:
        task: ``"regression"``, ``"binclass"`` or ``"multiclass"`` (decides the target transform).
        seed: seeds the fitting noise and scikit-learn's ``random_state``.
        impute: fill missing values (median + indicator / a missing category) instead of raising.
        noise: relative tie-breaking noise (per-feature std ``noise · min(1, std_j)``); 0 disables.
        n_quantiles: default ``max(min(n_train // 30, 1000), 10)`` (capped at ``n_train``).
    """

    def __init__(
        self,
        *,
        task: str,
        seed: int = 0,
        impute: bool = True,
        noise: float = 1e-3,
        n_quantiles: int | None = None,
    ) -> None:
        self.task = _check_task(task)
        self.seed = check_int(seed, name="seed", minimum=0)
        if not isinstance(impute, (bool, np.bool_)):
            raise TypeError(f"impute must be a bool, got {impute!r}")
        if not 0 <= check_finite_real(noise, name="noise") < 1:
            raise ValueError(f"noise must be a float in [0, 1), got {noise!r}")
        if n_quantiles is not None:
            try:
                n_quantiles = check_int(n_quantiles, name="n_quantiles", minimum=2)
            except TypeError as exc:
                raise ValueError(str(exc)) from None
        self.impute = bool(impute)
        self.noise = float(noise)
        self.n_quantiles = n_quantiles
        self.fitted_ = False

    # -- fitting ------------------------------------------------------------------------------

    def fit(
        self, X: pd.DataFrame | np.ndarray, y: pd.Series | np.ndarray | None = None, *, categorical=None
    ) -> TabularPreprocessor:
        """Fit on training features ``X`` (and training target ``y``, needed to transform targets).

        ``categorical``: exactly the categorical columns (all others must be numeric, datetime or
        timedelta); default: detected by :func:`~ensemblize.data.tables.detect_column_types`.
        """
        X = as_table_frame(X)
        if len(X) < 2:
            raise ValueError(f"need at least 2 training rows, got {len(X)}")
        if categorical is None:
            numeric, cats = detect_column_types(X)
        else:
            forced = {str(c) for c in categorical}
            unknown = sorted(forced - set(X.columns))
            if unknown:
                raise ValueError(
                    f"categorical columns {unknown} are not in the table; columns: {list(X.columns)}"
                )
            numeric = [c for c in X.columns if c not in forced]
            cats = [c for c in X.columns if c in forced]
        self.columns_ = list(X.columns)
        self._check_missing(X, self.columns_)
        self.fill_values_: dict[str, float] = {}
        self.dropped_: dict[str, str] = {}
        self.numeric_kinds_: dict[str, str] = {}
        self.category_kinds_: dict[str, str] = {}
        self.time_zones_: dict[str, bool | None] = {}
        self.categories_: dict[str, list[str]] = {}
        self.indicators_: list[str] = []
        self._fit_numeric(X, numeric)
        for c in cats:
            self._fit_category(X[c], c)
        self.categorical_ = list(self.categories_)
        self._warn_identifiers(X, numeric, cats)
        self._warn_date_strings(X, cats)
        named = self._warn_integer_objects(X, cats) | self._warn_numeric_text(X, cats)
        self._warn_many_levels(X, [c for c in cats if c not in named])
        self.n_train_ = len(X)
        self._fit_quantiles(X)
        self._fit_target(y, n=len(X))
        self.fitted_ = True
        return self

    def _numeric_column(self, X: pd.DataFrame, c: str, kind: str) -> np.ndarray:
        v = numeric_values(X[c], kind)  # a string that does not parse is a ValueError naming c
        if np.isinf(v).any():
            raise ValueError(f"numeric column {c!r} contains inf")
        return v

    def _check_missing(self, X: pd.DataFrame, columns: Sequence[str]) -> None:
        """With ``impute=False``: a ValueError naming every column of ``columns`` holding a NaN."""
        if self.impute:
            return
        counts = {c: int(n) for c in columns if (n := X[c].isna().sum())}
        if counts:
            raise self._nan_error(counts)

    def _nan_error(self, counts: dict[str, int]) -> ValueError:
        shown = dict(list(counts.items())[:10])
        more = f" and {len(counts) - 10} more column(s)" if len(counts) > 10 else ""
        return ValueError(
            f"missing values (NaN) in column(s) {list(shown)}{more} (counts {shown}); impute=True fills "
            "them (numeric: training median plus a missing indicator; categorical: a missing category)"
        )

    def _fit_numeric(self, X: pd.DataFrame, numeric: list[str]) -> None:
        kept: list[str] = []
        for c in numeric:
            kind = numeric_kind(X[c])
            v = self._numeric_column(X, c, kind)
            nan = np.isnan(v)
            if nan.any() and not self.impute:
                raise self._nan_error({c: int(nan.sum())})
            finite = v[~nan]
            if finite.size == 0:
                self.dropped_[c] = "no observed value in the training rows"
                continue
            self.numeric_kinds_[c] = kind
            if kind == "datetime":
                self.time_zones_[c] = time_zone_aware(X[c])
            self.fill_values_[c] = float(np.median(finite))
            if nan.any():
                self.indicators_.append(c)
            if np.unique(finite).size <= 1:
                self.dropped_[c] = f"constant numeric column (value {float(finite[0])!r})"
            else:
                kept.append(c)
        self.numeric_ = kept

    def _fit_category(self, col: pd.Series, c: str) -> None:
        kind = category_kind(col)
        values, missing = category_values(col, kind)
        if missing.any() and not self.impute:
            raise self._nan_error({c: int(missing.sum())})
        if missing.all():
            self.dropped_[c] = "no observed value in the training rows"
            return
        cats = sorted(set(values[~missing].tolist()))
        if missing.any():
            cats.append(MISSING_CATEGORY)
        if len(cats) <= 1:
            self.dropped_[c] = f"constant categorical column (value {cats[0]!r})"
            return
        self.category_kinds_[c] = kind
        self.categories_[c] = cats

    def _warn_date_strings(self, X: pd.DataFrame, cats: list[str]) -> None:
        """Warn about categorical columns whose every value is an ISO 8601 date string."""
        dates = [c for c in cats if iso_date_strings(X[c])]
        if dates:
            example = X[dates[0]].dropna().iloc[0]
            warnings.warn(
                f"column(s) {dates} hold date strings (e.g. {example!r}) and are read as categories, one "
                "per distinct date (a date not seen in training matches none); to use them as times "
                "(seconds since 1970), parse them first: X[col] = pd.to_datetime(X[col])",
                DateStringWarning,
                stacklevel=user_stacklevel(),
            )

    def _warn_integer_objects(self, X: pd.DataFrame, cats: list[str]) -> set[str]:
        """Warn about ``object`` columns of integers read as categories with many levels; their names."""
        many = [
            c
            for c in cats
            if pd.api.types.is_object_dtype(X[c].dtype)
            and self.category_kinds_.get(c) == "number"
            and len(self.categories_.get(c, ())) > _MANY_INTEGER_LEVELS
        ]
        if many:
            levels = ", ".join(f"{c!r}: {len(self.categories_[c])}" for c in many)
            warnings.warn(
                f"object column(s) of integers are read as categories, one per value ({levels} levels); "
                "if they are quantities, not codes, give them a numeric dtype first: "
                "X[col] = pd.to_numeric(X[col])",
                IntegerCategoryWarning,
                stacklevel=user_stacklevel(),
            )
        return set(many)

    def _warn_numeric_text(self, X: pd.DataFrame, cats: list[str]) -> set[str]:
        """Warn about categorical columns of many levels whose values are mostly numbers: text of
        non-integer numbers, or numbers mixed with some text (a missing-value marker such as ``'?'``);
        their names."""
        found: dict[str, tuple[int, float, str, str | None]] = {}
        for c in cats:
            levels = len(self.categories_.get(c, ()))
            kind = pd.api.types.infer_dtype(X[c], skipna=True)
            if levels <= _MANY_INTEGER_LEVELS or kind not in _NUMBERS_AS_TEXT_KINDS:
                continue
            text = X[c].dropna()
            parsed = pd.to_numeric(text.astype(object), errors="coerce")
            share = float(parsed.notna().mean()) if len(text) else 0.0
            values = parsed.dropna().to_numpy(dtype=np.float64)
            # text of whole numbers may be codes (zip codes); numbers stored as numbers beside text are not
            fractional = not np.all(np.isfinite(values) & (values == np.round(values)))
            if share >= 0.9 and (fractional or kind != "string"):
                marker = None if parsed.notna().all() else str(text[parsed.isna()].iloc[0])
                found[c] = (levels, share, str(text[parsed.notna()].iloc[0]), marker)
        if found:
            listed = ", ".join(
                f"{c!r}: {n} levels, {share:.0%} numbers, e.g. {ex!r}"
                + ("" if marker is None else f", and text such as {marker!r}")
                for c, (n, share, ex, marker) in list(found.items())[:5]
            )
            if len(found) > 5:
                listed += f", and {len(found) - 5} more: {list(found)[5:]}"
            warnings.warn(
                f"column(s) of numbers stored as text or mixed with text are read as categories, one per "
                f"distinct value ({listed}); to use them as numbers convert them first: "
                "X[col] = pd.to_numeric(X[col], errors='coerce') (text that is not a number, e.g. a '.' or '?' "
                "for missing, becomes a missing value)",
                NumericTextWarning,
                stacklevel=user_stacklevel(),
            )
        return set(found)

    def _warn_many_levels(self, X: pd.DataFrame, cats: list[str]) -> None:
        """Warn about categorical columns with so many levels that one-hot blocks are mostly singletons:
        at least :data:`_MANY_LEVELS` levels and more than a fifth of the training rows (free text, names,
        time stamps as text). Columns unique on every row (identifiers) and date strings have their own
        warnings."""
        n = len(X)
        found = {}
        for c in cats:
            levels = len(self.categories_.get(c, ()))
            if (
                levels < _MANY_LEVELS
                or levels <= n / 5
                or X[c].nunique(dropna=True) == n
                or iso_date_strings(X[c])
            ):
                continue
            found[c] = levels
        if found:
            listed = ", ".join(f"{c!r}: {k:,} levels" for c, k in list(found.items())[:5])
            if len(found) > 5:
                listed += f", and {len(found) - 5} more: {list(found)[5:]}"
            warnings.warn(
                f"categorical column(s) with a level for more than a fifth of the {n:,} training rows ({listed}) "
                "become one one-hot feature per level, most of them seen once or twice: free text, names "
                "or codes like these rarely generalise; drop them, or map them to fewer groups first",
                ManyLevelsWarning,
                stacklevel=user_stacklevel(),
            )

    def _warn_identifiers(self, X: pd.DataFrame, numeric: list[str], cats: list[str]) -> None:
        """Warn about columns that look like row identifiers (all distinct; integers: a dense run)."""
        n = len(X)
        if n < _ID_MIN_ROWS:
            return
        for c in X.columns:
            if c in numeric and (not _integer_coded(X[c]) or self.numeric_kinds_.get(c) != "number"):
                continue  # continuous measurements and timestamps are often all distinct
            if c not in numeric and c not in cats:  # pragma: no cover - every column is one or the other
                continue
            if c in cats and iso_date_strings(X[c]):
                continue  # dates, all distinct: the date-string warning says what to do instead
            if X[c].notna().all() and X[c].nunique(dropna=True) == n and _id_like(X[c], numeric=c in numeric):
                warnings.warn(
                    f"column {c!r} has a different value on every one of the {n} training rows; it looks "
                    "like an identifier and cannot generalise — drop it",
                    IdentifierColumnWarning,
                    stacklevel=user_stacklevel(),
                )

    def _fit_quantiles(self, X: pd.DataFrame) -> None:
        from sklearn.preprocessing import QuantileTransformer

        if not self.numeric_:
            self.quantiles_ = np.zeros((0, 0))
            self.references_ = np.zeros((0,))
            return
        Xn = self._numeric_matrix(X)
        nq = self.n_quantiles or max(min(len(X) // 30, 1000), 10)
        fit_x = Xn
        if self.noise > 0:
            std = Xn.std(axis=0)
            rng = np.random.default_rng(self.seed)
            fit_x = Xn + rng.standard_normal(Xn.shape) * (self.noise * np.minimum(1.0, std))
        qt = QuantileTransformer(
            output_distribution="normal",
            n_quantiles=min(nq, len(X)),
            subsample=10**9,
            random_state=self.seed,
        ).fit(fit_x)
        self.quantiles_ = np.asarray(qt.quantiles_, dtype=np.float64)
        self.references_ = np.asarray(qt.references_, dtype=np.float64)

    def _fit_target(self, y: Any, *, n: int) -> None:
        self.target_mean_ = self.target_std_ = None
        self.classes_ = None
        if y is None:
            return
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != n:
            raise ValueError(f"y must be 1-D with {n} entries (one per row of X), got shape {y.shape}")
        if pd.isna(y).any():
            raise ValueError(f"y has {int(pd.isna(y).sum())} missing value(s) (NaN)")
        if self.task == "regression":
            self.target_mean_, self.target_std_ = _target_moments(y)
        else:
            classes = np.unique(y)
            want = 2 if self.task == "binclass" else None
            if len(classes) < 2 or (want is not None and len(classes) != want):
                raise ValueError(f"task {self.task!r} but the training target has classes {classes.tolist()}")
            self.classes_ = classes

    # -- transforming -------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not self.fitted_:
            raise RuntimeError("this TabularPreprocessor is not fitted yet; call fit() first")

    def _numeric_matrix(self, X: pd.DataFrame) -> np.ndarray:
        out = np.empty((len(X), len(self.numeric_)), dtype=np.float64)
        for j, c in enumerate(self.numeric_):
            out[:, j] = self._filled(X, c)
        return out

    def _filled(self, X: pd.DataFrame, c: str) -> np.ndarray:
        v = self._numeric_column(X, c, self.numeric_kinds_[c])
        nan = np.isnan(v)
        if nan.any():
            if not self.impute:
                raise self._nan_error({c: int(nan.sum())})
            v = np.where(nan, self.fill_values_[c], v)
        return v

    def _columns_for(self, X: pd.DataFrame) -> None:
        have = list(X.columns)
        missing = [c for c in self.columns_ if c not in have]
        extra = [c for c in have if c not in self.columns_]
        if missing or extra:
            raise ValueError(
                f"X does not match the fitted columns: missing {missing}, unexpected {extra}; "
                f"fitted on {self.columns_}"
            )

    def _one_hot(
        self, X: pd.DataFrame, c: str, unknown: dict[str, tuple[int, object, np.ndarray]]
    ) -> np.ndarray:
        values, missing = category_values(X[c], self.category_kinds_[c])
        if missing.any():
            if not self.impute:
                raise self._nan_error({c: int(missing.sum())})
            values[missing] = MISSING_CATEGORY
        cats = self.categories_[c]
        codes = pd.Index(cats).get_indexer(values)  # -1 for unseen categories
        block = np.zeros((len(X), len(cats)), dtype=np.float32)
        seen = codes >= 0
        block[np.flatnonzero(seen), codes[seen]] = 1.0
        if not seen.all():
            first = X[c].to_numpy(dtype=object)[np.flatnonzero(~seen)[0]]
            unknown[c] = (int((~seen).sum()), _MISSING_UNSEEN if pd.isna(first) else first, ~seen)
        return block

    def transform(self, X: pd.DataFrame | np.ndarray, *, warn_unknown: bool = False) -> np.ndarray:
        """Features -> float32 ``(N, n_features_out_)`` (numeric block, one-hot blocks, missing indicators).

        A categorical value not seen in training gets an all-zero one-hot block ("no known
        category"); ``warn_unknown=True`` (the estimators' ``predict``) says so in one
        :class:`UnknownCategoryWarning` naming each such column, its row count and an example value,
        and names the numeric columns with missing values that had none in training (filled with the
        training median, without a missing indicator) in one :class:`UnseenMissingValueWarning`.
        """
        self._check_fitted()
        X = as_table_frame(X)
        self._columns_for(X)
        self._check_missing(X, [*self.numeric_, *self.categorical_, *self.indicators_])
        self._check_time_zones(X)
        parts = []
        if self.numeric_:
            parts.append(
                quantile_normal_transform(self._numeric_matrix(X), self.quantiles_, self.references_)
            )
        unknown: dict[str, tuple[int, object, np.ndarray]] = {}
        parts.extend(self._one_hot(X, c, unknown) for c in self.categorical_)
        if unknown and warn_unknown:
            listed = "; ".join(
                f"{c!r}: {n} row(s), e.g. {v if v is _MISSING_UNSEEN else repr(v)}"
                for c, (n, v, _) in unknown.items()
            )
            rows = int(np.logical_or.reduce([mask for _, _, mask in unknown.values()]).sum())
            warnings.warn(
                f"{rows} of {len(X)} row(s) to predict hold categories never seen in training ({listed}); "
                "each is read as no known category (an all-zero one-hot block)",
                UnknownCategoryWarning,
                stacklevel=user_stacklevel(),
            )
        if warn_unknown and self.numeric_:
            self._warn_unseen_missing(X)
        for c in self.indicators_:
            parts.append(np.isnan(self._numeric_column(X, c, self.numeric_kinds_[c]))[:, None])
        if not parts:
            return np.zeros((len(X), 0), dtype=np.float32)
        return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=1)

    def _warn_unseen_missing(self, X: pd.DataFrame) -> None:
        """One :class:`UnseenMissingValueWarning` naming the numeric columns without a missing indicator
        (no NaN in training) that have missing values in ``X``."""
        counts = {c: int(n) for c in self.numeric_ if c not in self.indicators_ and (n := X[c].isna().sum())}
        if counts:
            listed = ", ".join(f"{c!r}: {n} row(s)" for c, n in counts.items())
            warnings.warn(
                f"missing values in numeric column(s) that had none in training ({listed}); each is filled "
                "with the training median, and the model has no missing indicator for these columns "
                "(fit on rows with missing values there to give it one)",
                UnseenMissingValueWarning,
                stacklevel=user_stacklevel(),
            )

    def _check_time_zones(self, X: pd.DataFrame) -> None:
        """Warn when a datetime column's time-zone awareness differs from the training rows'."""
        for c, fitted in getattr(self, "time_zones_", {}).items():
            now = time_zone_aware(X[c]) if c in X.columns else None
            if fitted is None or now is None or now == fitted:
                continue
            was, is_ = ("time-zone aware", "naive") if fitted else ("naive", "time-zone aware")
            warnings.warn(
                f"datetime column {c!r} was {was} in the training rows but is {is_} now; naive times "
                "are read as UTC, so local wall-clock times shift by their UTC offset",
                UserWarning,
                stacklevel=user_stacklevel(),
            )

    def fit_transform(self, X, y=None, *, categorical=None) -> np.ndarray:
        """``fit(X, y).transform(X)``."""
        return self.fit(X, y, categorical=categorical).transform(X)

    def transform_target(self, y: pd.Series | np.ndarray) -> np.ndarray:
        """Regression: ``(y − mean) / std`` as float32. Classification: class indices as int64."""
        self._check_fitted()
        if self.target_mean_ is None and self.classes_ is None:
            raise RuntimeError("the preprocessor was fitted without y; pass y to fit() to transform targets")
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        if pd.isna(y).any():
            raise ValueError(f"y has {int(pd.isna(y).sum())} missing value(s) (NaN)")
        if self.task == "regression":
            with np.errstate(over="ignore", invalid="ignore"):
                z = (y.astype(np.float64) - self.target_mean_) / self.target_std_
            if not np.isfinite(z.astype(np.float32)).all():
                raise ValueError("target y overflows when standardised with the training mean and std")
            return z.astype(np.float32)
        lookup = {v: i for i, v in enumerate(self.classes_.tolist())}
        try:
            return np.fromiter((lookup[v] for v in y.tolist()), dtype=np.int64, count=len(y))
        except KeyError as exc:
            raise ValueError(
                f"label {exc.args[0]!r} was not seen in training; known classes {self.classes_.tolist()}"
            ) from None

    def inverse_transform_target(self, z: np.ndarray) -> np.ndarray:
        """Undo :meth:`transform_target` (regression: ``z · std + mean``; classification: indices -> labels)."""
        self._check_fitted()
        z = np.asarray(z)
        if self.task == "regression":
            if self.target_mean_ is None:
                raise RuntimeError("the preprocessor was fitted without y")
            return z.astype(np.float64) * self.target_std_ + self.target_mean_
        if self.classes_ is None:
            raise RuntimeError("the preprocessor was fitted without y")
        if not np.issubdtype(z.dtype, np.integer) or (
            z.size and (z.min() < 0 or z.max() >= len(self.classes_))
        ):
            raise ValueError(f"class indices must be integers in [0, {len(self.classes_)})")
        return self.classes_[z]

    # -- introspection ------------------------------------------------------------------------

    @property
    def n_numeric_(self) -> int:
        """Number of numeric output columns (they come first)."""
        return len(self.numeric_)

    @property
    def cat_cardinalities_(self) -> list[int]:
        """Widths of the blocks after the numeric columns: one-hot blocks, then 1 per missing indicator."""
        return [len(self.categories_[c]) for c in self.categorical_] + [1] * len(self.indicators_)

    @property
    def n_features_out_(self) -> int:
        """Width of :meth:`transform`'s output."""
        return self.n_numeric_ + sum(self.cat_cardinalities_)

    @property
    def feature_names_out_(self) -> list[str]:
        """Output column names: numeric names, ``"col=category"``, then ``"col=<missing>"`` indicators."""
        onehot = [f"{c}={v}" for c in self.categorical_ for v in self.categories_[c]]
        return [*self.numeric_, *onehot, *(f"{c}={MISSING_CATEGORY}" for c in self.indicators_)]

    @property
    def n_classes_(self) -> int | None:
        """Number of classes (classification fitted with y), else None."""
        return None if self.classes_ is None else len(self.classes_)

    # -- persistence (JSON + arrays, no pickle) ------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """The fitted arrays: ``quantiles`` (Q, n_numeric) and ``references`` (Q,), float64."""
        self._check_fitted()
        return {"quantiles": self.quantiles_.copy(), "references": self.references_.copy()}

    def config(self) -> dict[str, Any]:
        """Everything else, JSON-serialisable (settings, columns, kinds, categories, fill values, target stats)."""
        self._check_fitted()
        classes = None if self.classes_ is None else self.classes_.tolist()
        return {
            "version": _STATE_VERSION,
            "task": self.task,
            "seed": self.seed,
            "impute": self.impute,
            "noise": self.noise,
            "n_quantiles": self.n_quantiles,
            "n_train": self.n_train_,
            "columns": self.columns_,
            "numeric": self.numeric_,
            "numeric_kinds": self.numeric_kinds_,
            "category_kinds": self.category_kinds_,
            "time_zones": self.time_zones_,
            "categories": self.categories_,
            "indicators": self.indicators_,
            "fill_values": self.fill_values_,
            "dropped": self.dropped_,
            "target_mean": self.target_mean_,
            "target_std": self.target_std_,
            "classes": classes,
        }

    @classmethod
    def from_state(cls, config: Mapping[str, Any], arrays: Mapping[str, Any]) -> TabularPreprocessor:
        """Rebuild a fitted preprocessor from :meth:`config` and :meth:`state_dict` (arrays or tensors).

        Every size and name in ``config`` is checked (types, bounds, consistency with the arrays)
        before it is used.
        """
        if config.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported preprocessor state version {config.get('version')!r}")
        self = cls(
            task=config["task"],
            seed=config["seed"],
            impute=config["impute"],
            noise=config["noise"],
            n_quantiles=config["n_quantiles"],
        )
        self.quantiles_, self.references_ = (
            _state_array(arrays, "quantiles"),
            _state_array(arrays, "references"),
        )
        self.columns_ = _str_list(config["columns"], "columns")
        self.numeric_ = _str_list(config["numeric"], "numeric")
        self.numeric_kinds_ = _kinds(config["numeric_kinds"], NUMERIC_KINDS, "numeric_kinds")
        self.category_kinds_ = _kinds(config["category_kinds"], CATEGORY_KINDS, "category_kinds")
        zones = dict(config.get("time_zones") or {})  # absent in files written before it was recorded
        if any(v is not None and not isinstance(v, bool) for v in zones.values()):
            raise ValueError("preprocessor state time_zones must map columns to true, false or null")
        self.time_zones_ = {str(k): v for k, v in zones.items()}
        self.categories_ = {
            str(k): _str_list(v, f"categories[{k!r}]") for k, v in dict(config["categories"]).items()
        }
        self.categorical_ = list(self.categories_)
        self.indicators_ = _str_list(config["indicators"], "indicators")
        self.fill_values_ = {str(k): float(v) for k, v in dict(config["fill_values"]).items()}
        self.dropped_ = {str(k): str(v) for k, v in dict(config["dropped"]).items()}
        self.n_train_ = check_int(config["n_train"], name="n_train", minimum=2)
        self.target_mean_, self.target_std_ = config["target_mean"], config["target_std"]
        if (self.target_mean_ is None) != (self.target_std_ is None):
            raise ValueError("preprocessor state has only one of target_mean and target_std")
        if self.target_mean_ is not None:  # a hand-made file: "abc" or 0 would scale every prediction
            for name, v in (("target_mean", self.target_mean_), ("target_std", self.target_std_)):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"preprocessor state {name} must be a finite number, got {v!r}")
            if not self.target_std_ > 0:
                raise ValueError(f"preprocessor state target_std must be > 0, got {self.target_std_!r}")
            self.target_mean_, self.target_std_ = float(self.target_mean_), float(self.target_std_)
        self.classes_ = None if config["classes"] is None else np.asarray(config["classes"])
        known = set(self.columns_)
        used = [*self.numeric_, *self.categorical_, *self.indicators_]
        if not set(used) <= known or not set(self.numeric_) | set(self.indicators_) <= set(
            self.numeric_kinds_
        ):
            raise ValueError("preprocessor state names columns it does not list")
        if not set(self.categorical_) <= set(self.category_kinds_):
            raise ValueError("preprocessor state has categorical columns without a kind")
        if self.numeric_ and self.quantiles_.shape[1:] != (len(self.numeric_),):
            raise ValueError(
                f"quantiles have shape {self.quantiles_.shape}, expected (Q, {len(self.numeric_)})"
            )
        if self.references_.shape != self.quantiles_.shape[:1]:
            raise ValueError(
                f"references have shape {self.references_.shape}, expected {self.quantiles_.shape[:1]}"
            )
        self.fitted_ = True
        return self

    def save(self, stem: str | os.PathLike) -> Path:
        """Write ``stem.safetensors`` (arrays) and ``stem.json`` (config) atomically."""
        import torch

        from ensemblize.checkpoint import save_checkpoint

        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in self.state_dict().items()}
        return save_checkpoint(stem, tensors, {"kind": "TabularPreprocessor", "config": self.config()})

    @classmethod
    def load(cls, stem: str | os.PathLike) -> TabularPreprocessor:
        """Read a preprocessor written by :meth:`save`."""
        from ensemblize.checkpoint import load_checkpoint

        tensors, meta = load_checkpoint(stem)
        if meta.get("kind") != "TabularPreprocessor":
            raise ValueError(f"{stem} is not a TabularPreprocessor checkpoint (kind {meta.get('kind')!r})")
        return cls.from_state(meta["config"], tensors)

    def __repr__(self) -> str:
        if not self.fitted_:
            return f"TabularPreprocessor(task={self.task!r}, seed={self.seed}, unfitted)"
        return (
            f"TabularPreprocessor(task={self.task!r}, numeric={len(self.numeric_)}, "
            f"categorical={len(self.categorical_)}, indicators={len(self.indicators_)}, "
            f"out={self.n_features_out_}, dropped={list(self.dropped_)})"
        )


def _integer_coded(col: pd.Series) -> bool:
    """An integer dtype, or an ``object`` column of Python / NumPy integers (IDs look like this)."""
    if pd.api.types.is_integer_dtype(col.dtype):
        return True
    return pd.api.types.is_object_dtype(col.dtype) and pd.api.types.infer_dtype(col, skipna=True) == "integer"


def _target_moments(y: np.ndarray) -> tuple[float, float]:
    """(mean, population std) of a regression target, or a ValueError naming what failed."""
    if not np.issubdtype(y.dtype, np.number) or y.dtype == bool:
        raise TypeError(f"regression target y must be numeric, got dtype {y.dtype}")
    yf = y.astype(np.float64)
    if not np.isfinite(yf).all():
        raise ValueError("regression target y contains inf")
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = float(yf.mean()), float(yf.std())
    if not (np.isfinite(mean) and np.isfinite(std)):
        raise ValueError(
            f"regression target y cannot be standardised: its mean / std overflow float64 (|y| up to "
            f"{np.abs(yf).max():.3g}); rescale y"
        )
    if std == 0:
        raise ValueError(f"regression target y is constant ({float(yf[0])!r}) in the training split")
    return mean, std


def _state_array(arrays: Mapping[str, Any], key: str) -> np.ndarray:
    if key not in arrays:
        raise ValueError(f"preprocessor state is missing array {key!r}")
    a = arrays[key]
    return (a.numpy() if hasattr(a, "numpy") else np.asarray(a)).astype(np.float64)


def _str_list(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or len(value) > _MAX_COLUMNS or not all(isinstance(v, str) for v in value):
        raise ValueError(f"preprocessor state {name} must be a list of at most {_MAX_COLUMNS} strings")
    return list(value)


def _kinds(value: Any, allowed: tuple[str, ...], name: str) -> dict[str, str]:
    if not isinstance(value, dict) or any(v not in allowed for v in value.values()):
        raise ValueError(f"preprocessor state {name} must map columns to one of {allowed}")
    return {str(k): str(v) for k, v in value.items()}


# --------------------------------------------------------------------------------------------
# one call: split arrays ready for a model
# --------------------------------------------------------------------------------------------


@dataclass
class PreparedTable:
    """Model-ready arrays of one split table (features float32; targets float32 standardised or int64)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    task: str
    name: str
    preprocessor: TabularPreprocessor
    splits: TableSplits = field(repr=False)

    @property
    def n_classes(self) -> int | None:
        """Number of classes, or None for regression."""
        return self.preprocessor.n_classes_

    @property
    def n_numeric(self) -> int:
        """Number of leading quantile-transformed columns; the rest are one-hot."""
        return self.preprocessor.n_numeric_


def prepare(
    data: TabularDataset | TableSplits,
    *,
    seed: int = 0,
    impute: bool | None = None,
    noise: float = 1e-3,
    fractions: Sequence[float] = (0.64, 0.16, 0.20),
) -> PreparedTable:
    """Split (unless given splits), fit the :class:`TabularPreprocessor` on train, transform all parts.

    ``impute`` defaults to the dataset's own ``impute`` flag (set by the registry).
    """
    splits = split(data, seed=seed, fractions=fractions) if isinstance(data, TabularDataset) else data
    if not isinstance(splits, TableSplits):
        raise TypeError(f"data must be a TabularDataset or TableSplits, got {type(data).__name__}")
    tr, va, te = splits
    pre = TabularPreprocessor(
        task=tr.task, seed=seed, impute=tr.impute if impute is None else impute, noise=noise
    )
    pre.fit(tr.X, tr.y, categorical=tr.categorical)
    return PreparedTable(
        X_train=pre.transform(tr.X),
        y_train=pre.transform_target(tr.y),
        X_val=pre.transform(va.X),
        y_val=pre.transform_target(va.y),
        X_test=pre.transform(te.X),
        y_test=pre.transform_target(te.y),
        task=tr.task,
        name=tr.name,
        preprocessor=pre,
        splits=splits,
    )
