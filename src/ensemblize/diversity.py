"""Controllable diversity for σN ensembles: the softmax-temperature regulariser and sharing statistics.

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

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._checks import check_positive
from .nn.sigma_norm import SigmaNorm

__all__ = [
    "softmax_temperature_loss",
    "sharing",
    "LayerSharing",
    "sigma_layers",
    "optimal_owners",
    "uniform_gate_loss",
]


def sigma_layers(
    model: nn.Module, layers: Iterable[str] | Callable[[str, SigmaNorm], bool] | None = None
) -> list[tuple[str, SigmaNorm]]:
    """The σNorm layers of ``model`` as ``(name, layer)``; ``layers`` selects a subset by name or predicate."""
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, SigmaNorm)]
    if not found:
        raise ValueError(
            f"{type(model).__name__} has no σNorm layer; convert it with ensemblize.sigma_ensemble first"
        )
    if layers is None:
        return found
    if callable(layers):
        chosen = [(n, m) for n, m in found if layers(n, m)]
    else:
        wanted = list(layers)
        names = {n for n, _ in found}
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise ValueError(f"unknown σNorm layer name(s) {unknown}; available: {sorted(names)}")
        chosen = [(n, m) for n, m in found if n in set(wanted)]
    if not chosen:
        raise ValueError("the layer selection matched no σNorm layer")
    return chosen


def softmax_temperature_loss(
    model: nn.Module,
    tau: float,
    lam: float,
    *,
    layers: Iterable[str] | Callable[[str, SigmaNorm], bool] | None = None,
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
    total: Tensor | None = None
    for _, layer in sigma_layers(model, layers):
        term = torch.log_softmax(layer.gates() / tau, dim=0).sum()
        total = term if total is None else total + term
    assert total is not None
    return lam * total


def uniform_gate_loss(model: nn.Module, lam: float, *, layers=None) -> float:
    """Value of the regulariser when every feature's gates are equal across members: ``−λ·C·M·log M`` summed."""
    lam = check_positive(lam, name="lam", allow_zero=True)
    total = 0.0
    for _, layer in sigma_layers(model, layers):
        m = layer.members
        total += -layer.num_gated * m * float(torch.log(torch.tensor(float(m))))
    return lam * total


def optimal_owners(tau: float, members: int) -> float:
    """The continuous minimiser ``k* = M (τ − 1/(e^{1/τ} − 1))`` of the per-feature loss over binary gates."""
    tau = check_positive(tau, name="tau")
    return members * (tau - 1.0 / float(torch.expm1(torch.tensor(1.0 / tau, dtype=torch.float64))))


@dataclass
class LayerSharing:
    """How the members share one σNorm layer's features.

    ``owners`` (C,) — members whose gate exceeds the threshold, per feature; ``soft_owners`` (C,) —
    the sum of the members' gates per feature; ``histogram`` (M + 1,) — number of features with
    0, 1, …, M owners; ``binary_fraction`` — share of gates within 0.05 of 0 or 1.
    """

    name: str
    members: int
    features: int
    owners: Tensor
    soft_owners: Tensor
    histogram: Tensor
    binary_fraction: float

    @property
    def mean_owners(self) -> float:
        return float(self.owners.float().mean())

    @property
    def mean_soft_owners(self) -> float:
        return float(self.soft_owners.mean())

    @property
    def single_owner_fraction(self) -> float:
        return float((self.owners == 1).float().mean())

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "members": self.members,
            "features": self.features,
            "mean_owners": self.mean_owners,
            "mean_soft_owners": self.mean_soft_owners,
            "single_owner_fraction": self.single_owner_fraction,
            "binary_fraction": self.binary_fraction,
            "histogram": self.histogram.tolist(),
        }


@torch.no_grad()
def sharing(model: nn.Module, *, threshold: float = 0.5, layers=None) -> list[LayerSharing]:
    """Per σNorm layer: how many members own each feature (gate > ``threshold``) and the soft count Σ_m gate."""
    out = []
    for name, layer in sigma_layers(model, layers):
        g = layer.gates().detach().float().cpu()
        owners = (g > threshold).sum(dim=0)
        stats = LayerSharing(
            name=name,
            members=layer.members,
            features=layer.num_gated,
            owners=owners,
            soft_owners=g.sum(dim=0),
            histogram=torch.bincount(owners, minlength=layer.members + 1),
            binary_fraction=float(((g < 0.05) | (g > 0.95)).float().mean()),
        )
        out.append(stats)
    return out
