"""The softmax-temperature diversity regulariser of σN-Ens, and its closed-form landmarks.

The regulariser (σN-Ens, eq. for ``L_div``)::

    L_div = λ · Σ_{ℓ ∈ R} Σ_i Σ_{m=1..M} log softmax_τ( σ(γ_{·,ℓ,i}) )_m

where ``σ(γ_{·,ℓ,i})`` is the vector of the ``M`` members' gates for feature ``i`` of layer ``ℓ``
and ``softmax_τ(v) = softmax(v / τ)``. Minimised with the task loss, it drives each feature's gate
vector to a vertex of ``[0, 1]^M`` (it is concave in the gates). Which vertex is set by ``τ``
alone: for binary gates with ``k`` owners the loss per feature is
``k/τ − M·log(k·e^{1/τ} + M − k)``, minimised near ``k* = M·(τ − 1/(e^{1/τ} − 1))`` — one owner as
``τ → 0`` (hard partitioning), rising smoothly towards ``M/2`` as ``τ`` grows (soft "M-choose-k"
sharing). ``λ`` scales the pull, i.e. how fast gates settle, not where.

Note the value is a *sum* over features and members (as in the paper), so it is large and
negative; each gate's gradient is ``O(λ/τ)`` independently of the number of features.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import check_int, check_positive
from ..nn.sigma_norm import SigmaNorm
from .layers import LayerSelection, sigma_layers

__all__ = ["softmax_temperature_loss", "uniform_gate_loss", "optimal_owners", "MIN_TAU"]


MIN_TAU = 1e-12
"""Smallest accepted τ: ``σ(γ)/τ`` must stay finite in float32 (τ near 3e-39 overflows)."""


def softmax_temperature_loss(
    model: nn.Module, tau: float, lam: float, *, layers: LayerSelection = None
) -> Tensor:
    """``λ Σ_ℓ Σ_i Σ_m log softmax_τ(σ(γ_{·,ℓ,i}))_m`` over the member axis of every (selected) σNorm layer.

    Args:
        model: a module containing σNorm layers (e.g. from :func:`ensemblize.sigma_ensemble`).
        tau: softmax temperature ``τ ≥ MIN_TAU`` (1e-12): small → one owner per feature, large →
            shared features.
        lam: strength ``λ ≥ 0``.
        layers: optional subset (names as in ``model.named_modules()``, or a predicate ``(name, layer) -> bool``).

    Returns:
        a differentiable scalar tensor.
    """
    tau = check_positive(tau, name="tau")
    if tau < MIN_TAU:
        raise ValueError(f"tau must be >= {MIN_TAU:g} (below it σ(γ)/τ overflows to inf), got {tau!r}")
    lam = check_positive(lam, name="lam", allow_zero=True)
    total = None
    for logits in _gate_logit_groups(sigma_layers(model, layers)):
        term = torch.log_softmax(torch.sigmoid(logits) / tau, dim=0).sum()
        total = term if total is None else total + term
    return lam * total


def _gate_logit_groups(chosen: list[tuple[str, SigmaNorm]]) -> list[Tensor]:
    """The layers' ``(M, C_ℓ)`` gate logits side by side, ``(M, Σ C_ℓ)``, one tensor per member count,
    dtype and device (one group in practice).

    The regulariser is a sum of independent per-feature terms, so it runs once on these instead of
    once per layer: its cost (sigmoid, softmax and their backward) no longer grows with the number
    of layers — about five autograd nodes per layer and step before. The concatenation is
    differentiable; its backward hands each layer its own slice of the gradient.
    """
    groups: dict[tuple, list[Tensor]] = {}
    for _, layer in chosen:
        logits = layer.gate_logits
        groups.setdefault((logits.shape[0], logits.dtype, logits.device), []).append(logits)
    return [ts[0] if len(ts) == 1 else torch.cat(ts, dim=1) for ts in groups.values()]


def uniform_gate_loss(model: nn.Module, lam: float, *, layers: LayerSelection = None) -> float:
    """Value of the regulariser when every feature's gates are equal across members: ``−λ·C·M·log M`` summed."""
    lam = check_positive(lam, name="lam", allow_zero=True)
    total = sum(
        -layer.num_gated * layer.members * math.log(layer.members) for _, layer in sigma_layers(model, layers)
    )
    return lam * total


def optimal_owners(tau: float, members: int) -> float:
    """The continuous minimiser ``k* = M (τ − 1/(e^{1/τ} − 1))`` of the per-feature loss over binary gates."""
    tau = check_positive(tau, name="tau")
    members = check_int(members, name="members", minimum=1)
    return members * (tau - 1.0 / math.expm1(1.0 / tau)) if 1.0 / tau < 700 else members * tau
