"""Everything :func:`ensemblize.training.fit` resolves before its first epoch: :class:`Run`.

* :func:`check_options` — every keyword option validated (errors name the option and the value);
* :func:`make_run` — one no-grad probe forward on two samples learns the output's form: the
  member count ``M``, the number of classes, whether validation can score the ensemble as a
  classifier; labels of tensor data are checked here, those of Datasets batch by batch; the default
  member loss (with the model's ``member_loss_reduction``) is checked on the probe so that a bad
  output or target layout is named before any training; the monitor is resolved; the run's
  configuration (what a checkpoint must match to be resumed) is assembled.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_bool, check_int, check_labels, check_positive
from . import distributed as D
from .averaging import check_ema_decay
from .data import IndexedSource, Source, call_model, check_batch, split_batch, to_device, tree_map
from .identity import callable_identity
from .modes import eval_mode
from .optim import OPTIMIZERS, SCHEDULES, check_decay_filter, decay_filter_name
from .outputs import (
    class_members,
    member_cross_entropy,
    member_loss_reduction,
    member_mse,
    regression_members,
    warn_if_probabilities,
)
from .predict import TASKS
from .validation import MONITORS, check_scalar

__all__ = ["Run", "check_options", "make_run"]


@dataclass
class Run:
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
    ema: Any = None  # a WeightAverage with fit(ema_decay=...)
    shard_rows: int = 0
    steps: int = 0
    eval_kept: tuple[nn.Module, ...] = ()  # submodules the caller left in eval mode (a frozen BatchNorm)


def _probe(module: nn.Module, source: Source, device: torch.device) -> tuple[Any, Tensor | None]:
    """One no-grad, eval-mode forward on (at most) two samples, to learn the output's form."""
    if isinstance(source, IndexedSource):
        batch = source.take(torch.arange(min(2, source.n)))
    else:
        batch = tree_map(lambda t: t[:2], next(iter(source.batches())))
    x, y = split_batch(batch, labels_key=source.labels_key, need_labels=True, name=source.name)
    check_batch(x, None, name=source.name, num_classes=None)
    with eval_mode(module), torch.no_grad():
        out = call_model(module, to_device(x, device))
    return out, y


def _frozen_eval_layers(module: nn.Module) -> tuple[nn.Module, ...]:
    """The layers a caller froze: in a model in train mode, each top-most submodule in eval mode whose
    parameters are all frozen (``requires_grad=False``) or that has none — a BatchNorm whose statistics
    a fine-tune keeps. A submodule in eval mode with trainable parameters (a pretrained backbone loaded
    in eval mode, then given a new head) trains in train mode as before; so does a model wholly in eval mode.
    """
    if not module.training:
        return ()
    kept: list[tuple[str, nn.Module]] = []
    tops: list[str] = []  # top-most submodules in eval mode: their own children are not looked at
    for name, m in module.named_modules():  # parents before children
        if m.training or any(name.startswith(t + ".") for t in tops):
            continue
        tops.append(name)
        if not any(p.requires_grad for p in m.parameters()):
            kept.append((name, m))
    if kept:
        names = [k for k, _ in kept]
        warnings.warn(
            f"fit keeps {len(names)} frozen layer(s) in eval mode (eval mode and no trainable parameters "
            f"when fit was called): {names[:5]}{' …' if len(names) > 5 else ''}; call .train() on them first "
            "to train them in train mode",
            UserWarning,
            stacklevel=4,
        )
    return tuple(m for _, m in kept)


def _probe_val(module: nn.Module, source: Source, device: torch.device) -> tuple[Any, Tensor | None]:
    """:func:`_probe` on the validation data, a model error there named as such."""
    try:
        return _probe(module, source, device)
    except RuntimeError as exc:  # torch's shape / dtype errors
        raise ValueError(
            f"the model fails on the {source.name} data (checked before training): {exc}. Give validation "
            "data of the training data's form"
        ) from exc


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
    # validation data the model cannot take (another width, say) fails now, not after an epoch of training
    val_probe = _probe_val(module, val, device) if val is not None else None
    from ..selective.net import SelectiveOutput

    if loss_fn is None and isinstance(out, SelectiveOutput):
        # the default loss reads only its logits: g and the auxiliary head would never be trained
        raise ValueError(
            "the model returns a SelectiveOutput (a SelectiveNet): pass loss_fn=SelectiveNetLoss(...), "
            "SyncLoss(...) (ensemblize.selective); the default cross-entropy would train the prediction "
            "head only and leave the selection and auxiliary heads at their initial weights"
        )
    reduction = member_loss_reduction(module)
    loss = loss_fn if loss_fn is not None else _default_loss(task, reduction)
    num_classes, classify_val = None, False
    if task == "classification" and loss_fn is None:
        warn_if_probabilities(class_members(out), where="fit")
        c = int(class_members(out).shape[-1])
        if c < 2:
            raise ValueError(
                f"task='classification' needs at least 2 logits per row, but the model returns 1 (output shape "
                f"{tuple(class_members(out).shape)}): cross-entropy over one class is always 0. Give the model "
                "one output per class, or pass a loss_fn (e.g. BCEWithLogitsLoss on the single logit)"
            )
        num_classes = _check_classes(train, c)
        check_batch({}, y, name="train", num_classes=c)
        if val is not None:
            vnum = _check_classes(val, c)
            num_classes = num_classes if num_classes is not None else vnum
            classify_val = True
    elif task == "classification" and val_probe is not None:
        vout, vy = val_probe
        c = _member_count(vout, task) and int(class_members(vout).shape[-1])
        classify_val = _labels_fit(val, vy, c or 0)
    if task == "regression" and loss_fn is None and not o["per_member_batches"]:
        f = regression_members(out)
        if f.dim() == 2 and f.shape[1] > 1 and tuple(y.shape) == tuple(f.shape):
            raise ValueError(
                f"regression outputs (B, {f.shape[1]}) are read as {f.shape[1]} members each predicting one value, "
                f"and targets (B, {f.shape[1]}) as one target per member; a single model with {f.shape[1]} outputs "
                f"must return (B, 1, {f.shape[1]}) (e.g. out.unsqueeze(1)), an ensemble of one-output members "
                "takes targets (B,)"
            )
    if (
        loss_fn is None
    ):  # names a bad output or target layout, on the probe's rows (not the user's batch size)
        try:
            check_scalar(loss(out, y.to(device)), name="the member loss")
        except ValueError as exc:
            raise ValueError(
                f"checking the model on a probe batch of the first {len(y)} training rows: {exc}"
            ) from exc
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


def check_options(kw: dict[str, Any]) -> dict[str, Any]:
    """Validate ``fit``'s keyword options (named errors); return them normalised."""
    o = dict(kw)
    o["epochs"] = check_int(o["epochs"], name="epochs", minimum=1)
    o["batch_size"] = check_int(o["batch_size"], name="batch_size", minimum=1)
    if not isinstance(o["schedule"], str):
        o["schedule"] = check_epoch_factors(o["schedule"], epochs=o["epochs"])
    for key, allowed in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES), ("task", TASKS)):
        if key == "schedule" and isinstance(o[key], list):
            continue
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
    o["gate_lr_scale"] = check_positive(o["gate_lr_scale"], name="gate_lr_scale")
    if o["step_size"] is not None:
        o["step_size"] = check_int(o["step_size"], name="step_size")
    elif o["schedule"] == "plateau":
        o["step_size"] = 5
    else:
        o["step_size"] = max(1, o["epochs"] // 3)
    if o["schedule"] == "plateau" and o["val"] is None:
        raise ValueError(
            "schedule='plateau' cuts the lr when the validation score stalls: it needs val (val=None)"
        )
    if o["early_stopping_patience"] is not None:
        o["early_stopping_patience"] = check_int(o["early_stopping_patience"], name="early_stopping_patience")
        if o["val"] is None:
            raise ValueError("early_stopping_patience needs validation data (val=None)")
    if o["grad_clip"] is not None:
        o["grad_clip"] = check_positive(o["grad_clip"], name="grad_clip")
    o["ema_decay"] = check_ema_decay(o["ema_decay"])
    o["seed"] = check_int(o["seed"], name="seed", minimum=0)
    _check_callables(o)
    return o


def check_epoch_factors(factors: object, *, epochs: int) -> list[float]:
    """A replayed schedule (list, tuple or array): ``epochs`` finite, positive lr multipliers, one per epoch."""
    if not isinstance(factors, (list, tuple, np.ndarray)):
        raise TypeError(
            f"schedule must be one of {SCHEDULES} or a sequence of per-epoch lr multipliers, got {factors!r}"
        )
    if len(factors) != epochs:
        raise ValueError(
            f"a per-epoch schedule needs one lr multiplier per epoch: got {len(factors)} for epochs={epochs}"
        )
    return [check_positive(f, name=f"schedule[{e}]") for e, f in enumerate(factors)]


def _is_sigma_ensemble(module: nn.Module) -> bool:
    from ..sigma.convert import SigmaEnsemble

    return isinstance(module, SigmaEnsemble)


def _is_deep_ensemble(module: nn.Module) -> bool:
    from ..models.ensembles import DeepEnsemble

    return isinstance(module, DeepEnsemble)


def _check_callables(o: dict[str, Any]) -> None:
    if o["progress"] is not None and not isinstance(o["progress"], bool):
        raise TypeError(f"progress must be True, False or None, got {o['progress']!r}")
    for key in ("per_member_batches", "resume", "nesterov"):
        check_bool(o[key], name=key)
    for key in ("labels_key", "desc"):
        if not isinstance(o[key], str):
            raise TypeError(f"{key} must be a string, got {o[key]!r}")
    check_decay_filter(o["decay_filter"])
    folder = o["checkpoint_dir"]
    if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
        raise ValueError(f"checkpoint_dir {str(folder)!r} is a file, not a folder")
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


def _gate_lr_config(scale: float) -> dict[str, float]:
    """The checkpoint-config entry of ``gate_lr_scale``: none at 1, so older checkpoints still resume."""
    return {} if scale == 1.0 else {"gate_lr_scale": scale}


def make_run(o: dict, module: nn.Module, train: Source, val: Source | None, device: torch.device,
              ctx: D.DistContext) -> Run:  # fmt: skip
    """Probe the model on ``train``, check the options against it and return the :class:`Run` that
    :func:`ensemblize.training.fit` trains (loss, members, monitor, checkpointing, run config)."""
    info = _task_setup(o, module, train, val, device)
    if o["per_member_batches"] and _is_sigma_ensemble(module):
        raise ValueError(
            "per_member_batches is not supported by a σN ensemble: SigmaEnsemble repeats each input "
            "batch for every member, so its members always share their rows"
        )
    if o["per_member_batches"] and _is_deep_ensemble(module):
        raise ValueError(
            "per_member_batches is not supported by a DeepEnsemble: it gives every member the whole batch "
            "(B, ...), not member m's rows x[:, m]; per-member row orders need a model that reads (B, M, ...) "
            "inputs (the tabular ensembles)"
        )
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
        **_gate_lr_config(o["gate_lr_scale"]),
        **({} if o["ema_decay"] is None else {"ema_decay": o["ema_decay"]}),  # older checkpoints resume
        "monitor": monitor,
        "loss": callable_identity(info["loss"]),
        "regularizer": None if o["regularizer"] is None else callable_identity(o["regularizer"]),
        "world_size": ctx.world_size,
        "n_train": train.n,
        "n_val": val.n if val is not None else None,
        "train_data": train.fingerprint(),
        "val_data": val.fingerprint() if val is not None else None,
    }
    return Run(
        module=module, train=train, val=val, loss=info["loss"], regularizer=o["regularizer"], task=o["task"],
        classify_val=info["classify_val"], num_classes=info["num_classes"],
        member_order=info["members"] if o["per_member_batches"] else None, monitor=monitor,
        patience=o["early_stopping_patience"], config=config, device=device, ctx=ctx, callbacks=o["callbacks"],
        val_metrics=o["val_metrics"],
        eval_kept=_frozen_eval_layers(module),
    )  # fmt: skip
