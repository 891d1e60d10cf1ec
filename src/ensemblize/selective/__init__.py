"""Selective prediction: predict when confident, abstain otherwise.

* :class:`SelectiveNet` — prediction (``f``), selection (``g``) and auxiliary (``h``) heads on
  any feature extractor, returning a :class:`SelectiveOutput`;
* losses — :class:`SelectiveNetLoss`, :class:`SyncLoss` (SYNC: ``g`` synchronised with a softmax
  score such as SMP ``(max p)^γ``), :class:`DeepGamblersLoss`;
* scores — :func:`softmax_response`, :func:`softmax_power`, :func:`negative_entropy`,
  :func:`deep_gamblers_confidence` (defined once, in :mod:`ensemblize.metrics.confidence`);
* thresholds — :func:`threshold_for_coverage` (fit on validation), :func:`coverage_achieved`;
* evaluation — :func:`selective_report`, :func:`selective_net_report` ("w/o SR" vs "w/ SR"),
  :func:`predict_selective`.
"""

from __future__ import annotations

from ..metrics.confidence import deep_gamblers_confidence, negative_entropy, softmax_power, softmax_response
from .evaluate import (
    DEFAULT_COVERAGES,
    SelectivePredictions,
    SelectiveReport,
    predict_selective,
    selective_net_report,
    selective_report,
)
from .losses import DeepGamblersLoss, SelectiveNetLoss, SyncLoss
from .net import SelectiveNet, SelectiveOutput
from .thresholds import coverage_achieved, threshold_for_coverage

__all__ = [
    "SelectiveNet",
    "SelectiveOutput",
    "SelectiveNetLoss",
    "SyncLoss",
    "DeepGamblersLoss",
    "softmax_response",
    "softmax_power",
    "negative_entropy",
    "deep_gamblers_confidence",
    "threshold_for_coverage",
    "coverage_achieved",
    "selective_report",
    "selective_net_report",
    "predict_selective",
    "SelectiveReport",
    "SelectivePredictions",
    "DEFAULT_COVERAGES",
]
