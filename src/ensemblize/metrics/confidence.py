"""Confidence scores: higher = more confident / more in-distribution.

Every function returns a NumPy array of shape ``(N,)`` that can be passed as a confidence to the
OOD metrics (:mod:`ensemblize.metrics.ood`) and the selective metrics
(:mod:`ensemblize.metrics.selective`); any user-provided score works there just as well.
Entropies are in nats with ``0 · log 0 = 0``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .._checks import check_positive
from . import _validate as V


def entropy(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats along the last axis, ``-Σ_c p_c log p_c`` with ``0 · log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -terms.sum(axis=-1)


def max_probability(probs: object) -> np.ndarray:
    """Softmax response ``max_c p̄_c``; ``(N, C)`` or ``(N, M, C)`` (averaged first) ``-> (N,)``."""
    return V.mean_probs(V.probabilities(probs)).max(axis=1)


def negative_entropy(probs: object) -> np.ndarray:
    """``-H(p̄)``, the negative predictive entropy; ``(N, C)`` or ``(N, M, C)`` ``-> (N,)``."""
    return -entropy(V.mean_probs(V.probabilities(probs)))


def mutual_information_per_sample(member_probs: object) -> np.ndarray:
    """Per-sample mutual information ``H(p̄) − (1/M) Σ_m H(p_m)`` (epistemic part); ``(N, M, C) -> (N,)``.

    Mathematically ≥ 0 (Jensen); floating round-off below 0 is clipped to 0. M = 1 gives 0.
    """
    p = V.probabilities(member_probs, name="member_probs", require_members=True)
    mi = entropy(p.mean(axis=1)) - entropy(p).mean(axis=1)
    return np.maximum(mi, 0.0)


def negative_mutual_information(member_probs: object) -> np.ndarray:
    """``-MI`` per sample (see :func:`mutual_information_per_sample`); ``(N, M, C) -> (N,)``."""
    return -mutual_information_per_sample(member_probs)


def negative_energy(logits: object, temperature: float = 1.0) -> np.ndarray:
    """Negative free energy ``T · logsumexp_c(z_c / T)`` (Liu et al., 2020); ``(N, C) -> (N,)``.

    Higher = more in-distribution. Takes logits of one model (for an ensemble, pass the logits of
    the model whose energy you want); ``temperature`` must be > 0.
    """
    t = check_positive(temperature, name="temperature")
    z = V.logits(logits, name="logits", ranks=(2,))
    return t * logsumexp(z / t, axis=1)
