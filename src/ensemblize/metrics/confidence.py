"""Confidence scores — the one home of softmax response, SMP, entropy and the other scores.

Higher = more confident / more in-distribution. Every score returns one value per sample, ready to
pass as a confidence to the OOD metrics (:mod:`ensemblize.metrics.ood`), the selective metrics
(:mod:`ensemblize.metrics.selective`) and :func:`ensemblize.selective.threshold_for_coverage`.

Input and output convention (the same for every score here):

* probabilities ``(N, C)``, or member probabilities ``(N, M, C)`` which are first averaged on
  probabilities, ``p̄ = mean_m p_m`` (the ensemble's prediction; DESIGN.md member-axis contract).
  For one member's score pass ``probs[:, m]``. Probabilities are validated (finite, ≥ 0, rows
  summing to 1 within the input precision) so that logits passed by mistake raise a ValueError.
* a ``torch.Tensor`` in gives a tensor out (same dtype and device, differentiable); anything else
  (NumPy arrays, lists) gives a float64 NumPy array.

Entropies are in nats with ``0 · log 0 = 0``. ``ensemblize.selective`` re-exports the scores used for
selective prediction; the training losses call the private kernels (``_softmax_response`` …) that
act on the last axis without validation.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from .._checks import check_bool, check_finite, check_not_probabilities, check_positive
from . import _validate as V

__all__ = [
    "softmax_response",
    "max_probability",
    "softmax_power",
    "negative_entropy",
    "mutual_information_per_sample",
    "negative_mutual_information",
    "negative_energy",
    "deep_gamblers_confidence",
]

ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


# --- unchecked kernels on the last (class) axis: (..., C) -> (...) ------------------------------


def _softmax_response(probs: Tensor) -> Tensor:
    return probs.amax(dim=-1)


def _softmax_power(probs: Tensor, gamma: float) -> Tensor:
    return probs.amax(dim=-1).pow(gamma)


def _entropy(probs: Tensor) -> Tensor:
    """``-Σ_c p_c log p_c`` with ``0 log 0 = 0`` and a finite gradient at p = 0.

    ``xlogy(p, p)`` gets the value right but differentiates its second argument as ``p / p``: NaN at
    an exact 0, which a float32 softmax produces. Here the log is taken of ``p`` with its zeros
    replaced by 1, and the zero entries are selected away, so their gradient is 0.
    """
    positive = probs > 0
    safe = torch.where(positive, probs, torch.ones_like(probs))
    return -torch.where(positive, probs * torch.log(safe), torch.zeros_like(probs)).sum(dim=-1)


def _negative_entropy(probs: Tensor, normalize: bool) -> Tensor:
    neg_h = -_entropy(probs)
    if not normalize:
        return neg_h
    c = probs.shape[-1]
    return torch.ones_like(neg_h) if c == 1 else 1.0 + neg_h / math.log(c)


# --- validated public scores ----------------------------------------------------------------------


def _mean_probs(probs: object, *, name: str = "probs") -> tuple[Tensor, bool]:
    """Validate ``(N, C)`` / ``(N, M, C)`` probabilities; return ``(p̄ as a tensor (N, C), came_as_tensor)``."""
    if isinstance(probs, Tensor):
        V.probabilities(probs.detach(), name=name)
        t = probs if probs.is_floating_point() else probs.double()
        return (t.mean(dim=1) if t.dim() == 3 else t), True
    arr = V.probabilities(probs, name=name)
    return torch.from_numpy(V.mean_probs(arr)), False


def _out(x: Tensor, as_tensor: bool) -> Tensor | np.ndarray:
    return x if as_tensor else x.detach().cpu().numpy()


def softmax_response(probs: ArrayT) -> ArrayT:
    """Softmax response (SR): ``max_c p̄_c``; ``(N, C)`` or ``(N, M, C)`` ``-> (N,)``, values in ``[1/C, 1]``."""
    p, as_tensor = _mean_probs(probs)
    return _out(_softmax_response(p), as_tensor)


#: Another name for :func:`softmax_response` (the same function).
max_probability = softmax_response


def softmax_power(probs: ArrayT, gamma: float) -> ArrayT:
    """Softmax power (SMP, the SYNC paper): ``(max_c p̄_c) ** gamma``, ``gamma > 0``; ``(N, C)`` or ``(N, M, C)`` ``-> (N,)``.

    A monotone transform of SR, so it ranks samples exactly as SR does; ``gamma`` only matters as
    a *training target* (it reshapes the values the selection head is pulled towards).
    """
    g = check_positive(gamma, name="gamma")
    p, as_tensor = _mean_probs(probs)
    return _out(_softmax_power(p, g), as_tensor)


def negative_entropy(probs: ArrayT, *, normalize: bool = False) -> ArrayT:
    """Negative predictive entropy ``-H(p̄) = Σ_c p̄_c log p̄_c``; ``(N, C)`` or ``(N, M, C)`` ``-> (N,)``.

    Raw values lie in ``[-log C, 0]``. With ``normalize=True`` returns ``1 - H(p̄) / log C`` in
    ``[0, 1]`` (1 = one-hot, 0 = uniform); for ``C = 1`` that is defined as 1.
    """
    check_bool(normalize, name="normalize")
    p, as_tensor = _mean_probs(probs)
    return _out(_negative_entropy(p, normalize), as_tensor)


def mutual_information_per_sample(member_probs: ArrayT) -> ArrayT:
    """Per-sample mutual information ``H(p̄) − (1/M) Σ_m H(p_m)`` (epistemic part); ``(N, M, C) -> (N,)``.

    Mathematically ≥ 0 (Jensen); floating round-off below 0 is clipped to 0. M = 1 gives 0.
    """
    if isinstance(member_probs, Tensor):
        V.probabilities(member_probs.detach(), name="member_probs", require_members=True)
        p, as_tensor = (member_probs if member_probs.is_floating_point() else member_probs.double()), True
    else:
        p = torch.from_numpy(V.probabilities(member_probs, name="member_probs", require_members=True))
        as_tensor = False
    return _out(_mutual_information(p), as_tensor)


def _mutual_information(p: Tensor) -> Tensor:
    """``H(p̄) − (1/M) Σ_m H(p_m)`` of validated ``(N, M, C)`` probabilities, clipped at 0; ``-> (N,)``."""
    return (_entropy(p.mean(dim=1)) - _entropy(p).mean(dim=1)).clamp_min(0.0)


def negative_mutual_information(member_probs: ArrayT) -> ArrayT:
    """``-MI`` per sample (see :func:`mutual_information_per_sample`); ``(N, M, C) -> (N,)``."""
    return -mutual_information_per_sample(member_probs)


def negative_energy(logits: ArrayT, temperature: float = 1.0) -> ArrayT:
    """Negative free energy ``T · logsumexp_c(z_c / T)`` (Liu et al., 2020); logits ``(N, C) -> (N,)``.

    Higher = more in-distribution. Takes logits of one model (for an ensemble, pass the logits of
    the model whose energy you want); ``temperature`` must be finite and > 0.
    """
    t = check_positive(temperature, name="temperature")
    if isinstance(logits, Tensor):
        V.logits(logits.detach(), name="logits", ranks=(2,))
        z, as_tensor = (logits if logits.is_floating_point() else logits.double()), True
    else:
        z, as_tensor = torch.from_numpy(V.logits(logits, name="logits", ranks=(2,))), False
    return _out(t * torch.logsumexp(z / t, dim=1), as_tensor)


def deep_gamblers_confidence(logits: ArrayT) -> ArrayT:
    """Deep Gamblers confidence ``1 - p_{K+1}`` from ``K + 1`` logits (last = abstain); ``(..., K+1) -> (...)``.

    ``p = softmax(logits)``; ranking by this is the same as ranking by ``-p_{K+1}``. Member logits
    ``(N, M, K+1)`` give one confidence per member, ``(N, M)``.
    """
    if isinstance(
        logits, Tensor
    ):  # integer / bool tensors widen exactly, as arrays do (the other scores' rule)
        if logits.is_complex():
            raise TypeError(f"logits must be real-valued, got dtype {logits.dtype}")
        t, as_tensor = (logits if logits.is_floating_point() else logits.double()), True
    else:
        t, as_tensor = torch.from_numpy(V.as_float_array(logits, name="logits")), False
    if t.dim() < 1 or t.shape[-1] < 3:
        raise ValueError(
            f"logits must have K + 1 >= 3 entries on the last axis (K >= 2 classes plus abstain), "
            f"got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(f"logits is empty (shape {tuple(t.shape)}); at least one sample is required")
    check_finite(t, name="logits")
    check_not_probabilities(t, name="logits")
    return _out(-torch.expm1(torch.log_softmax(t, dim=-1)[..., -1]), as_tensor)
