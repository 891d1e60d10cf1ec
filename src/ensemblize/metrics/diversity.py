"""Ensemble diversity: disagreement, pairwise KL, mutual information (classification), ambiguity (regression).

Classification inputs are member probabilities ``(N, M, C)``; regression inputs member predictions
``(N, M)`` (or ``(N, M, D)``). One member (M = 1) gives 0 for every measure. Logarithms are natural.
"""

from __future__ import annotations

import numpy as np
import torch

from .._checks import check_finite, check_positive
from . import _validate as V
from .confidence import _mutual_information


def _members(member_probs: object) -> np.ndarray:
    return V.probabilities(member_probs, name="member_probs", require_members=True)


def disagreement(member_probs: object) -> float:
    """Mean over unordered member pairs ``m < m'`` of the share of samples with ``argmax p_m ≠ argmax p_m'``.

    ``(N, M, C) -> float`` in [0, 1]. Argmax takes the first index on ties. Computed per sample
    from class vote counts ``n_c``: disagreeing pairs = ``M(M−1)/2 − Σ_c n_c(n_c−1)/2``.
    """
    p = _members(member_probs)
    _, m, c = p.shape
    if m == 1:
        return 0.0
    votes = (p.argmax(axis=2)[:, :, None] == np.arange(c)).sum(axis=1).astype(np.float64)  # (N, C)
    pairs = m * (m - 1) / 2.0
    agree = (votes * (votes - 1) / 2.0).sum(axis=1)
    return float(np.mean((pairs - agree) / pairs))


def _kl_eps(eps: object) -> float:
    """``eps`` of :func:`pairwise_kl` if it lies in (0, 1), else ValueError naming it."""
    eps = check_positive(eps, name="eps")
    if eps >= 1:  # every probability would be clipped to eps: KL 0 whatever the members say
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    return eps


def pairwise_kl(member_probs: object, *, eps: float = 1e-12) -> float:
    """Mean over ordered pairs ``m ≠ m'`` and samples of ``KL(p_m ‖ p_m') = Σ_c p_m,c (log p_m,c − log p_m',c)``.

    ``(N, M, C) -> float`` ≥ 0. Zero policy: logarithms are taken of ``max(p, eps)`` (default
    ``eps = 1e-12``), and terms with ``p_m,c = 0`` contribute 0 (``0 · log 0 = 0``); a class that
    member ``m`` predicts but ``m'`` gives probability 0 therefore costs ``p_m,c · (log p_m,c − log eps)``
    instead of ``inf``. Vectorised via ``Σ_{m,m'} KL = M Σ_m Σ_c p_m log p_m − Σ_c (Σ_m p_m)(Σ_m' log p_m')``.
    """
    eps = _kl_eps(eps)
    p = _members(member_probs)
    m = p.shape[1]
    if m == 1:
        return 0.0
    log_p = np.log(np.maximum(p, eps))
    self_term = (p * log_p).sum(axis=(1, 2))  # Σ_m Σ_c p_m log p_m, per sample
    cross = (p.sum(axis=1) * log_p.sum(axis=1)).sum(axis=1)  # Σ_c (Σ_m p_m)(Σ_m' log p_m')
    total = m * self_term - cross  # Σ over all ordered pairs (diagonal terms are 0)
    return float(np.mean(total) / (m * (m - 1)))


def mutual_information(member_probs: object, *, reduction: str = "mean") -> float | np.ndarray:
    """Mutual information ``H(p̄) − (1/M) Σ_m H(p_m)`` between prediction and member (epistemic part).

    ``(N, M, C)``; ``reduction="mean"`` returns the mean over samples as a float, ``"none"`` the
    per-sample values ``(N,)`` (use ``-MI`` as an OOD confidence:
    :func:`ensemblize.metrics.negative_mutual_information`). Round-off below 0 is clipped to 0.
    """
    reduction = V.choice(reduction, ("mean", "none"), name="reduction")
    # validated at the input's own precision, then computed on the float64 copy (validating that copy
    # again would hold half-precision rows to float64's row-sum tolerance)
    mi = _mutual_information(torch.from_numpy(_members(member_probs))).numpy()
    return float(np.mean(mi)) if reduction == "mean" else mi


def ambiguity(member_preds: object) -> float:
    """Ambiguity of a regression ensemble: mean over samples and members of ``(f_m − f̄)²``.

    ``member_preds``: ``(N, M)`` (or ``(N, M, D)``, squared distances summed over ``D``), with
    ``f̄ = mean_m f_m``. Ensemble squared error = mean member squared error − ambiguity
    (Krogh & Vedelsby, 1995).
    """
    f = V.as_float_array(member_preds, name="member_preds")
    if f.ndim not in (2, 3):
        raise ValueError(f"member_preds must have shape (N, M) or (N, M, D), got shape {f.shape}")
    V.check_nonempty(f, name="member_preds")
    if 0 in f.shape:
        raise ValueError(f"member_preds has an empty axis: shape {f.shape}")
    check_finite(f, name="member_preds")
    dev = np.square(f - f.mean(axis=1, keepdims=True))
    if f.ndim == 3:
        dev = dev.sum(axis=2)
    return float(np.mean(dev))
