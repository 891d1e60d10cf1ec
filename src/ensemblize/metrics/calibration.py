"""Classification quality and calibration: accuracy, NLL, Brier score, ECE, reliability bins.

Input convention (DESIGN.md member-axis contract): ``probs`` is either the ensemble's mean
probability ``(N, C)`` or the member probabilities ``(N, M, C)``. Member probabilities are first
averaged **on probabilities**, ``p̄ = mean_m p_m`` (never on logits), and the metric is computed on
``p̄`` — the *ensemble* metric. :func:`member_average` gives the *member-average* metric instead
(the metric of each member, averaged over members). Arrays or tensors are accepted; scalar
results are Python floats, per-bin results NumPy arrays.

Predicted class = ``argmax_c p̄_c`` (the first index on ties, like ``numpy.argmax``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax, logsumexp

from .._checks import check_bool
from . import _validate as V

BINNINGS = ("equal_width", "equal_mass")


def _probs_and_labels(probs: object, labels: object) -> tuple[np.ndarray, np.ndarray]:
    p = V.mean_probs(V.probabilities(probs))
    y = V.labels(labels, p.shape[0], p.shape[1])
    return p, y


def accuracy(probs: object, labels: object) -> float:
    """Share of samples whose predicted class ``argmax_c p̄_c`` equals the label.

    ``probs``: ``(N, C)`` or ``(N, M, C)`` (averaged over members first); ``labels``: ``(N,)`` ints.
    """
    p, y = _probs_and_labels(probs, labels)
    return float(np.mean(p.argmax(axis=1) == y))


def _nll_eps(eps: object) -> float:
    """``eps`` of :func:`nll` if it lies in [0, 1), else ValueError naming it."""
    eps = V.nonnegative_real(eps, name="eps")
    if eps >= 1:  # every probability would be clipped to eps: a negative or zero "NLL"
        raise ValueError(f"eps must be in [0, 1), got {eps!r}")
    return eps


def nll(probs: object, labels: object, *, from_logits: bool = False, eps: float = 1e-12) -> float:
    """Negative log-likelihood of the ensemble: ``-(1/N) Σ_i log p̄_{i, y_i}``.

    * ``from_logits=False`` (default): ``probs`` is ``(N, C)`` or ``(N, M, C)`` probabilities;
      ``p̄ = mean_m p_m``, clipped below at ``eps`` (default 1e-12, so a zero probability on the
      true class costs ``-log(1e-12) ≈ 27.6`` instead of ``inf``; ``eps=0`` gives the exact value).
    * ``from_logits=True``: ``probs`` holds member logits ``z`` of shape ``(N, M, C)`` (or ``(N, C)``
      for one member) and the log mean probability is computed stably in log space,
      ``log p̄ = logsumexp_m(log_softmax(z_m)) − log M``; no clipping is applied.
    """
    check_bool(from_logits, name="from_logits")
    eps = _nll_eps(eps)
    if from_logits:
        z = V.logits(probs, name="logits")
        if z.ndim == 2:
            z = z[:, None, :]
        log_p = logsumexp(log_softmax(z, axis=-1), axis=1) - np.log(z.shape[1])
        y = V.labels(labels, z.shape[0], z.shape[2])
        return float(-np.mean(log_p[np.arange(z.shape[0]), y]))
    p, y = _probs_and_labels(probs, labels)
    p_true = p[np.arange(p.shape[0]), y]
    with np.errstate(divide="ignore"):
        return float(-np.mean(np.log(np.maximum(p_true, eps))))


def brier(probs: object, labels: object) -> float:
    """Multi-class Brier score ``(1/N) Σ_i Σ_c (p̄_ic − 1[y_i = c])²`` (range [0, 2]).

    ``probs``: ``(N, C)`` or ``(N, M, C)`` (averaged over members first); ``labels``: ``(N,)``.
    """
    p, y = _probs_and_labels(probs, labels)
    sq = np.square(p).sum(axis=1)
    p_true = p[np.arange(p.shape[0]), y]
    return float(np.mean(sq - 2.0 * p_true + 1.0))


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin statistics of a reliability diagram (all arrays of shape ``(n_bins,)``).

    ``edges`` has shape ``(n_bins + 1,)``; bin ``b`` holds confidences in ``(edges[b], edges[b+1]]``
    (the lowest bin also holds confidences equal to ``edges[0]``). ``confidence`` and ``accuracy``
    are the bin means and NaN for an empty bin; ``count`` is the number of samples per bin.
    """

    edges: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray
    count: np.ndarray


def _edges(conf: np.ndarray, n_bins: int, binning: str) -> np.ndarray:
    if binning == "equal_width":
        return np.linspace(0.0, 1.0, n_bins + 1)
    # equal_mass: edges at the empirical quantiles k/n_bins (numpy "linear" method). Samples with
    # equal confidence always share a bin, so bins may hold unequal counts when there are ties.
    edges = np.quantile(conf, np.linspace(0.0, 1.0, n_bins + 1))
    return np.maximum.accumulate(edges)


def _bin_index(conf: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin ``b`` such that ``edges[b] < conf <= edges[b+1]``; values at or below ``edges[0]`` go to bin 0."""
    idx = np.searchsorted(edges, conf, side="left") - 1
    return np.clip(idx, 0, len(edges) - 2)


def _binned(conf: np.ndarray, hit: np.ndarray, n_bins: int, binning: str) -> ReliabilityBins:
    edges = _edges(conf, n_bins, binning)
    idx = _bin_index(conf, edges)
    count = np.bincount(idx, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    hit_sum = np.bincount(idx, weights=hit.astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(count > 0, conf_sum / count, np.nan)
        mean_hit = np.where(count > 0, hit_sum / count, np.nan)
    return ReliabilityBins(edges=edges, confidence=mean_conf, accuracy=mean_hit, count=count)


def _gap(bins: ReliabilityBins, n: int) -> float:
    nz = bins.count > 0
    return float(np.sum(bins.count[nz] / n * np.abs(bins.accuracy[nz] - bins.confidence[nz])))


def reliability(
    probs: object, labels: object, n_bins: int = 15, *, binning: str = "equal_width"
) -> ReliabilityBins:
    """Top-label reliability diagram: per-bin mean confidence, accuracy and count.

    Confidence is ``max_c p̄_c``, a hit is ``argmax_c p̄_c == label``. Binning as in :func:`ece`.
    Returns a :class:`ReliabilityBins` (arrays of shape ``(n_bins,)``; empty bins hold NaN means).
    """
    n_bins = V.n_bins(n_bins)
    binning = V.choice(binning, BINNINGS, name="binning")
    p, y = _probs_and_labels(probs, labels)
    return _reliability_checked(p, y, n_bins=n_bins, binning=binning)


def _reliability_checked(p: np.ndarray, y: np.ndarray, *, n_bins: int, binning: str) -> ReliabilityBins:
    """:func:`reliability` on already validated ``p̄`` (N, C) float64 and labels (N,) int64."""
    return _binned(p.max(axis=1), p.argmax(axis=1) == y, n_bins, binning)


def ece(
    probs: object,
    labels: object,
    n_bins: int = 15,
    *,
    binning: str = "equal_width",
    classwise: bool = False,
) -> float:
    """Expected calibration error ``Σ_b (n_b / N) · |acc_b − conf_b|`` (in [0, 1]).

    * Top-label (default): confidence ``max_c p̄_c``, accuracy = share of ``argmax p̄ == label``.
    * ``classwise=True``: for every class ``c`` the binned gap between ``p̄_c`` and the frequency of
      ``label == c``, averaged over classes (Kull et al., 2019).

    Binning: ``"equal_width"`` — edges ``linspace(0, 1, n_bins + 1)``; ``"equal_mass"`` — edges at
    the empirical quantiles ``k / n_bins`` of the confidences (``numpy.quantile``, linear method),
    so tied confidences always share a bin. In both cases bin ``b`` is the half-open interval
    ``(edges[b], edges[b+1]]``, and a confidence equal to ``edges[0]`` (e.g. 0) goes to the first bin.
    Empty bins contribute nothing. ``probs``: ``(N, C)`` or ``(N, M, C)`` (averaged first).
    ``n_bins`` is an int in ``[1, 10_000]`` (``metrics._validate.MAX_BINS``; larger raises ValueError
    before anything is allocated).
    """
    n_bins = V.n_bins(n_bins)
    binning = V.choice(binning, BINNINGS, name="binning")
    check_bool(classwise, name="classwise")
    p, y = _probs_and_labels(probs, labels)
    return _ece_checked(p, y, n_bins=n_bins, binning=binning, classwise=classwise)


def _ece_checked(p: np.ndarray, y: np.ndarray, *, n_bins: int, binning: str, classwise: bool) -> float:
    """:func:`ece` on already validated ``p̄`` (N, C) float64 and labels (N,) int64."""
    n = p.shape[0]
    if not classwise:
        return _gap(_binned(p.max(axis=1), p.argmax(axis=1) == y, n_bins, binning), n)
    gaps = [_gap(_binned(p[:, c], y == c, n_bins, binning), n) for c in range(p.shape[1])]
    return float(np.mean(gaps))


def member_average(
    metric_fn: Callable[..., float], member_probs: object, labels: object, **kwargs: object
) -> float:
    """Member-average metric: ``(1/M) Σ_m metric_fn(member_probs[:, m], labels, **kwargs)``.

    ``member_probs``: ``(N, M, C)``. Compare with ``metric_fn(member_probs, labels)``, the metric of
    the ensemble's mean probability. Works with any metric taking ``(probs, labels)``.
    """
    if not callable(metric_fn):
        raise TypeError(f"metric_fn must be callable, got {metric_fn!r}")
    p = V.checked_probabilities(member_probs, name="member_probs", require_members=True)
    return float(np.mean([metric_fn(p[:, m], labels, **kwargs) for m in range(p.shape[1])]))
