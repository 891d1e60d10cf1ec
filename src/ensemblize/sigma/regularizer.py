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
from .layers import LayerSelection, sigma_layers

__all__ = ["softmax_temperature_loss", "uniform_gate_loss", "optimal_owners"]


def softmax_temperature_loss(
    model: nn.Module, tau: float, lam: float, *, layers: LayerSelection = None
) -> Tensor:
    """``λ Σ_ℓ Σ_i Σ_m log softmax_τ(σ(γ_{·,ℓ,i}))_m`` over the member axis of every (selected) σNorm layer.

    Args:
        model: a module containing σNorm layers (e.g. from :func:`ensemblize.sigma_ensemble`).
        tau: softmax temperature ``τ > 0``: small → one owner per feature, large → shared features.
        lam: strength ``λ ≥ 0``.
        layers: optional subset (names as in ``model.named_modules()``, or a predicate ``(name, layer) -> bool``).

    Returns:
        a differentiable scalar tensor.
    """
    tau = check_positive(tau, name="tau")
    lam = check_positive(lam, name="lam", allow_zero=True)
    total = sum(
        torch.log_softmax(layer.gates() / tau, dim=0).sum() for _, layer in sigma_layers(model, layers)
    )
    return lam * total


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
