"""Budgeted hyper-parameter tuning of tabular estimators on Optuna (optional extra: ``ensemblize[tune]``).

:func:`tune` searches an estimator's hyper-parameters with Optuna's TPE sampler and prunes
unpromising trials on their per-epoch validation scores; :func:`tune_csv` does the same for a
user's CSV file and writes the fitted model and a report (``ensemblize tune``).

Protocol (nothing here ever sees a test set):

1. ``(X, y)`` is split once, seeded, into tuning-train rows and validation rows
   (``val_fraction``, stratified for classifiers when every class has two rows or more);
2. every trial clones the estimator, sets the suggested hyper-parameters, fits on the
   tuning-train rows with ``eval_set=`` the validation rows (early stopping watches them) and is
   scored on the validation rows (``metric``: log-loss or accuracy for classifiers, RMSE for
   regressors);
3. per-epoch validation scores are reported to Optuna as intermediate values. An estimator whose
   ``fit`` accepts ``callbacks=`` (each called as ``cb(epoch, record, model)`` after every epoch,
   returning ``True`` to stop — the contract of :func:`ensemblize.training.fit`) is stopped as
   soon as the pruner says so, and the trial is PRUNED; otherwise its ``history_`` is reported
   after ``fit`` (recorded for the pruner's statistics, the trial is not pruned). With
   ``n_networks > 1`` only the first network's epochs are reported and pruned on, so step ``s``
   is epoch ``s`` of a first network in every trial;
4. with ``refit=True`` the best trial's hyper-parameters are fitted again on the same rows and
   seed, so ``result.best_estimator`` is that trial's model.

Trials run with ``refit_full=False`` whatever the estimator says (a refit would train on the
validation rows the trial is scored on), so ``best_estimator`` is the validated fit; to retrain
it on all rows, ``best_estimator.set_params(refit_full=True)`` and fit it again with ``eval_set``.

Scaling out is Optuna's own distributed mode: give the same ``storage`` and ``study_name`` to
several processes or machines and they tune one study together. ``storage`` is a journal file
(a path; :class:`optuna.storages.journal.JournalFileBackend`, for processes sharing a file
system), an RDB URL such as ``postgresql://user@host/db`` or ``sqlite:///tune.db``, or any
:class:`optuna.storages.BaseStorage`. ``n_trials`` is then the size of the whole study: a process
starts a new trial only while fewer than ``n_trials`` trials exist in the storage (trials started
by other processes included), so the study ends with ``n_trials`` trials, or at most one more per
extra process when two processes start a trial at the same instant. A process killed in the
middle of a trial leaves that trial RUNNING in a journal file (an RDB storage with a heartbeat can
fail it instead).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ensemblize._checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_instance,
    check_int,
    check_positive,
)
from ensemblize.report.environment import record_environment
from ensemblize.tabular.holdout import holdout_indices

__all__ = [
    "METRICS",
    "InterruptedWhileWriting",
    "TableFileError",
    "TuneResult",
    "lometab_search_space",
    "parse_duration",
    "tune",
    "tune_csv",
]

METRICS = {"log_loss": "minimize", "accuracy": "maximize", "rmse": "minimize"}
"""Validation objectives and their directions (``"auto"``: log-loss for classifiers, RMSE for regressors)."""

_EPOCH_KEYS = {
    "log_loss": ("val_nll", "val_loss"),
    "accuracy": ("val_accuracy",),
    "rmse": ("val_rmse",),
}
"""Keys of a per-epoch training record that hold the validation score of each metric, first found wins."""

_INSTALL = "pip install ensemblize[tune]"


def _optuna():
    try:
        import optuna
    except ImportError as exc:
        raise ImportError(f"tuning needs Optuna, an optional extra: {_INSTALL}") from exc
    return optuna


# ------------------------------------------------------------------------------------------------
# search space
# ------------------------------------------------------------------------------------------------
def lometab_search_space() -> dict[str, Any]:
    """The default search space of the LoMETab estimators, as Optuna distributions.

    ===============  =========================================  ===========================================
    parameter        range                                      why
    ===============  =========================================  ===========================================
    ``rank``         int 1 – 16, log scale                      adapter rank r: diversity axis 1
    ``init_scale``   float 0.3 – 8, log scale                   σ_init: diversity axis 2 (default 4 inside)
    ``lr``           float 1e-4 – 5e-3, log scale               AdamW learning rate (TabM's range)
    ``weight_decay`` float 1e-5 – 1e-1, log scale               AdamW decoupled weight decay
    ``n_blocks``     int 1 – 4                                  MLP depth
    ``d_block``      int 64 – 512, step 64                      MLP width
    ``dropout``      float 0 – 0.5                              dropout after every block
    ``n_bins``       int 8 – 64                                 piecewise-linear bins per numeric column
    ``d_embedding``  int 8 – 32, step 4                         numeric embedding width
    ===============  =========================================  ===========================================

    Everything else (``members``, ``max_epochs``, ``patience``, …) keeps the estimator's value.
    Raises ImportError without Optuna.
    """
    d = _optuna().distributions
    return {
        "rank": d.IntDistribution(1, 16, log=True),
        "init_scale": d.FloatDistribution(0.3, 8.0, log=True),
        "lr": d.FloatDistribution(1e-4, 5e-3, log=True),
        "weight_decay": d.FloatDistribution(1e-5, 1e-1, log=True),
        "n_blocks": d.IntDistribution(1, 4),
        "d_block": d.IntDistribution(64, 512, step=64),
        "dropout": d.FloatDistribution(0.0, 0.5),
        "n_bins": d.IntDistribution(8, 64),
        "d_embedding": d.IntDistribution(8, 32, step=4),
    }


def _resolve_space(estimator: Any, search_space: Any) -> Any:
    """The search space to use: the given one (checked against the estimator) or LoMETab's default."""
    optuna = _optuna()
    params = estimator.get_params()
    if search_space is None:
        default = lometab_search_space()
        if not set(default) <= set(params):
            raise ValueError(
                f"no default search space for {type(estimator).__name__} (it lacks "
                f"{sorted(set(default) - set(params))}); pass search_space="
            )
        return default
    if callable(search_space):
        return search_space
    if not isinstance(search_space, Mapping) or not search_space:
        raise TypeError(
            "search_space must be a non-empty dict {name: optuna distribution} or a callable "
            f"trial -> dict, got {search_space!r}"
        )
    for name, dist in search_space.items():
        if name not in params:
            raise ValueError(f"search_space names {name!r}, not a parameter of {type(estimator).__name__}")
        check_instance(
            dist,
            optuna.distributions.BaseDistribution,
            name=f"search_space[{name!r}]",
            what="an optuna distribution",
        )
    return dict(search_space)


def _suggest(trial: Any, space: Any) -> dict[str, Any]:
    if callable(space):
        return dict(
            check_instance(space(trial), Mapping, name="what search_space(trial) returns", what="a dict")
        )
    return {name: _suggest_one(trial, name, dist) for name, dist in space.items()}


def _suggest_one(trial: Any, name: str, dist: Any) -> Any:
    """One value of ``dist`` through the trial's public ``suggest_*`` API."""
    d = _optuna().distributions
    if isinstance(dist, d.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, d.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, d.CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise TypeError(f"search_space[{name!r}]: unsupported distribution {type(dist).__name__}")


# ------------------------------------------------------------------------------------------------
# data and scores
# ------------------------------------------------------------------------------------------------
def _take(a: Any, idx: np.ndarray) -> Any:
    return a.iloc[idx] if hasattr(a, "iloc") else np.asarray(a)[idx]


def _split(
    X: Any, y: Any, *, val_fraction: float, seed: int, classify: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (first, second) row indices — (tuning-train, validation) or (rest, test) — stratified
    for classification where possible.

    For classification, the rows of a class seen only once always go to the first part: a class
    the model never trains on could not be predicted, and its one row in a validation split would
    make that class unknown to the trial's estimator. ``val_fraction`` is a share of all rows.
    """
    n = len(np.asarray(y))
    if len(X) != n:
        raise ValueError(f"X has {len(X)} rows but y has {n} entries")
    try:
        return holdout_indices(y, n_holdout=int(round(val_fraction * n)), seed=seed, classify=classify)
    except ValueError as err:
        raise ValueError(f"val_fraction={val_fraction}: {err}") from None


def _score(estimator: Any, X: Any, y: Any, metric: str) -> float:
    """Validation score of a fitted estimator: log-loss, accuracy or RMSE (target units)."""
    from sklearn.metrics import accuracy_score, log_loss

    if metric == "log_loss":
        proba = np.asarray(estimator.predict_proba(X), dtype=np.float64)
        return float(log_loss(np.asarray(y), proba, labels=list(estimator.classes_)))
    if metric == "accuracy":
        return float(accuracy_score(np.asarray(y), estimator.predict(X)))
    diff = np.asarray(estimator.predict(X), dtype=np.float64) - np.asarray(y, dtype=np.float64)
    return float(np.sqrt(np.mean(diff**2)))


def _resolve_metric(estimator: Any, metric: str) -> str:
    from sklearn.base import is_classifier

    if check_choice(metric, ("auto", *METRICS), name="metric") == "auto":
        return "log_loss" if is_classifier(estimator) else "rmse"
    if is_classifier(estimator) == (metric == "rmse"):
        kind = "classifier" if is_classifier(estimator) else "regressor"
        raise ValueError(f"metric {metric!r} does not apply to a {kind}")
    return metric


# ------------------------------------------------------------------------------------------------
# one trial
# ------------------------------------------------------------------------------------------------
class _EpochReporter:
    """Reports each epoch's validation score to a trial; asks to stop when the pruner says so.

    Called as ``reporter(epoch, record, model)`` (the :func:`ensemblize.training.fit` callback
    contract); returns ``True`` to stop training once the trial should be pruned.
    """

    def __init__(
        self,
        trial: Any,
        metric: str,
        on_epoch: Callable[[int, float], None] | None = None,
        on_network: Callable[[int, int], None] | None = None,
    ) -> None:
        self.trial = trial
        self.keys = _EPOCH_KEYS[metric]
        self.step = 0
        self.pruned_at: int | None = None
        self.on_epoch = on_epoch  # called with (epoch, validation score) of the first network
        self.on_network = on_network  # called with (network, epoch) of the later networks

    def _value(self, record: Mapping[str, Any]) -> float | None:
        for key in self.keys:
            v = record.get(key)
            if v is not None and math.isfinite(float(v)):
                return float(v)
        return None

    @staticmethod
    def _first_network(record: Mapping[str, Any]) -> bool:
        return int(record.get("network", 0)) == 0

    def report(self, record: Mapping[str, Any]) -> None:
        """Report one epoch (no pruning decision): for histories replayed after ``fit``.

        Only the first network's epochs are reported: an estimator with ``n_networks > 1`` trains
        its networks one after another, and step ``s`` must mean epoch ``s`` of the same kind of
        run in every trial, or the pruner would compare a second network's first epochs with
        another trial's first network late in training.
        """
        if not self._first_network(record):
            return
        value = self._value(record)
        if value is not None:
            self.trial.report(value, self.step)
            if self.on_epoch is not None:
                self.on_epoch(self.step, value)
        self.step += 1

    def __call__(self, epoch: int, record: Mapping[str, Any], model: Any = None) -> bool:
        if not self._first_network(record):  # later networks: no step to compare, so no pruning decision
            if self.on_network is not None:
                self.on_network(int(record.get("network", 0)), epoch)
            return False
        self.report(record)
        if self.trial.should_prune():
            self.pruned_at = self.step
            return True
        return False


def _fit_params(estimator: Any) -> set[str]:
    try:
        return set(inspect.signature(estimator.fit).parameters)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return set()


def _fit_trial(estimator: Any, data: dict[str, Any], reporter: _EpochReporter | None) -> Any:
    """Fit on the tuning-train rows, early-stopping on the validation rows; report epochs."""
    accepted = _fit_params(estimator)
    kwargs: dict[str, Any] = {}
    if "eval_set" in accepted:
        kwargs["eval_set"] = (data["X_val"], data["y_val"])
    live = reporter is not None and "callbacks" in accepted
    if live:
        kwargs["callbacks"] = [reporter]
    estimator.fit(data["X_train"], data["y_train"], **kwargs)
    if reporter is not None and not live:
        for record in getattr(estimator, "history_", None) or []:
            reporter.report(record)
    return estimator


def _configured(estimator: Any, params: Mapping[str, Any], seed: int) -> Any:
    from sklearn.base import clone

    est = clone(estimator)
    fixed = dict(params)
    if "random_state" in est.get_params() and est.get_params()["random_state"] is None:
        fixed.setdefault("random_state", seed)
    if est.get_params().get("refit_full"):
        fixed["refit_full"] = False  # a trial is scored on its validation rows: no refit may train on them
    return est.set_params(**fixed)


# ------------------------------------------------------------------------------------------------
# the study
# ------------------------------------------------------------------------------------------------
def _storage(storage: Any) -> Any:
    """None (in memory), an RDB URL, a journal-file path or a storage object -> what Optuna takes."""
    optuna = _optuna()
    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return storage
    if isinstance(storage, (str, os.PathLike)):
        text = os.fspath(storage)
        if "://" in text:
            return _rdb_storage(text)
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        _check_writable_path(Path(text), what="storage journal file")
        path = Path(text)
        if path.is_file() and path.stat().st_size:
            with path.open("rb") as f:
                first = f.readline(65536)
            try:
                json.loads(first)
            except ValueError:
                raise ValueError(
                    f"storage {text!r} is an existing file that is not an Optuna journal (its first line "
                    "is not JSON); nothing in it was changed — give a new path or a journal file"
                ) from None
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(text))
    raise TypeError(
        f"storage must be None, a journal-file path, an RDB URL or an optuna storage, got {storage!r}"
    )


def _check_writable_path(path: Path, *, what: str, folder: bool = False) -> None:
    """Refuse, before any work, a ``path`` that could not be written later: a folder where a file is
    wanted (or the reverse), or a parent that is a file or not writable."""
    from ensemblize.run_folder import uncreatable

    if path.exists() and path.is_dir() != folder:
        raise ValueError(f"{what} {str(path)!r} is an existing {'file' if folder else 'folder'}")
    why = uncreatable(path)
    if why:
        raise ValueError(f"{what} {str(path)!r} cannot be created: {why}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {str(path)!r} is not writable here")


def _rdb_storage(url: str) -> Any:
    """``optuna.storages.RDBStorage(url)``; a URL that cannot be opened is one ValueError naming it
    (SQLAlchemy's own error is a 50-frame traceback)."""
    optuna = _optuna()
    try:
        return optuna.storages.RDBStorage(url)
    except ImportError as exc:  # the database's driver (psycopg2 for postgresql://, pymysql, …)
        raise ValueError(
            f"storage {url!r}: the database driver is not installed ({exc}); e.g. pip install "
            "psycopg2-binary for postgresql://"
        ) from None
    except Exception as exc:  # SQLAlchemy errors: no file, no server, bad credentials, …
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        hint = ""
        if url.startswith("sqlite:///"):
            folder = Path(url[len("sqlite:///") :]).parent
            if not folder.is_dir():
                hint = f" (the folder {folder} does not exist)"
        raise ValueError(f"storage {url!r} cannot be opened: {reason}{hint}") from None


def _default_pruner():
    return _optuna().pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=5)


def _make_study(*, storage, study_name, direction, seed, pruner):
    optuna = _optuna()
    shared = storage is not None
    # Processes sharing a study must not replay each other's random start-up draws.
    sampler_seed = (seed * 1_000_003 + os.getpid()) % 2**32 if shared else seed
    sampler = optuna.samplers.TPESampler(n_startup_trials=5, seed=sampler_seed)
    return optuna.create_study(
        storage=_storage(storage),
        sampler=sampler,
        pruner=_default_pruner() if pruner is None else pruner,
        study_name=study_name,
        direction=direction,
        load_if_exists=shared,
    )


_IDENTITY_KEY = "ensemblize.tune"


_NOT_IDENTITY = frozenset({"device", "verbose"})
"""Estimator parameters that do not make a tuning job another study (see :func:`_study_identity`)."""


def _study_identity(estimator, X, y, *, metric, val_fraction, seed, space) -> dict[str, Any]:
    """What makes two :func:`tune` calls the same study: objective, estimator, data, split, space."""
    import hashlib

    import pandas as pd

    from ensemblize.tabular.inputs import as_frame

    frame = as_frame(X, name="X")
    h = hashlib.sha256()
    h.update(pd.util.hash_pandas_object(frame.rename(columns=str), index=False).to_numpy().tobytes())
    h.update(pd.util.hash_pandas_object(pd.Series(np.asarray(y)), index=False).to_numpy().tobytes())
    names = sorted(space) if isinstance(space, Mapping) else f"callable {getattr(space, '__qualname__', '?')}"
    # the settings every trial shares (the searched ones excepted): two jobs whose estimators differ in
    # a fixed setting (max_epochs, calibration, ...) are different studies — the refit of one's best
    # trial under the other's settings is another model. Where a process runs (device) or how loudly
    # (verbose) does not change the model, so machines of different kinds can share a study.
    searched = set(space) if isinstance(space, Mapping) else set()
    fixed = {
        k: (
            v
            if isinstance(v, (str, int, float, bool, type(None)))
            else re.sub(r" at 0x[0-9a-fA-F]+", "", repr(v))
        )
        for k, v in sorted(estimator.get_params(deep=False).items())
        if k not in searched and k not in _NOT_IDENTITY
    }
    return {
        "metric": metric,
        "direction": METRICS[metric],
        "estimator": f"{type(estimator).__module__}.{type(estimator).__qualname__}",
        "estimator_params": fixed,
        "data": f"{frame.shape[0]}x{frame.shape[1]}:{h.hexdigest()[:16]}",
        "val_fraction": val_fraction,
        "seed": seed,
        "search_space": names,
    }


def _claim_study(study: Any, identity: dict[str, Any]) -> None:
    """Record ``identity`` on a new study; refuse a loaded one that was made for something else.

    A shared study is found by name only, so a second call with another metric, estimator, data set
    or search space would otherwise mix its trials with the first one's (and read a log-loss as an
    accuracy when the stored direction differs).
    """
    stored_direction = study.direction.name.lower()
    saved = study.user_attrs.get(_IDENTITY_KEY)
    if saved is None:
        # an empty study too: one made beforehand (`optuna create-study` defaults to minimize) would
        # otherwise be optimised the wrong way round, its worst trial refitted as the best
        if stored_direction != identity["direction"]:
            raise ValueError(
                f"study {study.study_name!r} optimises in direction {stored_direction!r}, but metric "
                f"{identity['metric']!r} needs {identity['direction']!r}; use another study_name"
            )
        study.set_user_attr(_IDENTITY_KEY, identity)
        return
    now = json.loads(json.dumps(identity))  # as the storage holds it (tuples become lists)
    diff = []
    for k, v in now.items():
        old = saved.get(k)
        if old == v:
            continue
        if isinstance(old, dict) and isinstance(v, dict):  # name only the settings that differ
            keys = sorted(old.keys() | v.keys())
            diff += [
                f"{k}.{n}: study {old.get(n)!r} vs now {v.get(n)!r}" for n in keys if old.get(n) != v.get(n)
            ]
        else:
            diff.append(f"{k}: study {old!r} vs now {v!r}")
    if diff:
        raise ValueError(
            f"study {study.study_name!r} in this storage was created for another tuning job "
            f"({'; '.join(diff)}); use another study_name, or the same settings and data to join it"
        )


_TRIAL_ERRORS = (FloatingPointError, ValueError, RuntimeError)
"""A trial raising one of these is recorded as FAIL and the study goes on (a diverging or
out-of-memory configuration must not end the search); anything else propagates."""

_MAX_FAILS_BEFORE_A_SUCCESS = 3


def _fail_reason(trial: Any) -> str:
    return str(trial.user_attrs.get("fail_reason", "no reason recorded"))


class _WarningsOnce:
    """Show each distinct warning once per study instead of once per trial.

    Every trial fits a fresh clone on the same rows, so a warning about the data (an identifier
    column, a constant column, ...) would otherwise repeat in every trial. Inside :meth:`shown_once`
    warnings are recorded; afterwards each ``(category, message)`` not shown before in this study is
    re-issued through the user's own filters (``"error"``/``"ignore"`` still apply).
    """

    def __init__(self) -> None:
        self._seen: set[tuple[type, str]] = set()

    @contextmanager
    def shown_once(self) -> Iterator[None]:
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield
        finally:  # a failing trial's warnings are shown too
            for w in caught:
                key = (w.category, str(w.message))
                if key not in self._seen:
                    self._seen.add(key)
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _recording_failures(objective: Callable[[Any], float]) -> Callable[[Any], float]:
    """``objective`` that stores a failing trial's error (type and message) as its ``fail_reason``."""

    def run(trial: Any) -> float:
        try:
            return objective(trial)
        except _TRIAL_ERRORS as exc:
            trial.set_user_attr("fail_reason", f"{type(exc).__name__}: {exc}")
            raise

    return run


class _TrialProgress:
    """:func:`tune`'s progress: one step per finished trial of this process, the running trial's epochs."""

    def __init__(self, study: Any, metric: str, *, n_trials: int | None, enabled: bool) -> None:
        from ensemblize.training.progress import Progress

        self.study, self.metric = study, metric
        # with a shared storage n_trials counts the whole study: this process runs at most the rest
        total = None if n_trials is None else max(0, n_trials - len(_started(study)))
        self.bar = Progress(total, desc="tune", unit="trial", enabled=enabled)

    def _best(self) -> str:
        try:
            best = self.study.best_trial
        except ValueError:  # no completed trial yet
            return "best: none yet"
        return f"best {self.metric} {best.value:.4g} (trial {best.number})"

    def epoch(self, number: int, epoch: int, value: float) -> None:
        if (
            self.bar.bar is None
        ):  # silent, or lines mode: a note shows nothing (and _best queries the storage)
            return
        # the per-epoch score is the training loop's: a regressor's RMSE of its standardised target
        label = "rmse/std" if self.metric == "rmse" else self.metric
        self.bar.note(f"trial {number} network 1 epoch {epoch} val {label} {value:.4g}; {self._best()}")

    def network(self, number: int, network: int, epoch: int) -> None:
        if self.bar.bar is None:
            return
        self.bar.note(f"trial {number} network {network + 1} epoch {epoch}; {self._best()}")

    def finished(self, trial: Any) -> None:
        state = trial.state.name
        score = f" {self.metric} {trial.value:.4g}" if state == "COMPLETE" and trial.value is not None else ""
        self.bar.step(f"trial {trial.number} {state.lower()}{score}; {self._best()}")

    def close(self) -> None:
        self.bar.close()


def _started(study: Any) -> list[Any]:
    """The study's trials that ran or are running (a queued, WAITING trial has not started: it counts
    against no budget)."""
    state = _optuna().trial.TrialState
    return study.get_trials(deepcopy=False, states=(state.COMPLETE, state.PRUNED, state.FAIL, state.RUNNING))


def _run_trials(
    study: Any,
    objective: Callable,
    *,
    n_trials: int | None,
    timeout: float | None,
    after_trial: Callable[[Any], None] | None = None,
) -> None:
    """Start trials one at a time while the study has < ``n_trials`` trials and time is left.

    ``after_trial`` is called with each finished trial of this process (the progress bar).

    If this process's first ``_MAX_FAILS_BEFORE_A_SUCCESS`` trials all fail and no trial of the
    study has completed, the error is in the data or the estimator, not in one configuration:
    a RuntimeError quoting the first failure ends the study instead of spending the budget.
    """
    optuna = _optuna()
    deadline = None if timeout is None else time.monotonic() + timeout
    failed: list[Any] = []
    while True:
        if n_trials is not None and len(_started(study)) >= n_trials:
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        before = {t.number for t in study.get_trials(deepcopy=False)}
        study.optimize(_recording_failures(objective), n_trials=1, catch=_TRIAL_ERRORS, gc_after_trial=True)
        mine = [t for t in study.get_trials(deepcopy=False) if t.number not in before]
        failed += [t for t in mine if t.state == optuna.trial.TrialState.FAIL]
        for t in mine if after_trial is not None else ():
            after_trial(t)
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if len(failed) >= _MAX_FAILS_BEFORE_A_SUCCESS and not done:
            raise RuntimeError(
                f"the first {len(failed)} trials all failed; the first with: {_fail_reason(failed[0])}"
            )


@dataclass
class TuneResult:
    """What :func:`tune` returns.

    Attributes:
        study: the :class:`optuna.study.Study` (all its trials, from every process).
        metric: the validation objective (``"log_loss"``, ``"accuracy"`` or ``"rmse"``).
        direction: ``"minimize"`` or ``"maximize"``.
        best_params: hyper-parameters of the best completed trial.
        best_value: its validation score.
        best_estimator: the best trial refitted (``None`` with ``refit=False``).
        train_index, val_index: row positions of ``X`` used for training and validation.
        trial_numbers: numbers of the trials this process ran, in order.
    """

    study: Any
    metric: str
    direction: str
    best_params: dict[str, Any]
    best_value: float
    best_estimator: Any
    train_index: np.ndarray
    val_index: np.ndarray
    trial_numbers: list[int] = field(default_factory=list)

    def trials_table(self):
        """One row per trial as a pandas DataFrame: number, state, ``value`` (the validation ``metric``
        of a COMPLETE trial; empty for any other state), ``last_epoch_score`` with ``epochs_reported``
        (the last per-epoch validation score the trial reported, and how many it reported), the
        hyper-parameters and ``seconds`` (the trial's duration; empty while it runs).

        A PRUNED trial has no final score: Optuna stores its last per-epoch score as its value, and
        that score is on the estimator's own training scale (a regressor's RMSE of the standardised
        target, not target units), so it is kept apart, in ``last_epoch_score``.
        """
        table = self.study.trials_dataframe(attrs=("number", "state", "value", "params", "duration"))
        if not len(table):
            return table
        import pandas as pd

        table["duration"] = pd.to_timedelta(table["duration"]).dt.total_seconds()
        table = table.rename(columns={"duration": "seconds"})
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        steps = [trials[n].intermediate_values for n in table["number"]]
        complete = table["state"] == "COMPLETE"
        table["value"] = table["value"].where(complete)
        table.insert(3, "last_epoch_score", [v[max(v)] if v else math.nan for v in steps])
        table.insert(4, "epochs_reported", [len(v) for v in steps])
        return table


def _inside(dist: Any, value: Any) -> bool:
    """Whether ``value`` is a point of an Optuna int / float / categorical distribution (others: no)."""
    d = _optuna().distributions
    if isinstance(dist, d.CategoricalDistribution):
        return any(value == c and type(value) is type(c) for c in dist.choices)
    if isinstance(dist, (d.IntDistribution, d.FloatDistribution)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not dist.low <= value <= dist.high
        ):
            return False
        if isinstance(dist, d.IntDistribution) and value != int(value):
            return False
        step = getattr(dist, "step", None)
        return step is None or math.isclose((value - dist.low) / step, round((value - dist.low) / step))
    return False


def _enqueue_own_setting(study: Any, estimator: Any, space: Any) -> None:
    """Queue ``estimator``'s own values of the searched parameters as a trial, when every one lies in
    its distribution (once per study: a queued or finished trial with them is not queued again).

    So a study's first trial is the setting the user would have fitted without tuning, and the best
    trial is never worse than it on validation.
    """
    if not isinstance(space, Mapping) or not hasattr(estimator, "get_params"):
        return
    own = estimator.get_params(deep=False)
    params = {name: own.get(name) for name in space}
    if all(_inside(dist, params[name]) for name, dist in space.items()):
        study.enqueue_trial(params, skip_if_exists=True)


class _QuietInterrupt(logging.Filter):
    """Drops Optuna's traceback of a trial stopped by Ctrl-C (and its "failed with value None" line):
    the interrupt itself reaches the caller; a failed trial's error is still logged."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.exc_info
            and record.exc_info[0] is not None
            and issubclass(record.exc_info[0], KeyboardInterrupt)
        ):
            self.interrupted = True
            return False
        return not (self.interrupted and "failed with value None" in record.getMessage())


@contextmanager
def _quiet_interrupts() -> Iterator[None]:
    logger = logging.getLogger("optuna.study._optimize")  # the logger of Optuna's trial-failure lines
    quiet = _QuietInterrupt()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _check_has_features(X: Any) -> None:
    shape = getattr(X, "shape", None)
    if shape is None:
        shape = np.shape(X)
    if len(shape) == 2 and shape[1] == 0:
        raise ValueError(f"X has no feature columns (shape {tuple(shape)}): there is nothing to tune on")


def _check_budget(n_trials: Any, timeout: Any) -> tuple[int | None, float | None]:
    if n_trials is None and timeout is None:
        raise ValueError("give n_trials or timeout (seconds): a study without either never ends")
    n = None if n_trials is None else check_int(n_trials, name="n_trials", minimum=1)
    t = None if timeout is None else check_positive(timeout, name="timeout")
    return n, t


def tune(
    estimator: Any,
    X: Any,
    y: Any,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    storage: Any = None,
    study_name: str | None = None,
    search_space: Any = None,
    metric: str = "auto",
    val_fraction: float = 0.2,
    seed: int = 0,
    pruner: Any = None,
    refit: bool = True,
    progress: bool = True,
) -> TuneResult:
    """Tune ``estimator``'s hyper-parameters on ``(X, y)`` with Optuna (TPE + pruning on validation epochs).

    Args:
        estimator: an unfitted scikit-learn style estimator (cloned for every trial), e.g.
            :class:`~ensemblize.tabular.LoMETabClassifier`.
        X, y: training data (a DataFrame or array and its target); a validation split of
            ``val_fraction`` of the rows is taken from them — keep your test rows out.
        n_trials: trials in the study (with ``storage``: in the whole shared study).
        timeout: seconds after which this process starts no new trial (a running one finishes).
        storage: None (in memory), a journal-file path, an RDB URL or an optuna storage; processes
            given the same ``storage`` and ``study_name`` tune one study together.
        study_name: the study's name; required with ``storage``. A stored study refuses a job made
            for something else — another metric, estimator class, fixed estimator setting (all but
            the searched ones, ``device`` and ``verbose``), data, split or search space — naming
            what differs.
        search_space: ``{param: optuna distribution}`` or a callable ``trial -> {param: value}``;
            default :func:`lometab_search_space` (for estimators that have those parameters). With a
            mapping, the study's first trial is ``estimator``'s own values of those parameters when
            each lies in its distribution (queued once per study), so the best trial is never worse
            on validation than the untuned estimator.
        metric: ``"auto"`` (log-loss for classifiers, RMSE for regressors), ``"log_loss"``,
            ``"accuracy"`` or ``"rmse"``, scored on the validation rows.
        val_fraction: share of the rows held out for validation.
        seed: the split, the TPE sampler (alone: exactly; with ``storage``: mixed with the process
            id) and ``random_state`` of estimators whose ``random_state`` is None.
        pruner: an optuna pruner (default ``MedianPruner(n_startup_trials=3, n_warmup_steps=5)``).
        refit: return the best trial's estimator: the one this process trained in that trial, or,
            when another process ran it, the same hyper-parameters fitted again (same rows, seed).
        progress: a bar over this process's trials on stderr (a line per trial where no bar can be
            drawn, e.g. a log file): the running trial's epoch and validation score, each finished
            trial's state and score, and the study's best so far. ``False`` prints nothing
            (Optuna's own log lines are Optuna's logging settings).

    Returns a :class:`TuneResult`. A trial that raises ``FloatingPointError`` (diverged),
    ``ValueError`` or ``RuntimeError`` (e.g. out of memory) is recorded as FAIL and the study goes
    on — unless this process's first three trials all fail while none has completed anywhere,
    which ends the study with a RuntimeError quoting the first failure.

    Raises:
        ImportError: Optuna is not installed (``pip install ensemblize[tune]``).
        ValueError / TypeError: no budget, a bad metric, split, storage or search space (named).
        RuntimeError: ``refit=True`` but no trial completed.
    """
    n_trials, timeout = _check_budget(n_trials, timeout)
    seed = check_int(seed, name="seed", minimum=0)
    val_fraction = check_fraction(val_fraction, name="val_fraction")
    if storage is not None and not study_name:
        raise ValueError("storage is shared by study name: pass study_name= with storage=")
    from sklearn.base import is_classifier

    metric = _resolve_metric(estimator, metric)
    space = _resolve_space(estimator, search_space)
    _check_has_features(X)
    tr, va = _split(X, y, val_fraction=val_fraction, seed=seed, classify=is_classifier(estimator))
    data = {"X_train": _take(X, tr), "y_train": _take(y, tr), "X_val": _take(X, va), "y_val": _take(y, va)}
    study = _make_study(
        storage=storage, study_name=study_name, direction=METRICS[metric], seed=seed, pruner=pruner
    )
    _claim_study(
        study,
        _study_identity(estimator, X, y, metric=metric, val_fraction=val_fraction, seed=seed, space=space),
    )
    _enqueue_own_setting(study, estimator, space)
    ran: list[int] = []
    kept: dict[str, tuple[float, int, Any]] = {}  # this process's best completed trial: value, number, model
    minimize = METRICS[metric] == "minimize"
    once = _WarningsOnce()
    bar = _TrialProgress(study, metric, n_trials=n_trials, enabled=check_bool(progress, name="progress"))

    def objective(trial: Any) -> float:
        ran.append(trial.number)
        est = _configured(estimator, _suggest(trial, space), seed)
        reporter = _EpochReporter(
            trial,
            metric,
            on_epoch=lambda epoch, v: bar.epoch(trial.number, epoch, v),
            on_network=lambda network, epoch: bar.network(trial.number, network, epoch),
        )
        with once.shown_once():
            _fit_trial(est, data, reporter)
            if reporter.pruned_at is not None:
                raise _optuna().TrialPruned(f"pruned after epoch {reporter.pruned_at}")
            value = _score(est, data["X_val"], data["y_val"], metric)
        prev = kept.get("best")
        if (
            refit
            and math.isfinite(value)
            and (prev is None or (value < prev[0] if minimize else value > prev[0]))
        ):
            kept["best"] = (value, trial.number, est)
        return value

    try:
        with _quiet_interrupts():
            _run_trials(study, objective, n_trials=n_trials, timeout=timeout, after_trial=bar.finished)
    finally:
        bar.close()
    with once.shown_once():
        return _result(study, estimator, data, metric=metric, seed=seed, refit=refit, index=(tr, va), ran=ran,
                       kept={number: est for _, number, est in kept.values()})  # fmt: skip


def _result(study, estimator, data, *, metric, seed, refit, index, ran, kept=None) -> TuneResult:
    optuna = _optuna()
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        if refit:
            trials = study.get_trials(deepcopy=False)
            states = [t.state.name for t in trials]
            fails = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
            why = f"; the first failure: {_fail_reason(fails[0])}" if fails else ""
            raise RuntimeError(f"no trial completed (states: {states}){why}; nothing to refit")
        best_params, best_value = {}, math.nan
    else:
        best_params, best_value = dict(study.best_trial.params), float(study.best_value)
    best = None
    if refit:
        # the best trial's own estimator when this process trained it (a refit would repeat the same
        # seeded fit), else a refit of its hyper-parameters
        best = (kept or {}).get(study.best_trial.number)
        if best is None:
            best = _fit_trial(_configured(estimator, best_params, seed), data, None)
    return TuneResult(
        study=study,
        metric=metric,
        direction=METRICS[metric],
        best_params=best_params,
        best_value=best_value,
        best_estimator=best,
        train_index=index[0],
        val_index=index[1],
        trial_numbers=ran,
    )


# ------------------------------------------------------------------------------------------------
# a user's CSV (``ensemblize tune``)
# ------------------------------------------------------------------------------------------------
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_ORDER = "dhms"  # largest first: the order of the parts of a compound duration


def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration: a number of seconds, or ``"90s"``, ``"10m"``, ``"1h30m"``, ``"2.5h"``.

    Raises ValueError naming the text when it is not a positive duration.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return check_positive(text, name="duration")
    if not isinstance(text, str):
        raise TypeError(f"duration must be a string like '10m' or a number of seconds, got {text!r}")
    if re.search(r"[\d.]\s+[\d.]", text):  # "10 20" is not 1020 seconds
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)")
    s = text.strip().lower().replace(" ", "")
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)")
    units = [u for _, u in parts]
    order = [_ORDER.index(u) for u in units if u]
    if len(parts) > 1 and ("" in units or order != sorted(set(order))):
        # "1h30" would read 30 as seconds; "30m1h" or "1m1m" are typos, not durations
        raise ValueError(
            f"not a duration: {text!r}: with several parts every number needs its unit, largest first, "
            "each unit once (e.g. 1h30m)"
        )
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return seconds


def _infer_task(y, *, target: str, task: str) -> str:
    import pandas as pd

    if check_choice(task, ("auto", "classification", "regression"), name="task") == "regression":
        if not pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y):
            raise ValueError(
                f"target column {target!r} is not numeric (dtype {y.dtype}); --task regression needs numbers"
            )
        return task
    if task == "classification":
        if pd.api.types.is_float_dtype(y) and not np.all(y.to_numpy() == np.round(y.to_numpy())):
            raise ValueError(
                f"target column {target!r} holds fractional numbers (e.g. {y[y != np.round(y)].iloc[0]!r}); "
                "--task classification needs class labels"
            )
        if y.nunique() < 2:
            raise ValueError(
                f"target column {target!r} has a single value {_plain(y.iloc[0])!r}; nothing to learn"
            )
        _check_class_counts(y, target=target)
        return task
    if y.nunique() < 2:
        raise ValueError(
            f"target column {target!r} has a single value {_plain(y.iloc[0])!r}; nothing to learn"
        )
    numeric = pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y)
    if not numeric:
        _check_class_counts(y, target=target)
        return "classification"
    values = y.to_numpy(dtype=np.float64)
    integral = bool(np.all(values == np.round(values)))
    if integral and y.nunique() <= _MAX_AUTO_CLASSES:
        return "classification"
    return "regression"


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds (``1``, not ``np.int64(1)``, in messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_class_counts(y, *, target: str) -> None:
    """Refuse class labels most of which occur once: an identifier, free text or a continuous number.

    Every trial would fail alike (validation rows of classes never seen in training), each failure
    printing Optuna's traceback, before the study gave up.
    """
    n, classes = len(y), int(y.nunique())
    if classes > n / 2:
        raise ValueError(
            f"target column {target!r} has {classes} distinct values in {n} rows: most classes would "
            "have a single row, so they cannot be both learnt and validated. Is it an identifier, free "
            "text, or a number to predict (--task regression)?"
        )


_MAX_AUTO_CLASSES = 20
"""``--task auto``: a numeric target whose values are all whole numbers with at most this many
distinct values is read as class labels; any other numeric target is regression."""


def _task_rule(y, task: str) -> str:
    """One line saying how ``task`` was chosen for target ``y`` (printed by ``ensemblize tune``)."""
    n = int(y.nunique())
    return (
        f"task: {task} (target has {n} distinct value(s); --task auto reads whole numbers with at most "
        f"{_MAX_AUTO_CLASSES} distinct values and non-numeric targets as classes, other numbers as "
        "regression; pass --task to override)"
    )


def _default_estimator(task: str, seed: int):
    from ensemblize.tabular.estimators import LoMETabClassifier, LoMETabRegressor

    est = (LoMETabRegressor if task == "regression" else LoMETabClassifier)(random_state=seed)
    if "impute" in est.get_params():
        est.set_params(impute=True)
    return est


def _test_scores(est, X, y, task: str, y_train) -> dict[str, float]:
    if task == "regression":
        rmse = _score(est, X, y, "rmse")
        return {"rmse": rmse, "rmse_over_train_std": rmse / float(np.std(np.asarray(y_train, float)))}
    yarr = np.asarray(y)
    seen = np.isin(yarr, np.asarray(est.classes_))
    scores = {"accuracy": float(np.mean(np.asarray(est.predict(X)) == yarr))}
    if seen.all():
        scores["log_loss"] = _score(est, X, y, "log_loss")
    else:  # a class absent from training has probability 0: log-loss on the other rows, said so
        rows = np.flatnonzero(seen)
        scores["log_loss_seen_classes"] = _score(est, _take(X, rows), yarr[rows], "log_loss")
        scores["test_rows_of_unseen_classes"] = int((~seen).sum())
    return scores


def _markdown_table(frame) -> str:
    """A pandas DataFrame as a Markdown table (floats to 6 significant digits)."""

    def cell(v: Any) -> str:
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    head = [str(c) for c in frame.columns]
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])


def _budget_text(budget: dict[str, Any]) -> str:
    """``{"seconds": 20.0, "n_trials": None}`` -> ``20 s`` (and / or ``N trials``)."""
    parts = []
    if budget.get("seconds") is not None:
        parts.append(f"{budget['seconds']:g} s")
    if budget.get("n_trials") is not None:
        n = budget["n_trials"]
        parts.append(f"{n} trial{'' if n == 1 else 's'}")
    return " or ".join(parts) + (", whichever comes first" if len(parts) == 2 else "")


def _report_markdown(report: dict[str, Any], trials_md: str) -> str:
    states = ", ".join(f"{n} {state.lower()}" for state, n in report["trial_states"].items())
    lines = [
        f"# ensemblize tune: {report['csv']} → {report['target']} ({report['task']})",
        "",
        f"- estimator: {report['estimator']}; rows: {report['rows']} "
        f"(tuning-train {report['rows_train']}, validation {report['rows_val']}, test {report['rows_test']})",
        f"- budget: {_budget_text(report['budget'])}; trials: {states}; seconds: {report['seconds']:.1f}",
        f"- validation {report['metric']} of the best trial: {report['best_value']:.6g}",
        f"- the fitted model: `{report['load_with']}`",
        "- test: " + ", ".join(f"{k} {v:.6g}" for k, v in report["test"].items()),
        "",
        "## Best hyper-parameters",
        "",
        *(f"- `{k}` = {v!r}" for k, v in report["best_params"].items()),
        "",
        "## Trials",
        "",
        trials_md,
    ]
    return "\n".join(lines) + "\n"


_OUTPUTS = (
    "model.safetensors", "model.json", "trials.csv", "report.json", "report.md", "results.json",
    "trials.png", "environment.json", "report.html",
)  # fmt: skip
_FEW_ROWS = 20
"""``tune_csv`` warns when the validation or the test split has fewer rows than this."""


def _load_line(estimator: Any, stem: Path) -> str:
    """The Python line that loads the saved model, e.g. ``from ensemblize.tabular import X; X.load('out/model')``."""
    cls = type(estimator)
    module = "ensemblize.tabular" if cls.__module__.startswith("ensemblize.tabular") else cls.__module__
    return f"from {module} import {cls.__name__}; {cls.__name__}.load({str(stem)!r})"


def _check_out(out: Path, *, overwrite: bool) -> None:
    """Refuse a file as ``out``, and an earlier result in it unless ``overwrite``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file, not a folder")
    _check_writable_path(out, what="--out", folder=True)  # before the budget is spent, not after
    from ensemblize.run_folder import MANIFEST

    marks = [name for name in ("run.json", MANIFEST) if (out / name).exists()]
    if (out / "results.json").exists() and not (out / "report.json").exists():
        marks.append("results.json")  # a run's results, not an earlier tuning result's
    if marks:  # tuning files mixed into a run break its manifest (`report` then refuses the run)
        raise ValueError(
            f"--out {out} is the run folder of another ensemblize command (it holds {', '.join(marks)}); "
            "nothing in it was changed — choose another folder for the tuning result"
        )
    found = [name for name in _OUTPUTS if (out / name).exists()]
    if found and not overwrite:
        raise ValueError(
            f"--out {out} already holds a tuning result ({', '.join(found)}); pass --overwrite to "
            "replace those files, or choose another folder"
        )


class InterruptedWhileWriting(KeyboardInterrupt):
    """Ctrl-C after tuning, while :func:`tune_csv` wrote its result: ``out`` may hold part of it."""


class TableFileError(ValueError):
    """The CSV file given to :func:`tune_csv` cannot be read as a table (empty, not CSV, duplicate names)."""


def _read_table(path: str | os.PathLike) -> Any:
    """``path`` as a DataFrame; TableFileError when it is empty, not comma-separated text, or names a
    column twice (pandas would rename the copy ``x.1`` and it would become a feature, the label's
    copy included)."""
    import pandas as pd

    try:
        header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise TableFileError(f"{path} is empty: expected a header row and data rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise TableFileError(
            f"{path} is not a readable CSV table (comma-separated text, a header row first): {exc}"
        ) from None
    twice = sorted({name for name in header if name and header.count(name) > 1})
    if twice:
        raise TableFileError(
            f"{path} names the column(s) {twice} more than once in its header; rename them (each copy would "
            "otherwise be read as another column)"
        )
    return frame


def _separator_hint(frame: Any) -> str:
    """A hint when the header looks like JSON, or was read as one column holding another separator."""
    name = str(frame.columns[0]) if frame.shape[1] else ""
    if name.lstrip().startswith(("{", "[")):
        return "; the file looks like JSON, not CSV"
    if frame.shape[1] != 1:
        return ""
    for sep, label in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
        if sep in name:
            return f"; the header is one column containing {label}: the file looks {label}-separated, but it is read as comma-separated CSV"
    return ""


def _hold_out(held: contextlib.ExitStack, out: Path, *, overwrite: bool) -> None:
    """Hold ``out``'s lock (one tuning result written at a time; the folder is made, and removed again if
    the run fails before writing anything) and check it again under the lock."""
    from ensemblize.run_folder import RunFolderBusy, RunFolderError, writer_lock

    try:
        held.enter_context(writer_lock(out))
    except (RunFolderBusy, RunFolderError) as exc:
        text = str(exc)
        raise ValueError(text if text.startswith("--out ") else f"--out {out}: {text}") from None
    _check_out(out, overwrite=overwrite)  # another process may have finished a result here meanwhile


def _parse_date_columns(X: Any, *, echo: Callable[[str], None] | None) -> Any:
    """``X`` with each column of ISO 8601 (or year-first slashed) date strings parsed as datetimes (a
    copy where any is)."""
    from ensemblize.data.table_columns import iso_date_strings, parse_iso_dates

    parsed = {}
    for c in X.columns:
        if iso_date_strings(X[c]):
            try:
                parsed[c] = parse_iso_dates(X[c])
            except (ValueError, TypeError):  # e.g. mixed UTC offsets: left as text (the estimator warns)
                continue
    if parsed and echo is not None:
        echo(f"date column(s) read as datetimes: {list(parsed)}")
    return X.assign(**parsed) if parsed else X


def tune_csv(
    path: str | os.PathLike,
    *,
    target: str,
    out: str | os.PathLike,
    time_budget: str | float | None = "10m",
    n_trials: int | None = None,
    task: str = "auto",
    test_fraction: float = 0.2,
    storage: Any = None,
    study_name: str | None = None,
    seed: int = 0,
    estimator: Any = None,
    echo: Callable[[str], None] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Tune a LoMETab estimator on a CSV file; write the fitted model and a report into ``out``.

    The rows are split once (seeded; stratified for classification): ``test_fraction`` test rows
    that tuning never sees, then :func:`tune` takes 20 % of the rest for validation — the
    64/16/20 protocol at the defaults. Writes ``out/model.safetensors`` + ``out/model.json``
    (``estimator.save``; reload with ``LoMETabClassifier.load(out / "model")``),
    ``out/trials.csv``, ``out/report.json`` and ``out/report.md`` (best hyper-parameters, trial
    table, validation and test scores), ``out/results.json`` (the best estimator's record, as every
    ensemblize command writes), ``out/trials.png`` (validation score per trial),
    ``out/environment.json`` and ``out/report.html``. Returns the report dict. ``out`` is locked
    while the command runs (a second process writing there is refused); a run that fails before
    writing its result leaves no folder it created behind.

    A feature column whose every value is an ISO 8601 date or date-time (``2001-02-03``,
    ``2001-02-03 04:05:06``, …) is read as a datetime column (seconds since 1970 to the model),
    not one category per date; ``echo`` names such columns. The saved model reads them from
    datetimes or from the same strings.

    Args:
        path: a CSV file with a header row.
        target: the target column.
        out: output folder (created).
        time_budget: ``"10m"``, ``"1h"``, seconds …; no new trial starts after it.
        n_trials: trial budget (either or both of ``time_budget`` / ``n_trials``).
        task: ``"auto"`` (non-numeric labels, or whole numbers with at most 20 distinct values:
            classification; other numbers: regression), ``"classification"`` or ``"regression"``.
        test_fraction: share of rows held out as the test set.
        storage, study_name: join a shared study (see :func:`tune`).
        seed: split, sampler and model seed.
        estimator: an estimator to tune instead of the default LoMETab one.
        echo: called with one line saying which task was chosen and why, before tuning starts
            (the command line prints it).
        overwrite: replace the files of an earlier result in ``out``; without it a folder that
            already holds any of them is refused before tuning starts (other files are never touched).
    """
    import pandas as pd

    from ensemblize.checkpoint import atomic_write_json, atomic_write_text

    t0 = time.perf_counter()
    timeout = None if time_budget is None else parse_duration(time_budget)
    _check_out(Path(out), overwrite=check_bool(overwrite, name="overwrite"))
    frame = _read_table(path)
    if target not in frame.columns:
        hint = _separator_hint(frame)  # the file's format, not the target's name, is wrong
        raise (TableFileError if hint else ValueError)(
            f"target column {target!r} is not in {path} (columns: {list(frame.columns)}){hint}"
        )
    if len(frame) == 0:
        raise TableFileError(f"{path} has a header but no data rows")
    if frame.shape[1] == 1:
        raise TableFileError(
            f"{path} has no feature columns besides the target {target!r}{_separator_hint(frame)}"
        )
    y = frame[target]
    if y.isna().any():
        raise ValueError(f"target column {target!r} has {int(y.isna().sum())} missing value(s) (NaN)")
    X = _parse_date_columns(frame.drop(columns=[target]), echo=echo)
    task = _infer_task(y, target=target, task=task)
    if echo is not None:
        echo(_task_rule(y, task))
    if task == "classification" and pd.api.types.is_numeric_dtype(y.dtype):
        # class codes as written: "01" / "02" parsed as numbers became the labels 1 / 2
        # only when each number is written one way: "1" and "1.0" are one class, not two
        written = pd.read_csv(path, usecols=[target], dtype=str)[target]
        one_to_one = len(written) == len(y) and bool(
            (
                pd.DataFrame({"n": y.to_numpy(), "w": written.to_numpy()}).groupby("n")["w"].nunique() == 1
            ).all()
        )
        if one_to_one and (written.to_numpy() != y.astype(str).to_numpy()).any():
            y = written.rename(target)
            if echo is not None:
                echo(f"target {target!r}: class labels kept as written (e.g. {y.iloc[0]!r}), not as numbers")
    test_fraction = check_fraction(test_fraction, name="test_fraction")
    est = _default_estimator(task, seed) if estimator is None else estimator
    try:
        rest, test = _split(X, y, val_fraction=test_fraction, seed=seed, classify=task == "classification")
    except ValueError as exc:
        raise ValueError(str(exc).replace("val_fraction=", "test_fraction=")) from None
    Xr, yr = X.iloc[rest], y.iloc[rest]
    n_val = int(round(0.2 * len(rest)))  # tune's val_fraction
    if echo is not None:
        echo(f"rows: {len(frame)} (tuning-train {len(rest) - n_val}, validation {n_val}, test {len(test)})")
    if min(n_val, len(test)) < _FEW_ROWS:
        warnings.warn(
            f"{path}: only {n_val} validation and {len(test)} test rows; scores on so few rows are noise "
            f"(a perfect test score on {len(test)} rows says little). Tune on a larger table",
            UserWarning,
            stacklevel=2,
        )
    out = Path(out)
    with contextlib.ExitStack() as held:
        _hold_out(held, out, overwrite=overwrite)
        res = tune(est, Xr, yr, n_trials=n_trials, timeout=timeout, storage=storage,
                   study_name=study_name, seed=seed)  # fmt: skip
        try:
            res.best_estimator.save(out / "model")
            table = res.trials_table()
            atomic_write_text(out / "trials.csv", table.to_csv(index=False))
            states = table["state"].value_counts().to_dict() if len(table) else {}
            report = {
                "csv": str(path), "target": target, "task": task, "estimator": type(est).__name__,
                "rows": len(frame), "rows_train": len(res.train_index), "rows_val": len(res.val_index),
                "rows_test": len(test), "budget": {"seconds": timeout, "n_trials": n_trials},
                "trial_states": {str(k): int(v) for k, v in states.items()}, "metric": res.metric,
                "best_value": res.best_value, "best_params": res.best_params,
                "test": _test_scores(res.best_estimator, X.iloc[test], y.iloc[test], task, yr.iloc[res.train_index]),
                "seconds": time.perf_counter() - t0, "model": str(out / "model"),
                "load_with": _load_line(res.best_estimator, out / "model"),
            }  # fmt: skip
            atomic_write_json(out / "report.json", report)
            atomic_write_text(out / "report.md", _report_markdown(report, _markdown_table(table)))
            _write_results(out, report, res, dataset=Path(path).stem, seed=seed)
            _trials_figure(table, out / "trials.png", metric=res.metric, direction=res.direction)
            record_environment(out, keep_existing=False)  # the report shows it, not the report writer's
            from ensemblize.report.html import write_report

            write_report(out, only=_OUTPUTS)  # --out may be a user's folder holding other files
            return report
        except KeyboardInterrupt:
            raise InterruptedWhileWriting(f"interrupted while writing the result into {out}") from None


def _write_results(out: Path, report: dict[str, Any], res: TuneResult, *, dataset: str, seed: int) -> None:
    """``out/results.json``: the best estimator's record (test scores, its validation score), as every
    ensemblize command writes one."""
    from ensemblize.report.results import Record, write_results

    best = res.best_estimator
    model = getattr(best, "model_", None)
    params = sum(p.numel() for p in model.parameters()) if hasattr(model, "parameters") else 0
    members = int(getattr(best, "members", 1) or 1) * int(getattr(best, "n_networks_", 1) or 1)
    metrics = {k: float(v) for k, v in report["test"].items()}
    metrics[f"val_{res.metric}"] = float(res.best_value)
    record = Record(
        method=type(best).__name__, dataset=dataset, seed=seed, members=members, params=int(params),
        train_seconds=float(getattr(best, "train_seconds_", math.nan)), metrics=metrics,
        extra={"best_params": res.best_params, "trials": report["trial_states"]},
    )  # fmt: skip
    write_results(out, [record])


def _trials_figure(table, path: Path, *, metric: str, direction: str) -> None:
    """``trials.png``: each completed trial's validation score and the best so far (the shared figure
    style; pyplot and the user's backend are left alone)."""
    from ensemblize.report.style import new_figure, save_figure

    done = table[table["state"] == "COMPLETE"] if len(table) else table
    fig, axes = new_figure(width=6, height=3.5)
    ax = axes[0][0]
    if len(done):
        values = done["value"].to_numpy(dtype=float)
        best = np.minimum.accumulate(values) if direction == "minimize" else np.maximum.accumulate(values)
        ax.plot(done["number"], values, "o", label="completed trial", alpha=0.7)
        ax.step(done["number"], best, where="post", label="best so far")
        ax.legend()
    ax.set_xlabel("trial")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title("ensemblize tune: validation score per trial")
    save_figure(fig, path)
