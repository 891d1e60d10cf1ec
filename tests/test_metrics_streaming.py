"""Streaming metrics fed in random chunks equal their functional twins on the whole data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ensemblize as ez

M = ez.metrics


def chunks(rng, n):
    """Random split points of range(n) into 1..6 non-empty chunks."""
    k = int(rng.integers(1, min(n, 6) + 1))
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False)) if k > 1 else []
    return np.split(np.arange(n), cuts)


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    n, m, c = 157, 3, 5
    logits = rng.normal(size=(n, m, c)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    probs[:20] = np.round(probs[:20], 1)  # ties in confidence
    probs[:20] /= probs[:20].sum(axis=-1, keepdims=True)
    y = rng.integers(0, c, n)
    return rng, logits, probs, y


def _feed(metric, parts, *arrays, as_torch=False):
    metric.reset()
    for idx in parts:
        batch = [torch.as_tensor(a[idx]) if as_torch else a[idx] for a in arrays]
        metric.update(*batch)
    return metric.compute()


CLASSIFICATION = [
    (M.Accuracy(), M.accuracy, {}),
    (M.NLL(), M.nll, {}),
    (M.Brier(), M.brier, {}),
    (M.ECE(), M.ece, {}),
    (M.ECE(7, binning="equal_mass"), M.ece, {"n_bins": 7, "binning": "equal_mass"}),
    (M.ECE(5, classwise=True), M.ece, {"n_bins": 5, "classwise": True}),
]


@pytest.mark.parametrize(
    ("metric", "fn", "kw"),
    CLASSIFICATION,
    # ids must not contain object addresses: xdist workers compare collected ids
    ids=[f"{type(m).__name__}-{i}" for i, (m, _, _) in enumerate(CLASSIFICATION)],
)
def test_classification_streams(data, metric, fn, kw):
    rng, _, probs, y = data
    for members in (probs, probs.mean(axis=1)):
        parts = chunks(rng, len(y))
        assert _feed(metric, parts, members, y) == pytest.approx(fn(members, y, **kw), abs=1e-12)
    assert _feed(metric, chunks(rng, len(y)), probs, y, as_torch=True) == pytest.approx(
        fn(probs, y, **kw), abs=1e-12
    )


def test_nll_from_logits_and_reliability_stream(data):
    rng, logits, probs, y = data
    s = M.NLL(from_logits=True)
    assert _feed(s, chunks(rng, len(y)), logits, y) == pytest.approx(
        M.nll(logits, y, from_logits=True), rel=1e-12
    )
    r = _feed(M.Reliability(10), chunks(rng, len(y)), probs, y)
    ref = M.reliability(probs, y, 10)
    np.testing.assert_array_equal(r.count, ref.count)
    np.testing.assert_allclose(r.confidence, ref.confidence, equal_nan=True)
    np.testing.assert_allclose(r.accuracy, ref.accuracy, equal_nan=True)


@pytest.mark.parametrize(
    ("metric", "fn"),
    [
        (M.Disagreement(), M.disagreement),
        (M.PairwiseKL(), M.pairwise_kl),
        (M.MutualInformation(), M.mutual_information),
    ],
)
def test_diversity_streams(data, metric, fn):
    rng, _, probs, _ = data
    assert _feed(metric, chunks(rng, len(probs)), probs) == pytest.approx(fn(probs), rel=1e-12, abs=1e-15)


def test_ambiguity_stream(data):
    rng = data[0]
    f = rng.normal(size=(90, 4))
    assert _feed(M.Ambiguity(), chunks(rng, 90), f) == pytest.approx(M.ambiguity(f), rel=1e-12)


def test_selective_streams(data):
    rng, _, probs, y = data
    conf = M.max_probability(probs)
    loss = (probs.mean(axis=1).argmax(axis=1) != y).astype(float)
    for metric, fn in [
        (M.AURC(), M.aurc),
        (M.EAURC(), M.eaurc),
        (M.AUGRC(), M.augrc),
        (M.RiskAtCoverage(0.7), lambda c, e: M.risk_at_coverage(c, e, 0.7)),
        (M.CoverageAtRisk(0.75), lambda c, e: M.coverage_at_risk(c, e, 0.75)),
        (M.CoverageAtRisk(0.01), lambda c, e: M.coverage_at_risk(c, e, 0.01)),
    ]:
        assert _feed(metric, chunks(rng, len(y)), conf, loss) == pytest.approx(
            fn(conf, loss), abs=1e-12, nan_ok=True
        )
    curve = _feed(M.RiskCoverage(), chunks(rng, len(y)), conf, loss)
    np.testing.assert_allclose(curve.risk, M.risk_coverage(conf, loss).risk)


def test_ood_streams(data):
    rng = data[0]
    c_id, c_ood = rng.integers(0, 8, 120).astype(float), rng.integers(0, 6, 70).astype(float)
    for metric, fn in [
        (M.OODAUROC(), M.ood_auroc),
        (M.OODAUPR(), M.ood_aupr),
        (M.OODAUPR(positive="id"), lambda a, b: M.ood_aupr(a, b, positive="id")),
        (M.FPRAtTPR(0.9), lambda a, b: M.fpr_at_tpr(a, b, 0.9)),
    ]:
        metric.reset()
        for idx in chunks(rng, 120):
            metric.update(id_confidence=c_id[idx])
        for idx in chunks(rng, 70):
            metric.update(ood_confidence=c_ood[idx])
        assert metric.compute() == pytest.approx(fn(c_id, c_ood), abs=1e-12)


def test_errors_and_reset():
    acc = M.Accuracy()
    with pytest.raises(ValueError, match=r"Accuracy.compute\(\) called before any update"):
        acc.compute()
    acc.update(np.array([[1.0, 0.0]]), np.array([0]))
    assert acc.compute() == 1.0
    acc.reset()
    with pytest.raises(ValueError, match="before any update"):
        acc.compute()
    with pytest.raises(ValueError, match="probs row 0 sums to 0.5"):
        M.ECE().update(np.array([[0.5, 0.0]]), np.array([0]))
    ece = M.ECE()
    ece.update(np.array([[1.0, 0.0]]), np.array([0]))
    with pytest.raises(ValueError, match="probs has 3 classes but earlier batches had 2"):
        ece.update(np.array([[1.0, 0.0, 0.0]]), np.array([0]))
    ood = M.OODAUROC()
    ood.update(id_confidence=np.array([0.1]))
    with pytest.raises(ValueError, match="no ood_confidence seen yet"):
        ood.compute()
    with pytest.raises(ValueError, match="needs id_confidence, ood_confidence or both"):
        ood.update()
    with pytest.raises(ValueError, match="n_bins must be >= 1"):
        M.ECE(0)
    with pytest.raises(ValueError, match=r"tpr must lie in \(0, 1\]"):
        M.FPRAtTPR(1.5)
    with pytest.raises(ValueError, match=r"coverage must lie in \(0, 1\]"):
        M.RiskAtCoverage(0.0)
    with pytest.raises(ValueError, match="losses must be >= 0"):
        M.AURC().update(np.array([0.1]), np.array([-1.0]))
    assert "ECE(n_bins=15" in repr(M.ECE())


@pytest.mark.parametrize(
    "cls", [M.MutualInformation, M.Accuracy, M.Brier, M.Disagreement, M.Ambiguity, M.AURC]
)
def test_a_metric_without_options_refuses_keywords(cls):
    """MutualInformation(reduction="none") streamed per-sample vectors of different samples as a
    mean (5 meaningless numbers for 10 samples); Accuracy(bogus=1) failed only at update."""
    with pytest.raises(TypeError, match=rf"{cls.__name__}\(\) takes no options, got reduction='none'"):
        cls(reduction="none")


def test_every_public_name_is_exported_and_documented():
    names = """accuracy nll brier ece reliability member_average ood_auroc ood_aupr fpr_at_tpr
    max_probability negative_entropy negative_mutual_information negative_energy risk_coverage aurc
    eaurc augrc risk_at_coverage coverage_at_risk disagreement pairwise_kl mutual_information
    ambiguity""".split()
    assert set(names) <= set(ez.metrics.__all__)
    for name in ez.metrics.__all__:
        obj = getattr(ez.metrics, name)
        assert obj.__doc__ and obj.__doc__.strip(), name


def test_merge_equals_one_metric_fed_every_batch(data):
    rng, logits, probs, y = data
    half = len(y) // 2
    for make, args in (
        (lambda: M.NLL(from_logits=True), (logits, y)),
        (M.Accuracy, (probs, y)),
        (lambda: M.ECE(n_bins=7), (probs, y)),
        (M.AURC, (probs.mean(axis=1).max(axis=1), (probs.mean(axis=1).argmax(axis=1) != y).astype(float))),
    ):
        whole, a, b = make(), make(), make()
        whole.update(*args)
        a.update(*(x[:half] for x in args))
        b.update(*(x[half:] for x in args))
        assert a.merge(b).compute() == pytest.approx(whole.compute(), rel=1e-12)
    with pytest.raises(ValueError, match="cannot merge"):
        M.ECE(n_bins=7).merge(M.ECE(n_bins=5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_streaming_calibration_accepts_half_precision_like_the_functional_form(dtype):
    """Half-precision rows sum to 1 only within 1e-2; the stored batches must not be re-validated
    at float64's 1e-6 when computing (they used to raise "sums to 1.0001…")."""
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(64, 2, 10, generator=g) * 3, -1).to(dtype)
    y = torch.randint(0, 10, (64,), generator=g)
    ece, rel = M.ECE(), M.Reliability()
    for part in (slice(0, 25), slice(25, 64)):
        ece.update(p[part], y[part])
        rel.update(p[part], y[part])
    assert ece.compute() == M.ece(p, y)
    got, want = rel.compute(), M.reliability(p, y)
    np.testing.assert_array_equal(got.count, want.count)
    np.testing.assert_array_equal(got.confidence, want.confidence)


def test_sample_mean_metrics_refuse_batches_of_another_member_or_class_count():
    d = M.Disagreement()
    d.update(np.full((5, 2, 3), 1 / 3))
    with pytest.raises(
        ValueError, match=r"shape \(N, 4, 3\) past the sample axis, earlier batches \(N, 2, 3\)"
    ):
        d.update(np.full((5, 4, 3), 1 / 3))
    a, b = M.Disagreement(), M.Disagreement()
    a.update(np.full((5, 2, 3), 1 / 3))
    b.update(np.full((5, 4, 3), 1 / 3))
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(b)


def test_merging_calibration_states_of_different_class_counts_is_named_at_once():
    """It was accepted, and compute() failed later in a NumPy concatenate error."""
    rng = np.random.default_rng(0)
    for metric in (ez.metrics.streaming.ECE, ez.metrics.streaming.Reliability):
        a, b = metric(), metric()
        a.update(rng.dirichlet(np.ones(3), size=6), rng.integers(0, 3, 6))
        b.update(rng.dirichlet(np.ones(4), size=6), rng.integers(0, 4, 6))
        with pytest.raises(ValueError, match="cannot merge .* states of 4 and 3 classes"):
            a.merge(b)


def test_streaming_ece_classwise_must_be_a_bool_like_the_function():
    with pytest.raises(TypeError, match="classwise must be a bool"):
        ez.metrics.streaming.ECE(classwise=1)
