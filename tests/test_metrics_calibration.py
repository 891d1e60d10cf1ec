"""Calibration metrics vs scikit-learn and slow per-sample / per-bin loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import log_loss, mean_squared_error

import ensemblize as ez

M = ez.metrics


def make(rng, n, m, c, *, alpha=1.0, ties=False):
    p = rng.dirichlet(np.full(c, alpha), size=(n, m))
    if ties:  # round so that confidences repeat and land exactly on bin edges
        p = np.round(p * 5) / 5
        p[..., -1] = 1.0 - p[..., :-1].sum(axis=-1)
        p = np.abs(p)  # -0.0 / tiny negatives from the subtraction
        p /= p.sum(axis=-1, keepdims=True)
    y = rng.integers(0, c, n)
    return p, y


def ref_top_label(pbar, y):
    conf, hit = [], []
    for i in range(len(y)):
        row = list(pbar[i])
        best = row.index(max(row))
        conf.append(row[best])
        hit.append(1.0 if best == y[i] else 0.0)
    return conf, hit


def ref_binned_gap(conf, hit, edges):
    """Loop: bin b holds edges[b] < c <= edges[b+1]; c <= edges[0] goes to bin 0."""
    n = len(conf)
    total = 0.0
    counts = []
    for b in range(len(edges) - 1):
        members = [
            i for i in range(n) if (edges[b] < conf[i] <= edges[b + 1]) or (b == 0 and conf[i] <= edges[0])
        ]
        counts.append(len(members))
        if members:
            acc = sum(hit[i] for i in members) / len(members)
            avg = sum(conf[i] for i in members) / len(members)
            total += len(members) / n * abs(acc - avg)
    assert sum(counts) == n
    return total, counts


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("n", "m", "c"), [(1, 1, 3), (60, 1, 4), (200, 3, 10), (97, 4, 2), (30, 2, 1)])
def test_against_references(n, m, c, ties):
    rng = np.random.default_rng(n + 7 * m + c + ties)
    p, y = make(rng, n, m, c, ties=ties)
    pbar = p.mean(axis=1)
    probs = p if m > 1 else p[:, 0]

    # accuracy: loop
    conf, hit = ref_top_label(pbar, y)
    assert M.accuracy(probs, y) == pytest.approx(sum(hit) / n)

    # NLL: scikit-learn log_loss (clips at machine eps) and a loop with our 1e-12 clip
    ref_nll = -sum(math.log(max(pbar[i, y[i]], 1e-12)) for i in range(n)) / n
    assert M.nll(probs, y) == pytest.approx(ref_nll, rel=1e-12)
    if pbar[np.arange(n), y].min() > 1e-12 and c > 1:
        assert M.nll(probs, y) == pytest.approx(log_loss(y, pbar, labels=list(range(c))), rel=1e-9)

    # Brier: one-hot MSE (scikit-learn averages over N*C entries) and a loop
    onehot = np.eye(c)[y]
    ref_brier = sum(sum((pbar[i, k] - onehot[i, k]) ** 2 for k in range(c)) for i in range(n)) / n
    assert M.brier(probs, y) == pytest.approx(ref_brier, abs=1e-12)
    assert M.brier(probs, y) == pytest.approx(c * mean_squared_error(onehot, pbar), abs=1e-12)

    # ECE / reliability, equal width
    for n_bins in (1, 5, 15):
        edges = np.linspace(0, 1, n_bins + 1)
        gap, counts = ref_binned_gap(conf, hit, edges)
        assert M.ece(probs, y, n_bins) == pytest.approx(gap, abs=1e-12)
        rel = M.reliability(probs, y, n_bins)
        np.testing.assert_array_equal(rel.count, counts)
        np.testing.assert_allclose(rel.edges, edges)
        for b in range(n_bins):
            inside = [
                i for i in range(n) if (edges[b] < conf[i] <= edges[b + 1]) or (b == 0 and conf[i] == 0)
            ]
            if inside:
                assert rel.confidence[b] == pytest.approx(np.mean([conf[i] for i in inside]))
                assert rel.accuracy[b] == pytest.approx(np.mean([hit[i] for i in inside]))
            else:
                assert math.isnan(rel.confidence[b]) and math.isnan(rel.accuracy[b])

        # equal mass: the loop with quantile edges
        q_edges = np.quantile(conf, np.linspace(0, 1, n_bins + 1))
        gap, counts = ref_binned_gap(conf, hit, q_edges)
        assert M.ece(probs, y, n_bins, binning="equal_mass") == pytest.approx(gap, abs=1e-12)

        # class-wise: mean over classes of the binned gap of p_c against 1[y = c]
        per_class = [
            ref_binned_gap(list(pbar[:, k]), list((y == k).astype(float)), edges)[0] for k in range(c)
        ]
        assert M.ece(probs, y, n_bins, classwise=True) == pytest.approx(np.mean(per_class), abs=1e-12)


def test_equal_mass_without_ties_splits_sorted_confidences_evenly():
    rng = np.random.default_rng(4)
    p, y = make(rng, 120, 1, 5)
    conf, hit = ref_top_label(p[:, 0], y)
    order = np.argsort(conf)
    gap = 0.0
    for chunk in np.array_split(order, 8):
        gap += len(chunk) / 120 * abs(np.mean(np.array(hit)[chunk]) - np.mean(np.array(conf)[chunk]))
    assert M.ece(p[:, 0], y, 8, binning="equal_mass") == pytest.approx(gap, abs=1e-12)
    assert np.all(M.reliability(p[:, 0], y, 8, binning="equal_mass").count == 15)


def test_hand_computed_ece_and_bin_edges():
    # confidences exactly on an edge go to the lower bin: 0.6 is in (0.4, 0.6] for 5 bins
    probs = np.array([[0.6, 0.4], [0.6, 0.4], [1.0, 0.0], [0.5, 0.5]])
    y = np.array([0, 1, 0, 1])
    rel = M.reliability(probs, y, n_bins=5)
    np.testing.assert_array_equal(rel.count, [0, 0, 3, 0, 1])
    # bin (0.4,0.6]: conf mean (0.6+0.6+0.5)/3, acc: hits 1,0,0 (argmax of [0.5,0.5] is class 0)
    expected = 3 / 4 * abs(1 / 3 - 1.7 / 3) + 1 / 4 * abs(1 - 1.0)
    assert M.ece(probs, y, n_bins=5) == pytest.approx(expected)
    # exactly representable edges: 0.5 is in (0, 0.5] of 2 bins, 0.75 in (0.5, 0.75] of 4 bins
    np.testing.assert_array_equal(M.reliability(np.array([[0.5, 0.5]]), np.array([0]), 2).count, [1, 0])
    np.testing.assert_array_equal(
        M.reliability(np.array([[0.75, 0.25]]), np.array([0]), 4).count, [0, 0, 1, 0]
    )
    # a single class: everything is certain and correct
    assert M.ece(np.ones((3, 1)), np.zeros(3, dtype=int)) == 0.0
    assert M.nll(np.ones((3, 1)), np.zeros(3, dtype=int)) == 0.0
    assert M.brier(np.ones((3, 1)), np.zeros(3, dtype=int)) == 0.0


def test_member_probs_are_averaged_on_probabilities():
    rng = np.random.default_rng(9)
    p, y = make(rng, 50, 4, 3)
    for fn in (M.accuracy, M.nll, M.brier, M.ece):
        assert fn(p, y) == fn(p.mean(axis=1), y)
    # member average vs ensemble: loops over members
    for fn in (M.accuracy, M.nll, M.brier, M.ece):
        expected = np.mean([fn(p[:, k], y) for k in range(4)])
        assert M.member_average(fn, p, y) == pytest.approx(expected)
    assert M.member_average(M.ece, p, y, n_bins=3) == pytest.approx(
        np.mean([M.ece(p[:, k], y, 3) for k in range(4)])
    )
    # NLL is convex in p: ensemble NLL <= member-average NLL
    assert M.nll(p, y) <= M.member_average(M.nll, p, y)


def test_nll_from_logits():
    rng = np.random.default_rng(12)
    z = rng.normal(size=(40, 5, 6)) * 4
    y = rng.integers(0, 6, 40)
    probs = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    ref = -np.mean([math.log(np.mean(probs[i, :, y[i]])) for i in range(40)])
    assert M.nll(z, y, from_logits=True) == pytest.approx(ref, rel=1e-12)
    assert M.nll(z, y, from_logits=True) == pytest.approx(M.nll(probs, y, eps=0), rel=1e-12)
    assert M.nll(z[:, 0], y, from_logits=True) == pytest.approx(M.nll(probs[:, 0], y, eps=0), rel=1e-12)
    # stable where naive exp overflows: logits shifted by 1e4 give the same value
    assert M.nll(z + 1e4, y, from_logits=True) == pytest.approx(ref, rel=1e-9)
    # extreme logits: probability of the label underflows to 0 but log space stays finite
    big = np.array([[[0.0, 2000.0]]])
    assert M.nll(big, np.array([0]), from_logits=True) == pytest.approx(2000.0)
    assert M.nll(torch.tensor(z, dtype=torch.float32), torch.tensor(y), from_logits=True) == pytest.approx(
        ref, rel=1e-5
    )


def test_nll_zero_probability_policy():
    probs = np.array([[1.0, 0.0]])
    assert M.nll(probs, np.array([1])) == pytest.approx(-math.log(1e-12))
    assert M.nll(probs, np.array([1]), eps=0) == math.inf


def test_torch_float32_softmax_accepted():
    torch.manual_seed(0)
    logits = torch.randn(64, 4, 100)
    probs = torch.softmax(logits, dim=-1)
    y = torch.randint(0, 100, (64,))
    assert M.accuracy(probs, y) == M.accuracy(probs.double().numpy(), y.numpy())
    assert M.ece(probs, y) == pytest.approx(M.ece(probs.double().numpy(), y.numpy()))


prob_rows = st.integers(1, 6).flatmap(
    lambda c: st.lists(
        st.lists(st.integers(0, 4), min_size=c, max_size=c).filter(lambda r: sum(r) > 0),
        min_size=1,
        max_size=25,
    )
)


@settings(max_examples=50, deadline=None)
@given(prob_rows, st.data())
def test_properties(rows, data):
    p = np.array(rows, dtype=float)
    p /= p.sum(axis=1, keepdims=True)
    n, c = p.shape
    y = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    n_bins = data.draw(st.integers(1, 20))
    for binning in ("equal_width", "equal_mass"):
        for classwise in (False, True):
            e = M.ece(p, y, n_bins, binning=binning, classwise=classwise)
            assert 0.0 <= e <= 1.0
    assert 0.0 <= M.accuracy(p, y) <= 1.0
    assert 0.0 <= M.brier(p, y) <= 2.0
    assert M.nll(p, y) >= 0.0
    assert int(M.reliability(p, y, n_bins).count.sum()) == n
    perm = data.draw(st.permutations(range(n)))
    for binning in ("equal_width", "equal_mass"):
        assert M.ece(p[perm], y[perm], n_bins, binning=binning) == pytest.approx(
            M.ece(p, y, n_bins, binning=binning), abs=1e-12
        )
    # perfectly confident and correct predictions are perfectly calibrated
    onehot = np.eye(c)[y]
    assert M.ece(onehot, y, n_bins) == 0.0
    assert M.brier(onehot, y) == 0.0
    assert M.accuracy(onehot, y) == 1.0


BAD = [
    (lambda: M.ece(np.array([[0.5, 0.4], [0.5, 0.5]]), np.array([0, 1])), r"probs row 0 sums to 0.9"),
    (lambda: M.nll(np.array([[1.2, -0.2]]), np.array([0])), r"negative probability -0.2 at index \(0, 1\)"),
    (lambda: M.brier(np.array([[np.nan, 1.0]]), np.array([0])), "probs contains 1 non-finite"),
    (
        lambda: M.accuracy(np.array([[0.5, 0.5]]), np.array([0, 1])),
        "labels has length 2 but the predictions have 1",
    ),
    (lambda: M.accuracy(np.array([[0.5, 0.5]]), np.array([2])), r"labels has value 2 outside \[0, 2\)"),
    (lambda: M.accuracy(np.array([[0.5, 0.5]]), np.array([-1])), r"labels has value -1 outside \[0, 2\)"),
    (lambda: M.accuracy(np.array([[0.5, 0.5]]), np.array([0.0])), "labels must be integer class indices"),
    (lambda: M.ece(np.zeros((0, 3)), np.zeros(0, dtype=int)), "probs is empty"),
    (lambda: M.ece(np.array([[1.0]]), np.array([0]), n_bins=0), "n_bins must be >= 1, got 0"),
    (lambda: M.ece(np.array([[1.0]]), np.array([0]), binning="quantile"), "binning must be one of"),
    (lambda: M.ece(np.ones(3) / 3, np.array([0])), r"probs must have shape \(N, C\) or \(N, M, C\)"),
    (lambda: M.nll(np.ones((2, 2, 2, 2)), np.array([0, 0]), from_logits=True), "logits must have shape"),
    (lambda: M.nll(np.array([[0.3, 0.7]]), np.array([0]), eps=-1.0), "eps must be finite and >= 0"),
    (lambda: M.reliability(np.array([[1.0, 0.0]]), np.array([0]), n_bins=-3), "n_bins must be >= 1"),
    (
        lambda: M.member_average(M.accuracy, np.array([[1.0, 0.0]]), np.array([0])),
        r"member_probs must have shape \(N, M, C\)",
    ),
    (lambda: M.ece(np.array([[[0.5, 0.5], [0.5, 0.2]]]), np.array([0])), r"probs row \(0, 1\) sums to 0.7"),
]


@pytest.mark.parametrize(("call", "match"), BAD)
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_invalid_types():
    with pytest.raises(TypeError, match="n_bins must be an int"):
        M.ece(np.array([[1.0]]), np.array([0]), n_bins=2.5)
    with pytest.raises(TypeError, match="from_logits must be a bool"):
        M.nll(np.array([[1.0]]), np.array([0]), from_logits=1)


@pytest.mark.parametrize("fn", [M.ece, M.reliability])
def test_n_bins_is_bounded_before_allocation(fn):
    """ece(..., n_bins=10**9) used 23 GB; now a ValueError naming the documented maximum."""
    from ensemblize.metrics._validate import MAX_BINS

    p, y = np.array([[0.7, 0.3]]), np.array([0])
    with pytest.raises(ValueError, match=f"n_bins must be <= {MAX_BINS}, got 1000000000"):
        fn(p, y, n_bins=10**9)
    with pytest.raises(ValueError, match="n_bins must be <="):
        M.ECE(n_bins=MAX_BINS + 1)
    fn(p, y, n_bins=MAX_BINS)  # the maximum itself is fine
    assert fn(p, y, n_bins=np.int64(15)) is not None


def test_a_clipping_floor_of_one_or_more_is_refused():
    """eps ≥ 1 clipped every probability to eps: NLL −0.69 at eps = 2, pairwise KL 0 at eps = 5."""
    p = np.array([[[0.7, 0.3], [0.2, 0.8]]])
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\), got 2.0"):
        ez.metrics.nll(p, [0], eps=2)
    with pytest.raises(ValueError, match=r"eps must be in \(0, 1\), got 5.0"):
        ez.metrics.pairwise_kl(p, eps=5)
