"""The one batched, no-grad prediction loop: :func:`predict` (member probabilities) and :func:`predict_outputs`.

Both run the model in eval mode under ``torch.no_grad`` over ``data`` in batches of ``batch_size``,
restore the model's train/eval mode afterwards and return CPU tensors in sample order. ``data`` is
anything :mod:`ensemblize.training.data` accepts: a tensor ``X``, an ``(X, ...)`` tuple (only ``X``
is used), a dict of tensors (the ``labels_key`` entry is dropped before ``model(**inputs)``), a
sized Dataset, or a DataLoader that yields every row once, in order (``shuffle=False``, no
other sampler, no ``drop_last``: anything else is a ValueError, since the rows would not line up). In an initialised process group (torchrun) each rank predicts the
samples ``rank::world`` of indexed data and the shards are gathered, so every rank returns the full
result; a DataLoader is predicted whole on every rank.

* :func:`predict` — ``task="classification"``: member probabilities ``softmax(z_m)`` ``(N, M, C)``
  (a ``(B, C)`` output counts as ``M = 1``); ``task="regression"``: member predictions ``(N, M)`` or
  ``(N, M, D)``. The logits are found in any output :func:`ensemblize.training.outputs.logits_of`
  reads (tensor, ``.logits``, ``["logits"]``, first tuple element).
* :func:`predict_outputs` — the general form for models whose output is richer (selective models,
  several heads): ``transform(output)`` is applied to every batch's raw output and may return a
  tensor or a tuple / list / dict / dataclass of tensors with the batch on axis 0; the results are
  concatenated leaf by leaf. Without ``transform`` the raw output is concatenated (it must have that
  form itself). Example for a SelectiveNet::

      probs, g = predict_outputs(model, X, transform=lambda o: (o.logits.softmax(-1), o.selection))
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_choice, check_int, check_module
from . import distributed as D
from .data import (
    Source,
    batch_bounds,
    call_model,
    check_batch,
    make_source,
    split_batch,
    to_device,
    tree_leaves,
    tree_map,
)
from .modes import eval_mode
from .outputs import class_members, regression_members, warn_if_probabilities
from .progress import Progress

__all__ = ["predict", "predict_outputs", "sharded_predict", "TASKS", "model_device", "sharded_batches"]

TASKS = ("classification", "regression")


def model_device(module: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for a model without either."""
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def sharded_batches(source: Source, ctx: D.DistContext, batch_size: int) -> Iterator[tuple[Tensor, Any]]:
    """``(indices, batch)`` over this rank's share of ``source`` (all of it for a DataLoader)."""
    if not source.shardable:
        start = 0
        for batch in source.batches():
            rows = _rows(batch)
            yield torch.arange(start, start + rows), batch
            start += rows
        return
    idx_all = D.eval_shard(source.n, ctx)
    for start, stop in batch_bounds(int(idx_all.numel()), batch_size):
        yield idx_all[start:stop], source.take(idx_all[start:stop])


def _rows(batch: Any) -> int:
    leaves = tree_leaves(batch)
    if not leaves:
        raise TypeError(f"a batch of type {type(batch).__name__} holds no tensors")
    return int(leaves[0][1].shape[0])


def concat(parts: list[Any]) -> Any:
    """Concatenate a list of same-structured results along axis 0, leaf by leaf."""
    first = parts[0]
    if isinstance(first, Tensor):
        return torch.cat(parts)
    if isinstance(first, Mapping):
        return {k: concat([p[k] for p in parts]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(concat([p[i] for p in parts]) for i in range(len(first)))
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        names = [f.name for f in dataclasses.fields(first)]
        return type(first)(**{n: concat([getattr(p, n) for p in parts]) for n in names})
    raise TypeError(
        f"cannot concatenate model results of type {type(first).__name__}; pass transform= returning a tensor "
        "or a tuple / dict / dataclass of tensors"
    )


def _to_cpu(result: Any) -> Any:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return type(result)(**{f.name: _to_cpu(getattr(result, f.name)) for f in dataclasses.fields(result)})
    return tree_map(lambda t: t.detach().cpu(), result)


def _reorder(result: Any, order: Tensor) -> Any:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return type(result)(
            **{f.name: _reorder(getattr(result, f.name), order) for f in dataclasses.fields(result)}
        )
    return tree_map(lambda t: t[order], result)


def _output_tensors(result: Any) -> list[Tensor]:
    """Every tensor of a model's output (nested tuples / lists / dicts, dataclass fields included)."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return [t for f in dataclasses.fields(result) for t in _output_tensors(getattr(result, f.name))]
    return [t for _, t in tree_leaves(result)]


def _check_rows(out: Any, rows: int, *, name: str) -> None:
    """ValueError unless every tensor the model returned has ``rows`` entries on its first axis (a
    model that drops or pools rows would misalign every later row with its input)."""
    for t in _output_tensors(out):
        if t.dim() == 0 or t.shape[0] != rows:
            raise ValueError(
                f"the model returned an output of shape {tuple(t.shape)} for a batch of {rows} {name} rows; "
                "predict needs one output row per input row (on the first axis)"
            )


def _local_outputs(module, source, *, transform, batch_size, device, ctx, bar) -> tuple[Tensor, Any]:
    indices, results = [], []
    for idx, batch in sharded_batches(source, ctx, batch_size):
        inputs, _ = split_batch(batch, labels_key=source.labels_key, need_labels=False, name=source.name)
        check_batch(inputs, None, name=source.name, num_classes=None)
        out = call_model(module, to_device(inputs, device))
        kept = transform(out) if transform is not None else out  # what is gathered (e.g. the logits)
        _check_rows(kept, len(idx), name=source.name)
        results.append(_to_cpu(kept))
        indices.append(idx)
        bar.update()
    return (torch.cat(indices), concat(results)) if results else (torch.empty(0, dtype=torch.long), None)


def _gather_outputs(model: nn.Module, data: object, o: dict[str, Any]) -> tuple[Tensor, Any]:
    batch_size = check_int(o["batch_size"], name="batch_size", minimum=1)
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    check_module(module, name="model")
    dev = model_device(module) if o["device"] is None else torch.device(o["device"])
    module.to(dev)
    ctx = D.current()
    source = make_source(data, name="data", labels_key=o["labels_key"])
    problem = None if source.shardable else source.order_problem()
    if problem is not None:
        raise ValueError(
            f"cannot predict from this DataLoader: {problem}, so the results would not line up with the "
            "dataset's rows. Pass DataLoader(dataset, batch_size=..., shuffle=False) or the tensors themselves"
        )
    steps = -(-source.n // batch_size) if source.shardable else source.num_batches(source.n, batch_size)
    bar = Progress(steps, desc=o["desc"], unit="batch", enabled=bool(o["progress"]) and ctx.is_main)
    try:
        with eval_mode(module), torch.no_grad():
            local = _local_outputs(module, source, transform=o["transform"], batch_size=batch_size, device=dev,
                                   ctx=ctx, bar=bar)  # fmt: skip
    finally:
        bar.close()
    parts = D.gather(local, ctx) if source.shardable else [local]
    indices = torch.cat([p[0] for p in parts])
    return indices, concat([p[1] for p in parts if p[1] is not None])


def predict_outputs(
    model: nn.Module,
    data: object,
    *,
    transform: Callable[[Any], Any] | None = None,
    batch_size: int = 512,
    device: str | torch.device | None = None,
    labels_key: str = "labels",
    progress: bool = False,
    desc: str = "predict",
) -> Any:
    """``concat over batches of transform(model(batch))`` in sample order (see the module docstring).

    Args:
        model: any ``nn.Module`` (a DistributedDataParallel wrapper is unwrapped).
        data: see the module docstring.
        transform: ``output -> tensor | tuple | list | dict | dataclass of tensors`` with the batch on
            axis 0; ``None`` keeps the raw output.
        batch_size: rows per forward pass (indexed data; a DataLoader keeps its own).
        device: where to run; ``None`` is the model's current device. The model is moved there.
        labels_key: the dict entry that holds labels, dropped before calling the model.
        progress: a per-batch :class:`~ensemblize.training.progress.Progress` labelled ``desc``.
    """
    options = {k: v for k, v in locals().items() if k not in ("model", "data")}
    indices, results = _gather_outputs(model, data, options)
    if D.current().enabled:
        D.check_coverage(indices, indices.numel())
        results = _reorder(results, torch.argsort(indices))
    return results


def sharded_predict(model: nn.Module, data: object, **options: Any) -> tuple[Tensor, Any]:
    """``(indices, results)`` gathered from every rank in rank order (NOT sorted); keywords of :func:`predict_outputs`.

    Without a process group ``indices`` is ``arange(N)``. Used to check that every sample is
    predicted exactly once under torchrun.
    """
    defaults = {
        k: p.default
        for k, p in inspect.signature(predict_outputs).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"sharded_predict got unexpected keyword(s) {unknown}; expected {sorted(defaults)}")
    return _gather_outputs(model, data, {**defaults, **options})


def predict(
    model: nn.Module,
    data: object,
    *,
    batch_size: int = 512,
    device: str | torch.device | None = None,
    task: str = "classification",
    labels_key: str = "labels",
    progress: bool = False,
    desc: str = "predict",
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Member probabilities ``softmax(z_m)`` (N, M, C) — or member predictions for regression — on CPU.

    ``task="classification"``: logits from any output form (module docstring), ``(B, C)`` counting
    as one member, returned as probabilities ``(N, M, C)`` in the logits' dtype, or in ``dtype``
    when given (the logits are cast first: ``dtype=torch.float64`` keeps confident rows apart —
    in float32 ``max_c p_c`` is exactly 1.0 once the logit margin passes about 17, so such rows tie).
    ``task="regression"``: outputs ``(B,)``, ``(B, M)`` or ``(B, M, D)`` returned as ``(N, M)`` or
    ``(N, M, D)`` (in ``dtype`` when given). Other arguments as in :func:`predict_outputs`.
    """
    check_choice(task, TASKS, name="task")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch dtype such as torch.float64, got {dtype!r}")
    checked = []

    def probabilities(out: Any) -> Tensor:
        z = class_members(out)
        z = z if dtype is None else z.to(dtype)
        if not checked:  # the first batch: a model ending in Softmax would be softmaxed twice
            warn_if_probabilities(z, where="predict")
            checked.append(True)
        return torch.softmax(z, dim=-1)

    def predictions(out: Any) -> Tensor:
        f = regression_members(out)
        return f if dtype is None else f.to(dtype)

    transform = probabilities if task == "classification" else predictions
    return predict_outputs(model, data, transform=transform, batch_size=batch_size, device=device,
                           labels_key=labels_key, progress=progress, desc=desc)  # fmt: skip
