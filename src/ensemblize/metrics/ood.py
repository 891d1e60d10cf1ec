"""Out-of-distribution detection from confidences: AUROC, AUPR, FPR at a given TPR.

Convention: a *confidence* is higher for samples that look more in-distribution (ID). The
functions take the ID samples' and the OOD samples' confidences as two 1-D arrays, so any score
works (:mod:`ensemblize.metrics.confidence` has the usual ones). OOD is the positive class by
default; the detector score is ``−confidence``. Ties are counted exactly as scikit-learn counts
them: ``ood_auroc == roc_auc_score(is_ood, −confidence)`` and
``ood_aupr == average_precision_score(is_ood, −confidence)``.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from . import _validate as V


def _pair(id_confidence: object, ood_confidence: object) -> tuple[np.ndarray, np.ndarray]:
    return (
        V.scores(id_confidence, name="id_confidence"),
        V.scores(ood_confidence, name="ood_confidence"),
    )


def ood_auroc(id_confidence: object, ood_confidence: object) -> float:
    """Area under the ROC curve for telling OOD (positive) from ID by ``−confidence``.

    Equals ``P(c_id > c_ood) + ½ · P(c_id = c_ood)`` over all ID/OOD pairs (Mann–Whitney U, average
    ranks for ties), computed in O(n log n). Shapes ``(N_id,)`` and ``(N_ood,)``; result in [0, 1].
    """
    c_id, c_ood = _pair(id_confidence, ood_confidence)
    n_id, n_ood = len(c_id), len(c_ood)
    ranks = rankdata(np.concatenate([c_id, c_ood]))  # ascending, ties get the average rank
    u = ranks[:n_id].sum() - n_id * (n_id + 1) / 2.0
    return float(u / (n_id * n_ood))


def ood_aupr(id_confidence: object, ood_confidence: object, *, positive: str = "ood") -> float:
    """Area under the precision–recall curve as average precision (scikit-learn's definition).

    ``AP = Σ_t (R_t − R_{t−1}) · P_t`` over the distinct thresholds ``t`` of the detector score
    (samples with equal scores enter together; no interpolation).

    * ``positive="ood"`` (default, "AUPR-Out"): OOD positive, score ``−confidence``;
    * ``positive="id"`` ("AUPR-In"): ID positive, score ``confidence``.
    """
    positive = V.choice(positive, ("ood", "id"), name="positive")
    c_id, c_ood = _pair(id_confidence, ood_confidence)
    if positive == "ood":
        score = -np.concatenate([c_id, c_ood])
        is_pos = np.concatenate([np.zeros(len(c_id)), np.ones(len(c_ood))])
    else:
        score = np.concatenate([c_id, c_ood])
        is_pos = np.concatenate([np.ones(len(c_id)), np.zeros(len(c_ood))])
    order = np.argsort(-score, kind="stable")
    s, y = score[order], is_pos[order]
    # last position of each group of equal scores = one threshold of the PR curve
    ends = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tp = np.cumsum(y)[ends]
    precision = tp / (ends + 1.0)
    recall = tp / tp[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def fpr_at_tpr(id_confidence: object, ood_confidence: object, tpr: float = 0.95) -> float:
    """Share of OOD samples accepted when the threshold accepts (at least) ``tpr`` of the ID samples.

    A sample is accepted when ``confidence >= t``. The threshold is ``t = `` the ``k``-th largest ID
    confidence with ``k = ⌈tpr · N_id⌉``, i.e. the largest threshold whose accepted ID share is
    ≥ ``tpr``; with ties at ``t`` every tied sample is accepted (so the ID share can exceed
    ``tpr``). Returns ``mean(c_ood >= t)``. This is the ROC point of scikit-learn's
    ``roc_curve(is_id, confidence, drop_intermediate=False)`` at the first TPR ≥ ``tpr``.
    ``tpr`` must lie in (0, 1]; ``tpr = 1`` accepts every ID sample (``t`` = the smallest ID confidence).
    """
    tpr = V.coverage(tpr, name="tpr")
    c_id, c_ood = _pair(id_confidence, ood_confidence)
    k = V.count_for_fraction(tpr, len(c_id))
    t = np.sort(c_id)[::-1][k - 1]
    return float(np.mean(c_ood >= t))
