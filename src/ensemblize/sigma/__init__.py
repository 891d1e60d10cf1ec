"""σN-Ens: turn a model into a normalization-based implicit ensemble, and steer its members' diversity.

One module per job:

* :mod:`~ensemblize.sigma.convert` — :func:`sigma_ensemble` / :func:`convert_norms`: every norm layer
  becomes its per-member σNorm twin (the layers themselves live in :mod:`ensemblize.nn.sigma_norm`);
* :mod:`~ensemblize.sigma.layers` — :func:`sigma_layers`, the one way to select a model's σNorm layers;
* :mod:`~ensemblize.sigma.regularizer` — :func:`softmax_temperature_loss`, the diversity regulariser;
* :mod:`~ensemblize.sigma.gate_sharing` — :func:`sharing`, how many members own each feature.

Output-diversity *metrics* of any ensemble (disagreement, pairwise KL, mutual information) are a
different job and live in :mod:`ensemblize.metrics.diversity`. The contract names
``ensemblize.sigma_ensemble`` and ``ensemblize.diversity.{softmax_temperature_loss, sharing}``
resolve to the functions here.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "sigma_ensemble": "ensemblize.sigma.convert",
    "SigmaEnsemble": "ensemblize.sigma.convert",
    "convert_norms": "ensemblize.sigma.convert",
    "NormSelection": "ensemblize.sigma.convert",
    "DEFAULT_NOISE": "ensemblize.sigma.convert",
    "GATE_INIT_BOUND": "ensemblize.sigma.convert",
    "sigma_layers": "ensemblize.sigma.layers",
    "softmax_temperature_loss": "ensemblize.sigma.regularizer",
    "uniform_gate_loss": "ensemblize.sigma.regularizer",
    "optimal_owners": "ensemblize.sigma.regularizer",
    "sharing": "ensemblize.sigma.gate_sharing",
    "LayerSharing": "ensemblize.sigma.gate_sharing",
    "DEFAULT_OWNER_THRESHOLD": "ensemblize.sigma.gate_sharing",
}

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES)
