"""Contract path for the σN diversity controls (DESIGN.md): ``ez.diversity.softmax_temperature_loss``
and ``ez.diversity.sharing``.

They are defined in :mod:`ensemblize.sigma` (regulariser: :mod:`ensemblize.sigma.regularizer`,
sharing statistics: :mod:`ensemblize.sigma.gate_sharing`, layer selection:
:mod:`ensemblize.sigma.layers`); this module only re-exports them. Output-diversity metrics of an
ensemble's predictions are in :mod:`ensemblize.metrics.diversity`.
"""

from __future__ import annotations

from .sigma.gate_sharing import LayerSharing, sharing
from .sigma.layers import sigma_layers
from .sigma.regularizer import optimal_owners, softmax_temperature_loss, uniform_gate_loss

__all__ = [
    "softmax_temperature_loss",
    "sharing",
    "LayerSharing",
    "sigma_layers",
    "optimal_owners",
    "uniform_gate_loss",
]
