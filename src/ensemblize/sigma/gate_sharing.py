"""How the members of a σN ensemble share each σNorm layer's features (gate statistics).

Ownership rule: member ``m`` **owns** feature ``i`` when its gate ``σ(γ_{m,i}) ≥ threshold``
(default ``½``, the midpoint between the regulariser's two vertices 0 and 1), compared in the
gates' dtype: a threshold ``σ(γ₀)`` counts a gate whose stored logit is ``γ₀`` in that dtype (half a
unit of it lower at most) as owning, up to :data:`OWNER_TOLERANCE_ULPS` units in the last place of
rounding in torch's sigmoid — and nothing lower. A gate of exactly
``½`` counts as owning. Consequence: a conversion with ``noise=0`` and the default ``gate_init=0``
starts every gate at exactly ``½``, so every member owns every feature (``M`` owners) — the
identical members share everything, as they should. With ``gate_init=γ₀ < 0`` and no noise the
gates start at ``σ(γ₀) < ½``; pass ``threshold=σ(γ₀)`` to count ownership relative to the start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_open_unit
from .layers import LayerSelection, sigma_layers

__all__ = ["sharing", "LayerSharing", "DEFAULT_OWNER_THRESHOLD", "OWNER_TOLERANCE_ULPS", "BINARY_MARGIN"]

#: A member owns a feature when its gate is at least this (see the module docstring).
DEFAULT_OWNER_THRESHOLD = 0.5
#: A gate at most this many units in the last place (of its dtype, just below the threshold) under the
#: threshold still owns its feature: measured over 20,001 gate inits in ±9.9, torch's sigmoid lands up
#: to 2 units below the correctly rounded value in float32 and float64 (none in float16 / bfloat16).
OWNER_TOLERANCE_ULPS = 2
#: A gate within this distance of 0 or 1 counts as binary in ``LayerSharing.binary_fraction``.
BINARY_MARGIN = 0.05


@dataclass
class LayerSharing:
    """How the members share one σNorm layer's features.

    ``owners`` (C,) — members whose gate is ``≥ threshold``, per feature; ``soft_owners`` (C,) —
    the sum of the members' gates per feature; ``histogram`` (M + 1,) — number of features with
    0, 1, …, M owners; ``binary_fraction`` — share of gates within ``BINARY_MARGIN`` of 0 or 1;
    ``threshold`` — the ownership threshold used.
    """

    name: str
    members: int
    features: int
    owners: Tensor
    soft_owners: Tensor
    histogram: Tensor
    binary_fraction: float
    threshold: float = DEFAULT_OWNER_THRESHOLD

    @property
    def mean_owners(self) -> float:
        """Mean number of owners per feature."""
        return float(self.owners.float().mean())

    @property
    def mean_soft_owners(self) -> float:
        """Mean of ``Σ_m σ(γ_m)`` per feature."""
        return float(self.soft_owners.mean())

    @property
    def single_owner_fraction(self) -> float:
        """Share of features owned by exactly one member."""
        return float((self.owners == 1).float().mean())

    def to_dict(self) -> dict:
        """The summary as plain JSON-ready values."""
        return {
            "name": self.name,
            "members": self.members,
            "features": self.features,
            "threshold": self.threshold,
            "mean_owners": self.mean_owners,
            "mean_soft_owners": self.mean_soft_owners,
            "single_owner_fraction": self.single_owner_fraction,
            "binary_fraction": self.binary_fraction,
            "histogram": self.histogram.tolist(),
        }


def _lower_bound(threshold: float, dtype: torch.dtype) -> float:
    """The smallest gate of ``dtype`` that owns at ``threshold``.

    A threshold ``t = σ(γ₀)`` names a logit ``γ₀`` the dtype may not hold: the stored logit can be half
    a unit in the last place of ``γ₀`` lower, which lowers the gate by ``t(1 − t)`` times that. The
    threshold so lowered is rounded to ``dtype``, less :data:`OWNER_TOLERANCE_ULPS` units in the last
    place just below it (torch's sigmoid rounding).
    """
    finfo = torch.finfo(dtype)
    logit = math.log(threshold / (1.0 - threshold))
    logit_ulp = finfo.eps * 2.0 ** math.floor(math.log2(abs(logit))) if logit else 0.0
    lowered = threshold - threshold * (1.0 - threshold) * logit_ulp / 2
    rounded = float(torch.tensor(lowered, dtype=dtype))
    if rounded <= 0.0:
        return -math.inf  # the threshold is below the dtype's smallest gate: every gate owns
    # the unit just below ``rounded``; subnormal gates (float16 under 6e-5) share one fixed unit
    ulp_below = max(finfo.eps * 2.0 ** (math.ceil(math.log2(rounded)) - 1), finfo.tiny * finfo.eps)
    return rounded - OWNER_TOLERANCE_ULPS * ulp_below


@torch.no_grad()
def sharing(
    model: nn.Module, *, threshold: float = DEFAULT_OWNER_THRESHOLD, layers: LayerSelection = None
) -> list[LayerSharing]:
    """Per σNorm layer: how many members own each feature (gate ``≥ threshold``, up to
    :data:`OWNER_TOLERANCE_ULPS` of round-off) and the soft count Σ_m gate.

    Args:
        model: a module with σNorm layers.
        threshold: ownership threshold, strictly inside ``(0, 1)`` (default ½; see the module docstring).
        layers: optional subset, as in :func:`ensemblize.sigma.sigma_layers`.

    Returns:
        one :class:`LayerSharing` per selected layer, in module order.

    Raises:
        TypeError / ValueError: ``threshold`` is not a real number in ``(0, 1)`` (NaN included).
    """
    threshold = check_open_unit(threshold, name="threshold")
    out = []
    for name, layer in sigma_layers(model, layers):
        native = layer.gates().detach().cpu()  # (M, C), in the layer's dtype
        owners = (native.double() >= _lower_bound(threshold, native.dtype)).sum(dim=0)
        g = native.float()
        out.append(
            LayerSharing(
                name=name,
                members=layer.members,
                features=layer.num_gated,
                owners=owners,
                soft_owners=g.sum(dim=0),
                histogram=torch.bincount(owners, minlength=layer.members + 1),
                binary_fraction=float(((g < BINARY_MARGIN) | (g > 1 - BINARY_MARGIN)).float().mean()),
                threshold=threshold,
            )
        )
    return out
