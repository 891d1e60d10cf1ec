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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_int, check_labels, check_positive
from . import distributed as D
from . import resume as R
from . import state as S
from .data import (
    IndexedSource,
    Source,
    batch_bounds,
    call_model,
    check_batch,
    derive_seed,
    epoch_order,
    make_source,
    split_batch,
    to_device,
    tree_map,
)
from .optim import OPTIMIZERS, SCHEDULES, check_decay_filter, decay_filter_name, lr_factor, make_optimizer
from .outputs import (
    class_members,
    member_cross_entropy,
    member_loss_reduction,
    member_mse,
    regression_members,
)
from .predict import TASKS, model_device
from .progress import Progress
from .validation import MONITORS, check_scalar, monitor_key, validate

__all__ = ["fit", "FitResult", "seed_everything", "OPTIMIZERS", "SCHEDULES", "MONITORS", "TASKS"]


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

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the legacy global RNG is the point
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------------------ the run


@dataclass
class _Run:
    """Everything one call of :func:`fit` resolved before its first epoch."""

    module: nn.Module
    train: Source
    val: Source | None
    loss: Callable[[Any, Tensor], Tensor]
    regularizer: Callable[[nn.Module], Tensor] | None
    task: str
    classify_val: bool
    num_classes: int | None  # set: class labels are checked batch by batch (Dataset/DataLoader data)
    member_order: int | None  # M when every member gets its own row order
    monitor: str | None
    patience: int | None
    config: dict[str, Any]
    device: torch.device
    ctx: D.DistContext
    callbacks: tuple
    val_metrics: Mapping[str, Callable[[Tensor, Tensor], float]]
    wrapped: nn.Module | None = None
    opt: torch.optim.Optimizer | None = None
    shard_rows: int = 0
    steps: int = 0


def _probe(module: nn.Module, source: Source, device: torch.device) -> tuple[Any, Tensor | None]:
    """One no-grad, eval-mode forward on (at most) two samples, to learn the output's form."""
    if isinstance(source, IndexedSource):
        batch = source.take(torch.arange(min(2, source.n)))
    else:
        batch = tree_map(lambda t: t[:2], next(iter(source.batches())))
    x, y = split_batch(batch, labels_key=source.labels_key, need_labels=True, name=source.name)
    check_batch(x, None, name=source.name, num_classes=None)
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = call_model(module, to_device(x, device))
    finally:
        module.train(was)
    return out, y


def _check_classes(source: Source, num_classes: int) -> int | None:
    """Check all labels of tensor data now; return ``num_classes`` when they must be checked per batch."""
    targets = source.all_targets() if source.checked_upfront else None
    if targets is None:
        return num_classes
    if targets.dim() != 1:
        raise ValueError(f"{source.name} labels must have shape (N,), got {tuple(targets.shape)}")
    check_labels(targets, num_classes, name=f"{source.name} labels")
    return None


def _labels_fit(source: Source, y: Tensor | None, num_classes: int) -> bool:
    """True if ``source``'s labels look like class indices in ``[0, num_classes)`` (no error raised)."""
    targets = source.all_targets() if source.checked_upfront else y
    if targets is None or targets.dim() != 1 or targets.is_floating_point() or targets.dtype == torch.bool:
        return False
    return (
        num_classes >= 2
        and targets.numel() > 0
        and 0 <= int(targets.min())
        and int(targets.max()) < num_classes
    )


def _default_loss(task: str, reduction: str) -> Callable[[Any, Tensor], Tensor]:
    member_loss = member_cross_entropy if task == "classification" else member_mse

    def loss(outputs: Any, targets: Tensor) -> Tensor:
        return member_loss(outputs, targets, reduction=reduction)

    loss.__qualname__ = f"{member_loss.__name__}(reduction={reduction!r})"
    return loss


def _member_count(out: Any, task: str) -> int | None:
    """M read from a probe output (``None`` when a custom output cannot be read)."""
    try:
        return int((class_members(out) if task == "classification" else regression_members(out)).shape[1])
    except ValueError:
        return None


def _task_setup(o: dict, module: nn.Module, train: Source, val: Source | None, device: torch.device) -> dict:
    """Probe the model; resolve the loss, label checks, the member count and whether validation classifies."""
    task, loss_fn = o["task"], o["loss_fn"]
    out, y = _probe(module, train, device)
    reduction = member_loss_reduction(module)
    loss = loss_fn if loss_fn is not None else _default_loss(task, reduction)
    num_classes, classify_val = None, False
    if task == "classification" and loss_fn is None:
        c = int(class_members(out).shape[-1])
        num_classes = _check_classes(train, c)
        check_batch({}, y, name="train", num_classes=c)
        if val is not None:
            vnum = _check_classes(val, c)
            num_classes = num_classes if num_classes is not None else vnum
            classify_val = True
    elif task == "classification" and val is not None:
        vout, vy = _probe(module, val, device)
        c = _member_count(vout, task) and int(class_members(vout).shape[-1])
        classify_val = _labels_fit(val, vy, c or 0)
    if loss_fn is None:
        check_scalar(loss(out, y.to(device)), name="the member loss")  # names a bad output or target layout
    members = _member_count(out, task)
    if o["per_member_batches"] and members is None:
        raise ValueError("per_member_batches needs member outputs (B, M, ...) to read M from")
    return {"members": members, "num_classes": num_classes, "classify_val": classify_val, "loss": loss}


def _resolve_monitor(
    monitor: str | None, *, task: str, classify_val: bool, has_val: bool, custom_loss: bool
) -> str | None:
    if not has_val:
        if monitor is not None:
            raise ValueError(f"monitor={monitor!r} needs validation data (val=None)")
        return None
    if monitor is None:
        if custom_loss:
            return "val_loss"
        return "val_nll" if task == "classification" else "val_rmse"
    if monitor in ("val_nll", "val_accuracy") and not classify_val:
        raise ValueError(f"monitor={monitor!r} needs class logits and integer labels in the validation data")
    if monitor == "val_rmse" and task != "regression":
        raise ValueError("monitor='val_rmse' needs task='regression'")
    return monitor


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
    schedule: str = "cosine",
    step_size: int | None = None,
    gamma: float = 0.1,
    decay_filter: str | Callable[[str, nn.Parameter, nn.Module], bool] = "standard",
    grad_clip: float | None = None,
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
    embeddings), ``"all"``, or a callable — see :mod:`ensemblize.training.optim`. Schedule:
    ``"cosine"`` per optimisation step, ``lr_t = lr·½(1 + cos(π t/T))``; ``"step"`` per epoch,
    ``lr·gamma^⌊e/step_size⌋`` (``step_size`` defaults to ``max(1, epochs // 3)``); ``"none"``.
    ``grad_clip`` clips the global gradient norm (over all members together).

    Batches: ``per_member_batches=True`` gives every member its own row order each epoch: the index
    is ``(B, M)`` and the model receives ``(B, M, ...)`` inputs and ``(B, M)`` targets (tabular
    ensembles; needs tensor or Dataset data). By default all members see the same rows.

    Validation and early stopping (need ``val``): the ENSEMBLE is scored
    (:mod:`ensemblize.training.validation`); ``monitor`` is ``"val_nll"`` (classification default),
    ``"val_accuracy"`` (ties broken by NLL), ``"val_rmse"`` (regression default) or ``"val_loss"``
    (default with a custom ``loss_fn``). ``val_metrics`` adds ``name -> fn(member_outputs, targets)``
    fields computed on the whole split. With ``early_stopping_patience`` training stops after that
    many epochs without improvement and the best epoch's weights are restored; without it the final
    weights are kept (``best_epoch`` is still reported).

    Checkpoints (``checkpoint_dir``): after every epoch, an atomic safetensors + JSON pair (no
    pickle) with everything needed to resume; a later call with the same arguments, seed, data and
    initial weights resumes from it (announced on stderr) and ends bitwise-identical to an
    uninterrupted run. Anything different is a ValueError naming the differing fields (see
    :mod:`ensemblize.training.resume`). ``resume=False`` deletes the folder's checkpoints first. A
    stop by early stopping or by a callback is final: resuming such a run trains no more.

    ``callbacks``: each is called after every epoch as ``cb(epoch, record, model)``; returning
    ``True`` stops training after that epoch. ``progress``: ``True``/``None`` shows a tqdm.auto bar
    labelled ``desc`` on a terminal or notebook and one line per epoch with an ETA elsewhere;
    ``False`` is silent. ``device``: ``None`` keeps the model where it is. Under ``torchrun`` (or an
    initialised process group) the model is wrapped in DistributedDataParallel and only rank 0
    writes files or progress; see :mod:`ensemblize.training.distributed`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    opts = _check_options(locals())
    dev = model_device(model) if device is None else torch.device(device)
    ctx = D.setup(dev)
    if ctx.enabled and dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    module = model.to(dev)
    train_src = make_source(train, name="train", labels_key=labels_key)
    val_src = make_source(val, name="val", labels_key=labels_key) if val is not None else None
    rng_devices = (
        [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    )
    with torch.random.fork_rng(devices=rng_devices):
        run = _make_run(opts, module, train_src, val_src, dev, ctx)
        return _train(run, opts)


def _check_options(kw: dict[str, Any]) -> dict[str, Any]:
    """Validate ``fit``'s keyword options (named errors); return them normalised."""
    o = dict(kw)
    o["epochs"] = check_int(o["epochs"], name="epochs", minimum=1)
    o["batch_size"] = check_int(o["batch_size"], name="batch_size", minimum=1)
    for key, allowed in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES), ("task", TASKS)):
        if o[key] not in allowed:
            raise ValueError(f"unknown {key} {o[key]!r}; expected one of {allowed}")
    if o["monitor"] is not None and o["monitor"] not in MONITORS:
        raise ValueError(f"unknown monitor {o['monitor']!r}; expected one of {MONITORS}")
    o["lr"] = check_positive(o["lr"], name="lr", allow_zero=True)
    o["weight_decay"] = check_positive(o["weight_decay"], name="weight_decay", allow_zero=True)
    o["momentum"] = check_positive(o["momentum"], name="momentum", allow_zero=True)
    if o["momentum"] >= 1:
        raise ValueError(f"momentum must lie in [0, 1), got {o['momentum']!r}")
    o["gamma"] = check_positive(o["gamma"], name="gamma")
    o["step_size"] = (
        max(1, o["epochs"] // 3) if o["step_size"] is None else check_int(o["step_size"], name="step_size")
    )
    if o["early_stopping_patience"] is not None:
        o["early_stopping_patience"] = check_int(o["early_stopping_patience"], name="early_stopping_patience")
        if o["val"] is None:
            raise ValueError("early_stopping_patience needs validation data (val=None)")
    if o["grad_clip"] is not None:
        o["grad_clip"] = check_positive(o["grad_clip"], name="grad_clip")
    if isinstance(o["seed"], bool) or not isinstance(o["seed"], int) or o["seed"] < 0:
        raise ValueError(f"seed must be an int >= 0, got {o['seed']!r}")
    _check_callables(o)
    return o


def _check_callables(o: dict[str, Any]) -> None:
    if o["progress"] is not None and not isinstance(o["progress"], bool):
        raise TypeError(f"progress must be True, False or None, got {o['progress']!r}")
    for key in ("per_member_batches", "resume", "nesterov"):
        if not isinstance(o[key], bool):
            raise TypeError(f"{key} must be True or False, got {o[key]!r}")
    for key in ("labels_key", "desc"):
        if not isinstance(o[key], str):
            raise TypeError(f"{key} must be a string, got {o[key]!r}")
    check_decay_filter(o["decay_filter"])
    for name in ("loss_fn", "regularizer"):
        if o[name] is not None and not callable(o[name]):
            raise TypeError(f"{name} must be callable, got {type(o[name]).__name__}")
    o["callbacks"] = tuple(o["callbacks"])
    if not all(callable(cb) for cb in o["callbacks"]):
        raise TypeError("callbacks must be callables")
    o["val_metrics"] = dict(o["val_metrics"] or {})
    for name, fn in o["val_metrics"].items():
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"val_metrics must map names to callables, got {name!r}: {type(fn).__name__}")


def _make_run(o: dict, module: nn.Module, train: Source, val: Source | None, device: torch.device,
              ctx: D.DistContext) -> _Run:  # fmt: skip
    info = _task_setup(o, module, train, val, device)
    if o["per_member_batches"] and not isinstance(train, IndexedSource):
        raise ValueError("per_member_batches needs tensor or Dataset training data, not a DataLoader")
    monitor = _resolve_monitor(o["monitor"], task=o["task"], classify_val=info["classify_val"],
                               has_val=val is not None, custom_loss=o["loss_fn"] is not None)  # fmt: skip
    config = {
        **{
            k: o[k]
            for k in (
                "optimizer",
                "lr",
                "weight_decay",
                "momentum",
                "nesterov",
                "schedule",
                "step_size",
                "gamma",
                "epochs",
                "batch_size",
                "seed",
                "grad_clip",
                "early_stopping_patience",
                "task",
                "per_member_batches",
                "labels_key",
            )
        },  # fmt: skip
        "decay_filter": decay_filter_name(o["decay_filter"]),
        "monitor": monitor,
        "loss": getattr(info["loss"], "__qualname__", type(info["loss"]).__name__),
        "world_size": ctx.world_size,
        "n_train": train.n,
        "n_val": val.n if val is not None else None,
        "train_data": train.fingerprint(),
        "val_data": val.fingerprint() if val is not None else None,
    }
    return _Run(
        module=module, train=train, val=val, loss=info["loss"], regularizer=o["regularizer"], task=o["task"],
        classify_val=info["classify_val"], num_classes=info["num_classes"],
        member_order=info["members"] if o["per_member_batches"] else None, monitor=monitor,
        patience=o["early_stopping_patience"], config=config, device=device, ctx=ctx, callbacks=o["callbacks"],
        val_metrics=o["val_metrics"],
    )  # fmt: skip


def _has_batch_norm(module: nn.Module) -> bool:
    from ..nn.sigma_norm import SigmaNorm

    return any(isinstance(m, (nn.modules.batchnorm._BatchNorm, SigmaNorm)) and "Batch" in type(m).__name__
               for m in module.modules())  # fmt: skip


def _prepare(run: _Run, o: dict) -> None:
    """Optimiser, DDP wrapper, steps per epoch and the initial-weights fingerprint."""
    run.opt = make_optimizer(run.module, optimizer=o["optimizer"], lr=o["lr"], weight_decay=o["weight_decay"],
                             momentum=o["momentum"], nesterov=o["nesterov"], decay_filter=o["decay_filter"])  # fmt: skip
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


def _start(run: _Run, folder: Path | None, resume: bool) -> R.LoopState:
    if folder is None:
        return R.LoopState()
    if not resume:
        if run.ctx.is_main:
            S.clear_checkpoints(folder)
        st = R.LoopState()
    else:
        if run.ctx.is_main:
            S.remove_temporaries(folder)
        st = R.restore(folder, run.module, run.opt, run.config, device=run.device, announce=run.ctx.is_main)
    starts = D.gather(st.epoch, run.ctx)
    if len(set(starts)) > 1:
        raise RuntimeError(f"ranks resume from different epochs {starts}; checkpoint_dir must be shared")
    return st


def _train(run: _Run, o: dict) -> FitResult:
    _prepare(run, o)
    folder = None if o["checkpoint_dir"] is None else Path(o["checkpoint_dir"])
    st = _start(run, folder, o["resume"])
    show = run.ctx.is_main and o["progress"] is not False
    bar = Progress(o["epochs"], desc=o["desc"], unit="epoch", enabled=show, initial=st.epoch)
    try:
        while st.epoch < o["epochs"] and not st.stopped:
            record = _epoch(run, st, o)
            if folder is not None and run.ctx.is_main:
                R.save(folder, run.module, run.opt, run.config, st)
            bar.update(_shown(record))
    finally:
        bar.close()
    if run.patience is not None and st.best_state is not None:
        run.module.load_state_dict(st.best_state)
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


def _epoch(run: _Run, st: R.LoopState, o: dict) -> dict[str, Any]:
    """Train one epoch, validate, track the best epoch, run the callbacks; returns the epoch's record."""
    t0 = time.perf_counter()
    epoch_seed = derive_seed(o["seed"], st.epoch, run.ctx.rank, 1)
    if run.device.type == "cuda":
        torch.manual_seed(epoch_seed)
    else:  # only the CPU generator: fork_rng restores no CUDA state here
        torch.default_generator.manual_seed(epoch_seed)
    train_loss, reg, lr_now = _train_epoch(run, st.epoch, o)
    record: dict[str, Any] = {
        "epoch": st.epoch + 1,
        "train_loss": train_loss,
        "regularizer": reg,
        "lr": lr_now,
    }
    if run.val is not None:
        record.update(validate(run.module, run.val, loss=run.loss, task=run.task, classify=run.classify_val,
                               num_classes=run.num_classes, batch_size=max(o["batch_size"], 256), device=run.device,
                               ctx=run.ctx, val_metrics=run.val_metrics))  # fmt: skip
        _track_best(run, st, record)
    record["seconds"] = time.perf_counter() - t0
    st.history.append(record)
    st.epoch += 1
    wants_stop = any(cb(st.epoch, record, run.module) is True for cb in run.callbacks)
    if any(D.gather(wants_stop, run.ctx)):
        st.stopped = True
    return record


def _track_best(run: _Run, st: R.LoopState, record: dict[str, Any]) -> None:
    key = monitor_key(record, run.monitor)
    if st.best_key is None or key < st.best_key:
        st.best_key, st.best_epoch, st.since_best = key, st.epoch + 1, 0
        if run.patience is not None:
            st.best_state = {k: v.detach().clone() for k, v in run.module.state_dict().items()}
    else:
        st.since_best += 1
        if run.patience is not None and st.since_best >= run.patience:
            st.stopped = st.stopped_early = True


def _epoch_batches(run: _Run, epoch: int, o: dict):
    """This rank's batches of the epoch (row orders from :func:`epoch_order`, or the DataLoader's)."""
    if not isinstance(run.train, IndexedSource):
        run.train.set_epoch(epoch)
        yield from run.train.batches()
        return
    order = epoch_order(run.train.n, seed=o["seed"], epoch=epoch, members=run.member_order)
    shard = D.train_shard(order, run.ctx)
    for start, stop in batch_bounds(int(shard.shape[0]), o["batch_size"]):
        yield run.train.take(shard[start:stop])


def _train_epoch(run: _Run, epoch: int, o: dict) -> tuple[float, float | None, float]:
    """One pass over the training data; returns (mean task loss, mean regulariser or None, last lr)."""
    run.module.train()
    sums = torch.zeros(3, dtype=torch.float64, device=run.device)  # task × rows, regulariser × rows, rows
    lr_now = o["lr"]
    for s, batch in enumerate(_epoch_batches(run, epoch, o)):
        lr_now = o["lr"] * lr_factor(o["schedule"], step=epoch * run.steps + s, total_steps=o["epochs"] * run.steps,
                                     epoch=epoch, step_size=o["step_size"], gamma=o["gamma"])  # fmt: skip
        for group in run.opt.param_groups:
            group["lr"] = lr_now
        sums += _step(run, batch, o["grad_clip"])
    D.broadcast_buffers(run.module, run.ctx)  # rank 0's BatchNorm statistics everywhere
    sums = D.all_reduce_sum(sums.cpu(), run.ctx)
    train_loss = float(sums[0] / sums[2])
    if not math.isfinite(train_loss):
        raise FloatingPointError(f"training loss is {train_loss} in epoch {epoch + 1}; try a lower lr")
    return train_loss, (float(sums[1] / sums[2]) if run.regularizer is not None else None), lr_now


def _step(run: _Run, batch: Any, grad_clip: float | None) -> Tensor:
    """One optimisation step; returns ``[task × rows, regulariser × rows, rows]`` (float64, CPU)."""
    x, y = split_batch(batch, labels_key=run.train.labels_key, need_labels=True, name="train")
    if not run.train.checked_upfront:
        check_batch(x, y, name="train", num_classes=run.num_classes)
    x, y = to_device(x, run.device), y.to(run.device)
    rows = int(y.shape[0])
    task = check_scalar(run.loss(call_model(run.wrapped, x), y), name="loss_fn")
    total, reg = task, torch.zeros((), device=task.device)
    if run.regularizer is not None:
        reg = check_scalar(run.regularizer(run.module), name="regularizer")
        total = task + reg
    run.opt.zero_grad(set_to_none=True)
    total.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_([p for g in run.opt.param_groups for p in g["params"]], grad_clip)
    run.opt.step()
    done = torch.stack([task.detach().double(), reg.detach().double().to(task.device)]) * rows
    return torch.cat(
        [done.to(run.device), torch.full((1,), float(rows), dtype=torch.float64, device=run.device)]
    )
