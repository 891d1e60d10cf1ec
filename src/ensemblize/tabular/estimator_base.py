"""The one implementation behind every tabular ensemble estimator (LoMETab, official TabM).

A concrete estimator only says which network it trains: its own ``__init__`` (hyper-parameters),
``_validate_model_params``, ``_network_options`` (its own JSON settings) and ``_network(config, bins)``. Everything
else is shared here:

``fit(X, y, eval_set=None)``
    1.–3. raw-table input, validation split and preprocessing: :class:`ensemblize.tabular.table_pipeline.TablePipeline`
       (shared with the GBDT wrappers).
    4. piecewise-linear bin edges (:func:`ensemblize.tabular.bins.safe_bins`) on the transformed
       numeric columns; ``n_bins`` is capped at ``n_train − 1`` (fitted value ``n_bins_``).
    5. the network trained by :func:`ensemblize.tabular.train.train_model` (mean member loss, AdamW,
       early stopping on the ensemble's validation score, best weights restored). With
       ``n_networks = S > 1``, S networks are trained one after another, network ``s`` seeded with
       :func:`~ensemblize.tabular.pooled.network_seed` ``(seed_, s)`` (``seed_`` itself for network 0,
       a hash of both otherwise, so no two ``random_state`` values share a network; its own
       initialisation, batch order, dropout and early stopping), and pooled
       by :class:`ensemblize.tabular.pooled.PooledNetworks`: the estimator then has ``S·K`` members.
       With ``refit_full=True`` each network is then retrained from its initial weights on the
       training + validation rows for the epochs early stopping chose (after step 6; preprocessing
       and bins stay the training rows').
    6. classifiers whose family calibrates (LoMETab's ``calibration="temperature"``): one temperature
       ``T = argmin_T NLL(mean_k softmax(z_k / T))`` on the same validation split
       (:func:`ensemblize.models.temperature_scaling.fit_temperature`), fitted attribute ``temperature_``
       (1.0 when not calibrated). Every member probability is then ``softmax(z_k / T)``.

Outputs (``K`` below is the pooled member count ``n_networks_ · members``): classifiers give ``predict_members`` ``(N, K, C)``, ``predict_proba`` ``(N, C)`` float64 rows
summing to 1 (renormalised in float64), ``predict``; regressors ``predict_members`` ``(N, K)`` and
``predict`` in target units; both give ``predict_uncertainty`` (:mod:`ensemblize.tabular.uncertainty`).

Persistence: ``save(path)`` writes ``path.safetensors`` + ``path.json`` atomically
(:mod:`ensemblize.checkpoint`, no pickle); ``Cls.load(path, device=None)`` rebuilds an estimator that
predicts bitwise identically, on ``device`` (a GPU-saved estimator loads on a CPU). Every size read
from the JSON file is bounded (:data:`LOAD_LIMITS`) before anything is allocated.
"""

from __future__ import annotations

import copy
import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted
from torch import nn

from ensemblize._checks import check_bool, check_choice, check_device, check_int, check_positive, check_size
from ensemblize.checkpoint import load_checkpoint, load_state_strict, save_checkpoint
from ensemblize.data.table_preprocessing import TabularPreprocessor
from ensemblize.models.temperature_scaling import fit_temperature
from ensemblize.tabular.bins import BIN_METHODS, safe_bins
from ensemblize.tabular.inputs import check_real
from ensemblize.tabular.pooled import PooledNetworks, network_seed
from ensemblize.tabular.table_pipeline import TablePipeline, estimator_init
from ensemblize.tabular.train import LR_SCHEDULES, auto_batch_size, predict_members, train_model
from ensemblize.tabular.uncertainty import classification_uncertainty, regression_uncertainty
from ensemblize.training.averaging import check_ema_decay

__all__ = [
    "CALIBRATIONS",
    "LOAD_LIMITS",
    "TRAINING_DEFAULTS",
    "estimator_init",
    "signature_defaults",
    "TabularEnsembleEstimator",
    "EnsembleClassifierMixin",
    "EnsembleRegressorMixin",
]

_FORMAT = 2
CALIBRATIONS = ("temperature", "none")
"""A classifier's post-hoc calibration on its validation split: one temperature, or none."""
_PREDICT_BATCH = 4096
_MIN_CALIBRATION_ROWS = 20
"""Below this many validation rows a fitted temperature is flagged with a warning."""
#: a fitted temperature outside this range is warned about (a near-separable validation split drives
#: T towards 0; on the benchmark tables T was 0.90–1.26)
_TEMPERATURE_RANGE = (0.2, 5.0)
LOAD_LIMITS = {
    "members": 4096,
    "n_networks": 1024,
    "n_blocks": 64,
    "d_block": 65536,
    "d_embedding": 4096,
    "rank": 4096,
    "n_out": 100_000,
    "n_num": 100_000,
    "cardinality": 1_000_000,
    "n_bins": 65536,
    "parameters": 2_000_000_000,
}
"""Upper bounds on the sizes read from a saved estimator's JSON, checked before allocation."""


TRAINING_DEFAULTS: dict[str, Any] = {
    "embedding": "piecewise",
    "n_bins": 48,
    "bin_method": "quantile",
    "d_embedding": 16,
    "lr": 2e-3,
    "weight_decay": 3e-4,
    "batch_size": "auto",
    "max_epochs": 200,
    "patience": 16,
    "lr_schedule": "constant",
    "ema_decay": None,
    "refit_full": False,
    "per_member_batches": False,
    "n_networks": 1,
    "val_fraction": 0.2,
    "impute": True,
    "random_state": None,
    "device": "cpu",
    "verbose": False,
}
"""Defaults of the hyper-parameters every tabular ensemble estimator shares (TabM's training recipe)."""


def signature_defaults(cls: type) -> dict[str, Any]:
    """The keyword-only hyper-parameters of ``cls.__init__`` and their defaults, in order (to extend them)."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _check_class_dtype(spec: Any, path: Any) -> None:
    """ValueError unless a saved ``classes_dtype`` is one scalar dtype of a sane size: a subarray dtype such
    as ``"(300000000,)u1"`` would allocate without bound and load malformed classes."""
    try:
        dt = np.dtype(spec) if isinstance(spec, str) else None
    except TypeError:
        dt = None
    if (
        dt is None
        or dt.kind not in "biufUSmM"
        or dt.subdtype is not None
        or dt.fields is not None
        or dt.itemsize > 4096
    ):
        raise ValueError(
            f"{path}: saved classes_dtype {spec!r} is not a label dtype (numbers, text or dates)"
        )


def _bounded(value: Any, key: str, *, minimum: int = 0) -> int:
    return check_size(value, name=f"saved {key}", maximum=LOAD_LIMITS[key], minimum=minimum)


class _CallbackRelay:
    """The user's epoch callbacks across the ``n_networks`` trainings of one ``fit``, seen as one run.

    Network ``s``'s epoch ``e`` reaches each callback as epoch ``E_s + e`` (``E_s``: the epochs the
    earlier networks ran; so epochs keep increasing) with ``"network": s`` added to the record. As in
    :func:`ensemblize.training.fit`, a callback returning ``True`` stops training — here the current
    network (its best epoch restored) and every later one (:attr:`stopped`).
    """

    def __init__(self, callbacks: Sequence[Callable[[int, dict, Any], bool | None]] | None) -> None:
        self.callbacks = tuple(callbacks or ())
        self.epochs = 0
        self.stopped = False

    def for_network(self, network: int) -> tuple[Callable[[int, dict, Any], bool], ...]:
        if not self.callbacks:
            return ()
        before = self.epochs

        def relay(epoch: int, record: dict, model: Any) -> bool:
            self.epochs = before + epoch
            row = {**record, "network": network}
            self.stopped = any([cb(before + epoch, row, model) is True for cb in self.callbacks])
            return self.stopped

        return (relay,)


class TabularEnsembleEstimator(TablePipeline):
    """Shared implementation of the tabular ensemble estimators (see the module docstring).

    Subclasses define ``__init__`` (keyword-only hyper-parameters, stored unchanged; they must
    include the parameters read here: ``members``, ``n_blocks``, ``d_block``, ``dropout``,
    ``d_embedding``, ``embedding``, ``n_bins``,
    ``bin_method``, ``lr``, ``weight_decay``, ``batch_size``, ``max_epochs``, ``patience``,
    ``lr_schedule``, ``ema_decay``, ``refit_full``, ``per_member_batches``, ``n_networks``, ``val_fraction``, ``impute``, ``random_state``, ``device``, ``verbose``)
    and the network hooks ``_validate_model_params``, ``_network_options``, ``_network``.
    """

    _embeddings: ClassVar[tuple[str, ...]] = ("piecewise",)
    #: ``batch_size="auto"`` on up to 10k training rows (:func:`~ensemblize.tabular.train.auto_batch_size`)
    _small_auto_batch: ClassVar[int] = 256
    #: parameters an earlier version saved that this class no longer has: :meth:`load` drops them
    _retired_params: ClassVar[tuple[str, ...]] = ()

    # -- hooks ---------------------------------------------------------------------------------
    def _validate_model_params(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _network_options(self) -> dict[str, Any]:  # pragma: no cover - abstract
        """The family's own network settings (JSON values), added to :meth:`_model_config`."""
        raise NotImplementedError

    def _monitor(self) -> str:
        """The classifier's early-stopping score (:data:`ensemblize.tabular.train.MONITORS`).

        ``"accuracy"`` (TabM's rule) unless the family has a ``monitor`` hyper-parameter.
        """
        return "accuracy"

    def _calibration(self) -> str:
        """The classifier's post-hoc calibration (:data:`CALIBRATIONS`): ``"none"`` unless the family
        has a ``calibration`` hyper-parameter (official TabM has none)."""
        return "none"

    def _model_config(self) -> dict[str, Any]:
        """The network's constructor arguments (JSON), from the fitted preprocessor and the parameters."""
        prep = self.preprocessor_
        return {
            "n_num": prep.n_numeric_,
            "cat_cardinalities": prep.cat_cardinalities_,
            "n_out": 1 if self._regression else len(self.classes_),
            "regression": self._regression,
            "members": int(self.members),
            "n_blocks": None if self.n_blocks is None else int(self.n_blocks),
            "d_block": int(self.d_block),
            "dropout": float(self.dropout),
            "embedding": self.embedding,
            "d_embedding": int(self.d_embedding),
            **self._network_options(),
        }

    @classmethod
    def _network(
        cls, config: dict[str, Any], bins: list[torch.Tensor] | None
    ) -> nn.Module:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def _build(cls, config: dict[str, Any], bins: list[torch.Tensor] | None, n_networks: int) -> nn.Module:
        """``n_networks`` networks of ``config``: the network itself for 1, else their :class:`PooledNetworks`."""
        nets = [cls._network(config, bins) for _ in range(n_networks)]
        return nets[0] if n_networks == 1 else PooledNetworks(nets)

    @classmethod
    def _check_saved_config(cls, config: dict[str, Any], n_networks: int = 1) -> None:
        """Bound every size in a saved model config (see :data:`LOAD_LIMITS`) before building."""
        sizes = {k: _bounded(config[k], k) for k in LOAD_LIMITS if config.get(k) is not None}
        cards = config.get("cat_cardinalities", [])
        if not isinstance(cards, list) or len(cards) > LOAD_LIMITS["n_num"]:
            raise ValueError("saved cat_cardinalities must be a list of at most 100000 ints")
        widths = [_bounded(c, "cardinality", minimum=1) for c in cards]
        d_in = sizes.get("n_num", 0) * max(sizes.get("d_embedding", 1), 1) + sum(widths)
        d = sizes.get("d_block", 1024)
        per_member = d_in * d + sizes.get("n_blocks", 3) * d * d + d * sizes.get("n_out", 1)
        estimate = n_networks * max(sizes.get("members", 1), 1) * per_member  # bound: S·K independent MLPs
        if estimate > LOAD_LIMITS["parameters"]:
            raise ValueError(f"saved model would have about {estimate} parameters; refusing to allocate")

    def _validate_params(self) -> None:
        check_int(self.members, name="members", minimum=1)
        check_int(self.n_networks, name="n_networks", minimum=1)
        check_choice(self.embedding, self._embeddings, name="embedding")
        check_int(self.n_bins, name="n_bins", minimum=2)
        check_choice(self.bin_method, BIN_METHODS, name="bin_method")
        check_real(self.lr, "lr", low=0.0, low_open=True)
        check_real(self.weight_decay, "weight_decay", low=0.0, low_open=False)
        if self.batch_size != "auto":
            check_int(self.batch_size, name="batch_size", minimum=1)
        check_int(self.max_epochs, name="max_epochs", minimum=1)
        check_int(self.patience, name="patience", minimum=1)
        check_choice(self.lr_schedule, LR_SCHEDULES, name="lr_schedule")
        check_ema_decay(self.ema_decay)
        check_bool(self.refit_full, name="refit_full")
        check_bool(self.per_member_batches, name="per_member_batches")
        check_bool(self.verbose, name="verbose")
        self._validate_pipeline_params()
        check_device(self.device)
        self._validate_model_params()

    def fit(
        self,
        X: Any,
        y: Any,
        eval_set: tuple[Any, Any] | None = None,
        *,
        callbacks: Sequence[Callable[[int, dict, Any], bool | None]] | None = None,
    ):
        """Fit on ``X`` ``(N, F)`` / ``y`` ``(N,)``; ``eval_set=(X_val, y_val)`` drives early stopping.

        Without ``eval_set`` a seeded ``val_fraction`` of the rows is held out. A refit first drops
        the previous fit's attributes, so one that raises leaves the estimator unfitted. ``callbacks
        (a fit parameter, not a hyper-parameter): each is called after every epoch as
        ``cb(epoch, record, model)`` (see :func:`~ensemblize.tabular.train.train_model`); returning
        ``True`` stops training — :func:`ensemblize.tabular.tuning.tune` prunes trials this way.
        With ``n_networks > 1`` the epochs of the networks are numbered on, one after another, each
        record has a ``"network"`` key, and a stop also skips the networks not yet trained (and the
        ``refit_full`` retraining, whose epochs reach no callback).
        Returns ``self``.
        Fitted attributes: ``n_features_in_``, ``feature_names_in_`` (string-named DataFrames),
        ``classes_`` (classifier), ``preprocessor_``, ``bins_``, ``n_bins_``, ``model_`` (the network,
        or the :class:`~ensemblize.tabular.pooled.PooledNetworks` of ``n_networks_`` networks),
        ``n_networks_`` (networks trained: ``n_networks`` unless a callback stopped early),
        ``history_`` (per-epoch dicts; key ``"network"`` says whose), ``best_epochs_`` /
        ``best_scores_`` (one per network), ``best_epoch_`` / ``best_score_`` (the first network's),
        ``train_seconds_`` (all networks, refits included), ``seed_``, ``batch_size_``,
        ``refit_epochs_`` (``None``, or with ``refit_full`` the epochs each network was retrained on
        training + validation rows) and, with ``refit_full``, ``refit_history_``; classifiers also
        ``temperature_`` (step 6 of the module docstring, fitted on the pooled members).
        """
        self._validate_params()
        self._forget_fit()
        frame, yarr = self._check_fit_input(X, y)
        self.seed_ = seed = self._seed()
        x_tr, t_tr, x_va, t_va = map(torch.from_numpy, self._preprocess(frame, yarr, eval_set, seed))
        self._fit_bins(x_tr, t_tr)
        auto = auto_batch_size(len(x_tr), small=self._small_auto_batch)
        self.batch_size_ = auto if self.batch_size == "auto" else int(self.batch_size)
        device = torch.device(self.device)
        x_tr, t_tr, x_va, t_va = (t.to(device) for t in (x_tr, t_tr, x_va, t_va))
        stop = _CallbackRelay(callbacks)
        # what this fit was: save() writes these, so set_params after fit cannot change a saved network
        self._fitted_params_ = self._json_params()
        self._fitted_model_config_ = config = self._model_config()
        nets, results = [], []
        for s in range(int(self.n_networks)):
            net, res = self._train_network(config, x_tr, t_tr, x_va, t_va, seed=seed, network=s,
                                           epochs=int(self.max_epochs), callbacks=stop.for_network(s))  # fmt: skip
            nets.append(net)
            results.append(res)
            if stop.stopped:
                break
        self.n_networks_ = len(nets)
        self.model_ = nets[0] if len(nets) == 1 else PooledNetworks(nets)
        self.history_ = [{**row, "network": s} for s, res in enumerate(results) for row in res.history]
        self.best_epochs_ = [res.best_epoch for res in results]
        self.best_scores_ = [res.best_score for res in results]
        self.best_epoch_ = self.best_epochs_[0]
        self.best_score_ = self.best_scores_[0]
        self.train_seconds_ = float(sum(res.train_seconds for res in results))
        if not self._regression:
            self.temperature_ = 1.0
            if self._calibration() == "temperature":
                self.temperature_ = self._fit_temperature(x_va, t_va.cpu())
        self.refit_epochs_ = None
        if self.refit_full and not stop.stopped:
            self._refit_on_all_rows(config, x_tr, t_tr, x_va, t_va, seed=seed)
        return self

    def _train_network(self, config, x_tr, t_tr, x_va, t_va, *, seed, network, epochs, callbacks=(),
                       lr_factors=None):  # fmt: skip
        """Network ``network`` of this fit, initialised from its own seed and trained by
        :func:`~ensemblize.tabular.train.train_model` (without validation when ``x_va`` is None;
        ``lr_factors``: per-epoch learning-rate multipliers replayed instead of ``lr_schedule``)."""
        device = x_tr.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            seed_s = network_seed(seed, network)
            torch.manual_seed(seed_s)
            net = self._network(config, self.bins_).to(device)
            res = train_model(
                net,
                x_tr,
                t_tr,
                x_va,
                t_va,
                regression=self._regression,
                members=int(self.members),
                lr=float(self.lr),
                weight_decay=float(self.weight_decay),
                batch_size=self.batch_size_,
                max_epochs=epochs,
                patience=int(self.patience),
                lr_schedule=self.lr_schedule if lr_factors is None else "constant",
                lr_factors=lr_factors,
                ema_decay=None if self.ema_decay is None else float(self.ema_decay),
                per_member_batches=bool(self.per_member_batches),
                seed=seed_s,
                verbose=bool(self.verbose),
                desc=self._progress_label(network, seed) + (" refit" if x_va is None else ""),
                callbacks=callbacks,
                monitor=self._monitor(),
            )
        return net, res

    def _refit_on_all_rows(self, config, x_tr, t_tr, x_va, t_va, *, seed) -> None:
        """``refit_full``: each network retrained on training + validation rows for its chosen epochs.

        Network ``s`` restarts from the same initial weights (its seed) and trains, without
        validation, for ``best_epochs_[s] + 1`` epochs — the count early stopping chose — over the
        ``n_train + n_val`` rows (so ``(n_train + n_val) / n_train`` times the steps). The
        preprocessing, bins and target standardisation stay the training rows' (fitted before any
        validation row was seen), and so does ``temperature_`` (fitted on the validation rows by
        the networks that had not trained on them). With ``lr_schedule="plateau"`` each epoch of the
        refit trains at the learning rate the same epoch had in the validation fit (its recorded
        ``lr``: the cuts that validation scores decided, replayed). ``history_`` / ``best_*`` keep
        describing the validation fit; ``refit_epochs_`` / ``refit_history_`` describe the refit.
        """
        x_all, t_all = torch.cat([x_tr, x_va]), torch.cat([t_tr, t_va])
        self.refit_epochs_ = [best + 1 for best in self.best_epochs_]
        nets, rows, seconds = [], [], 0.0
        for s, epochs in enumerate(self.refit_epochs_):
            factors = None
            if self.lr_schedule == "plateau":
                rates = [row["lr"] for row in self.history_ if row["network"] == s][:epochs]
                factors = [rate / float(self.lr) for rate in rates]
            net, res = self._train_network(
                config, x_all, t_all, None, None, seed=seed, network=s, epochs=epochs, lr_factors=factors
            )
            nets.append(net)
            rows += [{**row, "network": s} for row in res.history]
            seconds += res.train_seconds
        self.model_ = nets[0] if len(nets) == 1 else PooledNetworks(nets)
        self.refit_history_ = rows
        self.train_seconds_ += seconds

    def _progress_label(self, network: int, seed: int) -> str:
        label = f"{type(self).__name__} (M={int(self.members)}, seed {seed}"
        if int(self.n_networks) > 1:
            label += f", network {network + 1}/{int(self.n_networks)}"
        return label + ")"

    def _fit_temperature(self, x_va: torch.Tensor, t_va: torch.Tensor) -> float:
        """``T = argmin_T NLL(mean_k softmax(z_k / T), y)`` on the validation split (the trained members).

        A validation split with a single class cannot calibrate (the NLL falls as ``T → 0``): ``T``
        stays 1 with a warning. Fewer than ``_MIN_CALIBRATION_ROWS`` rows: fitted, with a warning.
        """
        n, present = len(t_va), int(torch.unique(t_va).numel())
        if present < 2:
            warnings.warn(
                f"calibration='temperature': the {n} validation row(s) hold a single class, which cannot "
                "calibrate a temperature; keeping T = 1 (pass an eval_set with several classes, or "
                "calibration='none')",
                UserWarning,
                stacklevel=4,
            )
            return 1.0
        if n < _MIN_CALIBRATION_ROWS:
            warnings.warn(
                f"calibration='temperature' is fitted on only {n} validation rows; the temperature may "
                f"be unreliable below {_MIN_CALIBRATION_ROWS} (pass a larger eval_set or "
                "calibration='none')",
                UserWarning,
                stacklevel=4,
            )
        z = predict_members(self.model_, x_va, batch_size=_PREDICT_BATCH)
        t = fit_temperature(z, t_va.long())
        if not (np.isfinite(t) and t > 0):
            raise RuntimeError(f"temperature fit on the validation split gave {t!r}; use calibration='none'")
        if not _TEMPERATURE_RANGE[0] <= t <= _TEMPERATURE_RANGE[1]:
            warnings.warn(
                f"calibration='temperature' fitted T = {t:.3g} on {n} validation rows, outside "
                f"[{_TEMPERATURE_RANGE[0]}, {_TEMPERATURE_RANGE[1]}]: "
                + (
                    "the members (nearly) separate the validation split, and T < 1 sharpens every "
                    "probability towards 0 or 1 (overconfident on new rows)"
                    if t < 1
                    else "T > 1 flattens every probability towards uniform"
                )  # fmt: skip
                + "; check on held-out data, or use calibration='none'",
                UserWarning,
                stacklevel=4,
            )
        return float(t)

    def _fit_bins(self, x_tr: torch.Tensor, t_tr: torch.Tensor) -> None:
        n_num = self.preprocessor_.n_numeric_
        self.n_bins_ = min(int(self.n_bins), len(x_tr) - 1)
        self.bins_ = None
        if self.embedding == "piecewise" and n_num:
            if self.n_bins_ < 2:
                raise ValueError(
                    f"piecewise embeddings need at least 3 training rows, got {len(x_tr)} after the "
                    "validation rows were held out (val_fraction); pass more rows, eval_set=(X_val, y_val) "
                    "or another embedding"
                )
            self.bins_ = safe_bins(
                x_tr[:, :n_num],
                t_tr,
                n_bins=self.n_bins_,
                method=self.bin_method,
                regression=self._regression,
            )

    def _raw_members(self, X: Any) -> torch.Tensor:
        """Raw member outputs, computed in float64 (float32 on MPS, which has no float64).

        A float64 copy of the network makes every row's prediction independent of the other rows
        in the call (float32 matrix products round differently with the batch size, by up to
        ~1e-7 relative at ``init_scale=4``: scikit-learn's subset-invariance check).
        """
        device = torch.device(self.device)
        dtype = torch.float32 if device.type == "mps" else torch.float64
        x = torch.from_numpy(self._transform_for_predict(X, fitted="model_"))  # float32 (N, F)
        model = copy.deepcopy(self.model_).to(dtype) if dtype != torch.float32 else self.model_
        # converted chunk by chunk: a float64 copy of all rows (wide one-hot blocks) tripled the memory
        parts = [
            predict_members(
                model, x[i : i + _PREDICT_BATCH].to(device, dtype), batch_size=_PREDICT_BATCH
            ).cpu()
            for i in range(0, max(len(x), 1), _PREDICT_BATCH)
        ]
        return torch.cat(parts)

    # -- persistence ---------------------------------------------------------------------------
    def _json_params(self) -> dict[str, Any]:
        """``get_params()`` as JSON values: a RandomState becomes None (``seed_`` records its draw)."""
        params = self.get_params()
        if not (params["random_state"] is None or isinstance(params["random_state"], Integral)):
            params["random_state"] = None
        elif params["random_state"] is not None:
            params["random_state"] = int(params["random_state"])
        if isinstance(params.get("device"), torch.device):
            params["device"] = str(params["device"])
        return params

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``path.safetensors`` + ``path.json`` atomically (safetensors + JSON, no pickle).

        The file holds the fitted estimator and the parameters it was fitted with: parameters changed
        by ``set_params`` after ``fit`` have not been applied to the network and are not written (a
        UserWarning names them; refit to apply them). Returns the stem ``path``. Reload with
        ``type(self).load(path, device=...)``.
        """
        check_is_fitted(self, "model_")
        tensors = {f"model.{k}": v.detach().cpu() for k, v in self.model_.state_dict().items()}
        for k, v in self.preprocessor_.state_dict().items():
            tensors[f"prep.{k}"] = torch.from_numpy(np.ascontiguousarray(v))
        for i, b in enumerate(self.bins_ or []):
            tensors[f"bins.{i}"] = b.detach().cpu()
        params = self._fitted_params_
        changed = sorted(k for k, v in self._json_params().items() if params.get(k) != v)
        if changed:
            warnings.warn(
                f"save: parameter(s) {changed} were changed by set_params after fit and have not been "
                "applied; the file holds the fitted estimator and the parameters it was fitted with "
                f"({', '.join(f'{k}={params.get(k)!r}' for k in changed)}). Refit to apply them.",
                UserWarning,
                stacklevel=2,
            )
        names = getattr(self, "feature_names_in_", None)
        meta = {
            "kind": type(self).__name__,
            "format": _FORMAT,
            "params": params,
            "preprocessor": self.preprocessor_.config(),
            "model": self._fitted_model_config_,
            "n_bins": self.n_bins_,
            "n_bin_tensors": 0 if self.bins_ is None else len(self.bins_),
            "n_features_in": int(self.n_features_in_),
            "feature_names_in": None if names is None else [str(c) for c in names],
            "seed": self.seed_,
            "batch_size": self.batch_size_,
            "n_networks": self.n_networks_,
            "best_epoch": self.best_epoch_,
            "best_score": self.best_score_,
            "best_epochs": self.best_epochs_,
            "best_scores": self.best_scores_,
            "train_seconds": self.train_seconds_,
            "history": self.history_,
            "refit_epochs": self.refit_epochs_,
        }
        if self.refit_epochs_ is not None:
            meta["refit_history"] = self.refit_history_
        if not self._regression:
            meta["temperature"] = self.temperature_
            timelike = self.classes_.dtype.kind in "mM"  # datetime64 / timedelta64: saved as int64 ticks
            meta["classes"] = (self.classes_.view(np.int64) if timelike else self.classes_).tolist()
            meta["classes_dtype"] = self.classes_.dtype.str if self.classes_.dtype != object else "object"
            odd = [c for c in meta["classes"] if not isinstance(c, (str, int, float, bool))]
            if odd:
                raise ValueError(
                    f"cannot save class labels of type {type(odd[0]).__name__} (e.g. {odd[0]!r}) as JSON; "
                    "map the labels to strings or integers before fit"
                )
        return save_checkpoint(Path(path), tensors, meta)

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str | torch.device | None = None):
        """Rebuild an estimator written by :meth:`save`; its predictions are bitwise identical.

        ``device``: where to put the network (its ``device`` parameter is set to it). ``None`` keeps
        the saved device when it is available here, else falls back to ``"cpu"`` with a warning —
        so an estimator saved on a GPU loads on a CPU-only machine.
        """
        tensors, meta = load_checkpoint(Path(path))
        if meta.get("kind") != cls.__name__:
            raise ValueError(f"{path} holds a {meta.get('kind')!r}, not a {cls.__name__}")
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{path}: unsupported format {meta.get('format')!r} (expected {_FORMAT})")
        params = dict(meta["params"])
        for name in cls._retired_params:
            params.pop(name, None)
        params["device"] = cls._load_device(params.get("device", "cpu"), device)
        # files written before n_networks existed hold one network
        n_networks = _bounded(meta.get("n_networks", 1), "n_networks", minimum=1)
        params.setdefault("n_networks", 1)
        est = cls(**params)
        prep_arrays = {k[len("prep.") :]: v for k, v in tensors.items() if k.startswith("prep.")}
        est.preprocessor_ = TabularPreprocessor.from_state(meta["preprocessor"], prep_arrays)
        if not cls._regression:
            dtype = meta["classes_dtype"]
            if dtype != "object":
                _check_class_dtype(dtype, path)
            if dtype != "object" and np.dtype(dtype).kind in "mM":
                est.classes_ = np.asarray(meta["classes"], dtype=np.int64).view(np.dtype(dtype))
            else:
                est.classes_ = np.asarray(
                    meta["classes"], dtype=object if dtype == "object" else np.dtype(dtype)
                )
        est.n_features_in_ = check_int(meta["n_features_in"], name="saved n_features_in", minimum=1)
        if meta["feature_names_in"] is not None:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.n_bins_ = _bounded(meta["n_bins"], "n_bins")
        n_bin_tensors = _bounded(meta["n_bin_tensors"], "n_num")
        est.bins_ = [tensors[f"bins.{i}"] for i in range(n_bin_tensors)] or None
        if any(b.ndim != 1 or len(b) > est.n_bins_ + 1 for b in est.bins_ or []):
            raise ValueError(f"{path}: bin edges do not match n_bins = {est.n_bins_}")
        for attr in ("seed", "batch_size", "best_epoch", "best_score", "train_seconds", "history"):
            setattr(est, f"{attr}_", meta[attr])
        if not cls._regression:
            # files written before calibration existed hold no temperature: they predicted with T = 1
            est.temperature_ = check_positive(meta.get("temperature", 1.0), name=f"{path}: saved temperature")
        est.n_networks_ = n_networks
        est.best_epochs_ = list(meta.get("best_epochs", [est.best_epoch_]))
        est.best_scores_ = list(meta.get("best_scores", [est.best_score_]))
        est.refit_epochs_ = meta.get("refit_epochs")  # files written before refit_full: None
        if est.refit_epochs_ is not None:
            est.refit_epochs_ = [
                check_int(e, name=f"{path}: saved refit epochs", minimum=1) for e in est.refit_epochs_
            ]
            est.refit_history_ = list(meta.get("refit_history", []))
        cls._check_saved_config(meta["model"], n_networks)
        cls._check_saved_consistency(path, meta, est)
        model = cls._build(meta["model"], est.bins_, n_networks)
        state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        load_state_strict(model, state, what=str(path))
        est.model_ = model.to(torch.device(est.device)).eval()
        est._fitted_params_ = est._json_params()
        est._fitted_model_config_ = dict(meta["model"])
        return est

    @classmethod
    def _check_saved_consistency(cls, path: Any, meta: dict[str, Any], est: Any) -> None:
        """The parts of a saved file that must agree do (a foreign or hand-edited file that still hashes
        right would otherwise predict wrong labels or report wrong parameters, silently)."""
        model = meta["model"]
        if not isinstance(model, dict):
            raise ValueError(f"{path}: saved model config must be an object")
        if "regression" in model and bool(model["regression"]) != cls._regression:
            raise ValueError(
                f"{path}: the saved network is a {'regressor' if model['regression'] else 'classifier'}"
            )
        n_out = model.get("n_out")
        want = 1 if cls._regression else len(est.classes_)
        if n_out is not None and n_out != want:
            what = "a regressor's 1" if cls._regression else f"the {want} saved classes"
            raise ValueError(f"{path}: the saved network has {n_out} outputs, not {what}")
        prep = est.preprocessor_.classes_
        if not cls._regression and prep is not None and prep.tolist() != est.classes_.tolist():
            raise ValueError(
                f"{path}: saved classes {est.classes_.tolist()} differ from the preprocessor's {prep.tolist()}"
            )
        if cls._regression and est.preprocessor_.target_std_ is None:
            raise ValueError(f"{path}: a regressor's preprocessor must hold the target's mean and std")
        params = meta["params"]
        differ = sorted(k for k in params.keys() & model.keys() if params[k] != model[k])
        if differ:
            raise ValueError(
                f"{path}: saved parameters and network disagree on {differ} "
                f"({', '.join(f'{k}: {params[k]!r} vs {model[k]!r}' for k in differ)})"
            )

    @staticmethod
    def _load_device(saved: str, requested: str | torch.device | None) -> str:
        if requested is not None:
            return str(check_device(requested))
        dev = torch.device(saved)
        if dev.type == "cuda" and not torch.cuda.is_available():
            warnings.warn(f"saved on {saved!r}, which is not available here; loading on 'cpu'", stacklevel=3)
            return "cpu"
        return str(saved)


class EnsembleClassifierMixin(ClassifierMixin):
    """Outputs of an ensemble classifier; ``K`` members, classes in ``classes_`` order."""

    _regression = False

    def predict_members(self, X: Any) -> np.ndarray:
        """Member probabilities ``softmax(z_k / T)`` in float64, shape ``(N, K, C)``; ``T`` is the fitted
        ``temperature_`` (1.0 without calibration)."""
        return torch.softmax(self._raw_members(X).double() / self.temperature_, dim=-1).numpy()

    def predict_proba(self, X: Any) -> np.ndarray:
        """Ensemble probabilities ``p̄ = mean_k softmax(z_k / T)``, float64 ``(N, C)``, rows summing to 1
        (``T`` = ``temperature_``: 1 unless ``calibration="temperature"`` fitted it).

        The mean is renormalised in float64 (``p̄ / Σ_c p̄_c``), so every row sums to 1 within 1e-12.
        """
        p = self.predict_members(X).mean(axis=1)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Labels ``classes_[argmax p̄]``, shape ``(N,)``."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    def predict_uncertainty(self, X: Any) -> pd.DataFrame:
        """Per-row member disagreement: ``total_entropy`` ``H[p̄]``, ``expected_entropy`` ``E_k H[p_k]``
        and ``mutual_information`` ``H[p̄] − E_k H[p_k]`` (nats; equations in
        :mod:`ensemblize.tabular.uncertainty`). A DataFrame ``(N, 3)`` indexed like ``X``."""
        return classification_uncertainty(self.predict_members(X), index=self._index(X))


class EnsembleRegressorMixin(RegressorMixin):
    """Outputs of an ensemble regressor (members trained on the standardised target)."""

    _regression = True

    def predict_members(self, X: Any) -> np.ndarray:
        """Member predictions ``ŷ_k`` in the original target units, float64 ``(N, K)``."""
        z = self._raw_members(X).double().numpy()
        return z * self.preprocessor_.target_std_ + self.preprocessor_.target_mean_

    def predict(self, X: Any) -> np.ndarray:
        """Ensemble prediction ``ȳ = mean_k ŷ_k``, shape ``(N,)``."""
        return self.predict_members(X).mean(axis=1)

    def predict_uncertainty(self, X: Any) -> pd.DataFrame:
        """Per-row ``mean`` ``ȳ`` and member standard deviation ``std = sqrt(mean_k (ŷ_k − ȳ)²)``
        (target units; :mod:`ensemblize.tabular.uncertainty`). A DataFrame ``(N, 2)`` indexed like ``X``."""
        return regression_uncertainty(self.predict_members(X), index=self._index(X))
