"""selective_report and the SelectiveNet helpers against loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from ensemblize.selective import (
    SelectiveNet,
    predict_selective,
    selective_net_report,
    selective_report,
)


def _top_k_risk(conf, losses, k):
    order = sorted(range(len(conf)), key=lambda i: -conf[i])
    return sum(losses[i] for i in order[:k]) / k


def _threshold_risk_loop(conf, losses, val, c):
    """Brute force: the largest val value whose val share >= c, then the test samples at or above it."""
    t = max(v for v in val if sum(u >= v for u in val) / len(val) >= c - 1e-12)
    acc = [i for i in range(len(conf)) if conf[i] >= t]
    return (sum(losses[i] for i in acc) / len(acc) if acc else math.nan), len(acc) / len(conf)


def test_report_values_without_ties():
    rng = np.random.default_rng(0)
    conf = rng.permutation(20) / 20.0
    losses = (rng.random(20) < 0.4).astype(float)
    rep = selective_report(conf, losses, coverages=(0.1, 0.25, 0.5, 1.0))
    for c, r in zip(rep.coverages, rep.risk, strict=True):
        assert r == pytest.approx(_top_k_risk(conf, losses, math.ceil(c * 20)))
    curve = [_top_k_risk(conf, losses, k) for k in range(1, 21)]
    assert rep.aurc == pytest.approx(np.mean(curve))
    oracle = [_top_k_risk(-losses, losses, k) for k in range(1, 21)]  # lowest losses first
    assert rep.eaurc == pytest.approx(np.mean(curve) - np.mean(oracle))
    generalized = [0.0] + [r * k / 20 for k, r in enumerate(curve, 1)]  # from (0, 0), trapezoid rule
    trapezoids = [(a + b) / 2 for a, b in zip(generalized[:-1], generalized[1:], strict=True)]
    assert rep.augrc == pytest.approx(np.mean(trapezoids))
    assert rep.thresholds is None and rep.threshold_risk is None


def test_validation_equal_to_test_reproduces_the_coverage_and_risk():
    rng = np.random.default_rng(1)
    conf = rng.permutation(50) / 50.0
    losses = rng.random(50)
    rep = selective_report(conf, losses, val_confidence=conf)
    np.testing.assert_allclose(rep.threshold_coverage, rep.coverages)
    np.testing.assert_allclose(rep.threshold_risk, rep.risk)


def test_threshold_risk_matches_loop_with_ties_and_an_empty_acceptance():
    rng = np.random.default_rng(2)
    conf = rng.integers(0, 5, 40) / 4.0  # ties
    losses = (rng.random(40) < 0.3).astype(float)
    val = np.concatenate([rng.integers(0, 5, 29) / 4.0, [1.5]])  # 1.5 is above every test value
    covs = (0.02, 0.1, 0.3, 0.5, 0.9, 1.0)
    rep = selective_report(torch.tensor(conf), torch.tensor(losses), coverages=covs, val_confidence=val)
    for i, c in enumerate(covs):
        risk, cov = _threshold_risk_loop(list(conf), list(losses), list(val), c)
        assert rep.threshold_coverage[i] == pytest.approx(cov)
        if math.isnan(risk):
            assert math.isnan(rep.threshold_risk[i])
        else:
            assert rep.threshold_risk[i] == pytest.approx(risk)
    assert rep.threshold_coverage[0] == 0.0 and math.isnan(rep.threshold_risk[0])  # nothing accepted
    m = rep.as_metrics(prefix="sn/")
    assert m["sn/risk@0.5"] == rep.risk[3] and m["sn/thr_coverage@0.3"] == rep.threshold_coverage[2]
    assert {"sn/aurc", "sn/eaurc", "sn/augrc"} <= set(m)


def test_report_bad_input():
    with pytest.raises(ValueError, match="coverage"):
        selective_report(np.arange(4.0), np.zeros(4), coverages=(0.5, 0.0))
    with pytest.raises(ValueError, match="shape"):
        selective_report(np.arange(4.0), np.zeros(3))
    with pytest.raises(ValueError, match="val_confidence"):
        selective_report(np.arange(4.0), np.zeros(4), val_confidence=np.array([np.nan]))


def _trained_like_net(seed=0, members=None):
    torch.manual_seed(seed)
    if members is None:
        feats = nn.Sequential(nn.Linear(3, 8), nn.Tanh())
    else:
        feats = nn.Sequential(nn.Linear(3, 8 * members), nn.Tanh(), nn.Unflatten(1, (members, 8)))
    net = SelectiveNet(feats, 8, 4, hidden=6)
    net.train()
    net(torch.randn(64, 3))  # non-trivial running statistics
    return net


def test_predict_selective_is_eval_mode_and_restores_training():
    net = _trained_like_net()
    x = torch.randn(37, 3)
    pred = predict_selective(net, x, batch_size=10)
    assert net.training
    net.eval()
    with torch.no_grad():
        out = net(x)
    # float64 softmax of the logits (float32's max p saturates at 1.0 and ties rows)
    torch.testing.assert_close(pred.probs, out.logits.double().softmax(-1))
    torch.testing.assert_close(pred.selection, out.selection.double())
    torch.testing.assert_close(pred.aux_probs, out.aux_logits.double().softmax(-1))


def test_predict_selective_averages_members_on_probabilities():
    net = _trained_like_net(members=3).eval()
    x = torch.randn(9, 3)
    pred = predict_selective(net, x)
    with torch.no_grad():
        out = net(x)
    torch.testing.assert_close(pred.probs, out.logits.double().softmax(-1).mean(1))
    torch.testing.assert_close(pred.selection, out.selection.double().mean(1))


def test_selective_net_report_scores_by_g_and_by_softmax_response():
    net = _trained_like_net(seed=3)
    x, x_val = torch.randn(60, 3), torch.randn(40, 3)
    y = torch.randint(0, 4, (60,), generator=torch.Generator().manual_seed(0))
    reports = selective_net_report(net, x, y, x_val=x_val, coverages=(0.2, 0.5, 1.0))
    net.eval()
    with torch.no_grad():
        out, out_val = net(x), net(x_val)
    errors = (out.logits.argmax(-1) != y).double().numpy()
    g, sr = out.selection.numpy(), out.logits.softmax(-1).amax(-1).numpy()
    g_val, sr_val = out_val.selection.numpy(), out_val.logits.softmax(-1).amax(-1).numpy()
    for key, conf, val in (("w/o SR", g, g_val), ("w/ SR", sr, sr_val)):
        rep = reports[key]
        for i, c in enumerate(rep.coverages):
            assert rep.risk[i] == pytest.approx(_top_k_risk(list(conf), list(errors), math.ceil(c * 60)))
            risk, cov = _threshold_risk_loop(list(conf), list(errors), list(val), c)
            assert rep.threshold_coverage[i] == pytest.approx(cov)
            assert rep.threshold_risk[i] == pytest.approx(risk, nan_ok=True)
    assert reports["w/o SR"].aurc != reports["w/ SR"].aurc
    with pytest.raises(ValueError, match="labels must have shape"):
        selective_net_report(net, x, y[:5])
    with pytest.raises(ValueError, match=r"labels has value 4 outside \[0, 4\)"):
        selective_net_report(net, x, torch.full((60,), 4))


def test_gamblers_scores_of_member_logits_drop_the_abstain_output_not_a_member():
    """``logits[:, :-1]`` on (N, M, K+1) dropped the last member: predictions named the abstain output
    as a class and every score came back (N, M−1)."""
    from ensemblize.evaluation.selective import score_model

    torch.manual_seed(0)
    z = torch.randn(6, 2, 5, dtype=torch.float64)
    z[..., -1] += 6.0  # a large abstain logit: it must never be predicted

    class Fixed(nn.Module):
        def forward(self, x):
            return z[x.long().flatten()]

    got = score_model(Fixed(), torch.arange(6.0)[:, None], kind="gamblers")
    cls = torch.softmax(z[..., :4], -1).mean(1)  # reference: members averaged on class probabilities
    p_abstain = torch.softmax(z, -1)[..., -1]
    np.testing.assert_array_equal(got.pred, cls.argmax(-1).numpy())
    np.testing.assert_allclose(got.sr, cls.amax(-1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(got.own, (1 - p_abstain).mean(1).numpy(), rtol=1e-12)
    assert got.pred.shape == got.sr.shape == got.own.shape == (6,) and got.pred.max() < 4


def test_softmax_response_does_not_saturate_in_float32():
    """float32's max p is exactly 1.0 once the margin passes ~17: such rows tied, and a threshold for 10 %
    coverage accepted every one of them."""
    from ensemblize.selective.thresholds import threshold_for_coverage

    net = _trained_like_net().eval()
    x = torch.randn(10, 3)
    with torch.no_grad():
        out = net(x)
    margins = torch.arange(20.0, 30.0)  # every row far past float32's saturation, all distinct

    class Confident(nn.Module):
        def forward(self, inp):
            o = net(inp)
            logits = torch.zeros_like(o.logits)
            logits[:, 0] = margins[: len(inp)]
            return type(o)(logits, o.selection, o.aux_logits)

    sr = predict_selective(Confident(), x).probs.amax(-1)
    assert len(torch.unique(sr)) == 10 and sr.dtype == torch.float64
    assert out.logits.dtype == torch.float32
    assert threshold_for_coverage(sr.numpy(), 0.1) == sr.max().item()


@pytest.mark.parametrize("kind", ["plain", "gamblers"])
def test_plain_and_gamblers_scores_do_not_saturate_in_float32(kind):
    """The same for a plain classifier's softmax response and Deep Gamblers' 1 − p_abstain: float32
    logits with margins 20–29 gave ten scores of exactly 1.0 (one tie group); float64 keeps them apart,
    and a threshold for 10 % coverage accepts one row."""
    from ensemblize.evaluation.selective import score_model
    from ensemblize.selective.thresholds import coverage_achieved, threshold_for_coverage

    margins = torch.arange(20.0, 30.0)

    class Confident(nn.Module):
        def forward(self, inp):  # (B, 4): class 0 far ahead (for gamblers, of the abstain logit too)
            z = torch.zeros(len(inp), 4)
            z[:, 0] = margins[: len(inp)] + 0 * inp[:, 0]
            return z

    x = torch.randn(10, 3)
    with torch.no_grad():
        z = Confident()(x)
    assert len(torch.unique(torch.softmax(z, -1).amax(-1))) == 1  # float32 ties them all at 1.0
    s = score_model(Confident(), x, kind=kind)
    for score in (s.sr, s.own) if kind == "gamblers" else (s.sr,):
        assert score.dtype == np.float64 and len(np.unique(score)) == 10
        assert coverage_achieved(score, threshold_for_coverage(score, 0.1)) == pytest.approx(0.1)


def test_a_model_returning_a_plain_tuple_is_scored_like_one_returning_a_selective_output():
    """The losses train a model whose forward returns ``(logits, selection, aux_logits)``; evaluation
    scores it the same way (it required the NamedTuple)."""
    net = _trained_like_net().eval()

    class AsTuple(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return tuple(self.net(x))

    x = torch.randn(11, 3)
    a, b = predict_selective(net, x), predict_selective(AsTuple(), x)
    for field in ("probs", "selection", "aux_probs"):
        torch.testing.assert_close(getattr(a, field), getattr(b, field), rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"the model's output must be a SelectiveOutput.*got Tensor"):
        predict_selective(nn.Linear(3, 2), x)
