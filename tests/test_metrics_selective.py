"""Selective metrics vs slow references that average over every ordering of each tie group."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemblize as ez

M = ez.metrics


def _all_tie_orders(conf):
    """Every ordering of the samples that is sorted by descending confidence (ties permuted)."""
    values = sorted(set(conf.tolist()), reverse=True)
    groups = [[i for i in range(len(conf)) if conf[i] == v] for v in values]
    for combo in itertools.product(*[itertools.permutations(g) for g in groups]):
        yield [i for grp in combo for i in grp]


def ref_curve(conf, loss):
    """Expected selective risk of the top k, averaged over ALL tie orderings (plain loops)."""
    n = len(conf)
    curves = []
    for order in _all_tie_orders(conf):
        risks = []
        for k in range(1, n + 1):
            total = 0.0
            for i in order[:k]:
                total += loss[i]
            risks.append(total / k)
        curves.append(risks)
    return np.mean(curves, axis=0)


def ref_augrc(conf, loss):
    """Mean over tie orderings of the trapezoid over (k/n, (1/n) Σ losses of the top k), k = 0..n."""
    n = len(conf)
    values = []
    for order in _all_tie_orders(conf):
        g = [0.0] + [sum(loss[i] for i in order[:k]) / n for k in range(1, n + 1)]
        values.append(sum((g[k - 1] + g[k]) / 2 / n for k in range(1, n + 1)))
    return np.mean(values)


def ref_augrc_fd_shifts(conf, loss):
    """AUGRC as fd-shifts defines it, from the definition: one RC point per distinct threshold t
    (accept conf >= t): coverage = share accepted, generalized risk = summed loss accepted / n; add
    the point (0, 0) and integrate with the trapezoid rule over coverage. Plain loops."""
    n = len(conf)
    points = [(0.0, 0.0)]
    for t in sorted(set(conf.tolist()), reverse=True):
        accepted = [i for i in range(n) if conf[i] >= t]
        points.append((len(accepted) / n, sum(loss[i] for i in accepted) / n))
    area = 0.0
    for (c0, r0), (c1, r1) in zip(points, points[1:], strict=False):
        area += (c1 - c0) * (r0 + r1) / 2
    return area


def ref_aurc_ideal(loss):
    s = sorted(loss.tolist())
    return sum(sum(s[:k]) / k for k in range(1, len(s) + 1)) / len(s)


def small_case(rng, n, n_levels, binary):
    conf = rng.integers(0, n_levels, n).astype(float) / n_levels
    loss = rng.integers(0, 2, n).astype(float) if binary else rng.exponential(size=n)
    return conf, loss


CASES = [(n, levels, binary) for n in (1, 2, 5, 7) for levels in (1, 2, 3, 50) for binary in (True, False)]


@pytest.mark.parametrize(("n", "levels", "binary"), CASES)
def test_against_exhaustive_tie_average(n, levels, binary):
    rng = np.random.default_rng(1000 * n + 10 * levels + binary)
    conf, loss = small_case(rng, n, levels, binary)
    curve = ref_curve(conf, loss)
    cov, risk = M.risk_coverage(conf, loss)
    np.testing.assert_allclose(cov, np.arange(1, n + 1) / n)
    np.testing.assert_allclose(risk, curve, rtol=1e-12, atol=1e-12)
    assert M.aurc(conf, loss) == pytest.approx(curve.mean(), abs=1e-12)
    assert M.eaurc(conf, loss) == pytest.approx(curve.mean() - ref_aurc_ideal(loss), abs=1e-12)
    assert M.augrc(conf, loss) == pytest.approx(ref_augrc(conf, loss), abs=1e-12)
    assert M.augrc(conf, loss) == pytest.approx(ref_augrc_fd_shifts(conf, loss), abs=1e-12)
    for c in (0.1, 0.3, 0.5, 2 / 3, 1.0):
        k = max(1, math.ceil(round(c * n, 9)))
        assert M.risk_at_coverage(conf, loss, c) == pytest.approx(curve[k - 1], abs=1e-12)
    for r in (0.0, 0.25, 0.5, 1.0, 10.0):
        ok = [k for k in range(1, n + 1) if curve[k - 1] <= r + 1e-12]
        expected = ok[-1] / n if ok else math.nan
        got = M.coverage_at_risk(conf, loss, r)
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_against_monte_carlo_shuffles():
    """n = 300 with heavy ties: the closed form equals the mean over many random tie orderings."""
    rng = np.random.default_rng(7)
    n = 300
    conf = rng.integers(0, 6, n).astype(float)
    loss = (rng.random(n) < 0.2 + 0.1 * conf).astype(float)
    shuffles = 3000
    curves = np.empty((shuffles, n))
    for s in range(shuffles):
        perm = rng.permutation(n)
        order = perm[np.argsort(-conf[perm], kind="stable")]
        curves[s] = np.cumsum(loss[order]) / np.arange(1, n + 1)
    mc = curves.mean(axis=0)
    se = curves.std(axis=0) / math.sqrt(shuffles)
    _, risk = M.risk_coverage(conf, loss)
    assert np.all(np.abs(risk - mc) <= 5 * se + 1e-12)
    assert M.aurc(conf, loss) == pytest.approx(
        mc.mean(), abs=5 * curves.mean(axis=1).std() / math.sqrt(shuffles)
    )


def test_hand_computed_values():
    # confidences 0.9, 0.8, 0.8, 0.1 ; losses 0, 1, 0, 1
    conf = np.array([0.9, 0.8, 0.8, 0.1])
    loss = np.array([0.0, 1.0, 0.0, 1.0])
    _, risk = M.risk_coverage(conf, loss)
    # top-2 takes one of the tied pair at random: expected loss sum 0.5
    np.testing.assert_allclose(risk, [0.0, 0.25, 1 / 3, 0.5])
    assert M.aurc(conf, loss) == pytest.approx((0 + 0.25 + 1 / 3 + 0.5) / 4)
    # trapezoid over (0,0), (1/4, 0), (2/4, 0.5/4), (3/4, 1/4), (1, 2/4)
    assert M.augrc(conf, loss) == pytest.approx((0 + 0.5 + 1 + 2) / 16 - 2 / 32)
    assert M.augrc(conf, loss) == pytest.approx(ref_augrc_fd_shifts(conf, loss))
    assert M.eaurc(conf, loss) == pytest.approx(M.aurc(conf, loss) - (0 + 0 + 1 / 3 + 0.5) / 4)
    assert M.risk_at_coverage(conf, loss, 0.5) == pytest.approx(0.25)
    assert M.coverage_at_risk(conf, loss, 0.3) == pytest.approx(0.5)
    assert math.isnan(M.coverage_at_risk(np.array([1.0, 0.0]), np.array([1.0, 1.0]), 0.5))


def test_torch_inputs_match_numpy():
    rng = np.random.default_rng(3)
    conf, loss = rng.random(50), rng.integers(0, 2, 50)
    assert M.aurc(torch.tensor(conf, dtype=torch.float32), torch.tensor(loss)) == pytest.approx(
        M.aurc(conf.astype(np.float32), loss)
    )
    assert M.aurc(conf, loss.astype(bool)) == M.aurc(conf, loss.astype(float))


def test_perfect_and_worst_scorer():
    rng = np.random.default_rng(5)
    loss = rng.integers(0, 2, 200).astype(float)
    assert M.eaurc(-loss, loss) == pytest.approx(0.0, abs=1e-12)
    worst = M.eaurc(loss, loss)
    assert worst > 0
    # the worst ordering (errors first) maximises AURC over any confidence
    other = rng.random(200)
    assert M.aurc(loss, loss) >= M.aurc(other, loss)
    assert M.aurc(-loss, loss) <= M.aurc(other, loss)


def test_constant_confidence_gives_mean_loss_everywhere():
    loss = np.array([0.0, 1.0, 2.0, 5.0])
    _, risk = M.risk_coverage(np.zeros(4), loss)
    np.testing.assert_allclose(risk, np.full(4, 2.0))


def test_single_sample():
    assert M.aurc([0.3], [1.0]) == 1.0
    assert M.eaurc([0.3], [1.0]) == 0.0
    assert M.augrc([0.3], [1.0]) == 0.5  # the triangle (0, 0) - (1, 1)
    assert M.risk_at_coverage([0.3], [0.0], 0.01) == 0.0


def test_risk_at_coverage_rounding():
    # 0.3 * 10 = 3.0000000000000004 in floating point: must keep 3 samples, not 4
    conf = np.arange(10, 0, -1).astype(float)
    loss = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1], dtype=float)
    assert M.risk_at_coverage(conf, loss, 0.3) == 0.0


tied = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(tied, st.randoms(use_true_random=False))
def test_permutation_invariance_and_bounds(pairs, rnd):
    conf = np.array([p[0] for p in pairs], dtype=float)
    loss = np.array([p[1] for p in pairs], dtype=float)
    perm = list(range(len(pairs)))
    rnd.shuffle(perm)
    for fn in (M.aurc, M.eaurc, M.augrc):
        a, b = fn(conf, loss), fn(conf[perm], loss[perm])
        assert a == pytest.approx(b, abs=1e-12)
    _, r1 = M.risk_coverage(conf, loss)
    _, r2 = M.risk_coverage(conf[perm], loss[perm])
    np.testing.assert_allclose(r1, r2, atol=1e-12)
    assert M.eaurc(conf, loss) >= -1e-12
    assert 0 <= M.augrc(conf, loss) <= M.aurc(conf, loss) + 1e-12 <= loss.max() + 2e-12
    assert M.coverage_at_risk(conf, loss, 2.0) == 1.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: M.aurc([], []), "confidence is empty"),
        (lambda: M.aurc([0.1, 0.2], [1.0]), "losses has length 1 but confidence has length 2"),
        (lambda: M.aurc([0.1, 0.2], [1.0, -1.0]), "losses must be >= 0, got -1.0 at index 1"),
        (lambda: M.aurc([0.1, np.nan], [1.0, 0.0]), "confidence contains 1 non-finite"),
        (lambda: M.aurc([[0.1]], [1.0]), "confidence must be 1-D"),
        (lambda: M.risk_at_coverage([0.1], [1.0], 0.0), r"coverage must lie in \(0, 1\], got 0.0"),
        (lambda: M.risk_at_coverage([0.1], [1.0], 1.5), r"coverage must lie in \(0, 1\], got 1.5"),
        (lambda: M.coverage_at_risk([0.1], [1.0], -0.1), "risk must be finite and >= 0, got -0.1"),
    ],
)
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 12),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_augrc_equals_fd_shifts_definition_on_random_data_with_ties(n, levels, binary, seed):
    """Random sizes, heavy ties (few confidence levels), 0/1 or continuous losses: |Δ| < 1e-9."""
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, levels, n) / levels
    loss = rng.integers(0, 2, n).astype(float) if binary else rng.exponential(size=n)
    assert abs(M.augrc(conf, loss) - ref_augrc_fd_shifts(conf, loss)) < 1e-9


def test_augrc_optimal_binary_ranking_is_half_err_squared():
    """fd-shifts' closed form for a perfect ranking of 0/1 losses: AUGRC* = err² / 2."""
    loss = np.array([0.0] * 7 + [1.0] * 3)
    conf = -loss + np.linspace(0, 0.1, 10)  # every correct sample ranked first
    assert M.augrc(conf, loss) == pytest.approx(0.5 * 0.3**2, abs=1e-15)
