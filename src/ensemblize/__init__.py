"""ensemblize: calibrated uncertainty without paying for M separate models.

Three methods share one member-axis contract (see ``ensemblize.members``):

* σN-Ens — :func:`sigma_ensemble` turns any ``nn.Module`` with BatchNorm/LayerNorm into a
  normalization-based implicit ensemble; :mod:`ensemblize.diversity` controls member diversity.
* LoMETab — :mod:`ensemblize.tabular` estimators built from rank-r multiplicative layers
  (:class:`ensemblize.nn.LoMELinear`).
* SYNC — :mod:`ensemblize.selective`: SelectiveNet trained to agree with its own softmax confidence.

Submodules are imported on first attribute access so that ``import ensemblize`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_SUBMODULES = (
    "nn",
    "metrics",
    "diversity",
    "selective",
    "tabular",
    "data",
    "models",
    "training",
    "members",
    "checkpoint",
    "experiments",
    "report",
)
_ATTRIBUTES = {"sigma_ensemble": "ensemblize.convert", "SigmaEnsemble": "ensemblize.convert"}

__all__ = [*_SUBMODULES, *_ATTRIBUTES, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from . import checkpoint, data, diversity, members, metrics, models, nn, selective, tabular, training
    from .convert import SigmaEnsemble, sigma_ensemble


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ensemblize.{name}")
    if name in _ATTRIBUTES:
        return getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    raise AttributeError(f"module 'ensemblize' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
