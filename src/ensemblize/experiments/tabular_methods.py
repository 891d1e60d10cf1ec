"""One tabular job: train one method on one split table with one seed and score it (:func:`tabular_job`).

Every method but ``sigma`` is a **public estimator** fitted on the raw split DataFrames — what a user
gets with ``LoMETabClassifier().fit(X, y, eval_set=(X_val, y_val))`` or
``GBDTClassifier(kind="xgboost").fit(...)``. Methods (:data:`METHODS`):

=================  ===============================================================================
``lometab``        :class:`~ensemblize.tabular.LoMETabClassifier` / ``Regressor`` (``layer="lome"``)
``tabm``           the official TabM estimator (``TabMClassifier`` / ``TabMRegressor`` in
                   :mod:`ensemblize.tabular`, the ``tabm`` package), its defaults; unavailable
                   (skipped with a message) until that estimator is installed
``batchensemble``  the LoMETab estimator with ``layer="batchensemble"`` (TabM's layer, our training)
``additive``       the LoMETab estimator with ``layer="additive"`` (the paper's ablation)
``mlp``            the LoMETab estimator with ``layer="plain"``, one member, one network
``sigma``          σN-Ens of a normalised MLP (:mod:`ensemblize.tabular.sigma_mlp`) with the diversity
                   regulariser (τ, λ) — a research baseline with no estimator, trained by
                   :func:`ensemblize.tabular.train.train_model` on the preprocessed matrices
``xgboost``        :class:`~ensemblize.tabular.GBDTClassifier` / ``GBDTRegressor`` (``kind="xgboost"``),
                   lr 0.05, early stopping on validation
``catboost``       idem, ``kind="catboost"``
=================  ===============================================================================

Budgets (:data:`BUDGETS`): ``full`` leaves every estimator at **its own defaults** (LoMETab:
3 pooled networks of K = 16, 2 blocks of 128, ≤ 200 epochs, patience 24, the classifier's weights averaged;
official TabM: its defaults, K = 32, 2 blocks of
512 with embeddings, ≤ 200 epochs, patience 16) and gives the GBDTs
≤ 4,000 rounds with patience 50; ``quick`` (K = 16, 2 blocks of 128, ≤ 80 epochs with patience 12 —
≤ 40 / 8 on tables with > 10,000 training rows), ``lite`` (one network of K = 8, 2 blocks of 64, ≤ 20
epochs, patience 5, GBDTs ≤ 500 rounds, patience 20) and ``tiny`` (tests; one network) override the estimators'
parameters of those names. Any key of the preset can be overridden per call.

Scores (:func:`ensemblize.evaluation.tabular.evaluate_predictions`): classification ``accuracy``,
``log_loss`` (and binary ``roc_auc``) of the ensemble's probabilities; regression ``rmse`` divided by
the standard deviation (ddof 0) of the training target, i.e. RMSE on the standardised scale. Each
score also as ``val_*`` on the validation split; ensembles add test diversity (``pairwise_kl``,
``disagreement``, or ``ambiguity`` on the standardised scale). A record also holds
``train_seconds`` (wall) and ``cpu_seconds`` (process CPU time of the fit).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from ensemblize._checks import check_choice

__all__ = [
    "METHODS",
    "ENSEMBLE_METHODS",
    "GBDT_METHODS",
    "BUDGETS",
    "budget_config",
    "method_available",
    "make_estimator",
    "load_split",
    "tabular_job",
    "defaults_digest",
]

METHODS = ("lometab", "tabm", "batchensemble", "additive", "mlp", "sigma", "xgboost", "catboost")
GBDT_METHODS = ("xgboost", "catboost")
ENSEMBLE_METHODS = ("lometab", "tabm", "batchensemble", "additive", "sigma")
_LAYER = {"lometab": "lome", "batchensemble": "batchensemble", "additive": "additive", "mlp": "plain"}

BUDGETS: dict[str, dict[str, Any]] = {
    "tiny": {"members": 2, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2, "n_bins": 8,
             "n_networks": 1, "gbdt_rounds": 20, "gbdt_patience": 5},
    "lite": {"members": 8, "n_blocks": 2, "d_block": 64, "max_epochs": 20, "patience": 5, "n_bins": 16,
             "n_networks": 1, "gbdt_rounds": 500, "gbdt_patience": 20},
    "quick": {"members": 16, "n_blocks": 2, "d_block": 128, "max_epochs": 80, "patience": 12,
              "gbdt_rounds": 4000, "gbdt_patience": 50},
    "full": {"gbdt_rounds": 4000, "gbdt_patience": 50},
}  # fmt: skip
"""Preset -> overrides of the estimators' parameters (absent keys keep the estimator's default)."""

_LARGE_ROWS = 10_000
_LARGE = {"quick": {"max_epochs": 40, "patience": 8}}
"""Preset -> further overrides on tables with more than ``_LARGE_ROWS`` training rows."""

_GBDT_LR = 0.05
_SIGMA = {"tau": 1.0, "lam": 1e-3, "noise": 0.5, "norm": "batchnorm"}
"""σN-Ens settings (the sigma method only)."""


@functools.cache
def _lometab_defaults(task: str = "binclass") -> dict[str, Any]:
    from ensemblize.tabular.estimators import LoMETabClassifier, LoMETabRegressor

    return (LoMETabRegressor if task == "regression" else LoMETabClassifier)().get_params()


#: the training budget every network method of one task shares (σN-Ens reads it from the task's estimator)
_BUDGET_KEYS = ("max_epochs", "patience")


@functools.cache
def defaults_digest() -> str:
    """12 hex digits of the SHA-256 of every tabular estimator's default parameters.

    Part of each tabular job's parameters and record: a run folder resumed after a default changed
    re-runs its jobs instead of mixing fits of the old and the new defaults, and a worker process
    whose library has other defaults refuses the job (:func:`tabular_job`).
    """
    import hashlib
    import json

    from ensemblize.tabular.estimators import LoMETabClassifier, LoMETabRegressor
    from ensemblize.tabular.gbdt import GBDTClassifier, GBDTRegressor
    from ensemblize.tabular.tabm_baseline import TabMClassifier, TabMRegressor

    classes = (
        LoMETabClassifier,
        LoMETabRegressor,
        TabMClassifier,
        TabMRegressor,
        GBDTClassifier,
        GBDTRegressor,
    )
    # the auto batch size's rule is a default too (a class attribute, not a parameter)
    defaults = {
        c.__name__: {**c().get_params(), "auto_batch": getattr(c, "_small_auto_batch", None)} for c in classes
    }
    text = json.dumps(defaults, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def budget_config(budget: str, n_train: int, **overrides: Any) -> dict[str, Any]:
    """The preset ``budget``'s overrides for a table with ``n_train`` training rows, then ``overrides``.

    Keys: LoMETab estimator parameters, ``gbdt_rounds`` / ``gbdt_patience`` / ``gbdt_refit`` (the
    GBDTs' ``refit_full``: off unless given) and the σN settings ``tau``, ``lam``, ``noise``, ``norm``.
    Raises ValueError for an unknown preset or key.
    """
    check_choice(budget, tuple(BUDGETS), name="budget")
    cfg = dict(BUDGETS[budget])
    if n_train > _LARGE_ROWS:
        cfg.update(_LARGE.get(budget, {}))
    known = {*_lometab_defaults(), "gbdt_rounds", "gbdt_patience", "gbdt_refit", *_SIGMA}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {unknown}; known: {sorted(known)}")
    return {**cfg, **overrides}


def method_available(method: str) -> str | None:
    """None when ``method`` can run here, else why not (a message naming what to install)."""
    if method in GBDT_METHODS:
        try:
            __import__(method)
        except ImportError:
            return f"{method} is not installed (optional extra: pip install ensemblize[gbdt])"
    if method == "tabm":
        try:
            _official_tabm("binclass")
        except (ImportError, AttributeError) as exc:
            return f"the official TabM estimator is not available: {exc}"
    return None


def _official_tabm(task: str):
    import ensemblize.tabular as tabular

    return getattr(tabular, "TabMRegressor" if task == "regression" else "TabMClassifier")


def make_estimator(method: str, task: str, *, seed: int, cfg: dict[str, Any]):
    """The public estimator of ``method`` with the budget's overrides applied, unfitted.

    Networks: only overrides naming one of the estimator's parameters are applied (``full`` applies
    none). GBDTs (:data:`GBDT_METHODS`): the public wrapper at the benchmark's setting — lr 0.05,
    ``cfg["gbdt_rounds"]`` rounds at most, early stopping after ``cfg["gbdt_patience"]``.
    Returns ``(estimator, applied_overrides)``.
    """
    if method in GBDT_METHODS:
        from ensemblize.tabular.gbdt import GBDTClassifier, GBDTRegressor

        setting = {
            "max_rounds": cfg["gbdt_rounds"],
            "early_stopping_rounds": cfg["gbdt_patience"],
            "learning_rate": _GBDT_LR,
        }
        if cfg.get("gbdt_refit"):  # the LoMETab regressor's refit, for boosting: a fairness check
            setting["refit_full"] = True
        cls = GBDTRegressor if task == "regression" else GBDTClassifier
        return cls(kind=method, random_state=int(seed), impute=True, **setting), setting
    if method == "tabm":
        cls = _official_tabm(task)
        est = cls(random_state=int(seed))
    else:
        from ensemblize.tabular.estimators import LoMETabClassifier, LoMETabRegressor

        if "layer" in cfg and cfg["layer"] != _LAYER[method]:  # was dropped silently
            methods = {layer: m for m, layer in _LAYER.items()}
            known = isinstance(cfg["layer"], str) and cfg["layer"] in methods
            hint = f"; run method {methods[cfg['layer']]!r} instead" if known else ""
            raise ValueError(
                f"override layer={cfg['layer']!r} conflicts with method {method!r}, whose layer is "
                f"{_LAYER[method]!r}{hint}"
            )
        cls = LoMETabRegressor if task == "regression" else LoMETabClassifier
        est = cls(random_state=int(seed), layer=_LAYER[method])
        if method == "mlp":
            cfg = {**cfg, "members": 1, "n_networks": 1}  # one MLP, not a deep ensemble
    names = est.get_params()
    applied = {k: v for k, v in cfg.items() if k in names and k != "layer"}
    if "impute" in names:
        applied["impute"] = True  # the tables' protocol: missing values are filled, never an error
    return est.set_params(**applied), applied


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def load_split(dataset: str, *, split_seed: int, max_rows: int | None = None):
    """The 64/16/20 split (:func:`ensemblize.data.tables.split`) of registry table ``dataset``.

    ``max_rows``: first subsample that many rows (seeded by ``split_seed``; for tests and ``lite``).
    Cached per process: the jobs of one worker share the loaded table.
    """
    from ensemblize.data.tables import load_benchmark, split

    ds = load_benchmark(dataset)
    if max_rows is not None and ds.n_rows > max_rows:
        rows = np.sort(np.random.default_rng(split_seed).choice(ds.n_rows, size=max_rows, replace=False))
        ds = ds.subset(rows)
    return split(ds, seed=split_seed)


def _class_index(classes: np.ndarray, y: Any, *, part: str) -> np.ndarray:
    lookup = {v: i for i, v in enumerate(np.asarray(classes).tolist())}
    values = np.asarray(y).tolist()
    missing = sorted({v for v in values if v not in lookup}, key=str)
    if missing:
        raise ValueError(f"{part} labels {missing} are not among the training classes {list(lookup)}")
    return np.asarray([lookup[v] for v in values], dtype=np.int64)


# ------------------------------------------------------------------------------------------------
# scoring
# ------------------------------------------------------------------------------------------------
def _diversity(task: str, members: np.ndarray) -> dict[str, float]:
    from ensemblize import metrics

    if members.shape[1] < 2:
        return {}
    if task == "regression":
        return {"ambiguity": float(metrics.ambiguity(members))}
    return {
        "pairwise_kl": float(metrics.pairwise_kl(members)),
        "disagreement": float(metrics.disagreement(members)),
    }


def _scores(task: str, y: np.ndarray, prediction: np.ndarray, *, prefix: str) -> dict[str, float]:
    from ensemblize.evaluation.tabular import evaluate_predictions

    return {f"{prefix}{k}": v for k, v in evaluate_predictions(task, y, prediction).items()}


def _member_outputs(est, X: Any, task: str) -> np.ndarray:
    """``(N, M)`` regression outputs (target units) or ``(N, M, C)`` probabilities of a fitted
    estimator; a single model (a GBDT) is one member."""
    if hasattr(est, "predict_members"):
        return np.asarray(est.predict_members(X), dtype=np.float64)
    single = est.predict(X) if task == "regression" else est.predict_proba(X)
    return np.asarray(single, dtype=np.float64)[:, None]


def _estimator_metrics(est, splits, task: str) -> tuple[dict[str, float], int]:
    """Test and validation scores (and test diversity) of a fitted estimator; its member count."""
    import warnings

    from ensemblize.data.table_preprocessing import UnknownCategoryWarning, UnseenMissingValueWarning

    with warnings.catch_warnings():  # test / validation rows of real tables hold unseen values: expected
        warnings.simplefilter("ignore", UnknownCategoryWarning)
        warnings.simplefilter("ignore", UnseenMissingValueWarning)
        return _scored_parts(est, splits, task)


def _scored_parts(est, splits, task: str) -> tuple[dict[str, float], int]:
    out: dict[str, float] = {}
    y_tr = splits.train.y.to_numpy()
    mean, std = (float(np.mean(y_tr)), float(np.std(y_tr))) if task == "regression" else (0.0, 1.0)
    for prefix, part in (("", splits.test), ("val_", splits.val)):
        members = _member_outputs(est, part.X, task)
        if task == "regression":
            z = (members - mean) / std
            out.update(
                _scores(task, (part.y.to_numpy(dtype=np.float64) - mean) / std, z.mean(axis=1), prefix=prefix)
            )
        else:
            y = _class_index(est.classes_, part.y, part=prefix or "test_")
            out.update(
                _scores(task, y, np.asarray(est.predict_proba(part.X), dtype=np.float64), prefix=prefix)
            )
            z = members
        if not prefix:
            out.update(_diversity(task, z))
    return out, int(members.shape[1])


def _n_params(est) -> int:
    model = getattr(est, "model_", None)
    return int(sum(p.numel() for p in model.parameters())) if model is not None else -1


@functools.cache
def _warm_up(method: str, task: str) -> None:
    """Fit ``method`` once on a tiny synthetic table, untimed, the first time a process meets it.

    The first fit in a process pays one-time costs — imports, torch's first-call set-up, the GBDT
    library's loading — that are no part of fitting (1–2 CPU s, which dominated small tables and
    went to whichever method ran first). Every timed fit therefore starts warm.
    """
    import pandas as pd

    X, y = _warm_up_table(task)
    if method == "sigma":  # no estimator: the job's own code path on the table's preprocessed split
        from ensemblize.data.table_preprocessing import prepare
        from ensemblize.data.tables import TabularDataset

        table = TabularDataset(
            X=X, y=pd.Series(y), task=task, name="warm-up", numeric=["a", "b"], categorical=["c"]
        )
        _sigma_job(prepare(table, seed=0), seed=0, cfg=budget_config("tiny", len(y)), keep_history=False)
        return
    est, _ = make_estimator(method, task, seed=0, cfg=budget_config("tiny", len(y)))
    est.fit(X.iloc[:48], y[:48], eval_set=(X.iloc[48:], y[48:]))


def _warm_up_table(task: str) -> tuple[Any, np.ndarray]:
    """A 64-row synthetic table (two numeric columns, one categorical) and a ``task`` target."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 64
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["u", "v", "w"], n)})
    if task == "regression":
        return X, X["a"].to_numpy() + rng.normal(size=n)
    if task == "binclass":
        return X, (X["a"] > 0).astype(int).to_numpy()
    return X, np.digitize(X["a"].to_numpy(), [-0.5, 0.5])


def _timed_fit(est, splits, *, method: str) -> tuple[float, float]:
    """Fit ``est`` on the raw training table, early-stopping on the validation table; wall and CPU
    seconds (after an untimed :func:`_warm_up` of ``method`` in this process)."""
    _warm_up(method, splits.train.task)
    wall, cpu = time.perf_counter(), time.process_time()
    est.fit(splits.train.X, splits.train.y, eval_set=(splits.val.X, splits.val.y))
    return time.perf_counter() - wall, time.process_time() - cpu


def _estimator_job(method, splits, *, seed, cfg, keep_history) -> dict[str, Any]:
    task = splits.train.task
    est, applied = make_estimator(method, task, seed=seed, cfg=cfg)
    wall, cpu = _timed_fit(est, splits, method=method)
    history = list(getattr(est, "history_", None) or [])
    metrics, members = _estimator_metrics(est, splits, task)
    record = {
        "members": members,
        "params": _n_params(est),
        "train_seconds": wall,
        "cpu_seconds": cpu,
        "metrics": metrics,
        "setting": applied,
        "best_epoch": getattr(est, "best_epoch_", None),  # the first network's
        "best_epochs": getattr(est, "best_epochs_", None),  # one per pooled network
        # refit_full: the fitted networks trained on the validation rows, so val_* scores are not held out
        "refit_epochs": getattr(est, "refit_epochs_", None),
        "epochs": len(history),  # all networks' epochs
    }
    if keep_history:
        record["history"] = history
    return record


def _gbdt_job(method, splits, *, seed, cfg) -> dict[str, Any]:
    """The public GBDT wrapper (``kind=method``) on the raw split tables; ``params`` counts its trees."""
    task = splits.train.task
    est, setting = make_estimator(method, task, seed=seed, cfg=cfg)
    wall, cpu = _timed_fit(est, splits, method=method)
    metrics, _ = _estimator_metrics(est, splits, task)
    rounds = int(est.best_iteration_) + 1
    return {
        "members": 1,
        "params": rounds * (len(est.classes_) if task == "multiclass" else 1),
        "train_seconds": wall,
        "cpu_seconds": cpu,
        "metrics": metrics,
        "setting": setting,  # the configuration only: the same for every seed, so seeds group together
        "rounds": rounds,  # the outcome of early stopping
    }


def _sigma_job(prepared, *, seed, cfg, keep_history) -> dict[str, Any]:
    """σN-Ens of a normalised MLP on the preprocessed matrices (no estimator exists for it)."""
    import torch

    from ensemblize.tabular.estimators import safe_bins
    from ensemblize.tabular.sigma_mlp import build_sigma_tab_mlp, sigma_regularizer
    from ensemblize.tabular.train import predict_members, train_model

    regression = prepared.task == "regression"
    task_budget = {k: _lometab_defaults(prepared.task)[k] for k in _BUDGET_KEYS}  # the same as LoMETab's
    c = {**_lometab_defaults(), **task_budget, **_SIGMA, **cfg}
    x_tr, y_tr = torch.from_numpy(prepared.X_train), torch.from_numpy(prepared.y_train)
    n_num = prepared.n_numeric
    bins = None
    if n_num:
        n_bins = min(int(c["n_bins"]), len(x_tr) - 1)
        bins = safe_bins(x_tr[:, :n_num], y_tr, n_bins=n_bins, method="quantile", regression=regression)
    arch = {"n_num": n_num, "cat_cardinalities": prepared.preprocessor.cat_cardinalities_,
            "n_out": 1 if regression else int(prepared.n_classes), "regression": regression,
            "n_blocks": int(c["n_blocks"]), "d_block": int(c["d_block"]), "dropout": float(c["dropout"]),
            "embedding": "piecewise" if n_num else "none", "bins": bins, "d_embedding": int(c["d_embedding"])}  # fmt: skip
    cpu = time.process_time()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = build_sigma_tab_mlp(members=int(c["members"]), noise=float(c["noise"]), seed=int(seed),
                                    norm=c["norm"], **arch)  # fmt: skip
        res = train_model(
            model, x_tr, y_tr, torch.from_numpy(prepared.X_val), torch.from_numpy(prepared.y_val),
            regression=regression, members=int(c["members"]), lr=float(c["lr"]),
            weight_decay=float(c["weight_decay"]), max_epochs=int(c["max_epochs"]), patience=int(c["patience"]),
            seed=int(seed), regularizer=sigma_regularizer(float(c["tau"]), float(c["lam"])),
        )  # fmt: skip
    cpu = time.process_time() - cpu
    metrics: dict[str, float] = {}
    for prefix, x, y in (("", prepared.X_test, prepared.y_test), ("val_", prepared.X_val, prepared.y_val)):
        out = predict_members(model, torch.from_numpy(x)).double()
        members = out.numpy() if regression else torch.softmax(out, dim=-1).numpy()
        metrics.update(_scores(prepared.task, y, members.mean(axis=1), prefix=prefix))
        if not prefix:
            metrics.update(_diversity(prepared.task, members))
    keys = ("members", "n_blocks", "d_block", "lr", "weight_decay", "max_epochs", "patience", *_SIGMA)
    record = {
        "members": int(c["members"]), "params": int(sum(p.numel() for p in model.parameters())),
        "train_seconds": float(res.train_seconds), "cpu_seconds": cpu, "metrics": metrics,
        "setting": {k: c[k] for k in keys}, "best_epoch": res.best_epoch, "epochs": len(res.history),
    }  # fmt: skip
    if keep_history:
        record["history"] = res.history
    return record


@functools.lru_cache(maxsize=4)
def _prepared(dataset: str, split_seed: int, max_rows: int | None):
    from ensemblize.data.table_preprocessing import prepare

    return prepare(load_split(dataset, split_seed=split_seed, max_rows=max_rows), seed=split_seed)


def tabular_job(
    *,
    method: str,
    dataset: str,
    seed: int,
    split_seed: int = 0,
    budget: str = "quick",
    overrides: dict[str, Any] | None = None,
    max_rows: int | None = None,
    keep_history: bool = False,
    name: str | None = None,
    defaults: str | None = None,
) -> list[dict[str, Any]]:
    """Train and score ``method`` on registry table ``dataset`` (split ``split_seed``) with ``seed``.

    A pure function of its arguments (all JSON-able), so it is a :class:`~ensemblize.experiments.jobs.Job`.
    Returns one record (see the module docstring); ``name`` replaces the method name in the record
    (grid cells), ``keep_history`` adds the per-epoch training history; ``defaults`` (the planning
    process's :func:`defaults_digest`) makes a process with other estimator defaults refuse the job.

    Raises ValueError for an unknown method, budget or override, and RuntimeError naming what to
    install when the method cannot run here.
    """
    from ensemblize._checks import check_int

    check_choice(method, tuple(METHODS), name="method")
    seed = check_int(seed, name="seed", minimum=0)
    if defaults is not None and defaults != defaults_digest():
        raise RuntimeError(
            f"this job was planned with tabular estimator defaults {defaults!r}, but this process's "
            f"ensemblize has {defaults_digest()!r}: run every process of one experiment on one version"
        )
    why = method_available(method)
    if why is not None:
        raise RuntimeError(why)
    splits = load_split(dataset, split_seed=split_seed, max_rows=max_rows)
    cfg = budget_config(budget, splits.train.n_rows, **(overrides or {}))
    if method in GBDT_METHODS:
        body = _gbdt_job(method, splits, seed=seed, cfg=cfg)
    elif method == "sigma":
        _warm_up(method, splits.train.task)
        body = _sigma_job(
            _prepared(dataset, split_seed, max_rows), seed=seed, cfg=cfg, keep_history=keep_history
        )
    else:
        body = _estimator_job(method, splits, seed=seed, cfg=cfg, keep_history=keep_history)
    record = {"method": name or method, "dataset": dataset, "seed": seed, **body}
    record.update(
        {"budget": budget, "split_seed": split_seed, "task": splits.train.task, "base_method": method,
         "defaults": defaults_digest()}
    )  # fmt: skip
    if max_rows is not None:
        record["max_rows"] = max_rows
    return [record]
