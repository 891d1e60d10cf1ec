"""Selective-prediction evaluation lives in :mod:`ensemblize.evaluation.selective`; its public names
are re-exported here (and by :mod:`ensemblize.selective`) for existing imports."""

from __future__ import annotations

from ..evaluation.selective import *  # noqa: F403
from ..evaluation.selective import __all__  # noqa: F401
