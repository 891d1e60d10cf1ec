"""Compatibility path: :func:`sigma_ensemble` lives in :mod:`ensemblize.sigma.convert`.

``ensemblize.sigma_ensemble`` (the contract name) and old ``from ensemblize.convert import …``
imports keep working through this re-export; new code imports from :mod:`ensemblize.sigma`.
"""

from __future__ import annotations

from .sigma.convert import DEFAULT_NOISE, GATE_INIT_BOUND, SigmaEnsemble, convert_norms, sigma_ensemble

__all__ = ["sigma_ensemble", "SigmaEnsemble", "convert_norms", "DEFAULT_NOISE", "GATE_INIT_BOUND"]
