"""The metric-name lists every command, table and figure agrees on (no imports beyond the stdlib).

``report/`` formats these; it does not decide them. Each list names keys of a record's flat
``metrics`` mapping (see :mod:`ensemblize.report.results`).
"""

from __future__ import annotations

__all__ = ["CLEAN_METRICS", "HEADLINE_METRICS", "SCORES"]

#: Clean-test metrics of an image classifier, in print order.
CLEAN_METRICS: tuple[str, ...] = ("accuracy", "nll", "ece", "brier")

#: The metrics every image command prints (every metric is in results.json): clean, then the rest.
HEADLINE_METRICS: tuple[str, ...] = (
    *CLEAN_METRICS,
    "corr_accuracy",
    "corr_ece",
    "ood_maxprob_auroc",
    "ood_mi_auroc",
    "ood_near_maxprob_auroc",  # only where near-OOD sets were evaluated (`ensemblize run --ood heldout`)
    "aurc",
    "eaurc",
    "disagreement",
    "pairwise_kl",
    "mutual_information",
)

#: Confidence sources the OOD evaluation scores with: max p̄, −H(p̄), −mutual information.
SCORES: tuple[str, ...] = ("maxprob", "entropy", "mi")
