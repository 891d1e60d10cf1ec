"""The training loop shared by every model in the library: :func:`fit` and :func:`predict`.

A model's forward maps a plain batch ``(B, ...)`` to member outputs ``(B, M, C)``; a ``(B, C)``
output counts as one member (M = 1). The default loss is the mean over members of the
cross-entropy, ``L = (1/M) Σ_m CE(z_m, y)``; ``loss_fn(outputs, targets)`` replaces it (selective
models whose output is an object, regression) and ``regularizer(model)`` is added to it. Validation
aggregates on probabilities, ``p̄ = mean_m softmax(z_m)``, and reports ``NLL = −mean_i log p̄_i[y_i]``
(computed stably as ``logsumexp_m log_softmax(z_m) − log M``; the same value as
``ensemblize.metrics.nll(logits, labels, from_logits=True)``) and the accuracy of ``argmax p̄``.

Reproducibility: shuffling uses its own ``torch.Generator`` seeded from ``(seed, epoch)`` and the
global torch RNG (dropout, noise) is re-seeded from ``(seed, epoch, rank)`` at the start of every
epoch, inside ``torch.random.fork_rng`` so the caller's RNG state is left untouched. Each epoch is
therefore a pure function of the state at its start, which is what makes a resumed run end with
bitwise the same weights as an uninterrupted one (on CPU, with the same thread count).
"""

from __future__ import annotations

import copy
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset, TensorDataset, default_collate

from .._checks import check_finite, check_int, check_labels, check_positive
from ..checkpoint import load_state_strict
from . import distributed as D
from . import state as S

__all__ = [
    "fit",
    "predict",
    "FitResult",
    "seed_everything",
    "member_cross_entropy",
    "OPTIMIZERS",
    "SCHEDULES",
]

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("cosine", "step", "none")
_FORMAT = "ensemblize.training/1"


@dataclass
class FitResult:
    """What :func:`fit` returns.

    ``history``: one dict per epoch run (resumed runs include the epochs before the interruption)
    with ``epoch`` (1-based), ``train_loss`` (task loss, mean over samples), ``regularizer`` (mean
    regulariser value, ``None`` without one), ``lr`` (learning rate of the epoch's last step),
    ``seconds`` (train + validation wall time) and, with validation data, ``val_loss``,
    ``val_count`` and — for classification outputs — ``val_nll`` and ``val_accuracy`` of ``p̄``.
    ``best_epoch``: the epoch with the lowest monitored validation value (``monitor``: ``"val_nll"``,
    or ``"val_loss"`` when NLL is undefined), ``None`` without validation data.
    ``train_seconds``: the sum of the epochs' ``seconds`` (``time.perf_counter``).
    """

    history: list[dict[str, Any]]
    best_epoch: int | None
    train_seconds: float
    epochs_run: int
    stopped_early: bool = False
    resumed_from_epoch: int | None = None
    monitor: str | None = None
    config: dict[str, Any] = field(default_factory=dict)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global RNG and torch (CPU and CUDA) with ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the legacy global RNG is the point
    torch.manual_seed(seed)


def _derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (NumPy's SeedSequence hash)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def _as_members(outputs: object) -> Tensor:
    """``(B, C) -> (B, 1, C)``; ``(B, M, C)`` unchanged; anything else is a ValueError."""
    if not isinstance(outputs, Tensor) or outputs.dim() not in (2, 3):
        what = tuple(outputs.shape) if isinstance(outputs, Tensor) else type(outputs).__name__
        raise ValueError(
            f"model output {what} is not (B, C) or (B, M, C) class logits; pass loss_fn for other outputs"
        )
    return outputs.unsqueeze(1) if outputs.dim() == 2 else outputs


def member_cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Mean over members of the cross-entropy: ``(1/M) Σ_m mean_b CE(z_bm, y_b)``.

    ``outputs``: logits (B, M, C) or (B, C); ``targets``: (B,) int64 class indices. Returns a scalar.
    """
    z = _as_members(outputs)
    b, m, c = z.shape
    return F.cross_entropy(z.reshape(b * m, c), targets.repeat_interleave(m))


def _log_mean_prob(outputs: Tensor) -> Tensor:
    """``log p̄`` (B, C) in float64, ``p̄ = mean_m softmax(z_m)``."""
    z = _as_members(outputs).double()
    return torch.logsumexp(F.log_softmax(z, dim=-1), dim=1) - math.log(z.shape[1])


# --------------------------------------------------------------------------------------------- data


class _Source:
    """Uniform batch access to ``(X, y)`` tensor pairs, a single tensor ``X`` or a ``Dataset``."""

    def __init__(self, data: object, *, name: str, labelled: bool = True) -> None:
        self.name = name
        self.X: Tensor | None = None
        self.y: Tensor | None = None
        self.dataset: Dataset | None = None
        self.labelled = labelled
        self.num_classes: int | None = None  # set => labels checked batch by batch (Dataset sources)
        if isinstance(data, TensorDataset) and len(data.tensors) == (2 if labelled else 1):
            data = tuple(data.tensors) if labelled else data.tensors[0]
        if labelled and isinstance(data, (tuple, list)):
            if len(data) != 2 or not all(isinstance(t, Tensor) for t in data):
                raise TypeError(f"{name} must be an (X, y) pair of tensors or a torch Dataset")
            self.X, self.y = data
            if self.X.shape[0] != self.y.shape[0]:
                raise ValueError(f"{name}: X has {self.X.shape[0]} rows but y has {self.y.shape[0]}")
        elif not labelled and isinstance(data, Tensor):
            self.X = data
        elif isinstance(data, Dataset) and hasattr(data, "__len__"):
            self.dataset = data
        else:
            want = "an (X, y) pair of tensors" if labelled else "a tensor"
            raise TypeError(f"{name} must be {want} or a sized torch Dataset, got {type(data).__name__}")
        self.n = len(self.dataset) if self.dataset is not None else int(self.X.shape[0])
        if self.n < 1:
            raise ValueError(f"{name} is empty")
        if self.X is not None and self.X.is_floating_point():
            check_finite(self.X, name=f"{name} X")
        if self.y is not None and self.y.is_floating_point():
            check_finite(self.y, name=f"{name} y")

    def check_class_labels(self, num_classes: int) -> None:
        """Require (N,) integer labels in ``[0, num_classes)`` (checked now, or per batch for Datasets)."""
        if self.y is None:
            self.num_classes = num_classes
            return
        if self.y.dim() != 1:
            raise ValueError(f"{self.name} labels must have shape (N,), got {tuple(self.y.shape)}")
        check_labels(self.y, num_classes, name=f"{self.name} labels")

    def get(self, idx: Tensor) -> tuple[Tensor, Tensor | None]:
        if self.X is not None:
            return self.X[idx], (self.y[idx] if self.y is not None else None)
        items = [self.dataset[i] for i in idx.tolist()]
        if self.labelled:
            batch = default_collate(items)
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise TypeError(f"{self.name} dataset items must be (x, y) pairs")
            x, y = batch
        else:
            x = default_collate([it[0] if isinstance(it, (tuple, list)) else it for it in items])
            y = None
        if x.is_floating_point():
            check_finite(x, name=f"{self.name} X")
        if self.num_classes is not None:
            if y.dim() != 1:
                raise ValueError(f"{self.name} labels must have shape (N,), got {tuple(y.shape)}")
            check_labels(y, self.num_classes, name=f"{self.name} labels")
        elif y is not None and y.is_floating_point():
            check_finite(y, name=f"{self.name} y")
        return x, y


def _probe(module: nn.Module, source: _Source, device: torch.device) -> tuple[object, Tensor | None]:
    """One no-grad, eval-mode forward on two samples (no state changes) to learn the output's form."""
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            x, y = source.get(torch.arange(min(2, source.n)))
            out = module(x.to(device))
    finally:
        module.train(was)
    return out, y


def _is_classification(out: object, y: Tensor | None) -> bool:
    return (
        isinstance(out, Tensor)
        and out.dim() in (2, 3)
        and y is not None
        and y.dim() == 1
        and not (y.is_floating_point() or y.is_complex() or y.dtype == torch.bool)
    )


# ------------------------------------------------------------------------------------------ helpers


def _check_scalar(value: object, *, name: str) -> Tensor:
    if not isinstance(value, Tensor) or value.numel() != 1:
        what = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"{name} must return a scalar tensor, got {what}")
    return value.reshape(())


def _lr_factor(
    schedule: str, *, step: int, total_steps: int, epoch: int, step_size: int, gamma: float
) -> float:
    """Learning-rate multiplier. cosine (per step): ``½(1 + cos(π t / T))`` for step ``t`` of ``T``;
    step (per epoch): ``γ^⌊epoch / step_size⌋`` (epoch 0-based); none: 1."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * step / total_steps))
    if schedule == "step":
        return gamma ** (epoch // step_size)
    return 1.0


def _evaluate(
    module: nn.Module,
    source: _Source,
    *,
    loss: Callable[[Any, Any], Tensor],
    classify: bool,
    batch_size: int,
    device: torch.device,
    ctx: D.DistContext,
) -> dict[str, float]:
    """Validation on this rank's shard ``rank::world``, gathered so every sample counts exactly once."""
    from ..metrics.streaming import NLL, Accuracy  # streaming twins of ensemblize.metrics (imported on use)

    idx_all = D.eval_shard(source.n, ctx)
    nll, accuracy = NLL(from_logits=True), Accuracy()
    loss_sum = 0.0
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            for start in range(0, idx_all.numel(), batch_size):
                idx = idx_all[start : start + batch_size]
                x, y = source.get(idx)
                x, y = x.to(device), y.to(device)
                out = module(x)
                loss_sum += float(_check_scalar(loss(out, y), name="loss_fn")) * idx.numel()
                if classify:
                    logits = _as_members(out).detach().double().cpu()
                    nll.update(logits, y.cpu())
                    accuracy.update(torch.softmax(logits, dim=-1), y.cpu())
    finally:
        module.train(was)
    parts = D.gather((idx_all, nll, accuracy, loss_sum), ctx)
    indices = torch.cat([p[0] for p in parts])
    D.check_coverage(indices, source.n)
    res = {"val_loss": sum(p[3] for p in parts) / source.n, "val_count": int(indices.numel())}
    if classify:
        merged_nll, merged_acc = NLL(from_logits=True), Accuracy()
        for part in parts:  # shards merged in rank order: the same value on every rank
            if part[0].numel():
                merged_nll.merge(part[1])
                merged_acc.merge(part[2])
        res["val_nll"] = float(merged_nll.compute())
        res["val_accuracy"] = float(merged_acc.compute())
    return res


# ---------------------------------------------------------------------------------------------- fit


def fit(
    model: nn.Module,
    train: object,
    val: object = None,
    *,
    epochs: int,
    batch_size: int = 128,
    optimizer: str = "sgd",
    lr: float = 0.05,
    weight_decay: float = 5e-4,
    momentum: float = 0.9,
    nesterov: bool = False,
    schedule: str = "cosine",
    step_size: int | None = None,
    gamma: float = 0.1,
    loss_fn: Callable[[Any, Tensor], Tensor] | None = None,
    regularizer: Callable[[nn.Module], Tensor] | None = None,
    early_stopping_patience: int | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = 0,
    progress: bool | None = None,
    device: str | torch.device = "cpu",
    grad_clip: float | None = None,
    callbacks: Sequence[Callable[[int, dict, nn.Module], bool | None]] = (),
) -> FitResult:
    """Train ``model`` in place (moved to ``device``) and return a :class:`FitResult`.

    Data: ``train`` / ``val`` are ``(X, y)`` tensor pairs or torch Datasets of ``(x, y)`` items;
    inputs must be finite; with the default loss, labels are (N,) integers in ``[0, C)`` where ``C``
    is the size of the model's last output axis. ``batch_size`` is per process under DDP; the last
    batch of an epoch may be smaller; validation runs in batches of ``max(batch_size, 256)``.

    Loss: ``loss_fn(outputs, targets)`` (default :func:`member_cross_entropy`) plus
    ``regularizer(model)`` if given; both must return scalar tensors and are logged separately.

    Optimiser: ``"sgd"`` (``momentum``, ``nesterov``, coupled L2 ``weight_decay``) or ``"adamw"``
    (decoupled ``weight_decay``), applied to every parameter that requires grad. Schedule:
    ``"cosine"`` is applied per optimisation step, ``lr_t = lr·½(1 + cos(π t/T))`` with ``T`` the
    total number of steps over ``epochs``; ``"step"`` is per epoch, ``lr·gamma^⌊e/step_size⌋``
    (``step_size`` defaults to ``max(1, epochs // 3)``); ``"none"`` keeps ``lr``. ``grad_clip``
    clips the global gradient norm.

    Early stopping (needs ``val``): stop when the monitored validation value (NLL of ``p̄``, or the
    validation loss when outputs are not class logits) has not improved for
    ``early_stopping_patience`` epochs; the best epoch's weights are restored at the end. Without
    early stopping the final weights are kept (``best_epoch`` is still reported).

    Checkpoints: with ``checkpoint_dir``, the full state (model, optimizer, best weights, RNG) is
    written atomically after every epoch (safetensors + JSON, no pickle; files ``epoch_NNNN.*``,
    older ones removed). ``resume=True`` continues from the newest complete checkpoint (a checkpoint
    of another model or another configuration is a ValueError naming the difference);
    ``resume=False`` deletes existing ``epoch_NNNN`` checkpoints there and starts afresh. A stop by
    early stopping or by a callback is recorded in the checkpoint: resuming such a run trains no more.

    ``callbacks``: each is called after every epoch as ``cb(epoch, record, model)``; returning
    ``True`` stops training after that epoch. ``progress``: a tqdm bar on stderr (``None``: only
    when stderr is a terminal). Under ``torchrun`` (or an initialised process group) the model is
    wrapped in DistributedDataParallel and only rank 0 writes files or progress; see
    :mod:`ensemblize.training.distributed`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    epochs = check_int(epochs, name="epochs", minimum=1)
    batch_size = check_int(batch_size, name="batch_size", minimum=1)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    lr = check_positive(lr, name="lr")
    weight_decay = check_positive(weight_decay, name="weight_decay", allow_zero=True)
    momentum = check_positive(momentum, name="momentum", allow_zero=True)
    if momentum >= 1:
        raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
    gamma = check_positive(gamma, name="gamma")
    step_size = (
        max(1, epochs // 3) if step_size is None else check_int(step_size, name="step_size", minimum=1)
    )
    if early_stopping_patience is not None:
        early_stopping_patience = check_int(
            early_stopping_patience, name="early_stopping_patience", minimum=1
        )
        if val is None:
            raise ValueError("early_stopping_patience needs validation data (val=None)")
    if grad_clip is not None:
        grad_clip = check_positive(grad_clip, name="grad_clip")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None, True or False, got {progress!r}")
    for name, fn in (("loss_fn", loss_fn), ("regularizer", regularizer)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    callbacks = tuple(callbacks)
    for cb in callbacks:
        if not callable(cb):
            raise TypeError(f"callbacks must be callables, got {type(cb).__name__}")

    device = torch.device(device)
    ctx = D.setup(device)
    if ctx.enabled and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    module = model.to(device)

    train_src = _Source(train, name="train")
    val_src = _Source(val, name="val") if val is not None else None
    out, y_probe = _probe(module, train_src, device)
    classify_val = False
    if loss_fn is None:
        num_classes = int(_as_members(out).shape[-1])
        train_src.check_class_labels(num_classes)
        if val_src is not None:
            val_src.check_class_labels(num_classes)
            classify_val = True
    elif val_src is not None:
        vout, vy = _probe(module, val_src, device)
        classify_val = _is_classification(vout, vy)
        if classify_val:
            val_src.check_class_labels(int(vout.shape[-1]))

    config = {
        "optimizer": optimizer,
        "lr": lr,
        "weight_decay": weight_decay,
        "momentum": momentum,
        "nesterov": bool(nesterov),
        "schedule": schedule,
        "step_size": step_size,
        "gamma": gamma,
        "epochs": epochs,
        "batch_size": batch_size,
        "seed": seed,
        "grad_clip": grad_clip,
        "early_stopping_patience": early_stopping_patience,
        "world_size": ctx.world_size,
        "n_train": train_src.n,
        "n_val": val_src.n if val_src is not None else None,
    }
    rng_devices = (
        [device.index if device.index is not None else torch.cuda.current_device()]
        if device.type == "cuda"
        else []
    )
    with torch.random.fork_rng(devices=rng_devices):
        return _run(
            module,
            train_src,
            val_src,
            config=config,
            loss=loss_fn if loss_fn is not None else member_cross_entropy,
            regularizer=regularizer,
            classify_val=classify_val,
            checkpoint_dir=None if checkpoint_dir is None else Path(checkpoint_dir),
            resume=resume,
            progress=progress,
            device=device,
            ctx=ctx,
            callbacks=callbacks,
        )


def _run(
    module: nn.Module,
    train_src: _Source,
    val_src: _Source | None,
    *,
    config: dict[str, Any],
    loss: Callable[[Any, Any], Tensor],
    regularizer: Callable[[nn.Module], Tensor] | None,
    classify_val: bool,
    checkpoint_dir: Path | None,
    resume: bool,
    progress: bool | None,
    device: torch.device,
    ctx: D.DistContext,
    callbacks: tuple,
) -> FitResult:
    from tqdm.auto import tqdm

    c = config
    params = [p for p in module.parameters() if p.requires_grad]
    if c["optimizer"] == "sgd":
        opt = torch.optim.SGD(
            params, lr=c["lr"], momentum=c["momentum"], weight_decay=c["weight_decay"], nesterov=c["nesterov"]
        )
    else:
        opt = torch.optim.AdamW(params, lr=c["lr"], weight_decay=c["weight_decay"])
    if ctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        wrapped: nn.Module = DistributedDataParallel(
            module, device_ids=[device.index] if device.type == "cuda" else None
        )
    else:
        wrapped = module

    n, batch_size, epochs = train_src.n, c["batch_size"], c["epochs"]
    shard_len = D.train_shard(torch.arange(n), ctx).numel()
    steps = -(-shard_len // batch_size)
    total_steps = epochs * steps
    patience = c["early_stopping_patience"]
    monitor = None if val_src is None else ("val_nll" if classify_val else "val_loss")

    history: list[dict[str, Any]] = []
    best_epoch: int | None = None
    best_metric = math.inf
    since_best = 0
    best_state: dict[str, Tensor] | None = None
    start = 0
    stopped = stopped_early = False
    resumed_from: int | None = None

    if checkpoint_dir is not None:
        if not resume:
            if ctx.is_main:
                S.clear_checkpoints(checkpoint_dir)
        else:
            if ctx.is_main:
                S.remove_temporaries(checkpoint_dir)
            loaded = S.latest_checkpoint(checkpoint_dir)
            if loaded is not None:
                tensors, meta = loaded
                _restore_model(module, tensors, meta, config, checkpoint_dir)
                opt.load_state_dict(S.decode(meta["optimizer"], tensors))
                torch.set_rng_state(tensors["rng.torch"])
                history = meta["history"]
                best_epoch, best_metric, since_best = (
                    meta["best_epoch"],
                    meta["best_metric"],
                    meta["since_best"],
                )
                stopped, stopped_early = meta["stopped"], meta["stopped_early"]
                if any(k.startswith("best.") for k in tensors):
                    best_state = {k[5:]: v.to(device) for k, v in tensors.items() if k.startswith("best.")}
                start = resumed_from = int(meta["epoch"])
        starts = D.gather(start, ctx)
        if len(set(starts)) > 1:
            raise RuntimeError(f"ranks resume from different epochs {starts}; checkpoint_dir must be shared")

    show = ctx.is_main and (progress if progress is not None else sys.stderr.isatty())
    bar = tqdm(total=epochs, initial=start, desc="fit", unit="epoch", disable=not show, file=sys.stderr)
    epoch = start
    try:
        while epoch < epochs and not stopped:
            t0 = time.perf_counter()
            epoch_seed = _derive_seed(c["seed"], epoch, ctx.rank, 1)
            if device.type == "cuda":
                torch.manual_seed(epoch_seed)
            else:  # only the CPU generator: fork_rng restores no CUDA state here
                torch.default_generator.manual_seed(epoch_seed)
            perm = torch.randperm(
                n, generator=torch.Generator().manual_seed(_derive_seed(c["seed"], epoch, 0))
            )
            shard = D.train_shard(perm, ctx)
            module.train()
            task_sum = torch.zeros((), dtype=torch.float64, device=device)
            reg_sum = torch.zeros((), dtype=torch.float64, device=device)
            lr_now = c["lr"]
            for s in range(steps):
                idx = shard[s * batch_size : (s + 1) * batch_size]
                x, y = train_src.get(idx)
                x, y = x.to(device), y.to(device)
                lr_now = c["lr"] * _lr_factor(
                    c["schedule"],
                    step=epoch * steps + s,
                    total_steps=total_steps,
                    epoch=epoch,
                    step_size=c["step_size"],
                    gamma=c["gamma"],
                )
                for group in opt.param_groups:
                    group["lr"] = lr_now
                task = _check_scalar(loss(wrapped(x), y), name="loss_fn")
                total = task
                if regularizer is not None:
                    reg = _check_scalar(regularizer(module), name="regularizer")
                    total = task + reg
                    reg_sum += reg.detach().double() * idx.numel()
                opt.zero_grad(set_to_none=True)
                total.backward()
                if c["grad_clip"] is not None:
                    torch.nn.utils.clip_grad_norm_(params, c["grad_clip"])
                opt.step()
                task_sum += task.detach().double() * idx.numel()
            D.broadcast_buffers(module, ctx)
            sums = D.all_reduce_sum(torch.stack([task_sum, reg_sum]).cpu(), ctx) / (
                shard_len * ctx.world_size
            )
            train_loss = float(sums[0])
            if not math.isfinite(train_loss):
                raise FloatingPointError(
                    f"training loss is {train_loss} in epoch {epoch + 1}; try a lower lr"
                )
            record: dict[str, Any] = {
                "epoch": epoch + 1,
                "train_loss": train_loss,
                "regularizer": float(sums[1]) if regularizer is not None else None,
                "lr": lr_now,
            }
            if val_src is not None:
                record.update(
                    _evaluate(
                        module,
                        val_src,
                        loss=loss,
                        classify=classify_val,
                        batch_size=max(batch_size, 256),
                        device=device,
                        ctx=ctx,
                    )
                )
                metric = record[monitor]
                if metric < best_metric:
                    best_metric, best_epoch, since_best = metric, epoch + 1, 0
                    if patience is not None:
                        best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
                else:
                    since_best += 1
                    if patience is not None and since_best >= patience:
                        stopped = stopped_early = True
            record["seconds"] = time.perf_counter() - t0
            history.append(record)
            epoch += 1
            wants_stop = any(cb(epoch, record, module) is True for cb in callbacks)
            if any(D.gather(wants_stop, ctx)):
                stopped = True
            if checkpoint_dir is not None and ctx.is_main:
                _save(
                    checkpoint_dir,
                    module,
                    opt,
                    epoch,
                    history,
                    config,
                    best_state,
                    best_epoch,
                    best_metric,
                    since_best,
                    stopped,
                    stopped_early,
                )
            bar.update(1)
            post = {"loss": f"{train_loss:.4f}"}
            for key, short in (("val_nll", "val_nll"), ("val_accuracy", "val_acc"), ("val_loss", "val_loss")):
                if key in record and (key != "val_loss" or "val_nll" not in record):
                    post[short] = f"{record[key]:.4f}"
            bar.set_postfix(post, refresh=True)
    finally:
        bar.close()
    if patience is not None and best_state is not None:
        module.load_state_dict(best_state)
    return FitResult(
        history=history,
        best_epoch=best_epoch,
        train_seconds=float(sum(h["seconds"] for h in history)),
        epochs_run=len(history),
        stopped_early=stopped_early,
        resumed_from_epoch=resumed_from,
        monitor=monitor,
        config=dict(config),
    )


def _restore_model(module: nn.Module, tensors: dict, meta: dict, config: dict, folder: Path) -> None:
    if meta.get("format") != _FORMAT:
        raise ValueError(
            f"checkpoint in {folder} is not a training checkpoint (format {meta.get('format')!r})"
        )
    state = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    what = f"checkpoint in {folder}"
    saved = meta.get("config", {})
    diff = [f"{k}: checkpoint {saved.get(k)!r} vs now {v!r}" for k, v in config.items() if saved.get(k) != v]
    if diff:
        load_state_strict(copy.deepcopy(module), state, what=what)  # a different model is reported first
        raise ValueError(
            f"{what} was written with a different configuration ({'; '.join(diff)}); "
            "pass resume=False or another checkpoint_dir"
        )
    load_state_strict(module, state, what=what)


def _save(folder, module, opt, epoch, history, config, best_state, best_epoch, best_metric, since_best,
          stopped, stopped_early) -> None:  # fmt: skip
    tensors: dict[str, Tensor] = {f"model.{k}": v for k, v in module.state_dict().items()}
    if best_state is not None:
        tensors.update({f"best.{k}": v for k, v in best_state.items()})
    tensors["rng.torch"] = torch.get_rng_state()
    optim_meta = S.encode(opt.state_dict(), "optim.", tensors)
    meta = {
        "format": _FORMAT,
        "epoch": epoch,
        "history": history,
        "config": config,
        "best_epoch": best_epoch,
        "best_metric": best_metric,
        "since_best": since_best,
        "stopped": stopped,
        "stopped_early": stopped_early,
        "optimizer": optim_meta,
    }
    S.write_epoch(folder, epoch, tensors, meta)


# ------------------------------------------------------------------------------------------ predict


def _member_probs_on(
    model: nn.Module, X: object, *, batch_size: int, device: str | torch.device, ctx: D.DistContext
) -> tuple[Tensor, Tensor]:
    batch_size = check_int(batch_size, name="batch_size", minimum=1)
    module = model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model
    device = torch.device(device)
    module.to(device)
    src = _Source(X, name="X", labelled=False)
    idx_all = D.eval_shard(src.n, ctx)
    chunks = []
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            for start in range(0, idx_all.numel(), batch_size):
                x, _ = src.get(idx_all[start : start + batch_size])
                chunks.append(torch.softmax(_as_members(module(x.to(device))), dim=-1).cpu())
    finally:
        module.train(was)
    local = torch.cat(chunks) if chunks else None
    parts = D.gather((idx_all, local), ctx)
    indices = torch.cat([p[0] for p in parts])
    probs = torch.cat([p[1] for p in parts if p[1] is not None])
    return indices, probs


def predict(
    model: nn.Module, X: object, *, batch_size: int = 512, device: str | torch.device = "cpu"
) -> Tensor:
    """Member probabilities ``softmax(z_m)`` of ``model`` on ``X``: (N, M, C) on CPU, in sample order.

    ``X``: a (N, ...) tensor or a Dataset (items ``x`` or ``(x, ...)``). A (B, C) model output counts
    as M = 1. Runs in eval mode under ``no_grad`` and restores the model's train/eval mode; the model
    is moved to ``device``. In an initialised process group each rank predicts ``rank::world`` and
    the shards are gathered, so every rank returns the full (N, M, C) tensor.
    """
    ctx = D.current()
    indices, probs = _member_probs_on(model, X, batch_size=batch_size, device=device, ctx=ctx)
    if ctx.enabled:
        D.check_coverage(indices, indices.numel())
        probs = probs[torch.argsort(indices)]
    return probs
