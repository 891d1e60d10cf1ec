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

from typing import TYPE_CHECKING

from ._lazy import lazy_namespace

__version__ = "0.1.0"

_SUBMODULES = (
    "nn",
    "metrics",
    "diversity",
    "sigma",
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
_ATTRIBUTES = {
    "sigma_ensemble": "ensemblize.sigma.convert",
    "SigmaEnsemble": "ensemblize.sigma.convert",
    "save_ensemble": "ensemblize.sigma_io",
    "load_ensemble": "ensemblize.sigma_io",
}


if TYPE_CHECKING:  # pragma: no cover
    from . import checkpoint, data, diversity, members, metrics, models, nn, selective, tabular, training  # noqa: F401
    from .sigma.convert import SigmaEnsemble, sigma_ensemble  # noqa: F401
    from .sigma_io import load_ensemble, save_ensemble  # noqa: F401

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
__all__ = [*__all__, "__version__"]
