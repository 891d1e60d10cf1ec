"""Metrics for ensembles: calibration, OOD detection, selective prediction, diversity.

Pure functions on NumPy arrays or torch tensors (results are Python floats or NumPy arrays), each
with a streaming twin (``update`` / ``compute``) in :mod:`ensemblize.metrics.streaming`.

Shapes: ``probs`` is ``(N, C)`` mean probabilities or ``(N, M, C)`` member probabilities (then
averaged on probabilities, ``p̄ = mean_m p_m``); ``labels`` ``(N,)`` ints; confidences and losses
``(N,)``. Higher confidence = more confident / more in-distribution.

* calibration: :func:`accuracy`, :func:`nll`, :func:`brier`, :func:`ece`, :func:`reliability`,
  :func:`member_average`
* OOD: :func:`ood_auroc`, :func:`ood_aupr`, :func:`fpr_at_tpr`
* confidence scores (their one home, :mod:`ensemblize.metrics.confidence`): :func:`softmax_response`
  (alias :func:`max_probability`), :func:`softmax_power`, :func:`negative_entropy`,
  :func:`negative_mutual_information`, :func:`negative_energy`, :func:`deep_gamblers_confidence`
* selective: :func:`risk_coverage`, :func:`aurc`, :func:`eaurc`, :func:`augrc`,
  :func:`risk_at_coverage`, :func:`coverage_at_risk`
* diversity: :func:`disagreement`, :func:`pairwise_kl`, :func:`mutual_information`,
  :func:`ambiguity`
"""

from __future__ import annotations

from .calibration import ReliabilityBins, accuracy, brier, ece, member_average, nll, reliability
from .confidence import (
    deep_gamblers_confidence,
    max_probability,
    mutual_information_per_sample,
    negative_energy,
    negative_entropy,
    negative_mutual_information,
    softmax_power,
    softmax_response,
)
from .diversity import ambiguity, disagreement, mutual_information, pairwise_kl
from .ood import fpr_at_tpr, ood_aupr, ood_auroc
from .selective import (
    RiskCoverageCurve,
    augrc,
    aurc,
    coverage_at_risk,
    eaurc,
    risk_at_coverage,
    risk_coverage,
)
from .streaming import (
    AUGRC,
    AURC,
    EAURC,
    ECE,
    NLL,
    OODAUPR,
    OODAUROC,
    Accuracy,
    Ambiguity,
    Brier,
    CoverageAtRisk,
    Disagreement,
    FPRAtTPR,
    Metric,
    MutualInformation,
    PairwiseKL,
    Reliability,
    RiskAtCoverage,
    RiskCoverage,
)

__all__ = [
    # calibration
    "accuracy",
    "nll",
    "brier",
    "ece",
    "reliability",
    "ReliabilityBins",
    "member_average",
    # confidence scores
    "softmax_response",
    "max_probability",
    "softmax_power",
    "deep_gamblers_confidence",
    "negative_entropy",
    "negative_mutual_information",
    "mutual_information_per_sample",
    "negative_energy",
    # OOD
    "ood_auroc",
    "ood_aupr",
    "fpr_at_tpr",
    # selective
    "risk_coverage",
    "RiskCoverageCurve",
    "aurc",
    "eaurc",
    "augrc",
    "risk_at_coverage",
    "coverage_at_risk",
    # diversity
    "disagreement",
    "pairwise_kl",
    "mutual_information",
    "ambiguity",
    # streaming
    "Metric",
    "Accuracy",
    "NLL",
    "Brier",
    "ECE",
    "Reliability",
    "OODAUROC",
    "OODAUPR",
    "FPRAtTPR",
    "RiskCoverage",
    "AURC",
    "EAURC",
    "AUGRC",
    "RiskAtCoverage",
    "CoverageAtRisk",
    "Disagreement",
    "PairwiseKL",
    "MutualInformation",
    "Ambiguity",
]
