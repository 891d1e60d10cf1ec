"""Validation inside :func:`ensemblize.training.fit`: the ensemble's scores and the monitored key.

On every validation sample (each exactly once, also under DDP) ``fit`` records:

* ``val_loss`` — the training loss function on the validation data (sample mean), and ``val_count``;
* classification: ``val_nll`` = ``−mean_i log p̄_i[y_i]`` and ``val_accuracy`` of ``argmax p̄``, with
  ``p̄ = mean_m softmax(z_m)`` the ENSEMBLE's probability (streaming twins of
  :mod:`ensemblize.metrics`, computed stably from the logits);
* regression: ``val_rmse`` = RMSE of the member mean ``f̄ = mean_m f_m`` (over samples and target
  dimensions);
* every ``val_metrics[name](outputs, targets)`` on the whole split, with ``outputs`` the member
  probabilities ``(N, M, C)`` (classification) or member predictions ``(N, M[, D])`` (regression).

Monitors (lower key is better; used for early stopping and ``best_epoch``):
``"val_nll"``; ``"val_accuracy"`` (higher is better, ties broken by the lower ``val_nll``);
``"val_rmse"``; ``"val_loss"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from . import distributed as D
from .data import Source, call_model, check_batch, split_batch, to_device
from .modes import eval_mode
from .outputs import class_members, regression_members
from .predict import concat, sharded_batches

__all__ = ["MONITORS", "monitor_key", "validate", "check_scalar"]

MONITORS = ("val_nll", "val_accuracy", "val_rmse", "val_loss")


def monitor_key(record: Mapping[str, Any], monitor: str) -> list[float]:
    """The value to minimise for ``monitor`` (``[-accuracy, nll]`` for ``"val_accuracy"``).

    A NaN is mapped to ``+inf``, the worst value: every comparison with NaN is False, so a NaN first
    epoch would stay "best" for ever and early stopping would restore its weights.
    """
    values = (
        [-float(record["val_accuracy"]), float(record["val_nll"])]
        if monitor == "val_accuracy"
        else [float(record[monitor])]
    )
    return [math.inf if math.isnan(v) else v for v in values]


def check_scalar(value: object, *, name: str) -> Tensor:
    """A one-element tensor as a 0-d tensor; TypeError naming ``name`` otherwise."""
    if not isinstance(value, Tensor) or value.numel() != 1:
        what = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"{name} must return a scalar tensor, got {what}")
    return value.reshape(())


class _Accumulator:
    """This rank's running sums (picklable, gathered across ranks)."""

    def __init__(self, task: str, classify: bool, keep: bool) -> None:
        from ..metrics.streaming import NLL, Accuracy  # imported on use

        self.task, self.classify, self.keep = task, classify, keep
        self.indices: list[Tensor] = []
        self.loss_sum = 0.0
        self.sse, self.count = 0.0, 0
        self.nll, self.accuracy = NLL(from_logits=True), Accuracy()
        self.outputs: list[Tensor] = []
        self.targets: list[Tensor] = []

    def update(self, idx: Tensor, out: Any, y: Tensor, loss: float) -> None:
        self.indices.append(idx)
        self.loss_sum += loss * int(y.shape[0])
        members = None
        if self.classify:
            logits = class_members(out).detach().double().cpu()
            self.nll.update(logits, y.cpu())
            members = torch.softmax(logits, dim=-1)
            self.accuracy.update(members, y.cpu())
        elif self.task == "regression":
            members = regression_members(out).detach().double().cpu()
            mean = members.mean(dim=1)
            if y.numel() != mean.numel():
                raise ValueError(
                    f"val: targets of shape {tuple(y.shape)} do not match the member-mean prediction "
                    f"{tuple(mean.shape)} (outputs {tuple(members.shape)} read as (B, M[, D]))"
                )
            err = mean - y.double().cpu().reshape(mean.shape)
            self.sse += float((err**2).sum())
            self.count += err.numel()
        if self.keep and members is not None:
            self.outputs.append(members)
            self.targets.append(y.detach().cpu())


def _merge(parts: list[_Accumulator], n: int, shardable: bool) -> dict[str, Any]:
    from ..metrics.streaming import NLL, Accuracy

    indices = torch.cat([i for p in parts for i in p.indices])
    if shardable:
        D.check_coverage(indices, n)
    elif indices.numel() != n:  # a DataLoader that skipped or repeated rows (a custom batch sampler)
        raise ValueError(
            f"val: the DataLoader yielded {indices.numel()} rows but its dataset has {n}; validation scores "
            "every row once: use a loader without a subset or distributed sampler and with drop_last=False"
        )
    first = parts[0]
    scored = int(indices.numel())
    res: dict[str, Any] = {"val_loss": sum(p.loss_sum for p in parts) / scored, "val_count": scored}
    if first.classify:
        nll, acc = NLL(from_logits=True), Accuracy()
        for part in parts:  # merged in rank order: the same value on every rank
            if part.indices and sum(i.numel() for i in part.indices):
                nll.merge(part.nll)
                acc.merge(part.accuracy)
        res["val_nll"] = float(nll.compute())
        res["val_accuracy"] = float(acc.compute())
    elif first.task == "regression":
        res["val_rmse"] = math.sqrt(sum(p.sse for p in parts) / sum(p.count for p in parts))
    return res, indices


def validate(
    module: nn.Module,
    source: Source,
    *,
    loss: Callable[[Any, Tensor], Tensor],
    task: str,
    classify: bool,
    num_classes: int | None,
    batch_size: int,
    device: torch.device,
    ctx: D.DistContext,
    val_metrics: Mapping[str, Callable[[Tensor, Tensor], float]],
) -> dict[str, Any]:
    """One validation pass in eval mode under no_grad; returns the record fields (module docstring)."""
    acc = _Accumulator(task, classify, keep=bool(val_metrics))
    with eval_mode(module), torch.no_grad():
        for idx, batch in sharded_batches(source, ctx, batch_size):
            x, y = split_batch(batch, labels_key=source.labels_key, need_labels=True, name=source.name)
            if not source.checked_upfront:
                check_batch(x, y, name=source.name, num_classes=num_classes)
            x, y = to_device(x, device), y.to(device)
            out = call_model(module, x)
            acc.update(idx, out, y, float(check_scalar(loss(out, y), name="loss_fn")))
    parts = D.gather(acc, ctx) if source.shardable else [acc]
    res, indices = _merge(parts, source.n, source.shardable)
    if val_metrics:
        order = torch.argsort(indices)
        outputs = concat([o for p in parts for o in p.outputs])[order]
        targets = concat([t for p in parts for t in p.targets])[order]
        for name, fn in val_metrics.items():
            res[name] = float(fn(outputs, targets))
    return res
