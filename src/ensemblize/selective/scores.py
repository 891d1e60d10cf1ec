"""Confidence scores computed from class probabilities (higher = more confident).

All functions reduce the last axis (classes): ``(..., C) -> (...)``. They accept a
``torch.Tensor`` (returned as a tensor, differentiable) or a NumPy array (returned as NumPy).
Inputs are validated: finite, in ``[0, 1]``, rows summing to 1 — passing logits by mistake is
an error, not a silent wrong answer. The losses in :mod:`ensemblize.selective.losses` call the
unchecked twins (leading underscore) on their hot path.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from .._checks import check_finite, check_positive

__all__ = ["softmax_response", "softmax_power", "negative_entropy", "deep_gamblers_confidence"]

ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


def _as_tensor(x: object, *, name: str) -> tuple[Tensor, bool]:
    """Return ``(tensor, was_numpy)``; NumPy input is viewed (no copy, no mutation)."""
    if isinstance(x, Tensor):
        return x, False
    if isinstance(x, np.ndarray):
        if not (np.issubdtype(x.dtype, np.floating)):
            raise TypeError(f"{name} must be a floating array of probabilities, got dtype {x.dtype}")
        return torch.from_numpy(np.ascontiguousarray(x)), True
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _back(x: Tensor, was_numpy: bool) -> Tensor | np.ndarray:
    return x.detach().cpu().numpy() if was_numpy else x


def check_probabilities(probs: Tensor, *, name: str = "probs", atol: float = 1e-3) -> None:
    """Raise ValueError unless ``probs`` (..., C) is finite, in [0, 1] and sums to 1 over the last axis."""
    probs = probs.detach()
    if not probs.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor of probabilities, got dtype {probs.dtype}")
    if probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(f"{name} must have a non-empty class axis, got shape {tuple(probs.shape)}")
    check_finite(probs, name=name)
    if probs.numel() == 0:
        return
    lo, hi = float(probs.min()), float(probs.max())
    if lo < 0 or hi > 1:
        raise ValueError(
            f"{name} must lie in [0, 1] (got values in [{lo:.4g}, {hi:.4g}]); did you pass logits?"
        )
    err = (probs.sum(dim=-1) - 1).abs()
    if float(err.max()) > atol:
        idx = int(err.flatten().argmax())
        raise ValueError(
            f"{name} must sum to 1 over the last (class) axis; row {idx} sums to "
            f"{float(probs.sum(dim=-1).flatten()[idx]):.6g}"
        )


def _check_gamma(gamma: object) -> float:
    return check_positive(gamma, name="gamma")


# --- unchecked kernels (used inside losses) -------------------------------------------------


def _softmax_response(probs: Tensor) -> Tensor:
    return probs.amax(dim=-1)


def _softmax_power(probs: Tensor, gamma: float) -> Tensor:
    return probs.amax(dim=-1).pow(gamma)


def _negative_entropy(probs: Tensor, normalize: bool) -> Tensor:
    # Σ p log p with the convention 0·log 0 = 0 (xlogy), gradient-safe at p = 0.
    neg_h = torch.special.xlogy(probs, probs).sum(dim=-1)
    if normalize:
        c = probs.shape[-1]
        if c == 1:
            return torch.ones_like(neg_h)
        return 1.0 + neg_h / math.log(c)
    return neg_h


# --- public, validated ------------------------------------------------------------------------


def softmax_response(probs: ArrayT) -> ArrayT:
    """Softmax response (SR): ``max_c p_c``; ``(..., C) -> (...)``, values in ``[1/C, 1]``."""
    t, was_np = _as_tensor(probs, name="probs")
    check_probabilities(t)
    return _back(_softmax_response(t), was_np)


def softmax_power(probs: ArrayT, gamma: float) -> ArrayT:
    """Softmax power (SMP, the SYNC paper): ``(max_c p_c) ** gamma`` with ``gamma > 0``; ``(..., C) -> (...)``.

    A monotone transform of SR, so it ranks samples exactly as SR does; ``gamma`` only matters as
    a *training target* (it reshapes the values the selection head is pulled towards).
    """
    g = _check_gamma(gamma)
    t, was_np = _as_tensor(probs, name="probs")
    check_probabilities(t)
    return _back(_softmax_power(t, g), was_np)


def negative_entropy(probs: ArrayT, *, normalize: bool = False) -> ArrayT:
    """Negative Shannon entropy ``-H(p) = Σ_c p_c log p_c`` (natural log, ``0 log 0 = 0``); ``(..., C) -> (...)``.

    Raw values lie in ``[-log C, 0]``. With ``normalize=True`` returns ``1 - H(p) / log C`` in
    ``[0, 1]`` (1 = one-hot, 0 = uniform); for ``C = 1`` that is defined as 1.
    """
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {normalize!r}")
    t, was_np = _as_tensor(probs, name="probs")
    check_probabilities(t)
    return _back(_negative_entropy(t, normalize), was_np)


def deep_gamblers_confidence(logits: ArrayT) -> ArrayT:
    """Deep Gamblers confidence ``1 - p_{K+1}`` from ``K + 1`` logits (last = abstain); ``(..., K+1) -> (...)``.

    ``p = softmax(logits)``; ranking by this is the same as ranking by ``-p_{K+1}``.
    """
    t, was_np = _as_tensor(logits, name="logits")
    if not t.is_floating_point():
        raise TypeError(f"logits must be floating, got dtype {t.dtype}")
    if t.dim() < 1 or t.shape[-1] < 3:
        raise ValueError(
            f"logits must have K + 1 >= 3 entries on the last axis (K >= 2 classes plus abstain), "
            f"got shape {tuple(t.shape)}"
        )
    check_finite(t, name="logits")
    return _back(-torch.expm1(torch.log_softmax(t, dim=-1)[..., -1]), was_np)
