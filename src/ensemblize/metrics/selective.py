"""Selective prediction: risk–coverage curve, AURC, E-AURC, AUGRC, risk/coverage operating points.

Every function takes an explicit per-sample ``confidence`` ``(N,)`` (higher = kept first) and
per-sample ``losses`` ``(N,)`` (0/1 errors or any non-negative loss). At coverage ``k/N`` the model
keeps the ``k`` most confident samples; the selective risk is their mean loss.

Ties: when confidences tie, the order inside a tie group is undefined, so every value here is the
**expectation over uniformly random orderings within each tie group**; permuting the input never
changes it. Because the loss sum of the top ``k`` is linear in which samples are taken, this has a
closed form: complete tie groups contribute their loss sum, the partly-taken group contributes
``(number taken) × (its mean loss)``. Everything is vectorised, O(N log N).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _validate as V

# coverage_at_risk compares risks with this slack, relative to the risk (absolute below 1), so that
# 0.1 + 0.2 counts as <= 0.3 and a top-k mean of losses near 1e6 counts as <= itself.
RISK_RTOL = 1e-12


class RiskCoverageCurve(NamedTuple):
    """``coverage[k-1] = k / N`` and ``risk[k-1]`` = expected mean loss of the top ``k``, k = 1..N."""

    coverage: np.ndarray
    risk: np.ndarray


def _topk_loss_sums(conf: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Expected loss sum of the ``k`` most confident samples, for k = 1..N (ties averaged)."""
    n = len(conf)
    order = np.argsort(-conf, kind="stable")
    c, l_sorted = conf[order], loss[order]
    starts = np.r_[0, np.nonzero(np.diff(c))[0] + 1]  # first position of each tie group
    sizes = np.diff(np.r_[starts, n])
    group_sum = np.add.reduceat(l_sorted, starts)
    before = np.r_[0.0, np.cumsum(group_sum)[:-1]]  # loss of all complete groups ahead
    group = np.repeat(np.arange(len(starts)), sizes)  # group of position k-1
    taken = np.arange(1, n + 1) - starts[group]
    return before[group] + taken * (group_sum[group] / sizes[group])


def risk_coverage(confidence: object, losses: object) -> RiskCoverageCurve:
    """Risk–coverage curve: coverages ``k/N`` and selective risks of the top ``k``, k = 1..N.

    Returns a :class:`RiskCoverageCurve` ``(coverage, risk)`` of two ``(N,)`` arrays (ties averaged,
    see the module docstring).
    """
    conf, loss = V.confidence_and_losses(confidence, losses)
    n = len(conf)
    k = np.arange(1, n + 1, dtype=np.float64)
    return RiskCoverageCurve(coverage=k / n, risk=_topk_loss_sums(conf, loss) / k)


def aurc(confidence: object, losses: object) -> float:
    """Area under the risk–coverage curve, ``(1/N) Σ_{k=1..N} risk(top k)`` (Geifman et al., 2019)."""
    return float(np.mean(risk_coverage(confidence, losses).risk))


def _optimal_aurc(loss: np.ndarray) -> float:
    s = np.cumsum(np.sort(loss))
    return float(np.mean(s / np.arange(1, len(loss) + 1)))


def eaurc(confidence: object, losses: object) -> float:
    """Excess AURC: ``AURC − AURC*`` where ``AURC*`` keeps the same losses in ascending order.

    ≥ 0 up to round-off; 0 for a confidence that ranks every lower loss first.
    """
    _, loss = V.confidence_and_losses(confidence, losses)
    return aurc(confidence, losses) - _optimal_aurc(loss)


def augrc(confidence: object, losses: object) -> float:
    """Area under the generalized risk–coverage curve, as defined by fd-shifts (Traub et al., 2024).

    Generalized risk at coverage ``k/N`` = ``G_k / N``, the summed loss of the top ``k`` divided by
    *all* ``N`` samples (= coverage × selective risk; for 0/1 losses the share of samples that are
    accepted *and* wrong). AUGRC is the trapezoid rule over the points ``(k/N, G_k/N)``,
    ``k = 0..N``, **including** ``(0, 0)``::

        AUGRC = (1/N) Σ_{k=1..N} (G_{k-1} + G_k) / (2N) = (Σ_{k=1..N} G_k − G_N / 2) / N²

    With tied confidences ``G_k`` is the expectation over orderings inside each tie group (module
    docstring); the expected curve is linear across a tie group, so this equals fd-shifts'
    trapezoid over its distinct-threshold points. fd-shifts reports the value ×1000; this is
    unscaled, in ``[0, mean loss]``. (Until Dec 2026 this function returned the right Riemann sum
    ``Σ_k G_k / N²``, larger by ``mean loss / (2N)``.)
    """
    conf, loss = V.confidence_and_losses(confidence, losses)
    n = len(conf)
    sums = _topk_loss_sums(conf, loss)
    return float((np.sum(sums) - 0.5 * sums[-1]) / (n * n))


def risk_at_coverage(confidence: object, losses: object, coverage: float) -> float:
    """Selective risk of the ``⌈coverage · N⌉`` most confident samples; ``coverage`` in (0, 1].

    ``⌈·⌉`` is taken with a slack below one sample against float rounding (``0.3 · 10`` keeps 3
    samples; see ``count_for_fraction``), and at least one sample is kept.
    """
    cov = V.coverage(coverage)
    curve = risk_coverage(confidence, losses)
    k = V.count_for_fraction(cov, len(curve.risk))
    return float(curve.risk[k - 1])


def coverage_at_risk(confidence: object, losses: object, risk: float) -> float:
    """Largest coverage ``k/N`` whose selective risk is ≤ ``risk`` (slack ``1e-12 · max(1, risk)``); NaN if none.

    ``risk`` must be finite and ≥ 0. The risk–coverage curve need not be monotone; the largest
    qualifying ``k`` is returned, not the end of the first qualifying run.
    """
    r = V.nonnegative_real(risk, name="risk")
    curve = risk_coverage(confidence, losses)
    ok = np.nonzero(curve.risk <= r + RISK_RTOL * max(1.0, r))[0]
    return float(curve.coverage[ok[-1]]) if len(ok) else math.nan
