"""Selective-prediction evaluation lives in :mod:`ensemblize.evaluation.selective`; these names are
re-exported here (and by :mod:`ensemblize.selective`) for existing imports."""

from __future__ import annotations

from ..evaluation.selective import (
    DEFAULT_COVERAGES,
    SelectivePredictions,
    SelectiveReport,
    predict_selective,
    selective_net_report,
    selective_report,
)

__all__ = [
    "DEFAULT_COVERAGES",
    "SelectiveReport",
    "SelectivePredictions",
    "selective_report",
    "predict_selective",
    "selective_net_report",
]
