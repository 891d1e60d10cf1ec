"""Diversity metrics vs explicit loops over member pairs and samples."""

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


def ref_disagreement(p):
    n, m, _ = p.shape
    pairs = list(itertools.combinations(range(m), 2))
    if not pairs:
        return 0.0
    shares = []
    for a, b in pairs:
        differ = sum(1 for i in range(n) if int(np.argmax(p[i, a])) != int(np.argmax(p[i, b])))
        shares.append(differ / n)
    return sum(shares) / len(shares)


def ref_kl(p, q, eps=1e-12):
    return sum(
        pi * (math.log(max(pi, eps)) - math.log(max(qi, eps))) for pi, qi in zip(p, q, strict=True) if pi > 0
    )


def ref_pairwise_kl(p, eps=1e-12):
    n, m, _ = p.shape
    pairs = [(a, b) for a in range(m) for b in range(m) if a != b]
    if not pairs:
        return 0.0
    return sum(sum(ref_kl(p[i, a], p[i, b], eps) for i in range(n)) / n for a, b in pairs) / len(pairs)


def ref_mi(p):
    def ent(row):
        return -sum(x * math.log(x) for x in row if x > 0)

    n, m, _ = p.shape
    return sum(ent(p[i].mean(axis=0)) - sum(ent(p[i, k]) for k in range(m)) / m for i in range(n)) / n


def ref_ambiguity(f):
    n, m = f.shape[:2]
    total = 0.0
    for i in range(n):
        mean = sum(f[i, k] for k in range(m)) / m
        for k in range(m):
            total += float(np.sum((f[i, k] - mean) ** 2))
    return total / (n * m)


def members(rng, n, m, c, *, ties):
    if ties:  # coarse probabilities: argmax ties inside rows and exact zeros
        raw = rng.integers(0, 3, size=(n, m, c)).astype(float)
        raw[raw.sum(axis=-1) == 0, 0] = 1.0
        return raw / raw.sum(axis=-1, keepdims=True)
    return rng.dirichlet(np.full(c, 0.7), size=(n, m))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("n", "m", "c"), [(1, 1, 3), (1, 4, 2), (40, 2, 5), (30, 5, 3), (25, 3, 1)])
def test_against_loops(n, m, c, ties):
    rng = np.random.default_rng(100 * n + 10 * m + c + ties)
    p = members(rng, n, m, c, ties=ties)
    assert M.disagreement(p) == pytest.approx(ref_disagreement(p), abs=1e-12)
    assert M.pairwise_kl(p) == pytest.approx(ref_pairwise_kl(p), rel=1e-10, abs=1e-12)
    assert M.pairwise_kl(p, eps=1e-6) == pytest.approx(ref_pairwise_kl(p, 1e-6), rel=1e-10, abs=1e-12)
    assert M.mutual_information(p) == pytest.approx(max(ref_mi(p), 0.0), abs=1e-12)
    f = rng.normal(size=(n, m))
    assert M.ambiguity(f) == pytest.approx(ref_ambiguity(f), rel=1e-12, abs=1e-15)
    f3 = rng.normal(size=(n, m, 3))
    assert M.ambiguity(f3) == pytest.approx(ref_ambiguity(f3), rel=1e-12, abs=1e-15)


def test_one_member_gives_zero():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(10, 1))
    assert M.disagreement(p) == 0.0
    assert M.pairwise_kl(p) == 0.0
    assert M.mutual_information(p) == 0.0
    assert M.ambiguity(rng.normal(size=(10, 1))) == 0.0


def test_hand_computed_and_identities():
    # two members, certain and opposite: all pairs disagree, MI = log 2, KL = (log 1 - log eps)
    p = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    assert M.disagreement(p) == 1.0
    assert M.mutual_information(p) == pytest.approx(math.log(2))
    assert M.pairwise_kl(p) == pytest.approx(-math.log(1e-12))
    # identical members: no diversity at all
    q = np.repeat(np.array([[[0.2, 0.3, 0.5]]]), 4, axis=1)
    assert M.disagreement(q) == 0.0
    assert M.pairwise_kl(q) == pytest.approx(0.0, abs=1e-15)
    assert M.mutual_information(q) == pytest.approx(0.0, abs=1e-15)
    # Krogh & Vedelsby: ensemble squared error = mean member squared error - ambiguity
    rng = np.random.default_rng(1)
    f, t = rng.normal(size=(50, 6)), rng.normal(size=50)
    ens = np.mean((f.mean(axis=1) - t) ** 2)
    avg = np.mean((f - t[:, None]) ** 2)
    assert ens == pytest.approx(avg - M.ambiguity(f))
    assert M.ambiguity(torch.tensor(f)) == pytest.approx(M.ambiguity(f))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda m: st.lists(
            st.lists(
                st.lists(st.integers(0, 3), min_size=3, max_size=3).filter(lambda r: sum(r) > 0),
                min_size=m,
                max_size=m,
            ),
            min_size=1,
            max_size=15,
        )
    ),
    st.randoms(use_true_random=False),
)
def test_properties(rows, rnd):
    p = np.array(rows, dtype=float)
    p /= p.sum(axis=-1, keepdims=True)
    d, kl, mi = M.disagreement(p), M.pairwise_kl(p), M.mutual_information(p)
    assert 0.0 <= d <= 1.0
    assert kl >= -1e-9 and mi >= 0.0
    assert mi <= math.log(p.shape[1]) + 1e-12  # MI <= log M
    perm = list(range(p.shape[0]))
    rnd.shuffle(perm)
    mperm = list(range(p.shape[1]))
    rnd.shuffle(mperm)
    q = p[perm][:, mperm]
    assert M.disagreement(q) == pytest.approx(d, abs=1e-12)
    assert M.pairwise_kl(q) == pytest.approx(kl, abs=1e-9)
    assert M.mutual_information(q) == pytest.approx(mi, abs=1e-12)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: M.disagreement(np.ones((3, 2)) / 2), r"member_probs must have shape \(N, M, C\)"),
        (lambda: M.pairwise_kl(np.full((2, 2, 2), 0.4)), r"member_probs row \(0, 0\) sums to 0.8"),
        (lambda: M.pairwise_kl(np.full((1, 2, 2), 0.5), eps=0.0), "eps must be finite and > 0"),
        (lambda: M.mutual_information(np.zeros((0, 2, 2))), "member_probs is empty"),
        (lambda: M.mutual_information(np.full((1, 2, 2), 0.5), reduction="sum"), "reduction must be one of"),
        (lambda: M.ambiguity(np.ones(4)), r"member_preds must have shape \(N, M\)"),
        (lambda: M.ambiguity(np.array([[1.0, np.inf]])), "member_preds contains 1 non-finite"),
        (lambda: M.ambiguity(np.zeros((0, 3))), "member_preds is empty"),
    ],
)
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
