"""Data for :func:`ensemblize.training.fit` and :func:`ensemblize.training.predict`: every accepted form, one batch API.

Accepted data (``train``, ``val``, or ``predict``'s ``data``):

* ``(X, y)`` — a tuple/list of tensors with the same leading size ``N``; ``X`` may also be a dict
  of tensors (``({"input_ids": ..., "attention_mask": ...}, labels)``). ``predict`` also takes a
  bare tensor ``X``; in a tuple it reads the first element and ignores the rest;
* a dict of tensors with the same leading size (``input_ids``, ``attention_mask``, ``labels``…);
  the targets are the entry named ``labels_key`` (default ``"labels"``);
* a sized map-style ``Dataset`` (``TensorDataset`` included) whose items are ``(x, y)`` pairs,
  dicts or bare inputs, collated with ``torch.utils.data.default_collate``;
* a ``DataLoader`` yielding any of those batch forms. It is iterated as given: its own batch size,
  sampler, shuffling and ``collate_fn`` are used and ``fit``'s ``batch_size`` is ignored. Under
  ``torchrun`` a TRAINING loader must shard itself (a ``DistributedSampler``; ``fit`` calls
  ``set_epoch``), while a validation or prediction loader is evaluated whole on every rank (give it
  no DistributedSampler, or the ranks would score different subsets). Its shuffling draws on the
  global torch RNG, which ``fit`` seeds per epoch, so runs stay reproducible.

Calling the model: a dict batch calls ``model(**inputs)`` with the labels entry REMOVED (fit computes
the member loss itself; a HuggingFace model then returns logits without a loss); any other input
calls ``model(x)``.

Every other form is a TypeError naming it; non-finite floating inputs are a ValueError naming the
entry. Tensor and dict data are checked once up front, Dataset/DataLoader data batch by batch.

Batches inside an epoch (indexed data): :func:`batch_bounds` cuts ``N`` rows into batches of
``batch_size``; when ``N % batch_size == 1`` the trailing singleton joins the previous batch (one
batch of ``batch_size + 1``), because a batch of one sample breaks BatchNorm and σNorm in training
mode. With ``per_member`` orders (:func:`epoch_order`) an index is ``(B, M)`` and each tensor entry
is gathered to ``(B, M, ...)``: member ``m`` sees its own row order.

Data fingerprint (:meth:`Source.fingerprint`, stored with checkpoints to refuse resuming on other
data): SHA-256 over ``N``, then for 16 evenly spaced rows every entry's shape, dtype and values
(at most 65,536 evenly spaced values per entry). It is cheap and catches a different data set,
split, size, order or preprocessing; an edit to a row it does not sample goes unnoticed. The rows are
read with Python's, NumPy's and torch's global RNGs seeded to 0 (and restored afterwards), so a
Dataset with random augmentation has a stable fingerprint.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
)

from .._checks import check_finite, check_labels

__all__ = [
    "Source",
    "IndexedSource",
    "LoaderSource",
    "make_source",
    "split_batch",
    "call_model",
    "to_device",
    "tree_map",
    "batch_bounds",
    "epoch_order",
    "row_order",
    "derive_seed",
]

_FINGERPRINT_ROWS = 16
_FINGERPRINT_VALUES = 65_536


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (NumPy's SeedSequence hash)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def tree_map(fn: Callable[[Tensor], Any], tree: Any) -> Any:
    """Apply ``fn`` to every tensor in nested tuples / lists / dicts (other leaves unchanged)."""
    if isinstance(tree, Tensor):
        return fn(tree)
    if isinstance(tree, Mapping):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(fn, v) for v in tree)
    return tree


def tree_leaves(tree: Any, prefix: str = "") -> list[tuple[str, Tensor]]:
    """``(path, tensor)`` for every tensor in ``tree``, in a fixed order."""
    if isinstance(tree, Tensor):
        return [(prefix, tree)]
    if isinstance(tree, Mapping):
        return [leaf for k in tree for leaf in tree_leaves(tree[k], f"{prefix}[{k}]")]
    if isinstance(tree, (tuple, list)):
        return [leaf for i, v in enumerate(tree) for leaf in tree_leaves(v, f"{prefix}[{i}]")]
    return []


def to_device(tree: Any, device: torch.device) -> Any:
    """Move every tensor of a batch to ``device``."""
    return tree_map(lambda t: t.to(device), tree)


def split_batch(batch: Any, *, labels_key: str, need_labels: bool, name: str) -> tuple[Any, Tensor | None]:
    """``(inputs, targets)`` of one batch; targets ``None`` when absent and not needed.

    Tensor -> ``(x, None)``; dict -> (the other entries, ``batch[labels_key]``); tuple/list ->
    ``(first, second)`` (``(first, None)`` for one element). Missing labels when they are needed is a
    ValueError naming what was expected.
    """
    if isinstance(batch, Tensor):
        inputs, targets = batch, None
    elif isinstance(batch, Mapping):
        inputs = {k: v for k, v in batch.items() if k != labels_key}
        targets = batch.get(labels_key)
        if need_labels and targets is None:
            raise ValueError(
                f"{name} batches are dicts with keys {sorted(map(str, batch))} but no labels entry "
                f"{labels_key!r}; expected a {labels_key!r} tensor (or pass labels_key=...)"
            )
    elif isinstance(batch, (tuple, list)) and len(batch) in (1, 2):
        inputs, targets = batch[0], (batch[1] if len(batch) == 2 else None)
    else:
        raise TypeError(
            f"{name} batches must be an (x, y) pair, a dict of tensors or a tensor, got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    if need_labels and targets is None:
        raise ValueError(f"{name} has no labels: expected (x, y) pairs or dicts with a {labels_key!r} entry")
    if targets is not None and not isinstance(targets, Tensor):
        raise TypeError(f"{name} labels must be a tensor, got {type(targets).__name__}")
    return inputs, targets


def call_model(model: nn.Module, inputs: Any) -> Any:
    """``model(**inputs)`` for a dict of inputs, ``model(inputs)`` otherwise."""
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def check_batch(
    inputs: Any, targets: Tensor | None, *, name: str, num_classes: int | None, member_targets: bool = False
) -> None:
    """Finite floating inputs/targets; class labels (N,) in ``[0, num_classes)`` when given.

    ``member_targets``: the batch was gathered with per-member row orders, so its labels are
    ``(B, M)`` (one column per member); otherwise a 2-D label tensor (one-hot rows, ``(N, 1)``) is
    refused, as it is for tensor data.
    """
    for path, t in tree_leaves(inputs):
        if t.is_floating_point():
            check_finite(t, name=f"{name} X{path if isinstance(inputs, Mapping) else ''}")
    if targets is None:
        return
    if num_classes is not None:
        if targets.dim() != (2 if member_targets else 1):
            want = "(B, M) (per-member row orders)" if member_targets else "(N,)"
            raise ValueError(f"{name} labels must have shape {want}, got {tuple(targets.shape)}")
        check_labels(targets, num_classes, name=f"{name} labels")
    elif targets.is_floating_point():
        check_finite(targets, name=f"{name} y")


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in batches of ``batch_size``.

    A trailing batch of exactly one row is merged into the previous batch (which then has
    ``batch_size + 1`` rows), so no training step sees a single sample when ``n > 1`` and
    ``batch_size > 1`` (``batch_size=1`` asks for single rows: every batch keeps its one row).
    """
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    if batch_size > 1 and len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] == 1:
        bounds[-2:] = [(bounds[-2][0], n)]
    return bounds


def epoch_order(n: int, *, seed: int, epoch: int, members: int | None) -> Tensor:
    """One epoch's row order, a pure function of ``(seed, epoch)``.

    ``members=None``: a ``(N,)`` permutation shared by every member. ``members=M``: ``(N, M)`` whose
    column ``m`` is member ``m``'s own permutation (one ``argsort`` of uniform noise, no loop).
    """
    return row_order(n, members=members, generator=torch.Generator().manual_seed(derive_seed(seed, epoch, 0)))


def row_order(n: int, *, members: int | None, generator: torch.Generator) -> Tensor:
    """``(N,)`` permutation (``members=None``) or ``(N, M)`` with column ``m`` a permutation, from ``generator``."""
    if members is None:
        return torch.randperm(n, generator=generator)
    return torch.argsort(torch.rand(members, n, generator=generator), dim=1).T.contiguous()


def _digest(h: Any, tree: Any) -> None:
    for path, t in tree_leaves(tree):
        flat = t.detach().reshape(-1).cpu()
        if flat.numel() > _FINGERPRINT_VALUES:
            flat = flat[torch.linspace(0, flat.numel() - 1, _FINGERPRINT_VALUES).long()]
        values = flat.to(torch.float64) if not flat.is_complex() else torch.view_as_real(flat).double()
        h.update(f"{path}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(values.numpy().tobytes())


def _tensor_tree(data: object) -> bool:
    """True for a non-empty tuple / list / dict whose items are tensors or (one level of) dicts of tensors."""
    if not data or (isinstance(data, (tuple, list)) and len(data) > 3):
        return False
    items = data.values() if isinstance(data, Mapping) else data
    return all(
        isinstance(t, Tensor)
        or (isinstance(t, Mapping) and t and all(isinstance(v, Tensor) for v in t.values()))
        for t in items
    )


@contextmanager
def _fixed_rng() -> Iterator[None]:
    """Seed Python's, NumPy's and torch's CPU global RNGs to 0 for the block; restore them after."""
    py, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002 - saving the legacy global state
    with torch.random.fork_rng(devices=[]):
        random.seed(0)
        np.random.seed(0)  # noqa: NPY002
        torch.manual_seed(0)
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(np_state)  # noqa: NPY002


class Source:
    """Batches of one data argument (see the module docstring for the accepted forms)."""

    name: str
    n: int
    shardable: bool = True  # rows can be split between DDP ranks by index
    labels_key: str = "labels"

    def batches(self, indices: Tensor | None = None) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def num_batches(self, rows: int, batch_size: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def fingerprint(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class IndexedSource(Source):
    """Tensors, dicts of tensors or a map-style Dataset, read by row index."""

    def __init__(self, data: object, *, name: str, labels_key: str) -> None:
        self.name, self.labels_key = name, labels_key
        self.tensors: Any = None  # tuple or dict of (N, ...) tensors
        self.dataset: Dataset | None = None
        if isinstance(data, TensorDataset):
            data = tuple(data.tensors)
        if isinstance(data, Tensor) or (isinstance(data, (tuple, list)) and _tensor_tree(data)):
            self.tensors = (data,) if isinstance(data, Tensor) else tuple(data)
            names = ("X", "y", "z")
            self._check_rows({names[int(p[1])] + p[3:]: t for p, t in tree_leaves(self.tensors)})
        elif isinstance(data, Mapping) and _tensor_tree(data):
            self.tensors = dict(data)
            self._check_rows({p[1:-1]: t for p, t in tree_leaves(self.tensors)})
        elif isinstance(data, Dataset) and hasattr(data, "__len__"):
            self.dataset = data
        else:
            raise TypeError(
                f"{name} must be a tensor X (predict only), an (X, y) pair of tensors, a dict of tensors, a "
                f"sized torch Dataset or a DataLoader, got {_describe(data)}"
            )
        self.n = len(self.dataset) if self.dataset is not None else self._rows
        if self.n < 1:
            raise ValueError(f"{name} is empty")

    def _check_rows(self, named: Mapping[str, Tensor]) -> None:
        sizes = {k: (int(t.shape[0]) if t.dim() else None) for k, t in named.items()}
        first = next(iter(sizes))
        for key, rows in sizes.items():
            if rows is None:
                raise ValueError(f"{self.name} {key} is a 0-d tensor; expected a leading sample axis")
            if rows != sizes[first]:
                raise ValueError(f"{self.name}: {first} has {sizes[first]} rows but {key} has {rows}")
        self._rows = sizes[first]
        for key, t in named.items():
            if t.is_floating_point():
                check_finite(t, name=f"{self.name} {key}")

    @property
    def checked_upfront(self) -> bool:
        """True when the data was validated at construction (tensors), False for Datasets."""
        return self.tensors is not None

    def all_targets(self) -> Tensor | None:
        """The whole target tensor of tensor data (``None`` for Datasets or unlabelled data)."""
        if isinstance(self.tensors, tuple):
            return self.tensors[1] if len(self.tensors) == 2 else None
        if isinstance(self.tensors, dict):
            return self.tensors.get(self.labels_key)
        return None

    def take(self, idx: Tensor) -> Any:
        """The batch at ``idx`` (``(B,)`` rows, or ``(B, M)`` per-member rows -> entries ``(B, M, ...)``)."""
        if self.tensors is not None:
            return tree_map(lambda t: t[idx], self.tensors)
        items = [self.dataset[i] for i in idx.reshape(-1).tolist()]
        if not items or not isinstance(items[0], (tuple, list, Mapping, Tensor)):
            items = [torch.as_tensor(it) for it in items]
        batch = default_collate(items)
        if idx.dim() == 2:
            batch = tree_map(lambda t: t.reshape(*idx.shape, *t.shape[1:]), batch)
        return batch

    def batches(self, indices: Tensor | None = None, *, batch_size: int = 512) -> Iterator[Any]:
        """Batches over ``indices`` (default ``arange(N)``) cut by :func:`batch_bounds`."""
        indices = torch.arange(self.n) if indices is None else indices
        for start, stop in batch_bounds(int(indices.shape[0]), batch_size):
            yield self.take(indices[start:stop])

    def num_batches(self, rows: int, batch_size: int) -> int:
        """Number of batches :meth:`batches` yields for ``rows`` indices."""
        return len(batch_bounds(rows, batch_size))

    def fingerprint(self) -> str:
        """See the module docstring."""
        h = hashlib.sha256(f"n={self.n};".encode())
        idx = torch.linspace(0, self.n - 1, min(self.n, _FINGERPRINT_ROWS)).round().long().unique()
        with _fixed_rng():
            _digest(h, self.take(idx))
        return h.hexdigest()[:16]


def _describe(data: object) -> str:
    """The type of ``data``, and of its elements when a container holds something other than tensors."""
    what = type(data).__name__
    items = (
        list(data.values())
        if isinstance(data, Mapping)
        else data
        if isinstance(data, (tuple, list))
        else None
    )
    if isinstance(data, np.ndarray):
        return f"{what}; convert it with torch.as_tensor"
    if not items:
        return what
    kinds = sorted({type(v).__name__ for v in items if not isinstance(v, Tensor)})
    hint = "; convert them with torch.as_tensor" if any(isinstance(v, np.ndarray) for v in items) else ""
    return f"a {what} holding {', '.join(kinds)}{hint}"


class LoaderSource(Source):
    """A DataLoader, iterated as given."""

    shardable = False

    def __init__(self, loader: DataLoader, *, name: str, labels_key: str) -> None:
        self.name, self.labels_key, self.loader = name, labels_key, loader
        try:
            self.steps = len(loader)
            self.n = len(loader.dataset)  # type: ignore[arg-type]
        except TypeError as exc:
            raise TypeError(f"{name}: a DataLoader over a dataset without __len__ is not supported") from exc
        if self.steps < 1 or self.n < 1:
            raise ValueError(f"{name} is empty")

    checked_upfront = False

    def all_targets(self) -> None:
        return None

    def batches(self, indices: Tensor | None = None, *, batch_size: int = 512) -> Iterator[Any]:
        """The loader's own batches (``indices`` and ``batch_size`` are not used)."""
        yield from self.loader

    def num_batches(self, rows: int, batch_size: int) -> int:
        """``len(loader)``."""
        return self.steps

    def order_problem(self) -> str | None:
        """Why this loader would not yield every row of its dataset once, in order (None if it does).

        Prediction returns rows in dataset order, so it needs a sequential, complete loader: a
        ``SequentialSampler`` (``shuffle=False``, no other sampler) in a plain ``BatchSampler`` without
        ``drop_last`` (or automatic batching off).
        """
        if isinstance(self.loader.dataset, IterableDataset):  # its own order; no sampler applies
            if self.loader.num_workers > 1:
                return (
                    f"it reads an IterableDataset with num_workers={self.loader.num_workers}, whose rows "
                    "interleave across the worker processes"
                )
            return "it drops the last incomplete batch (drop_last=True)" if self.loader.drop_last else None
        batch_sampler = self.loader.batch_sampler
        if batch_sampler is None:
            sampler = self.loader.sampler
        elif type(batch_sampler) is BatchSampler:
            if batch_sampler.drop_last:
                return "it drops the last incomplete batch (drop_last=True)"
            sampler = batch_sampler.sampler
        else:
            return f"its batch sampler {type(batch_sampler).__name__} may reorder or skip rows"
        if type(sampler) is not SequentialSampler:
            hint = " (shuffle=True)" if type(sampler) is RandomSampler else ""
            return f"its sampler {type(sampler).__name__}{hint} does not yield every row once in order"
        return None

    def rows_per_pass(self) -> int | None:
        """Rows one pass over the loader yields, when its sampler says without being iterated (None:
        a custom batch sampler or an IterableDataset; -1: a sampler that draws with replacement)."""
        if isinstance(self.loader.dataset, IterableDataset):
            return None  # rows come from the dataset's own iterator: counted after the pass
        batch_sampler = self.loader.batch_sampler
        sampler = self.loader.sampler if batch_sampler is None else getattr(batch_sampler, "sampler", None)
        if isinstance(sampler, WeightedRandomSampler) or getattr(sampler, "replacement", False):
            return -1  # draws with replacement: some rows twice, others never
        if batch_sampler is None:
            return len(self.loader.sampler)  # type: ignore[arg-type]
        if type(batch_sampler) is not BatchSampler:
            return None
        rows = len(batch_sampler.sampler)  # type: ignore[arg-type]
        return rows - rows % batch_sampler.batch_size if batch_sampler.drop_last else rows

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to a sampler that wants it (``DistributedSampler``)."""
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    def fingerprint(self) -> str:
        """Rows sampled from the loader's dataset through its ``collate_fn`` (see the module docstring)."""
        h = hashlib.sha256(f"n={self.n};steps={self.steps};".encode())
        ds = self.loader.dataset
        if hasattr(ds, "__getitem__") and not isinstance(ds, IterableDataset):
            idx = torch.linspace(0, self.n - 1, min(self.n, _FINGERPRINT_ROWS)).round().long().unique()
            with _fixed_rng():
                _digest(h, self.loader.collate_fn([ds[i] for i in idx.tolist()]))
        return h.hexdigest()[:16]


def make_source(data: object, *, name: str, labels_key: str = "labels") -> Source:
    """The :class:`Source` for ``data`` (a DataLoader, or anything :class:`IndexedSource` takes)."""
    if isinstance(data, DataLoader):
        return LoaderSource(data, name=name, labels_key=labels_key)
    return IndexedSource(data, name=name, labels_key=labels_key)
