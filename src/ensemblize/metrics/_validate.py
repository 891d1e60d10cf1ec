"""Input validation for the metrics: every check names the offending value (private module).

All metrics convert their inputs to float64 NumPy arrays here, never mutating the caller's data.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import (
    check_choice,
    check_finite,
    check_fraction,
    check_labels,
    check_not_probabilities,
    check_open_unit,
    check_positive,
    check_size,
    to_numpy,
)

# Row sums of probabilities must equal 1 within this absolute tolerance, chosen by the input's
# precision: float64 inputs are held to 1e-6, float32 (e.g. a torch softmax) to 1e-4, and
# half precision to 1e-2 — and never to less than a float32 softmax over C classes can meet once
# widened to float64 (its row sum drifts like √C rounding errors of 2⁻²⁴: 4·√C·2⁻²³, 1.2e-6 at
# 21k classes was seen), see _sum_tolerance.
_SUM_ATOL = {8: 1e-6, 4: 1e-4, 2: 1e-2}


def _sum_tolerance(itemsize: int, n_classes: int) -> float:
    return max(_SUM_ATOL.get(itemsize, 1e-6), 4.0 * float(np.sqrt(n_classes)) * 2.0**-23)


def _itemsize(x: object) -> int:
    if isinstance(x, torch.Tensor):
        return x.element_size() if x.is_floating_point() else 8
    dtype = getattr(x, "dtype", None)
    if dtype is not None and np.issubdtype(dtype, np.floating):
        return int(np.dtype(dtype).itemsize)
    return 8


def as_float_array(x: object, *, name: str) -> np.ndarray:
    """``x`` as a float64 array; integer and bool arrays are accepted (exact conversion)."""
    arr = to_numpy(x, name=name)
    if not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_
    ):
        raise TypeError(f"{name} must be a real-valued array, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=True)


def check_nonempty(arr: np.ndarray, *, name: str) -> None:
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array, got a scalar")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); at least one sample is required")


def probabilities(
    probs: object, *, name: str = "probs", allow_members: bool = True, require_members: bool = False
) -> np.ndarray:
    """Validate probabilities of shape ``(N, C)`` or ``(N, M, C)``; return them as float64.

    Raises ValueError for a wrong rank, an empty axis, NaN/inf, negative entries, or a row whose
    sum is not 1 within the input precision's tolerance (at least what a float32 softmax over the
    row's classes can meet; the row index and its sum are named).
    """
    itemsize = _itemsize(probs)
    arr = as_float_array(probs, name=name)
    ranks = (3,) if require_members else ((2, 3) if allow_members else (2,))
    if arr.ndim not in ranks:
        shape_txt = {2: "(N, C)", 3: "(N, M, C)"}
        expected = " or ".join(shape_txt[r] for r in ranks)
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    check_nonempty(arr, name=name)
    if 0 in arr.shape:
        raise ValueError(f"{name} has an empty axis: shape {arr.shape}")
    check_finite(arr, name=name)
    if (arr < 0).any():
        idx = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(
            f"{name} has a negative probability {float(arr[idx])!r} at index {idx}; pass probabilities "
            "(softmax outputs), not logits or log-probabilities"
        )
    sums = arr.sum(axis=-1)
    atol = _sum_tolerance(itemsize, arr.shape[-1])
    bad = np.abs(sums - 1.0) > atol
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"row {idx[0]}" if len(idx) == 1 else f"row {idx}"
        total = float(sums[idx])
        hint = (
            "renormalise the rows (p / p.sum(-1, keepdims=True)) if they are probabilities"
            if abs(total - 1.0) < 1e-2
            else "pass probabilities (softmax outputs), not logits"
        )
        raise ValueError(f"{name} {where} sums to {total!r}, not 1 (tolerance {atol:g}); {hint}")
    return arr


def checked_probabilities(probs: object, *, name: str = "probs", require_members: bool = False) -> np.ndarray:
    """:func:`probabilities`, returned so that any metric accepts the float64 array again.

    A lower-precision input is validated at its own row-sum tolerance (half precision: 1e-2); its rows
    that float64's tolerance would then refuse are renormalised in float64, every other row is returned
    unchanged. For functions that validate once and hand the array to other public metrics (a metric
    validating the float64 copy again held half-precision rows to float64's tolerance).
    """
    arr = probabilities(probs, name=name, require_members=require_members)
    if _itemsize(probs) >= 8:
        return arr
    sums = arr.sum(axis=-1, keepdims=True)
    off = np.abs(sums - 1.0) > _sum_tolerance(8, arr.shape[-1])
    return np.where(off, arr / sums, arr) if off.any() else arr


def mean_probs(arr: np.ndarray) -> np.ndarray:
    """``(N, C) -> (N, C)`` unchanged; ``(N, M, C) -> (N, C)`` as ``p̄ = mean_m p_m``."""
    return arr.mean(axis=1) if arr.ndim == 3 else arr


def logits(z: object, *, name: str = "logits", ranks: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Validate finite logits of shape ``(N, C)`` or ``(N, M, C)``; return float64."""
    arr = as_float_array(z, name=name)
    if arr.ndim not in ranks:
        expected = " or ".join({2: "(N, C)", 3: "(N, M, C)"}[r] for r in ranks)
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    check_nonempty(arr, name=name)
    if 0 in arr.shape:
        raise ValueError(f"{name} has an empty axis: shape {arr.shape}")
    check_finite(arr, name=name)
    check_not_probabilities(arr, name=name)
    return arr


def labels(y: object, n: int, num_classes: int, *, name: str = "labels") -> np.ndarray:
    """Validate integer class labels of shape ``(n,)`` in ``[0, num_classes)``; return int64."""
    arr = to_numpy(y, name=name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (N,), got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has length {arr.shape[0]} but the predictions have {n} samples")
    check_labels(arr, num_classes, name=name)
    return arr.astype(np.int64, copy=False)


def scores(x: object, *, name: str) -> np.ndarray:
    """Validate a non-empty, finite 1-D score vector; return float64."""
    arr = as_float_array(x, name=name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (N,), got shape {arr.shape}")
    check_nonempty(arr, name=name)
    check_finite(arr, name=name)
    return arr


def confidence_and_losses(confidence: object, losses: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate a confidence vector and matching non-negative per-sample losses."""
    conf = scores(confidence, name="confidence")
    loss = scores(losses, name="losses")
    if loss.shape[0] != conf.shape[0]:
        raise ValueError(f"losses has length {loss.shape[0]} but confidence has length {conf.shape[0]}")
    if (loss < 0).any():
        i = int(np.argmax(loss < 0))
        raise ValueError(f"losses must be >= 0, got {float(loss[i])!r} at index {i}")
    return conf, loss


def coverage(value: object, *, name: str = "coverage") -> float:
    """Return ``value`` if it lies in (0, 1], else raise naming it (``name``)."""
    return check_fraction(value, name=name)


#: Largest ``n_bins`` accepted by the binned metrics (ECE, reliability): far more bins than any
#: evaluation set can fill, and small enough that the per-bin arrays never matter for memory.
MAX_BINS = 10_000


def n_bins(value: object) -> int:
    """Return ``value`` if it is an int in ``[1, MAX_BINS]`` (checked before anything is allocated)."""
    return check_size(value, name="n_bins", maximum=MAX_BINS)


def open_unit(value: object, *, name: str) -> float:
    """Return ``value`` if it lies strictly inside (0, 1), else raise naming it."""
    return check_open_unit(value, name=name)


def nonnegative_real(value: object, *, name: str) -> float:
    """Return ``value`` if it is a finite real ≥ 0, else raise naming it."""
    return check_positive(value, name=name, allow_zero=True)


def count_for_fraction(fraction: float, n: int) -> int:
    """``⌈fraction·n⌉`` clamped to ``[1, n]``, robust to rounding (0.3·10 counts as 3, not 4).

    The slack below the ceiling is what float64 rounding of ``fraction`` and of the product can
    contribute (about ``n · 2⁻⁵²``) plus 1e-9 — a fraction of one sample at any ``n``, so no sample is
    dropped (a slack proportional to ``n`` dropped one at ``n = 10⁷``).
    """
    k = math.ceil(fraction * n - (1e-9 + 4 * n * np.finfo(np.float64).eps))
    return min(max(k, 1), n)


def choice(value: object, options: tuple[str, ...], *, name: str) -> str:
    """Return ``value`` if it is one of ``options``, else raise naming it."""
    return check_choice(value, options, name=name)
