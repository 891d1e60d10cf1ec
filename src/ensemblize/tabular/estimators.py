"""scikit-learn style LoMETab estimators: :class:`LoMETabClassifier` and :class:`LoMETabRegressor`.

Pipeline inside ``fit(X, y, eval_set=None)``:

1. ``X``: a pandas DataFrame (numeric columns = numeric non-bool dtypes, everything else
   categorical, see :func:`ensemblize.data.tabular.detect_column_types`) or a 2-D array (columns
   named ``x0, x1, …``; an object array has its numeric columns inferred). The caller's data is
   never modified.
2. validation split: ``eval_set=(X_val, y_val)``, or a seeded split of ``val_fraction`` of the
   rows (stratified for classification when every class has ≥ 2 rows).
3. :class:`ensemblize.data.tabular.TabularPreprocessor` fitted on the training rows: noisy
   quantile transform of numeric columns, one-hot categoricals (unseen categories at predict time
   give an all-zero block), constant columns dropped, missing values rejected with a ValueError
   naming the columns unless ``impute=True``, regression target standardised.
4. piecewise-linear bins (:func:`rtdl_num_embeddings.compute_bins`, quantile or tree bins) on
   the transformed training numeric columns; ``n_bins`` is capped at ``n_train − 1`` (the fitted
   value is ``n_bins_``).
5. :class:`~ensemblize.tabular.model.LoMETabModel` trained by
   :func:`~ensemblize.tabular.train.train_model` (mean member loss, AdamW, early stopping on the
   ensemble's validation accuracy / RMSE, best weights restored).

Defaults for LoMETab's two diversity axes (paper: the adapter rank ``r`` and the init scale
``σ_init`` jointly control pairwise KL over orders of magnitude; a low ``σ_init`` gives low
diversity whatever the rank, a higher one "switches on" the rank axis; the best pair is
dataset-dependent): ``rank=2`` — the smallest rank whose weight family strictly contains
TabM's rank-1 masks — and ``init_scale=1.0``, i.e. each residual entry of ``A_k B_kᵀ`` starts with
standard deviation 1 (see :class:`ensemblize.nn.LoMELinear`), a member perturbation as large as
the shared weight itself, comparable to TabM's ±1 first-layer signs. Tune both per dataset.

Persistence: ``save(path)`` writes ``path.safetensors`` (model tensors, bin edges, preprocessor
arrays) and ``path.json`` (hyper-parameters, preprocessor config, classes, history) atomically via
:mod:`ensemblize.checkpoint`; ``Cls.load(path)`` rebuilds an estimator that predicts bitwise
identically. No pickle.
"""

from __future__ import annotations

import math
import os
import warnings
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ensemblize.checkpoint import load_checkpoint, load_state_strict, save_checkpoint
from ensemblize.data.tabular import TabularPreprocessor
from ensemblize.tabular.model import EMBEDDINGS, LAYERS, LoMETabModel
from ensemblize.tabular.train import auto_batch_size, predict_members, train_model

__all__ = ["LoMETabClassifier", "LoMETabRegressor"]

_FORMAT = 1
_PREDICT_BATCH = 4096
_BIN_METHODS = ("quantile", "tree")
_TREE_KWARGS = {"min_samples_leaf": 64, "min_impurity_decrease": 1e-4}  # TabM / rtdl defaults


# ------------------------------------------------------------------------------------------------
# parameter validation (fit-time, naming the bad value)
# ------------------------------------------------------------------------------------------------
def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _real(value: Any, name: str, *, low: float, low_open: bool, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise TypeError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if v < low or (low_open and v == low) or v >= high:
        lo = "(" if low_open else "["
        raise ValueError(f"{name} must lie in {lo}{low}, {high}), got {value!r}")
    return v


def _choice(value: Any, name: str, options: tuple) -> Any:
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


# ------------------------------------------------------------------------------------------------
# input conversion
# ------------------------------------------------------------------------------------------------
def _as_frame(X: Any, *, name: str) -> pd.DataFrame:
    """A DataFrame view of ``X`` (never modified): DataFrames pass through, arrays get columns x0…"""
    if isinstance(X, pd.DataFrame):
        if X.ndim != 2:  # pragma: no cover - DataFrames are always 2-D
            raise ValueError(f"{name} must be 2-D")
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


def _as_target(y: Any, *, name: str, n: int) -> np.ndarray:
    if y is None:
        raise ValueError(f"this estimator requires y to be passed, but the target y is None ({name})")
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            raise ValueError(f"{name} must be 1-D, got a DataFrame with {y.shape[1]} columns")
        y = y.iloc[:, 0]
    arr = y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        raise ValueError(f"{name} must be 1-D (n_samples,), got shape {arr.shape}; use y.ravel()")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n_samples,), got shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries but X has {n} rows")
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} has complex dtype {arr.dtype}; Complex data not supported")
    if pd.isna(arr).any():
        raise ValueError(f"{name} has {int(pd.isna(arr).sum())} missing value(s) (NaN)")
    return arr


def safe_bins(x_num: torch.Tensor, y: torch.Tensor, *, n_bins: int, method: str, regression: bool):
    """Bin edges for every numeric column; a column constant on the training rows gets one bin."""
    import rtdl_num_embeddings as rtdl

    constant = (x_num == x_num[0]).all(dim=0)
    varying = torch.nonzero(~constant).flatten()
    bins: list[torch.Tensor | None] = [None] * x_num.shape[1]
    if len(varying):
        kw = (
            {}
            if method == "quantile"
            else {"tree_kwargs": dict(_TREE_KWARGS), "y": y, "regression": regression}
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*just two bin edges.*")
            computed = rtdl.compute_bins(x_num[:, varying], n_bins, **kw)
        for j, b in zip(varying.tolist(), computed, strict=True):
            bins[j] = b
    for j in torch.nonzero(constant).flatten().tolist():
        v = float(x_num[0, j])
        bins[j] = torch.tensor([v, v + 1.0], dtype=x_num.dtype)
    return bins


class _LoMETabBase(BaseEstimator):
    """Shared implementation; use :class:`LoMETabClassifier` or :class:`LoMETabRegressor`."""

    _regression: bool = False

    def __init__(
        self,
        *,
        members: int = 32,
        rank: int = 2,
        init_scale: float = 1.0,
        layer: str = "lome",
        n_blocks: int = 3,
        d_block: int = 256,
        dropout: float = 0.1,
        embedding: str = "piecewise",
        n_bins: int = 48,
        bin_method: str = "quantile",
        d_embedding: int = 16,
        lr: float = 2e-3,
        weight_decay: float = 3e-4,
        batch_size: int | str = "auto",
        max_epochs: int = 200,
        patience: int = 16,
        per_member_batches: bool = False,
        val_fraction: float = 0.2,
        impute: bool = False,
        random_state: int | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        self.members = members
        self.rank = rank
        self.init_scale = init_scale
        self.layer = layer
        self.n_blocks = n_blocks
        self.d_block = d_block
        self.dropout = dropout
        self.embedding = embedding
        self.n_bins = n_bins
        self.bin_method = bin_method
        self.d_embedding = d_embedding
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.per_member_batches = per_member_batches
        self.val_fraction = val_fraction
        self.impute = impute
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def __sklearn_tags__(self):
        """scikit-learn tags: string / categorical columns are accepted; NaN only with ``impute=True``."""
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = bool(self.impute)
        tags.non_deterministic = self.random_state is None
        return tags

    # -------------------------------------------------------------------------------------------
    def _validate_params(self) -> None:
        _int(self.members, "members", 1)
        _int(self.rank, "rank", 1)
        _real(self.init_scale, "init_scale", low=0.0, low_open=False)
        _choice(self.layer, "layer", LAYERS)
        _int(self.n_blocks, "n_blocks", 1)
        _int(self.d_block, "d_block", 1)
        _real(self.dropout, "dropout", low=0.0, low_open=False, high=1.0)
        _choice(self.embedding, "embedding", EMBEDDINGS)
        _int(self.n_bins, "n_bins", 2)
        _choice(self.bin_method, "bin_method", _BIN_METHODS)
        _int(self.d_embedding, "d_embedding", 1)
        _real(self.lr, "lr", low=0.0, low_open=True)
        _real(self.weight_decay, "weight_decay", low=0.0, low_open=False)
        if self.batch_size != "auto":
            _int(self.batch_size, "batch_size", 1)
        _int(self.max_epochs, "max_epochs", 1)
        _int(self.patience, "patience", 1)
        _bool(self.per_member_batches, "per_member_batches")
        _real(self.val_fraction, "val_fraction", low=0.0, low_open=True, high=1.0)
        _bool(self.impute, "impute")
        _bool(self.verbose, "verbose")
        if self.random_state is not None and not isinstance(
            self.random_state, (Integral, np.random.RandomState)
        ):
            raise TypeError(f"random_state must be None, an int or a RandomState, got {self.random_state!r}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {self.device!r} is not a valid torch device") from exc

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, Integral) and not isinstance(rs, bool):
            return int(rs) % (2**31)
        from sklearn.utils import check_random_state

        return int(check_random_state(rs).randint(2**31 - 1))

    def _encode_y(self, y: np.ndarray, *, name: str) -> np.ndarray:
        """Training/validation target -> int64 class indices or float32 standardised values."""
        if self._regression:
            if not np.issubdtype(y.dtype, np.number) or y.dtype == bool:
                raise TypeError(
                    f"Unknown label type: {name} must be numeric for regression, got dtype {y.dtype}"
                )
            if not np.isfinite(y.astype(np.float64)).all():
                raise ValueError(f"{name} contains inf")
            return self.preprocessor_.transform_target(y)
        lookup = {v: i for i, v in enumerate(self.classes_.tolist())}
        out = np.empty(len(y), dtype=np.int64)
        for i, v in enumerate(y.tolist()):  # label lookup, runs once per fit on the labels only
            if v not in lookup:
                raise ValueError(
                    f"{name} has label {v!r} that is not among the training classes {self.classes_.tolist()}"
                )
            out[i] = lookup[v]
        return out

    def _frame_for_predict(self, X: Any) -> pd.DataFrame:
        frame = _as_frame(X, name="X")
        # scikit-learn's own feature-name and feature-count checks (no array conversion)
        probe = frame if isinstance(X, pd.DataFrame) else np.empty((1, frame.shape[1]))
        validate_data(self, probe, reset=False, skip_check_array=True)
        if list(map(str, frame.columns)) != self.preprocessor_.columns_:
            frame = frame.set_axis(self.preprocessor_.columns_, axis=1)  # positional (arrays)
        return frame

    # -------------------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, eval_set: tuple[Any, Any] | None = None):
        """Fit on ``X`` ``(N, F)`` / ``y`` ``(N,)``; ``eval_set=(X_val, y_val)`` drives early stopping.

        Without ``eval_set`` a seeded ``val_fraction`` of the rows is held out. Returns ``self``.
        Fitted attributes: ``n_features_in_``, ``feature_names_in_`` (string-named DataFrames),
        ``classes_`` (classifier), ``preprocessor_``, ``bins_``, ``n_bins_``, ``model_``,
        ``history_`` (per-epoch dicts), ``best_epoch_``, ``best_score_``, ``train_seconds_``,
        ``seed_``, ``batch_size_``.
        """
        self._validate_params()
        frame = _as_frame(X, name="X")
        n = len(frame)
        yarr = _as_target(y, name="y", n=n)
        if n < 2:
            raise ValueError(f"X must have at least 2 rows, got n_samples = {n}")
        if frame.shape[1] == 0:
            raise ValueError(f"0 feature(s) (shape=({n}, 0)) while a minimum of 1 is required.")
        # sets n_features_in_ and, for a DataFrame with string column names, feature_names_in_
        probe = frame if isinstance(X, pd.DataFrame) else np.empty((1, frame.shape[1]))
        validate_data(self, probe, skip_check_array=True)
        if any(not isinstance(c, str) for c in frame.columns):
            frame = frame.rename(columns=str)
        if self._regression and (not np.issubdtype(yarr.dtype, np.number) or yarr.dtype == bool):
            raise TypeError(
                f"Unknown label type: a regression target must be numeric, got y of dtype {yarr.dtype}"
            )
        seed = self._seed()
        self.seed_ = seed

        if not self._regression:
            from sklearn.utils.multiclass import type_of_target

            kind = type_of_target(yarr)
            if kind not in ("binary", "multiclass"):
                raise ValueError(f"Unknown label type: {kind!r}; y must hold class labels for a classifier")
            self.classes_ = np.unique(yarr)
            if len(self.classes_) < 2:
                raise ValueError(f"y has a single class {self.classes_.tolist()}; need at least 2")

        # -- validation split ---------------------------------------------------------------------
        if eval_set is not None:
            if not isinstance(eval_set, (tuple, list)) or len(eval_set) != 2:
                raise TypeError(f"eval_set must be a pair (X_val, y_val), got {type(eval_set).__name__}")
            tr_frame, y_tr = frame, yarr
            va_frame = self._frame_for_eval(eval_set[0], frame)
            y_va = _as_target(eval_set[1], name="eval_set y", n=len(va_frame))
        else:
            from sklearn.model_selection import train_test_split

            n_val = max(1, int(round(self.val_fraction * n)))
            if n_val >= n:
                raise ValueError(f"val_fraction={self.val_fraction} leaves no training rows out of {n}")
            strat = None
            if not self._regression:
                _, counts = np.unique(yarr, return_counts=True)
                if counts.min() >= 2 and n_val >= len(counts) and n - n_val >= len(counts):
                    strat = yarr
            tr_idx, va_idx = train_test_split(
                np.arange(n), test_size=n_val, random_state=seed, stratify=strat
            )
            tr_idx, va_idx = np.sort(tr_idx), np.sort(va_idx)
            tr_frame, va_frame = frame.iloc[tr_idx], frame.iloc[va_idx]
            y_tr, y_va = yarr[tr_idx], yarr[va_idx]

        # -- preprocessing --------------------------------------------------------------------------
        if self._regression:
            task = "regression"
        else:
            task = "binclass" if len(self.classes_) == 2 else "multiclass"
        prep = TabularPreprocessor(task=task, seed=seed, impute=bool(self.impute))
        prep.fit(tr_frame, y_tr if self._regression else None)
        self.preprocessor_ = prep
        if prep.n_features_out_ == 0:
            raise ValueError(f"every column is constant on the training rows: dropped {prep.dropped_}")
        x_tr = torch.from_numpy(prep.transform(tr_frame))
        x_va = torch.from_numpy(prep.transform(va_frame))
        t_tr = torch.from_numpy(self._encode_y(y_tr, name="y"))
        t_va = torch.from_numpy(self._encode_y(y_va, name="eval_set y" if eval_set is not None else "y"))

        n_num = prep.n_numeric_
        self.n_bins_ = min(int(self.n_bins), len(x_tr) - 1)
        self.bins_ = None
        if self.embedding == "piecewise" and n_num:
            if self.n_bins_ < 2:
                raise ValueError(f"piecewise embeddings need at least 3 training rows, got {len(x_tr)}")
            self.bins_ = safe_bins(
                x_tr[:, :n_num],
                t_tr,
                n_bins=self.n_bins_,
                method=self.bin_method,
                regression=self._regression,
            )
        self.batch_size_ = auto_batch_size(len(x_tr)) if self.batch_size == "auto" else int(self.batch_size)

        device = torch.device(self.device)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            self.model_ = self._build_model().to(device)
            res = train_model(
                self.model_,
                x_tr.to(device),
                t_tr.to(device),
                x_va.to(device),
                t_va.to(device),
                regression=self._regression,
                members=int(self.members),
                lr=float(self.lr),
                weight_decay=float(self.weight_decay),
                batch_size=self.batch_size_,
                max_epochs=int(self.max_epochs),
                patience=int(self.patience),
                per_member_batches=bool(self.per_member_batches),
                seed=seed,
                verbose=bool(self.verbose),
            )
        self.history_ = res.history
        self.best_epoch_ = res.best_epoch
        self.best_score_ = res.best_score
        self.train_seconds_ = res.train_seconds
        return self

    def _frame_for_eval(self, X_val: Any, train_frame: pd.DataFrame) -> pd.DataFrame:
        frame = _as_frame(X_val, name="eval_set X")
        if frame.shape[1] != train_frame.shape[1]:
            raise ValueError(f"eval_set X has {frame.shape[1]} features, but X has {train_frame.shape[1]}")
        if not isinstance(X_val, pd.DataFrame) or any(not isinstance(c, str) for c in frame.columns):
            frame = frame.set_axis(list(train_frame.columns), axis=1)
        return frame

    def _model_config(self) -> dict[str, Any]:
        prep = self.preprocessor_
        n_out = 1 if self._regression else len(self.classes_)
        return {
            "n_num": prep.n_numeric_,
            "cat_cardinalities": prep.cat_cardinalities_,
            "n_out": n_out,
            "regression": self._regression,
            "members": int(self.members),
            "layer": self.layer,
            "n_blocks": int(self.n_blocks),
            "d_block": int(self.d_block),
            "dropout": float(self.dropout),
            "embedding": self.embedding,
            "d_embedding": int(self.d_embedding),
            "rank": int(self.rank),
            "init_scale": float(self.init_scale),
        }

    def _build_model(self) -> LoMETabModel:
        return LoMETabModel(**self._model_config(), bins=self.bins_)

    # -------------------------------------------------------------------------------------------
    def _raw_members(self, X: Any) -> torch.Tensor:
        check_is_fitted(self, "model_")
        frame = self._frame_for_predict(X)
        x = torch.from_numpy(self.preprocessor_.transform(frame)).to(torch.device(self.device))
        return predict_members(self.model_, x, batch_size=_PREDICT_BATCH).cpu()

    # -------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``path.safetensors`` + ``path.json`` atomically (safetensors + JSON, no pickle).

        Returns the stem ``path``. Reload with ``type(self).load(path)``.
        """
        check_is_fitted(self, "model_")
        tensors = {f"model.{k}": v for k, v in self.model_.state_dict().items()}
        for k, v in self.preprocessor_.state_dict().items():
            tensors[f"prep.{k}"] = torch.from_numpy(np.ascontiguousarray(v))
        for i, b in enumerate(self.bins_ or []):
            tensors[f"bins.{i}"] = b
        params = self.get_params()
        if not (params["random_state"] is None or isinstance(params["random_state"], Integral)):
            params["random_state"] = None  # a RandomState object is not JSON; seed_ records the draw
        elif params["random_state"] is not None:
            params["random_state"] = int(params["random_state"])
        names = getattr(self, "feature_names_in_", None)
        meta = {
            "kind": type(self).__name__,
            "format": _FORMAT,
            "params": params,
            "preprocessor": self.preprocessor_.config(),
            "model": self._model_config(),
            "n_bins": self.n_bins_,
            "n_bin_tensors": 0 if self.bins_ is None else len(self.bins_),
            "n_features_in": int(self.n_features_in_),
            "feature_names_in": None if names is None else [str(c) for c in names],
            "seed": self.seed_,
            "batch_size": self.batch_size_,
            "best_epoch": self.best_epoch_,
            "best_score": self.best_score_,
            "train_seconds": self.train_seconds_,
            "history": self.history_,
        }
        if not self._regression:
            meta["classes"] = self.classes_.tolist()
            meta["classes_dtype"] = self.classes_.dtype.str if self.classes_.dtype != object else "object"
        return save_checkpoint(Path(path), tensors, meta)

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Rebuild an estimator written by :meth:`save`; its predictions are bitwise identical."""
        tensors, meta = load_checkpoint(Path(path))
        if meta.get("kind") != cls.__name__:
            raise ValueError(f"{path} holds a {meta.get('kind')!r}, not a {cls.__name__}")
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{path}: unsupported format {meta.get('format')!r} (expected {_FORMAT})")
        est = cls(**meta["params"])
        prep_arrays = {k[len("prep.") :]: v for k, v in tensors.items() if k.startswith("prep.")}
        est.preprocessor_ = TabularPreprocessor.from_state(meta["preprocessor"], prep_arrays)
        if not cls._regression:
            dtype = meta["classes_dtype"]
            est.classes_ = np.asarray(meta["classes"], dtype=object if dtype == "object" else np.dtype(dtype))
        est.n_features_in_ = meta["n_features_in"]
        if meta["feature_names_in"] is not None:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.bins_ = [tensors[f"bins.{i}"] for i in range(meta["n_bin_tensors"])] or None
        est.n_bins_ = meta["n_bins"]
        est.seed_ = meta["seed"]
        est.batch_size_ = meta["batch_size"]
        est.best_epoch_ = meta["best_epoch"]
        est.best_score_ = meta["best_score"]
        est.train_seconds_ = meta["train_seconds"]
        est.history_ = meta["history"]
        model = LoMETabModel(**meta["model"], bins=est.bins_)
        state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        load_state_strict(model, state, what=str(path))
        est.model_ = model.to(torch.device(est.device)).eval()
        return est


class LoMETabClassifier(ClassifierMixin, _LoMETabBase):
    """LoMETab classifier: K members of a rank-r multiplicative MLP ensemble, averaged on probabilities.

    Hyper-parameters (keyword-only; ``__init__`` only stores them, ``fit`` validates):
        members (32): ensemble size K.
        rank (2), init_scale (1.0): LoMETab's adapter rank r and σ_init (std of the residual
            ``A_k B_kᵀ`` entries at init) — the diversity axes; see the module docstring.
        layer ("lome"): ``"lome"``, ``"additive"``, ``"batchensemble"`` (TabM),
            ``"plain"`` (shared MLP; with ``members=1`` the MLP baseline) or ``"independent"``
            (deep ensemble).
        n_blocks (3), d_block (256), dropout (0.1): the MLP.
        embedding ("piecewise"), n_bins (48), bin_method ("quantile" | "tree"), d_embedding (16):
            numeric feature embeddings.
        lr (2e-3), weight_decay (3e-4), batch_size ("auto": 256/512/1024 by training size),
        max_epochs (200), patience (16), per_member_batches (False), val_fraction (0.2): training.
        impute (False): fill missing values instead of raising a ValueError naming the columns.
        random_state (None), device ("cpu"), verbose (False).

    ``predict_members(X)`` -> member probabilities ``(N, K, C)``; ``predict_proba(X)`` -> their mean
    ``(N, C)`` (columns in ``classes_`` order); ``predict(X)`` -> labels from ``classes_`` ``(N,)``.
    """

    _regression = False

    def predict_members(self, X: Any) -> np.ndarray:
        """Member probabilities ``softmax(z_k)``, shape ``(N, K, C)`` (float64)."""
        return torch.softmax(self._raw_members(X).double(), dim=-1).numpy()

    def predict_proba(self, X: Any) -> np.ndarray:
        """Ensemble probabilities ``p̄ = mean_k softmax(z_k)``, shape ``(N, C)``."""
        return self.predict_members(X).mean(axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """Labels ``classes_[argmax p̄]``, shape ``(N,)``."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]


class LoMETabRegressor(RegressorMixin, _LoMETabBase):
    """LoMETab regressor: K members trained with MSE on the standardised target, averaged.

    Same hyper-parameters as :class:`LoMETabClassifier`. ``predict_members(X)`` -> member
    predictions in target units ``(N, K)``; ``predict(X)`` -> their mean ``(N,)``.
    """

    _regression = True

    def predict_members(self, X: Any) -> np.ndarray:
        """Member predictions ``ŷ_k`` in the original target units, shape ``(N, K)`` (float64)."""
        z = self._raw_members(X).double().numpy()
        return z * self.preprocessor_.target_std_ + self.preprocessor_.target_mean_

    def predict(self, X: Any) -> np.ndarray:
        """Ensemble prediction ``mean_k ŷ_k``, shape ``(N,)``."""
        return self.predict_members(X).mean(axis=1)
