"""OOD metrics vs scikit-learn and slow pairwise / threshold loops; confidence scores vs formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

import ensemblize as ez

M = ez.metrics


def sk_inputs(c_id, c_ood):
    y = np.r_[np.zeros(len(c_id)), np.ones(len(c_ood))]
    return y, -np.r_[c_id, c_ood]


def ref_auroc_pairs(c_id, c_ood):
    total = 0.0
    for a in c_id:
        for b in c_ood:
            total += 1.0 if a > b else (0.5 if a == b else 0.0)
    return total / (len(c_id) * len(c_ood))


def ref_fpr_at_tpr_loop(c_id, c_ood, tpr):
    """Try every candidate threshold from high to low; take the first accepting >= tpr of ID."""
    for t in sorted(set(c_id.tolist()), reverse=True):
        accepted_id = sum(1 for a in c_id if a >= t) / len(c_id)
        if accepted_id >= tpr - 1e-12:
            return sum(1 for b in c_ood if b >= t) / len(c_ood)
    raise AssertionError("unreachable")


def draw(rng, n_id, n_ood, levels):
    if levels is None:
        return rng.normal(1.0, 1.0, n_id), rng.normal(0.0, 1.0, n_ood)
    return (
        rng.integers(0, levels, n_id).astype(float),
        rng.integers(0, levels, n_ood).astype(float),
    )


@pytest.mark.parametrize("levels", [None, 2, 5, 30])
@pytest.mark.parametrize(("n_id", "n_ood"), [(1, 1), (1, 7), (40, 25), (300, 500)])
def test_against_sklearn_and_loops(levels, n_id, n_ood):
    rng = np.random.default_rng(n_id * 31 + n_ood + (levels or 0))
    c_id, c_ood = draw(rng, n_id, n_ood, levels)
    y, s = sk_inputs(c_id, c_ood)
    assert M.ood_auroc(c_id, c_ood) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert M.ood_aupr(c_id, c_ood) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert M.ood_aupr(c_id, c_ood, positive="id") == pytest.approx(
        average_precision_score(1 - y, -s), abs=1e-12
    )
    if n_id * n_ood <= 2000:
        assert M.ood_auroc(c_id, c_ood) == pytest.approx(ref_auroc_pairs(c_id, c_ood), abs=1e-12)
    fpr, tpr_curve, _ = roc_curve(1 - y, -s, drop_intermediate=False)
    for tpr in (0.05, 0.5, 0.8, 0.95):
        expected = ref_fpr_at_tpr_loop(c_id, c_ood, tpr)
        assert M.fpr_at_tpr(c_id, c_ood, tpr) == pytest.approx(expected, abs=1e-12)
        first = np.searchsorted(tpr_curve, tpr - 1e-12, side="left")
        assert M.fpr_at_tpr(c_id, c_ood, tpr) == pytest.approx(fpr[first], abs=1e-12)


def test_hand_computed():
    c_id = np.array([0.9, 0.5, 0.5, 0.2])
    c_ood = np.array([0.5, 0.1])
    # pairs (id > ood): 0.9>0.5,0.9>0.1,0.5>0.1,0.5>0.1,0.2>0.1 = 5, ties 0.5=0.5 twice -> 1
    assert M.ood_auroc(c_id, c_ood) == pytest.approx(6 / 8)
    # 0.95 of 4 -> k = 4 -> threshold 0.2 -> both 0.5 accepted? 0.5 >= 0.2 yes, 0.1 no
    assert M.fpr_at_tpr(c_id, c_ood, 0.95) == 0.5
    # 0.5 of 4 -> k = 2 -> threshold 0.5 (accepts 3 of 4 ID because of the tie) -> OOD 0.5 accepted
    assert M.fpr_at_tpr(c_id, c_ood, 0.5) == 0.5
    assert M.fpr_at_tpr(c_id, c_ood, 0.25) == 0.0
    assert M.ood_auroc([1.0, 2.0], [0.0, -1.0]) == 1.0
    assert M.ood_auroc([0.0], [1.0]) == 0.0
    assert M.ood_aupr([1.0, 2.0], [0.0, -1.0]) == 1.0


finite = st.floats(-5, 5, allow_nan=False)
tied = st.integers(0, 3).map(float)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(finite, tied), min_size=1, max_size=30),
    st.lists(st.one_of(finite, tied), min_size=1, max_size=30),
    st.randoms(use_true_random=False),
)
def test_bounds_permutation_and_sklearn(c_id, c_ood, rnd):
    c_id, c_ood = np.array(c_id), np.array(c_ood)
    auroc = M.ood_auroc(c_id, c_ood)
    aupr = M.ood_aupr(c_id, c_ood)
    fpr = M.fpr_at_tpr(c_id, c_ood, 0.95)
    assert 0 <= auroc <= 1 and 0 <= aupr <= 1 and 0 <= fpr <= 1
    y, s = sk_inputs(c_id, c_ood)
    assert auroc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert aupr == pytest.approx(average_precision_score(y, s), abs=1e-12)
    pi, po = list(range(len(c_id))), list(range(len(c_ood)))
    rnd.shuffle(pi)
    rnd.shuffle(po)
    assert M.ood_auroc(c_id[pi], c_ood[po]) == pytest.approx(auroc, abs=1e-12)
    assert M.ood_aupr(c_id[pi], c_ood[po]) == pytest.approx(aupr, abs=1e-12)
    assert M.fpr_at_tpr(c_id[pi], c_ood[po], 0.95) == fpr
    # swapping the roles mirrors the AUROC
    assert M.ood_auroc(c_ood, c_id) == pytest.approx(1 - auroc, abs=1e-12)


def test_tensor_inputs():
    rng = np.random.default_rng(0)
    c_id, c_ood = rng.random(30), rng.random(20)
    assert M.ood_auroc(torch.tensor(c_id), torch.tensor(c_ood)) == M.ood_auroc(c_id, c_ood)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: M.ood_auroc([], [0.1]), "id_confidence is empty"),
        (lambda: M.ood_auroc([0.1], []), "ood_confidence is empty"),
        (lambda: M.ood_aupr([0.1], [np.inf]), "ood_confidence contains 1 non-finite"),
        (lambda: M.ood_aupr([0.1], [0.2], positive="in"), "positive must be one of"),
        (lambda: M.fpr_at_tpr([0.1], [0.2], tpr=1.5), r"tpr must lie in \(0, 1\], got 1.5"),
        (lambda: M.fpr_at_tpr([0.1], [0.2], tpr=0.0), r"tpr must lie in \(0, 1\], got 0.0"),
        (lambda: M.ood_auroc([[0.1]], [0.2]), "id_confidence must be 1-D"),
    ],
)
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- confidence scores -------------------------------------------------------------------------


def test_confidence_scores_against_formulas():
    rng = np.random.default_rng(11)
    member = rng.dirichlet(np.ones(4) * 0.5, size=(20, 3))
    member[0, 0] = [1.0, 0.0, 0.0, 0.0]  # exercise 0 log 0 = 0
    mean = member.mean(axis=1)
    np.testing.assert_allclose(M.max_probability(member), mean.max(axis=1))
    np.testing.assert_allclose(M.max_probability(mean), mean.max(axis=1))

    def ent(p):
        return -sum(x * math.log(x) for x in p if x > 0)

    np.testing.assert_allclose(M.negative_entropy(member), [-ent(p) for p in mean], atol=1e-12)
    mi = [ent(mean[i]) - np.mean([ent(member[i, m]) for m in range(3)]) for i in range(20)]
    np.testing.assert_allclose(M.negative_mutual_information(member), -np.array(mi), atol=1e-12)
    np.testing.assert_allclose(M.mutual_information(member, reduction="none"), mi, atol=1e-12)
    assert np.all(M.negative_mutual_information(member[:, :1]) == 0)

    z = rng.normal(size=(20, 4)) * 3
    for t in (0.5, 1.0, 2.0):
        expected = [t * math.log(sum(math.exp(v / t) for v in row)) for row in z]
        np.testing.assert_allclose(M.negative_energy(z, temperature=t), expected, rtol=1e-12)
    # stable for large logits
    np.testing.assert_allclose(M.negative_energy(np.array([[1000.0, 1000.0]])), [1000 + math.log(2)])
    assert M.negative_energy(z).shape == (20,)
    assert np.allclose(M.negative_energy(z), logsumexp(z, axis=1))
    with pytest.raises(ValueError, match="temperature must be finite and > 0, got 0"):
        M.negative_energy(z, temperature=0)
    with pytest.raises(ValueError, match=r"logits must have shape \(N, C\)"):
        M.negative_energy(z[:, None, :])


def test_scores_rank_ood_correctly_end_to_end():
    """A confident ID set vs a flat OOD set: every score separates them perfectly."""
    rng = np.random.default_rng(2)
    id_probs = np.full((50, 3, 5), 0.02)
    id_probs[np.arange(50), :, rng.integers(0, 5, 50)] = 0.92
    ood_probs = rng.dirichlet(np.ones(5) * 50, size=(40, 3))
    for score in (M.max_probability, M.negative_entropy):
        assert M.ood_auroc(score(id_probs), score(ood_probs)) == 1.0


def test_fpr_at_full_tpr_accepts_every_id_sample():
    """``tpr = 1``: the threshold is the smallest ID confidence (ties included); it was refused."""
    ident, ood = np.array([0.9, 0.4, 0.7, 0.4]), np.array([0.3, 0.4, 0.5, 0.95, 0.1])
    assert M.fpr_at_tpr(ident, ood, tpr=1.0) == np.mean(ood >= 0.4) == 0.6
