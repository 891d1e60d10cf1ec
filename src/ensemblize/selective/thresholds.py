"""Acceptance thresholds fitted on held-out validation confidences.

A selective classifier accepts a sample when ``confidence >= t``. The threshold is chosen on a
validation split for a target coverage and then applied unchanged to test data, where the coverage
actually achieved may differ from the target; :func:`coverage_achieved` measures it.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_finite_real, check_fraction
from ..metrics._validate import count_for_fraction, scores

__all__ = ["threshold_for_coverage", "coverage_achieved"]


def _confidence_1d(x: object, *, name: str) -> np.ndarray:
    """A non-empty, finite, real 1-D confidence vector as float64 (the metrics' own check)."""
    return scores(x, name=name)


def threshold_for_coverage(confidence_val: object, coverage: float) -> float:
    """The acceptance threshold ``t`` for a target ``coverage`` in (0, 1], fitted on validation confidences.

    ``t`` is the largest value such that the share of validation samples with
    ``confidence_val >= t`` is at least ``coverage``; equivalently, among all thresholds it gives
    the *smallest* validation coverage that is ``>= coverage``. With ``n`` samples sorted in
    decreasing order, ``t`` is the ``k``-th largest confidence, ``k = ceil(coverage · n)``.

    Ties: every sample tied with ``t`` is accepted (the rule is ``>=``), so when a tie group
    straddles position ``k`` the validation coverage exceeds ``coverage`` — the method never
    breaks ties at random and never under-covers on validation. ``coverage = 1`` returns the
    minimum confidence (everything accepted).

    Args:
        confidence_val: ``(N,)`` finite confidences (tensor or array), higher = more confident.
        coverage: target share of accepted samples, in ``(0, 1]``.

    Returns:
        ``t`` as a Python float; accept a sample when ``confidence >= t``.
    """
    c = check_fraction(coverage, name="coverage")
    conf = _confidence_1d(confidence_val, name="confidence_val")
    n = conf.size
    # k = ceil(c·n), with a tolerance so that e.g. 0.7·10 = 7.000000000000001 gives 7, not 8
    # (the same count as the selective metrics' risk_at_coverage)
    k = count_for_fraction(c, n)
    # k-th largest = element n - k of the ascending order; np.partition is O(n).
    return float(np.partition(conf, n - k)[n - k])


def coverage_achieved(confidence_test: object, threshold: float) -> float:
    """Share of samples accepted by ``confidence_test >= threshold``; ``(N,) -> float`` in [0, 1].

    ``threshold`` must be a finite real number (e.g. from :func:`threshold_for_coverage`).
    """
    conf = _confidence_1d(confidence_test, name="confidence_test")
    t = check_finite_real(threshold, name="threshold")
    return float(np.mean(conf >= t))
