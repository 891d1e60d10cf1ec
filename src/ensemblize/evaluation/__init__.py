"""Evaluation in one place: images, tables and selective prediction, and the metric-name lists.

Modules (imported on first attribute access, so ``report/`` can read the name lists cheaply):

* :mod:`.names` — the metric-name lists (``CLEAN_METRICS``, ``HEADLINE_METRICS``, ``SCORES``);
* :mod:`.image` — :func:`evaluate_classifier` / :func:`evaluate_probs` for image classifiers
  (clean, shift, OOD, selective, diversity);
* :mod:`.selective` — :func:`selective_report` (risk at coverages, AURC / E-AURC / AUGRC,
  validation thresholds), :func:`score_model` (the confidence scores of a plain, selective or
  Deep Gamblers model), :func:`predict_selective`, :func:`selective_net_report`;
* :mod:`.tabular` — :func:`evaluate_predictions` for tables (classification and regression).
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "CLEAN_METRICS": "ensemblize.evaluation.names",
    "HEADLINE_METRICS": "ensemblize.evaluation.names",
    "SCORES": "ensemblize.evaluation.names",
    "EvalSpec": "ensemblize.evaluation.image",
    "Evaluation": "ensemblize.evaluation.image",
    "evaluate_classifier": "ensemblize.evaluation.image",
    "evaluate_probs": "ensemblize.evaluation.image",
    "selective_report": "ensemblize.evaluation.selective",
    "SelectiveReport": "ensemblize.evaluation.selective",
    "score_model": "ensemblize.evaluation.selective",
    "Scores": "ensemblize.evaluation.selective",
    "predict_selective": "ensemblize.evaluation.selective",
    "selective_net_report": "ensemblize.evaluation.selective",
    "evaluate_predictions": "ensemblize.evaluation.tabular",
}
_SUBMODULES = ("names", "image", "selective", "tabular")

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
