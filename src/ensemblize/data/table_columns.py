"""One column, one meaning: how a table column's values are read, whatever dtype they arrive in.

A column's *kind* is fixed when the preprocessor is fitted; later values are read by that kind, so a
column keeps its meaning when its dtype drifts between fit and predict (a bool column arriving as
``0/1`` or ``"True"/"False"``, an integer category ``1`` arriving as ``1.0``, a number arriving as
the string ``"3.5"``).

Numeric kinds (:data:`NUMERIC_KINDS`) give float64 values, NaN for missing:

* ``"number"`` — numeric dtypes as float (``decimal.Decimal`` values too); bools as 0/1; strings /
  objects parsed as numbers
  (a value that does not parse is a ValueError naming the column and the value);
* ``"datetime"`` — seconds since 1970-01-01 (time-zone aware values are converted to UTC first;
  strings must be ISO 8601, year first — ``"2001-07-01"``, ``"2001-07-01T10:00Z"`` — since
  ``"01/07/2001"`` is 1 July or 7 January depending on the writer);
* ``"timedelta"`` — seconds (strings parsed with :func:`pandas.to_timedelta`).

A time column is never given as bare numbers: a number's unit (seconds, milliseconds, nanoseconds
since 1970) is not in the data, and reading it as pandas does (nanoseconds) would silently move every
value, so numbers there are a ValueError naming the column.

Categorical kinds (:data:`CATEGORY_KINDS`) give one canonical string per value, ``None`` for missing:

* ``"bool"`` — ``"True"`` / ``"False"``; bools, the numbers 1 / 0 and the strings ``"true"``,
  ``"1"``, ``"1.0"``, ``"yes"`` / ``"false"``, ``"0"``, ``"0.0"``, ``"no"`` (any case) all map there;
* ``"number"`` — an integral number is written as an integer (``1``, ``1.0``, ``np.int8(1)`` and
  ``True`` all read ``"1"``), any other number by ``repr(float)``; strings that parse as numbers are
  read as those numbers;
* ``"string"`` — strings as they are; numbers and bools written as above.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Hashable
from decimal import Decimal
from numbers import Integral, Real

import numpy as np
import pandas as pd

from ensemblize._checks import check_choice

__all__ = [
    "NUMERIC_KINDS",
    "CATEGORY_KINDS",
    "time_kind",
    "numeric_kind",
    "category_kind",
    "numeric_values",
    "category_values",
    "iso_date_strings",
    "parse_iso_dates",
]

NUMERIC_KINDS = ("number", "datetime", "timedelta")
CATEGORY_KINDS = ("bool", "number", "string")
_TRUE = frozenset({"true", "1", "1.0", "yes"})
_FALSE = frozenset({"false", "0", "0.0", "no"})
_EPOCH = pd.Timestamp("1970-01-01")


def column_names(frame: pd.DataFrame, *, name: str) -> list[str]:
    """``frame``'s column names as strings; ValueError naming ``name`` when two of them coincide
    (also ``1`` and ``"1"``, which are one name once written as text)."""
    names = [str(c) for c in frame.columns]
    if len(set(names)) != len(names):
        dup = sorted({c for c in names if names.count(c) > 1})
        raise ValueError(f"{name} has duplicate column names {dup}; give every column its own name")
    return names


def time_kind(col: pd.Series) -> str | None:
    """``"datetime"`` / ``"timedelta"`` for a datetime / timedelta column, else ``None``.

    A column counts by its dtype (``datetime64[…]`` naive or time-zone aware, ``timedelta64``) or,
    for an object column, when every observed value is a datetime / date / timedelta object
    (``pandas.api.types.infer_dtype``). Strings that look like dates are *not* parsed: read them
    with ``pd.to_datetime`` (or ``read_csv(parse_dates=...)``) to make them a time column.
    """
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return "datetime"
    if pd.api.types.is_timedelta64_dtype(col.dtype):
        return "timedelta"
    if pd.api.types.is_object_dtype(col.dtype) and col.notna().any():
        inferred = pd.api.types.infer_dtype(col, skipna=True)
        if inferred in ("datetime", "datetime64", "date"):
            return "datetime"
        if inferred in ("timedelta", "timedelta64"):
            return "timedelta"
    return None


#: ISO 8601 dates / date-times as text: 2001-02-03, 2001-02-03 04:05, 2001-02-03T04:05:06.789Z, …+01:00
#: a year-first date or date-time: ISO 8601 (``2016-01-31``, ``2016-01-31T00:47:36Z``) or the same with
#: slashes (``2016/01/31 00:47:36``, what many exports write); day-first or month-first forms are ambiguous
#: and not matched
_ISO_DATE = r"\d{4}(?P<sep>[-/])\d{2}(?P=sep)\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?(?:Z|[+-]\d{2}:?\d{2})?"
_SLASH_DATE = r"^(\d{4})/(\d{2})/(\d{2})"


def iso_date_strings(col: pd.Series) -> bool:
    """Whether every observed value of a text (or categorical) column is an ISO 8601 date or date-time string
    (or one written year-first with slashes, ``2016/01/31``: :data:`_ISO_DATE`).

    Such a column is what ``pd.read_csv`` gives for a date column without ``parse_dates``. It is
    *not* a time column by :func:`time_kind` (text is never parsed silently); the estimators warn
    about it and ``ensemblize tune`` parses it when reading a CSV.
    """
    if isinstance(col.dtype, pd.CategoricalDtype):  # a category column of date strings: its categories
        col = pd.Series(col.cat.categories[col.cat.categories.isin(col.dropna().unique())])
    if not (pd.api.types.is_object_dtype(col.dtype) or pd.api.types.is_string_dtype(col.dtype)):
        return False
    observed = col.dropna()
    if not len(observed) or pd.api.types.infer_dtype(observed, skipna=True) != "string":
        return False
    if re.fullmatch(_ISO_DATE, observed.iloc[0]) is None:  # the common case, decided on one value
        return False
    return bool(observed.astype(str).str.fullmatch(_ISO_DATE).all())


def parse_iso_dates(col: pd.Series) -> pd.Series:
    """Datetimes of a column :func:`iso_date_strings` accepts (slashes read as dashes); ValueError /
    TypeError where pandas cannot parse them (e.g. mixed UTC offsets)."""
    text = col.astype(object).where(col.notna(), None)
    return pd.to_datetime(text.str.replace(_SLASH_DATE, r"\1-\2-\3", regex=True), format="ISO8601")


def time_zone_aware(col: pd.Series) -> bool | None:
    """Whether a datetime column carries time zones: True / False, or None when it cannot tell
    (strings, or no observed value). Time-zone-aware values are read in UTC, naive ones as UTC."""
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return getattr(col.dt, "tz", None) is not None
    observed = col.dropna()
    if not len(observed):
        return None
    first = observed.iloc[0]
    if isinstance(first, dt.datetime):
        return first.tzinfo is not None
    return None


def numeric_kind(col: pd.Series) -> str:
    """The numeric kind of a training column: ``"datetime"``, ``"timedelta"`` (:func:`time_kind`) or ``"number"``."""
    return time_kind(col) or "number"


def _is_bool(v: object) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_number(v: object) -> bool:
    # decimal.Decimal (a SQL NUMERIC read by pd.read_sql) is a number, though not a numbers.Real
    return (isinstance(v, Real) and not _is_bool(v)) or (isinstance(v, Decimal) and v.is_finite())


def _unhashable_cell(col: pd.Series) -> TypeError:
    """The error for a column holding an unhashable cell (dict, list, set), naming the column."""
    odd = next((v for v in col.dropna() if not isinstance(v, Hashable)), None)
    what = "an unhashable cell" if odd is None else f"a {type(odd).__name__} cell ({odd!r:.60})"
    return TypeError(
        f"column {col.name!r} holds {what}; table cells must be numbers, strings, bools, dates or missing"
    )


def category_kind(col: pd.Series) -> str:
    """The categorical kind of a training column: ``"bool"``, ``"number"`` or ``"string"``."""
    dtype = col.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if isinstance(dtype, pd.CategoricalDtype):
        values = list(dtype.categories)
    elif pd.api.types.is_numeric_dtype(dtype):
        return "number"
    else:
        try:
            values = pd.unique(col.dropna().to_numpy(dtype=object)).tolist()
        except TypeError:  # unhashable cells (dicts, lists, sets)
            raise _unhashable_cell(col) from None
    if values and all(_is_bool(v) for v in values):
        return "bool"
    if values and all(_is_number(v) for v in values):
        return "number"
    return "string"


def _format_number(v: Real) -> str:
    if isinstance(v, Integral):
        return str(int(v))
    # a float32 / float16 value as the decimal it was written as (float32(0.1) is 0.1, not
    # 0.10000000149011612), so a category keeps its string when the column's precision drifts
    f = float(str(v)) if isinstance(v, np.floating) and v.dtype.itemsize < 8 else float(v)
    if math.isfinite(f) and f.is_integer() and abs(f) < 2**63:
        return str(int(f))
    return repr(f)


def _parse_number(text: str) -> str:
    try:
        return _format_number(float(text))
    except ValueError:
        return text


def _canonical(v: object, kind: str) -> str:
    """One value -> its canonical category string under ``kind`` (see the module docstring)."""
    if kind == "bool":
        if _is_bool(v):
            return str(bool(v))
        text = _format_number(v) if _is_number(v) else str(v).strip()
        low = text.lower()
        return "True" if low in _TRUE else "False" if low in _FALSE else text
    if _is_bool(v):
        return "1" if (kind == "number" and v) else "0" if kind == "number" else str(bool(v))
    if _is_number(v):
        return _format_number(v)
    return _parse_number(str(v)) if kind == "number" else str(v)


def category_values(col: pd.Series, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``col`` read as categories of ``kind``: (canonical strings, object ``(N,)``; missing mask ``(N,)``).

    Missing entries (``None``, NaN, NaT, ``pd.NA``) are ``None`` in the first array; an observed
    value spelled like the missing category is escaped (:func:`_escape_missing`). Distinct raw
    values are canonicalised once each (``pd.factorize``), so the cost is one pass over the rows.
    """
    check_choice(kind, tuple(CATEGORY_KINDS), name="kind")
    if isinstance(col.dtype, pd.CategoricalDtype):  # a category column of float32 values: its values
        inner = col.dtype.categories.dtype
        inner = getattr(inner, "numpy_dtype", inner)
        if isinstance(inner, np.dtype) and np.issubdtype(inner, np.floating) and inner.itemsize < 8:
            col = col.astype(inner)
    dtype = getattr(col.dtype, "numpy_dtype", col.dtype)  # a nullable Float32 -> float32
    if isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.floating) and dtype.itemsize < 8:
        # float32 / float16 values as the decimals they were written as: float32(0.1) widened to
        # float64 is 0.10000000149011612, which matched no category fitted on float64 0.1
        exact = col.to_numpy(dtype=dtype, na_value=np.nan).astype(str).astype(np.float64)
        col = pd.Series(exact, index=col.index, name=col.name)
    raw = col.to_numpy(dtype=object)
    missing = pd.isna(raw)
    if missing.ndim != 1:  # pragma: no cover - a Series is 1-D
        raise ValueError(f"column {col.name!r} must be 1-D")
    out = np.full(len(raw), None, dtype=object)
    try:
        codes, uniques = pd.factorize(raw[~missing])
    except TypeError:  # unhashable cells at predict time / in an eval_set (fit checks in category_kind)
        raise _unhashable_cell(col) from None
    if len(uniques):
        canon = np.asarray([_escape_missing(_canonical(v, kind)) for v in uniques], dtype=object)
        out[~missing] = canon[codes]
    return out, missing


def _escape_missing(text: str) -> str:
    """An observed value spelled like the missing category (``"<missing>"``, ``"<<missing>"``, …) gets
    one more ``<``, so a literal value can never be read as — or collide with — a missing one."""
    if text.endswith("missing>") and text[: -len("missing>")] and set(text[: -len("missing>")]) == {"<"}:
        return "<" + text
    return text


def _unparsed(col: pd.Series, parsed: pd.Series, what: str) -> ValueError | None:
    bad = parsed.isna().to_numpy() & ~col.isna().to_numpy()
    if bad.any():
        example = col.to_numpy(dtype=object)[np.flatnonzero(bad)[0]]
        return ValueError(
            f"column {str(col.name)!r} was fitted as {what} but holds {example!r} ({int(bad.sum())} "
            "value(s) that do not parse)"
        )
    return None


def _refuse_numbers(col: pd.Series, what: str, give: str) -> None:
    """ValueError when a time column holds numbers (or bools): their unit is not in the data."""
    kind = pd.api.types.infer_dtype(col, skipna=True)  # one pass in C; per value only for mixed columns
    if kind in ("string", "empty", "datetime", "datetime64", "date", "timedelta", "timedelta64", "period"):
        return
    values = col.dropna().to_numpy(dtype=object)
    numeric = [
        v
        for v in values
        if isinstance(v, (Real, np.number, np.bool_)) and not isinstance(v, (np.datetime64, np.timedelta64))
    ]  # numpy counts its time scalars as numbers
    if numeric:
        raise ValueError(
            f"column {str(col.name)!r} was fitted as {what} but holds numbers (dtype {col.dtype}, e.g. "
            f"{numeric[0]!r}; {len(numeric)} value(s)): a number's unit is not in the data and would be "
            f"read as nanoseconds. Give {give}"
        )


def _seconds_since_epoch(col: pd.Series) -> pd.Series:
    if not pd.api.types.is_datetime64_any_dtype(col.dtype):
        _refuse_numbers(
            col,
            "a datetime",
            "datetimes (pd.to_datetime(values, unit='s') for seconds since 1970) or ISO 8601 strings",
        )
        parsed = pd.to_datetime(col.astype(object), errors="coerce", utc=True, format="ISO8601")
        err = _unparsed(col, parsed, "a datetime")
        if err is not None:
            raise ValueError(
                f"{err}; date strings are read only in ISO 8601, year first ('2001-07-01', "
                "'2001-07-01 10:00'): parse other formats with pd.to_datetime(..., format=...) first"
            ) from None
        col = parsed
    if getattr(col.dt, "tz", None) is not None:
        col = col.dt.tz_convert("UTC").dt.tz_localize(None)
    return (col - _EPOCH).dt.total_seconds()


def numeric_values(col: pd.Series, kind: str) -> np.ndarray:
    """``col`` read as numbers of ``kind`` -> float64 ``(N,)``, NaN where missing (inf kept)."""
    check_choice(kind, tuple(NUMERIC_KINDS), name="kind")
    if kind == "datetime":
        values = _seconds_since_epoch(col)
    elif kind == "timedelta":
        values = col
        if not pd.api.types.is_timedelta64_dtype(col.dtype):
            _refuse_numbers(
                col, "a timedelta", "timedeltas (pd.to_timedelta(values, unit='s') for seconds) or strings"
            )
            values = pd.to_timedelta(col.astype(object), errors="coerce")
            err = _unparsed(col, values, "a timedelta")
            if err is not None:
                raise err
        values = values.dt.total_seconds()
    elif pd.api.types.is_bool_dtype(col.dtype) or (
        pd.api.types.is_numeric_dtype(col.dtype) and not isinstance(col.dtype, pd.CategoricalDtype)
    ):
        values = col
    else:
        values = pd.to_numeric(col.astype(object), errors="coerce")
        err = _unparsed(col, values, "a number")
        if err is not None:
            raise err
    if pd.api.types.is_complex_dtype(values.dtype):  # as at fit: never drop the imaginary part
        raise ValueError(
            f"column {str(col.name)!r} has complex values (dtype {values.dtype}); complex data is not supported"
        )
    return values.to_numpy(dtype=np.float64, na_value=np.nan)
