"""The training loop shared by every model in the library: :func:`fit`.

A model's forward maps a plain batch ``(B, ...)`` to member outputs: classification logits
``(B, M, C)`` (``(B, C)`` is one member) or regression predictions ``(B, M)`` / ``(B, M, D)``, in any
output form :mod:`ensemblize.training.outputs` reads (a tensor, ``.logits``, ``["logits"]``, the first
tuple element). The default loss is the member loss of the task —
:func:`~ensemblize.training.outputs.member_cross_entropy` or
:func:`~ensemblize.training.outputs.member_mse` — reduced over members as the model declares
(``model.member_loss_reduction``: ``"mean"`` by default, ``"sum"`` for a
:class:`~ensemblize.models.DeepEnsemble`, so each explicit member trains exactly like a single model).
``loss_fn(outputs, targets)`` replaces it (selective models, anything else) and
``regularizer(model)`` is added to it. Validation aggregates the ENSEMBLE on probabilities
(:mod:`ensemblize.training.validation`).

Reproducibility: the row order of epoch ``e`` is a pure function of ``(seed, e)``, and the global
torch RNG (dropout, noise, a DataLoader's shuffling) is re-seeded from ``(seed, e, rank)`` at the
start of every epoch, inside ``torch.random.fork_rng`` so the caller's RNG state is left untouched.
Each epoch is therefore a pure function of the state at its start, which is what makes a resumed
run end with bitwise the same weights as an uninterrupted one (on CPU, with the same thread count).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_int, check_module
from . import distributed as D
from . import resume as R
from . import state as S
from .averaging import WeightAverage
from .data import (
    IndexedSource,
    LoaderSource,
    Source,
    batch_bounds,
    call_model,
    check_batch,
    derive_seed,
    epoch_order,
    make_source,
    split_batch,
    to_device,
)
from .optim import OPTIMIZERS, SCHEDULES, group_lr, lr_factor, make_optimizer
from .predict import TASKS, model_device
from .progress import Progress
from .setup import Run, check_options, make_run
from .validation import MONITORS, check_scalar, monitor_key, validate

__all__ = [
    "fit",
    "FitResult",
    "TrainingDiverged",
    "seed_everything",
    "OPTIMIZERS",
    "SCHEDULES",
    "MONITORS",
    "TASKS",
]


class TrainingDiverged(FloatingPointError, ValueError):
    """The training loss, the regularizer or a parameter became non-finite (NaN/inf): typically a too-high ``lr``."""


@dataclass
class FitResult:
    """What :func:`fit` returns.

    ``history``: one dict per epoch run (resumed runs include the epochs before the interruption)
    with ``epoch`` (1-based), ``train_loss`` (task loss, mean over samples), ``regularizer`` (mean
    regulariser value, ``None`` without one), ``lr`` (learning rate of the epoch's last step),
    ``seconds`` (train + validation wall time) and, with validation data, the fields of
    :func:`ensemblize.training.validation.validate` (``val_loss``, ``val_count``, ``val_nll`` /
    ``val_accuracy`` or ``val_rmse``, and every ``val_metrics`` entry).
    ``best_epoch``: the epoch with the best ``monitor`` value, ``None`` without validation data.
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
    import random

    import numpy as np

    seed = check_int(seed, name="seed", minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the legacy global RNG is the point
    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------------- fit


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
    schedule: str | Sequence[float] = "cosine",
    step_size: int | None = None,
    gamma: float = 0.1,
    decay_filter: str | Callable[[str, nn.Parameter, nn.Module], bool] = "standard",
    gate_lr_scale: float = 1.0,
    grad_clip: float | None = None,
    ema_decay: float | None = None,
    task: str = "classification",
    loss_fn: Callable[[Any, Tensor], Tensor] | None = None,
    regularizer: Callable[[nn.Module], Tensor] | None = None,
    monitor: str | None = None,
    early_stopping_patience: int | None = None,
    val_metrics: Mapping[str, Callable[[Tensor, Tensor], float]] | None = None,
    per_member_batches: bool = False,
    labels_key: str = "labels",
    checkpoint_dir: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = 0,
    progress: bool | None = True,
    desc: str = "fit",
    device: str | torch.device | None = None,
    callbacks: Sequence[Callable[[int, dict, nn.Module], bool | None]] = (),
) -> FitResult:
    """Train ``model`` in place (moved to ``device``) and return a :class:`FitResult`.

    Data (``train``, ``val``): ``(X, y)`` tensor pairs, dicts of tensors with a ``labels_key`` entry
    (the model is called as ``model(**inputs)`` WITHOUT the labels), sized Datasets yielding either,
    or DataLoaders (iterated as given) — see :mod:`ensemblize.training.data`. Inputs must be finite;
    for classification with the default loss, labels are (N,) integers in ``[0, C)``. ``batch_size``
    is per process under DDP; when ``N % batch_size == 1`` the trailing single sample joins the
    previous batch (BatchNorm/σNorm cannot train on one sample). Validation runs in batches of
    ``max(batch_size, 256)``.

    Task and loss: ``task="classification"`` (default loss
    :func:`~ensemblize.training.outputs.member_cross_entropy`) or ``"regression"``
    (:func:`~ensemblize.training.outputs.member_mse`; outputs ``(B, M)`` for targets ``(B,)``,
    ``(B, M, D)`` for ``(B, D)``), reduced over members by the model's ``member_loss_reduction``
    (``"mean"`` unless the model says ``"sum"``). ``loss_fn(outputs, targets)`` replaces the default
    and receives the raw model output; ``regularizer(model)`` is added. Both must return scalar
    tensors and are logged separately.

    Optimiser: ``"sgd"`` (``momentum``, ``nesterov``, coupled L2 ``weight_decay``) or ``"adamw"``
    (decoupled ``weight_decay``). ``decay_filter`` picks which parameters are decayed:
    ``"standard"`` (default: no decay on norm affine parameters, σN gate logits, biases and
    embeddings), ``"all"``, or a callable — see :mod:`ensemblize.training.optim`.
    ``gate_lr_scale`` (> 0, default 1): σN gate logits (parameters named ``gate_logits``) train at
    this multiple of the scheduled learning rate, in their own parameter group; 1 leaves the
    optimiser exactly as without the option. Schedule:
    ``"cosine"`` per optimisation step, ``lr_t = lr·½(1 + cos(π t/T))``; ``"step"`` per epoch,
    ``lr·gamma^⌊e/step_size⌋`` (``step_size`` defaults to ``max(1, epochs // 3)``); ``"plateau"``
    (needs ``val``) multiplies the learning rate by ``gamma`` each time ``step_size`` (default 5)
    further epochs pass without a better monitored score — ``lr·gamma^c`` after ``c`` such cuts, kept
    when the score improves again (Keras' / torch's reduce-on-plateau with cooldown 0, counted on the
    same epochs as early stopping, so with ``early_stopping_patience`` P a run makes at most
    ``⌈P / step_size⌉ − 1`` cuts per plateau); ``"none"``; or a sequence of ``epochs`` positive
    multipliers, epoch ``e`` training at ``lr·schedule[e]`` (a schedule replayed, e.g. a plateau
    run's recorded rates retrained without validation).
    ``grad_clip`` clips the global gradient norm (over all members together).

    Weight averaging: ``ema_decay`` (``None``: off; else in ``(0, 1)``) keeps an exponential moving
    average of the weights, updated after every step with the warm-up decay
    ``min(ema_decay, (1 + t) / (10 + t))`` at step ``t`` (:mod:`ensemblize.training.averaging`).
    Validation, early stopping and best-epoch selection then score the AVERAGED weights, and the
    model ends with them (the best epoch's average with early stopping, the last one without).
    Training itself, and what ``callbacks`` receive as the model, are the raw weights.

    Batches: ``per_member_batches=True`` gives every member its own row order each epoch: the index
    is ``(B, M)`` and the model receives ``(B, M, ...)`` inputs and ``(B, M)`` targets (tabular
    ensembles; needs tensor or Dataset data). By default all members see the same rows.

    Validation and early stopping (need ``val``): the ENSEMBLE is scored
    (:mod:`ensemblize.training.validation`); ``monitor`` is ``"val_nll"`` (classification default),
    ``"val_accuracy"`` (ties broken by NLL), ``"val_rmse"`` (regression default) or ``"val_loss"``
    (default with a custom ``loss_fn``). ``val_loss`` is the row-weighted mean of ``loss_fn`` over
    validation batches of ``max(batch_size, 256)`` rows — the loss on the whole split only for losses
    that are means over rows; a loss with split-level terms (SelectiveNet's coverage-normalised risk and
    coverage penalty) gets them per batch. ``val_metrics`` adds ``name -> fn(member_outputs, targets)``
    fields computed on the whole split (use one for a split-level criterion). With ``early_stopping_patience`` training stops after that
    many epochs without improvement and the best epoch's weights are restored; without it the final
    weights are kept (``best_epoch`` is still reported).

    Checkpoints (``checkpoint_dir``): after every epoch, an atomic safetensors + JSON pair (no
    pickle) with everything needed to resume; a later call with the same arguments, seed, data and
    initial weights resumes from it (announced on stderr) and ends bitwise-identical to an
    uninterrupted run. Anything different is a ValueError naming the differing fields (see
    :mod:`ensemblize.training.resume`). ``resume=False`` deletes the folder's checkpoints first. A
    stop by early stopping or by a callback is final: resuming such a run trains no more.

    ``callbacks``: each is called after every epoch as ``cb(epoch, record, model)``; returning
    ``True`` stops training after that epoch (the other callbacks still see that epoch). ``progress``: ``True``/``None`` shows a tqdm.auto bar
    labelled ``desc`` on a terminal or notebook and one line per epoch with an ETA elsewhere;
    ``False`` is silent. ``device``: ``None`` keeps the model where it is. Under ``torchrun`` (or an
    initialised process group) the model is wrapped in DistributedDataParallel and only rank 0
    writes files or progress; see :mod:`ensemblize.training.distributed`.

    Modes: every epoch puts the model in train mode, except layers the caller froze — in a model in
    train mode, a top-most submodule in eval mode with no trainable parameters (a BatchNorm frozen for a
    fine-tune: ``.eval()`` and ``requires_grad_(False)``) stays in eval mode, its running statistics
    untouched, and a warning names it. A submodule in eval mode with trainable parameters (a pretrained
    backbone loaded in eval mode) and a model passed wholly in eval mode train in train mode as usual.
    """
    check_module(model, name="model")
    opts = check_options(locals())
    dev = model_device(model) if device is None else torch.device(device)
    ctx = D.setup(dev)
    if ctx.enabled and dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    module = model.to(dev)
    train_src = make_source(train, name="train", labels_key=labels_key)
    val_src = make_source(val, name="val", labels_key=labels_key) if val is not None else None
    _check_loaders(train_src, val_src, ctx)
    rng_devices = (
        [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    )
    with torch.random.fork_rng(devices=rng_devices):
        run = make_run(opts, module, train_src, val_src, dev, ctx)
        return _train(run, opts)


def _check_loaders(train: Source, val: Source | None, ctx: D.DistContext) -> None:
    """A validation DataLoader must yield every row once (scores of a subset, or of a different
    subset on each rank, would be silently wrong or deadlock early stopping); under DDP a training
    DataLoader without a DistributedSampler trains every rank on every row (warned)."""
    if isinstance(val, LoaderSource):
        rows = val.rows_per_pass()
        if rows == -1:
            raise ValueError(
                f"val: the DataLoader's sampler {type(val.loader.sampler).__name__} draws rows with replacement "
                "(some twice, others never); validation scores every row once: use shuffle=False or a "
                "sampler without replacement"
            )
        if rows is not None and rows != val.n:
            sampler = val.loader.sampler
            raise ValueError(
                f"val: the DataLoader yields {rows} of its dataset's {val.n} rows per pass (sampler "
                f"{type(sampler).__name__}, drop_last={val.loader.drop_last}); validation scores every row "
                "once, on every rank: give it no DistributedSampler or subset sampler and drop_last=False"
            )
    if ctx.enabled and isinstance(train, LoaderSource):
        batch_sampler = train.loader.batch_sampler  # a custom batch sampler may shard by rank itself
        sampler = train.loader.sampler if batch_sampler is None else getattr(batch_sampler, "sampler", None)
        plain = batch_sampler is None or type(batch_sampler) is torch.utils.data.BatchSampler
        if plain and not isinstance(sampler, torch.utils.data.DistributedSampler):
            warnings.warn(
                f"train: under torchrun (world size {ctx.world_size}) this DataLoader has no DistributedSampler, "
                "so every rank trains on every row (each epoch is world-size times the data). Give it "
                "sampler=DistributedSampler(dataset) or pass tensors / a Dataset and let fit shard them",
                UserWarning,
                stacklevel=3,
            )


def _has_batch_norm(module: nn.Module) -> bool:
    from ..nn.sigma_norm import SigmaNorm

    return any(isinstance(m, (nn.modules.batchnorm._BatchNorm, SigmaNorm)) and "Batch" in type(m).__name__
               for m in module.modules())  # fmt: skip


def _prepare(run: Run, o: dict) -> None:
    """Optimiser, DDP wrapper, steps per epoch and the initial-weights fingerprint."""
    run.opt = make_optimizer(run.module, optimizer=o["optimizer"], lr=o["lr"], weight_decay=o["weight_decay"],
                             momentum=o["momentum"], nesterov=o["nesterov"], decay_filter=o["decay_filter"],
                             gate_lr_scale=o["gate_lr_scale"])  # fmt: skip
    run.wrapped = D.wrap(run.module, run.device, run.ctx)
    if isinstance(run.train, IndexedSource):
        run.shard_rows = int(D.train_shard(torch.arange(run.train.n), run.ctx).numel())
        run.steps = len(batch_bounds(run.shard_rows, o["batch_size"]))
        if run.shard_rows == 1 and _has_batch_norm(run.module):
            raise ValueError(
                "train has a single sample per step; a BatchNorm / σBatchNorm model needs at least 2"
            )
    else:
        run.steps = run.train.num_batches(run.train.n, o["batch_size"])
    run.config["initial_weights"] = R.weights_fingerprint(run.module)
    if o["ema_decay"] is not None:
        run.ema = WeightAverage(run.module, decay=o["ema_decay"])


def _start(run: Run, folder: Path | None, resume: bool) -> R.LoopState:
    if folder is None:
        return R.LoopState()
    if not resume:
        if run.ctx.is_main:
            S.clear_checkpoints(folder)
        st = R.LoopState()
    else:
        if run.ctx.is_main:
            S.remove_temporaries(folder)
        st = R.restore(folder, run.module, run.opt, run.config, device=run.device, announce=run.ctx.is_main,
                       ema=run.ema)  # fmt: skip
    starts = D.gather(st.epoch, run.ctx)
    if len(set(starts)) > 1:
        raise RuntimeError(f"ranks resume from different epochs {starts}; checkpoint_dir must be shared")
    return st


def _train(run: Run, o: dict) -> FitResult:
    _prepare(run, o)
    folder = None if o["checkpoint_dir"] is None else Path(o["checkpoint_dir"])
    st = _start(run, folder, o["resume"])
    show = run.ctx.is_main and o["progress"] is not False
    bar = Progress(o["epochs"], desc=o["desc"], unit="epoch", enabled=show, initial=st.epoch)
    try:
        while st.epoch < o["epochs"] and not st.stopped:
            record = _epoch(run, st, o)
            if folder is not None and run.ctx.is_main:
                R.save(folder, run.module, run.opt, run.config, st, ema=run.ema)
            bar.update(_shown(record))
    finally:
        bar.close()
    if run.patience is not None and st.best_state is not None:
        run.module.load_state_dict(st.best_state)
    elif run.ema is not None:
        run.module.load_state_dict(run.ema.averaged.state_dict())
    return FitResult(
        history=st.history,
        best_epoch=st.best_epoch,
        train_seconds=float(sum(h["seconds"] for h in st.history)),
        epochs_run=len(st.history),
        stopped_early=st.stopped_early,
        resumed_from_epoch=st.resumed_from,
        monitor=run.monitor,
        config=dict(run.config),
    )


def _shown(record: dict[str, Any]) -> dict[str, float]:
    shown = {"loss": record["train_loss"]}
    for key, short in (("val_nll", "val_nll"), ("val_accuracy", "val_acc"), ("val_rmse", "val_rmse")):
        if key in record:
            shown[short] = record[key]
    if "val_loss" in record and len(shown) == 1:
        shown["val_loss"] = record["val_loss"]
    return shown


# ------------------------------------------------------------------------------------------ epochs


def _epoch(run: Run, st: R.LoopState, o: dict) -> dict[str, Any]:
    """Train one epoch, validate, track the best epoch, run the callbacks; returns the epoch's record."""
    t0 = time.perf_counter()
    epoch_seed = derive_seed(o["seed"], st.epoch, run.ctx.rank, 1)
    if run.device.type == "cuda":
        torch.manual_seed(epoch_seed)
    else:  # only the CPU generator: fork_rng restores no CUDA state here
        torch.default_generator.manual_seed(epoch_seed)
    train_loss, reg, lr_now = _train_epoch(run, st, o)
    record: dict[str, Any] = {
        "epoch": st.epoch + 1,
        "train_loss": train_loss,
        "regularizer": reg,
        "lr": lr_now,
    }
    if run.val is not None:
        record.update(validate(_scored(run), run.val, loss=run.loss, task=run.task, classify=run.classify_val,
                               num_classes=run.num_classes, batch_size=max(o["batch_size"], 256), device=run.device,
                               ctx=run.ctx, val_metrics=run.val_metrics))  # fmt: skip
        _track_best(run, st, record)
    record["seconds"] = time.perf_counter() - t0
    st.history.append(record)
    st.epoch += 1
    # every callback sees every epoch (a list, not a short-circuiting generator)
    wants_stop = any([cb(st.epoch, record, run.module) is True for cb in run.callbacks])
    if any(D.gather(wants_stop, run.ctx)):
        st.stopped = True
    return record


def _scored(run: Run) -> nn.Module:
    """The weights validation scores and early stopping keeps: the average with ``ema_decay``, else the model."""
    return run.module if run.ema is None else run.ema.averaged


def _track_best(run: Run, st: R.LoopState, record: dict[str, Any]) -> None:
    key = monitor_key(record, run.monitor)
    if math.inf in key and run.ctx.is_main:
        warnings.warn(
            f"epoch {st.epoch + 1}: the monitored {run.monitor} is {record.get(run.monitor)!r}; it counts as "
            "the worst epoch for early stopping and best-epoch selection",
            RuntimeWarning,
            stacklevel=2,
        )
    if st.best_key is None or key < st.best_key:
        st.best_key, st.best_epoch, st.since_best = key, st.epoch + 1, 0
        if run.patience is not None:
            st.best_state = {k: v.detach().clone() for k, v in _scored(run).state_dict().items()}
    else:
        st.since_best += 1
        if run.patience is not None and st.since_best >= run.patience:
            st.stopped = st.stopped_early = True
        elif run.config["schedule"] == "plateau" and st.since_best % run.config["step_size"] == 0:
            st.plateau_cuts += 1  # the next epoch trains at lr·γ^cuts


def _epoch_batches(run: Run, epoch: int, o: dict):
    """This rank's batches of the epoch (row orders from :func:`epoch_order`, or the DataLoader's)."""
    if not isinstance(run.train, IndexedSource):
        run.train.set_epoch(epoch)
        yield from run.train.batches()
        return
    order = epoch_order(run.train.n, seed=o["seed"], epoch=epoch, members=run.member_order)
    shard = D.train_shard(order, run.ctx)
    for start, stop in batch_bounds(int(shard.shape[0]), o["batch_size"]):
        yield run.train.take(shard[start:stop])


def _train_epoch(run: Run, st: R.LoopState, o: dict) -> tuple[float, float | None, float]:
    """One pass over the training data; returns (mean task loss, mean regulariser or None, last lr)."""
    epoch = st.epoch
    run.module.train()
    for layer in run.eval_kept:  # layers the caller froze in eval mode stay frozen
        layer.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=run.device)  # task × rows, regulariser × rows, rows
    lr_now = o["lr"]
    for s, batch in enumerate(_epoch_batches(run, epoch, o)):
        lr_now = o["lr"] * lr_factor(o["schedule"], step=epoch * run.steps + s, total_steps=o["epochs"] * run.steps,
                                     epoch=epoch, step_size=o["step_size"], gamma=o["gamma"],
                                     plateau_cuts=st.plateau_cuts)  # fmt: skip
        for group in run.opt.param_groups:
            group["lr"] = group_lr(group, lr_now)
        sums += _step(run, batch, o["grad_clip"])
    D.broadcast_buffers(run.module, run.ctx)  # rank 0's BatchNorm statistics everywhere
    if run.ema is not None:  # the average holds running statistics too, updated from each rank's own
        D.broadcast_buffers(run.ema.averaged, run.ctx)
    sums = D.all_reduce_sum(sums.cpu(), run.ctx)
    train_loss = float(sums[0] / sums[2])
    if not math.isfinite(train_loss):
        raise TrainingDiverged(f"training loss is {train_loss} in epoch {epoch + 1}; try a lower lr")
    reg_mean = float(sums[1] / sums[2]) if run.regularizer is not None else None
    if reg_mean is not None and not math.isfinite(reg_mean):
        raise TrainingDiverged(f"the regularizer is {reg_mean} in epoch {epoch + 1}: check what it computes")
    bad = next((n for n, p in run.module.named_parameters() if not bool(torch.isfinite(p).all())), None)
    if bad is not None:
        raise TrainingDiverged(
            f"parameter {bad!r} became non-finite in epoch {epoch + 1} (lr {o['lr']!r}); try a lower lr"
        )
    return train_loss, reg_mean, lr_now


def _step(run: Run, batch: Any, grad_clip: float | None) -> Tensor:
    """One optimisation step; returns ``[task × rows, regulariser × rows, rows]`` (float64, CPU)."""
    x, y = split_batch(batch, labels_key=run.train.labels_key, need_labels=True, name="train")
    if not run.train.checked_upfront:
        check_batch(
            x, y, name="train", num_classes=run.num_classes, member_targets=run.member_order is not None
        )
    x, y = to_device(x, run.device), y.to(run.device)
    rows = int(y.shape[0])
    try:
        out = call_model(run.wrapped, x)
    except ValueError as exc:
        if "Expected more than 1 value per channel" not in str(exc) or rows > 1:
            raise
        raise ValueError(
            "a training batch of one row reached a BatchNorm layer, which cannot normalise a single value "
            "(batch_size=1, or a DataLoader whose last batch holds one row): use batch_size >= 2, or "
            "drop_last=True on the DataLoader"
        ) from None
    task = check_scalar(run.loss(out, y), name="loss_fn")
    total, reg = task, torch.zeros((), device=task.device)
    if run.regularizer is not None:
        reg = check_scalar(run.regularizer(run.module), name="regularizer")
        total = task + reg
    run.opt.zero_grad(set_to_none=True)
    total.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_([p for g in run.opt.param_groups for p in g["params"]], grad_clip)
    run.opt.step()
    if run.ema is not None:
        run.ema.update(run.module)
    done = torch.stack([task.detach().double(), reg.detach().double().to(task.device)]) * rows
    return torch.cat(
        [done.to(run.device), torch.full((1,), float(rows), dtype=torch.float64, device=run.device)]
    )
