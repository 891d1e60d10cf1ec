"""Scores against loop references; thresholds against a brute-force search over all candidate values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemblize.selective import (
    coverage_achieved,
    deep_gamblers_confidence,
    negative_entropy,
    softmax_power,
    softmax_response,
    threshold_for_coverage,
)


def _probs(seed=0, n=20, c=5):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(n, c, generator=gen, dtype=torch.float64) * 2, -1)
    p[0] = 0.0  # a one-hot row and a row with exact zeros
    p[0, 2] = 1.0
    p[1] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0], dtype=torch.float64)
    return p


def test_scores_equal_loop_references():
    p = _probs()
    rows = p.tolist()
    sr = [max(r) for r in rows]
    ent = [sum(q * math.log(q) for q in r if q > 0) for r in rows]
    torch.testing.assert_close(softmax_response(p), torch.tensor(sr, dtype=torch.float64))
    torch.testing.assert_close(softmax_power(p, 2.5), torch.tensor([s**2.5 for s in sr], dtype=torch.float64))
    torch.testing.assert_close(negative_entropy(p), torch.tensor(ent, dtype=torch.float64))
    norm = negative_entropy(p, normalize=True)
    torch.testing.assert_close(norm, torch.tensor([1 + e / math.log(5) for e in ent], dtype=torch.float64))
    assert float(norm[0]) == 1.0  # one-hot
    uniform = torch.full((3, 5), 0.2, dtype=torch.float64)
    torch.testing.assert_close(negative_entropy(uniform, normalize=True), torch.zeros(3, dtype=torch.float64))


def test_member_probabilities_are_averaged_first_and_numpy_in_numpy_out():
    p = _probs(n=12).reshape(3, 4, 5)  # (N, M, C)
    pbar = p.mean(dim=1)
    torch.testing.assert_close(softmax_response(p), pbar.amax(-1))
    out = softmax_power(p.numpy(), 2.0)
    assert isinstance(out, np.ndarray) and out.shape == (3,)
    np.testing.assert_allclose(out, pbar.numpy().max(-1) ** 2)
    np.testing.assert_allclose(negative_entropy(p.numpy()), negative_entropy(pbar).numpy())
    with pytest.raises(ValueError, match=r"\(N, C\) or \(N, M, C\)"):
        softmax_response(p.reshape(3, 2, 2, 5))


def test_one_definition_of_each_score():
    import ensemblize as ez
    from ensemblize.metrics import confidence

    assert ez.selective.negative_entropy is ez.metrics.negative_entropy is confidence.negative_entropy
    assert ez.selective.softmax_response is ez.metrics.softmax_response is ez.metrics.max_probability
    assert ez.selective.softmax_power is ez.metrics.softmax_power
    assert ez.selective.deep_gamblers_confidence is ez.metrics.deep_gamblers_confidence


def test_negative_entropy_gradient_equals_derivative():
    p = _probs()[2:].requires_grad_(True)  # strictly positive rows: d/dp (p log p) = log p + 1
    negative_entropy(p, normalize=True).sum().backward()
    torch.testing.assert_close(p.grad, (torch.log(p.detach()) + 1) / math.log(5))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 8.0))
def test_softmax_power_ranks_like_softmax_response(seed, gamma):
    p = _probs(seed=seed, n=30)
    a = softmax_response(p).numpy()
    b = softmax_power(p, gamma).numpy()
    i, j = np.triu_indices(30, 1)
    assert np.all(np.sign(a[i] - a[j]) == np.sign(b[i] - b[j]) * (a[i] != a[j]))


def test_deep_gamblers_confidence_is_one_minus_abstain_probability():
    z = torch.randn(6, 5, dtype=torch.float64)
    p = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)
    torch.testing.assert_close(deep_gamblers_confidence(z), 1 - p[:, -1])


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (torch.randn(4, 3) * 3, "negative probability"),
        (torch.rand(4, 3) * 3, "not logits"),
        (torch.full((4, 3), 0.5), "sums to"),
        (torch.tensor([[0.5, float("nan")]]), "non-finite"),
    ],
)
def test_scores_reject_non_probabilities(bad, match):
    for fn in (softmax_response, lambda p: softmax_power(p, 2.0), negative_entropy):
        with pytest.raises(ValueError, match=match):
            fn(bad)


@pytest.mark.parametrize("gamma", [0, -1.0, float("nan"), float("inf")])
def test_softmax_power_rejects_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        softmax_power(_probs(), gamma)


# --- thresholds -----------------------------------------------------------------------------


def _threshold_brute_force(conf, coverage):
    """Among all candidate thresholds (the distinct values), the one with the smallest share >= coverage."""
    best_t, best_share = None, None
    for t in sorted(set(conf)):
        share = sum(c >= t for c in conf) / len(conf)
        if share >= coverage - 1e-12 and (best_share is None or share < best_share):
            best_t, best_share = t, share
    return best_t, best_share


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=40),  # small range: many ties
    st.integers(1, 100),
)
def test_threshold_matches_brute_force_with_ties(values, cov_pct):
    conf = [v / 4 for v in values]
    coverage = cov_pct / 100
    t = threshold_for_coverage(np.array(conf), coverage)
    t_ref, share_ref = _threshold_brute_force(conf, coverage)
    assert t == t_ref
    assert coverage_achieved(np.array(conf), t) == pytest.approx(share_ref)
    assert share_ref >= coverage - 1e-12


def test_threshold_exact_shares_and_ties():
    conf = torch.arange(10, dtype=torch.float32)  # tensors are accepted
    # 0.7 · 10 is 7.000000000000001 in floating point: must still accept exactly 7
    t = threshold_for_coverage(conf, 0.7)
    assert t == 3.0 and coverage_achieved(conf, t) == 0.7
    assert threshold_for_coverage(conf, 1.0) == 0.0
    assert threshold_for_coverage(conf, 0.01) == 9.0
    tied = np.array([0.9, 0.5, 0.5, 0.5, 0.1])
    t = threshold_for_coverage(tied, 0.4)  # the tie group straddles position 2: all three are accepted
    assert t == 0.5 and coverage_achieved(tied, t) == 0.8
    assert coverage_achieved(np.array([0.2, 0.4, 0.6, 0.8]), 0.5) == 0.5


@pytest.mark.parametrize("coverage", [0, -0.1, 1.01, float("nan")])
def test_threshold_rejects_bad_coverage(coverage):
    with pytest.raises(ValueError, match="coverage"):
        threshold_for_coverage(np.arange(5.0), coverage)


def test_threshold_rejects_bad_confidences():
    with pytest.raises(ValueError, match="confidence_val"):
        threshold_for_coverage(np.array([0.1, np.nan]), 0.5)
    with pytest.raises(ValueError, match="1-D"):
        threshold_for_coverage(np.ones((2, 2)), 0.5)
    with pytest.raises(ValueError, match="empty"):
        threshold_for_coverage(np.array([]), 0.5)
    with pytest.raises(ValueError, match="threshold must be finite"):
        coverage_achieved(np.ones(3), float("nan"))
    with pytest.raises(TypeError, match="threshold"):
        coverage_achieved(np.ones(3), "0.5")
