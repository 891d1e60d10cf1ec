"""Evaluation in one place: images, tables and selective prediction, and the metric-name lists.

Modules (imported on first attribute access, so ``report/`` can read the name lists cheaply):

* :mod:`.names` — the metric-name lists (``CLEAN_METRICS``, ``HEADLINE_METRICS``, ``SCORES``);
* :mod:`.image` — :func:`evaluate_classifier` / :func:`evaluate_probs` for image classifiers
  (clean, shift, OOD, selective, diversity).
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
}
_SUBMODULES = ("names", "image")

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
