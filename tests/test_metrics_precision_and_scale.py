"""Metrics on half-precision inputs, at large N and on large losses; finite entropy gradients at p = 0.

Found by an audit: rows validated at their own precision were validated again as float64 copies (half
precision failed float64's row-sum tolerance); a sample-count slack proportional to N dropped one sample
at N = 10⁷; an absolute risk slack failed for losses near 1e6; ``xlogy(p, p)`` gave NaN gradients at an
exact 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ensemblize.metrics as M
from ensemblize.evaluation.image import evaluate_probs
from ensemblize.selective import SelectiveOutput, SyncLoss, threshold_for_coverage


@pytest.fixture
def half_members():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, 4, 10, generator=gen) * 2, -1)
    y = torch.randint(0, 10, (64,), generator=gen)
    return p, y


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_member_probs_give_the_float64_value_of_the_same_rows(half_members, dtype):
    p, y = half_members
    low = p.to(dtype)
    ref = low.double()  # the same numbers, as float64
    ref = ref / ref.sum(-1, keepdim=True)  # renormalised so that float64's tolerance accepts them
    assert M.mutual_information(low) == pytest.approx(M.mutual_information(ref), abs=5e-3)
    stream = M.MutualInformation()
    stream.update(low)
    assert stream.compute() == pytest.approx(M.mutual_information(low), rel=1e-12)
    got = M.member_average(M.nll, low, y)
    want = np.mean([M.nll(ref[:, m], y) for m in range(4)])  # the same rows in float64
    assert got == pytest.approx(want, rel=1e-3)
    metrics = evaluate_probs(low, y)
    assert metrics["member_nll"] == pytest.approx(got, rel=1e-12)
    assert metrics["nll"] == pytest.approx(M.nll(ref, y), rel=1e-3)
    assert metrics["mutual_information"] == pytest.approx(M.mutual_information(ref), rel=1e-3)
    # the caller's metric_fn still receives float64 NumPy rows (not the caller's tensors)
    seen = []
    M.member_average(lambda p, t: seen.append(type(p)) or 0.0, low, y)
    assert set(seen) == {np.ndarray}


def test_member_average_still_validates_and_takes_lists(half_members):
    p, y = half_members
    as_list = p.double().tolist()
    assert M.member_average(M.accuracy, as_list, y) == pytest.approx(M.member_average(M.accuracy, p, y))
    with pytest.raises(ValueError, match="member_probs must have shape"):
        M.member_average(M.accuracy, p[:, 0], y)


def test_entropy_scores_have_finite_gradients_at_exact_zero_probabilities():
    z = torch.tensor([[0.0, -200.0, -200.0], [1.0, 0.5, -0.2]], requires_grad=True)
    p = torch.softmax(z, -1)
    assert (p[0, 1:] == 0).all()  # float32 underflow: exact zeros
    M.negative_entropy(p).sum().backward()
    assert torch.isfinite(z.grad).all()
    # the gradient of -H(softmax z) w.r.t. z_j is p_j (log p_j + H): compare on the row without zeros
    p1 = p[1].detach().double()
    h = -(p1 * p1.log()).sum()
    assert torch.allclose(z.grad[1].double(), p1 * (p1.log() + h), atol=1e-6)
    zm = torch.tensor([[[0.0, -200.0, -200.0], [0.0, 1.0, -200.0]]], requires_grad=True)
    M.mutual_information_per_sample(torch.softmax(zm, -1)).sum().backward()
    assert torch.isfinite(zm.grad).all()
    b = 4
    zl = torch.tensor([[0.0, -200.0, -200.0]] * b, requires_grad=True)
    gen = torch.Generator().manual_seed(0)
    out = SelectiveOutput(
        torch.randn(b, 3, generator=gen), torch.rand(b, generator=gen), torch.randn(b, 3, generator=gen)
    )
    loss = SyncLoss(0.7, mu=1.0, score="entropy", detach=False)(
        out, torch.zeros(b, dtype=torch.long), prior=torch.softmax(zl, -1)
    )
    loss.backward()
    assert torch.isfinite(zl.grad).all()


def test_a_fraction_of_a_large_sample_keeps_the_ceiling_count():
    n = 10_000_001
    c = np.arange(n, dtype=np.float64)
    k = math.ceil(0.01 * n)  # 100,001 (0.01 · n is not near an integer)
    assert M.fpr_at_tpr(c, c, 0.01) == pytest.approx(k / n)  # the top k ID scores, and as many OOD ones
    assert threshold_for_coverage(c, 0.01) == c[-k]
    losses = (np.arange(n) % 2).astype(float)
    top = losses[::-1][:k].mean()
    assert M.risk_at_coverage(c, losses, 0.01) == pytest.approx(top, rel=1e-12)
    # rounding still does not add a sample: 0.3 · 10 keeps 3, 0.7 · 10 keeps 7
    ten = np.arange(10.0)
    assert threshold_for_coverage(ten, 0.3) == 7.0
    assert threshold_for_coverage(ten, 0.7) == 3.0
    assert M.risk_at_coverage(ten, np.arange(10.0), 0.3) == pytest.approx(8.0)


def test_coverage_at_risk_accepts_a_top_k_mean_of_large_losses():
    rng = np.random.default_rng(0)
    loss = rng.random(30) * 1e6
    conf = -np.arange(30.0)  # sample 0 most confident
    for k in range(1, 31):
        assert M.coverage_at_risk(conf, loss, float(np.mean(loss[:k]))) >= k / 30


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (M.NLL, {"from_logits": 1}, "from_logits"),
        (M.NLL, {"eps": 1.5}, "eps"),
        (M.PairwiseKL, {"eps": -1}, "eps"),
        (M.PairwiseKL, {"eps": 1.0}, "eps"),
    ],
)
def test_streaming_metrics_check_their_options_when_built(cls, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cls(**kwargs)


def test_deep_gamblers_confidence_treats_tensors_as_arrays_and_refuses_empty_input():
    z = np.array([[2, 0, -1], [0, 1, 3]])
    from_array = M.deep_gamblers_confidence(z)
    from_tensor = M.deep_gamblers_confidence(torch.from_numpy(z))
    np.testing.assert_allclose(from_tensor.numpy(), from_array, rtol=0, atol=0)
    for empty in (np.zeros((0, 3)), torch.zeros(0, 3)):
        with pytest.raises(ValueError, match="logits is empty"):
            M.deep_gamblers_confidence(empty)
