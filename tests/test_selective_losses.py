"""Losses against their equations written out in plain torch, gradients and detach semantics included."""

from __future__ import annotations

import math

import pytest
import torch

from ensemblize.selective import DeepGamblersLoss, SelectiveNetLoss, SelectiveOutput, SyncLoss

B, C = 11, 4


def _inputs(seed=0, b=B, c=C, m=None, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    lead = (b,) if m is None else (b, m)
    f = torch.randn(*lead, c, generator=gen, dtype=dtype) * 2
    graw = torch.randn(*lead, generator=gen, dtype=dtype)
    h = torch.randn(*lead, c, generator=gen, dtype=dtype) * 2
    y = torch.randint(0, c, (b,), generator=gen)
    return f, graw, h, y


def _ce_loop(logits, y):
    """Per-sample cross-entropy written out: -z_y + log Σ_c exp z_c."""
    return torch.stack([-logits[i, y[i]] + torch.log(torch.exp(logits[i]).sum()) for i in range(len(y))])


def _sn_reference(f, g, h, y, c, lam, alpha, normalize):
    lf = _ce_loop(f, y)
    phi = g.sum() / len(g)
    risk = (g * lf).sum() / g.sum() if normalize else (g * lf).sum() / len(g)
    pen = lam * torch.relu(torch.as_tensor(c, dtype=g.dtype) - phi) ** 2
    return alpha * (risk + pen) + (1 - alpha) * _ce_loop(h, y).mean(), risk, phi


def _score_reference(p, score, gamma):
    top = torch.stack([max(row) for row in p])  # loop max
    if score == "sr":
        return top
    if score == "smp":
        return top**gamma
    ent = torch.stack([-(row * torch.log(row)).sum() for row in p])
    return 1 - ent / math.log(p.shape[-1])


def _grads(fn, *tensors):
    ts = [t.detach().clone().requires_grad_(True) for t in tensors]
    val = fn(*ts)
    return val, torch.autograd.grad(val, ts, allow_unused=True)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize(("coverage", "lam", "alpha"), [(0.9, 32.0, 0.5), (0.3, 4.0, 0.8), (1.0, 0.0, 1.0)])
def test_selectivenet_loss_equals_equation_with_gradients(normalize, coverage, lam, alpha):
    f, graw, h, y = _inputs(seed=3)
    loss = SelectiveNetLoss(coverage, lam=lam, alpha=alpha, normalize_by_coverage=normalize)

    def ours(f, graw, h):
        return loss(SelectiveOutput(f, torch.sigmoid(graw), h), y)

    def ref(f, graw, h):
        return _sn_reference(f, torch.sigmoid(graw), h, y, coverage, lam, alpha, normalize)[0]

    v1, g1 = _grads(ours, f, graw, h)
    v2, g2 = _grads(ref, f, graw, h)
    torch.testing.assert_close(v1, v2)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)
    _, risk, phi = _sn_reference(f, torch.sigmoid(graw), h, y, coverage, lam, alpha, normalize)
    torch.testing.assert_close(loss.last["selective_risk"], risk)
    torch.testing.assert_close(loss.last["coverage"], phi)
    torch.testing.assert_close(loss.last["loss"], v1.detach())
    assert torch.autograd.gradcheck(
        ours, (f.requires_grad_(), graw.requires_grad_(), h.requires_grad_()), fast_mode=True
    )


def test_coverage_penalty_is_active_only_below_target():
    f, graw, h, y = _inputs(seed=4)
    g = torch.full((B,), 0.6, dtype=torch.float64)
    low = SelectiveNetLoss(0.5)
    low(SelectiveOutput(f, g, h), y)
    assert float(low.last["coverage_penalty"]) == 0.0
    high = SelectiveNetLoss(0.8, lam=10.0)
    high(SelectiveOutput(f, g, h), y)
    assert float(high.last["coverage_penalty"]) == pytest.approx(10.0 * 0.2**2)


@pytest.mark.parametrize("loss", [SelectiveNetLoss(0.7), SyncLoss(0.7, mu=0.5, score="entropy")])
def test_member_outputs_are_mean_of_per_member_losses(loss):
    M = 3
    f, graw, h, y = _inputs(seed=5, m=M)
    g = torch.sigmoid(graw)
    total = loss(SelectiveOutput(f, g, h), y)
    last = dict(loss.last)
    per = [loss(SelectiveOutput(f[:, m], g[:, m], h[:, m]), y) for m in range(M)]
    torch.testing.assert_close(total, torch.stack(per).mean())
    torch.testing.assert_close(last["coverage"], g.mean())
    # the coverage penalty is per member: with one member above and one below the target, the
    # pooled coverage would meet the target and give no penalty, the per-member one does not
    gg = torch.stack([torch.full((B,), 0.9), torch.full((B,), 0.5)], 1).double()
    loss(SelectiveOutput(f[:, :2], gg, h[:, :2]), y)
    assert float(loss.last["coverage_penalty"]) == pytest.approx(loss.lam * 0.2**2 / 2)


@pytest.mark.parametrize("score", ["sr", "smp", "entropy"])
@pytest.mark.parametrize("source", ["f", "h"])
@pytest.mark.parametrize("detach", [True, False])
def test_sync_loss_equals_equation_with_gradients(score, source, detach):
    f, graw, h, y = _inputs(seed=6)
    cov, mu, gamma, lam, alpha = 0.8, 0.7, 3.0, 16.0, 0.4
    loss = SyncLoss(cov, mu, score=score, gamma=gamma, source=source, detach=detach, lam=lam, alpha=alpha)

    def ours(f, graw, h):
        return loss(SelectiveOutput(f, torch.sigmoid(graw), h), y)

    def ref(f, graw, h):
        g = torch.sigmoid(graw)
        p = torch.softmax(f if source == "f" else h, dim=-1)
        s = _score_reference(p, score, gamma)
        if detach:
            s = s.detach()
        sn = _sn_reference(f, g, h, y, cov, lam, alpha, True)[0]
        return sn + mu * ((g - s) ** 2).sum() / len(g)

    v1, g1 = _grads(ours, f, graw, h)
    v2, g2 = _grads(ref, f, graw, h)
    torch.testing.assert_close(v1, v2)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)
    if detach:  # the target is a constant for autograd but not for finite differences: check g only
        assert torch.autograd.gradcheck(
            lambda graw: ours(f, graw, h), (graw.requires_grad_(),), fast_mode=True
        )
    else:
        assert torch.autograd.gradcheck(
            ours, (f.requires_grad_(), graw.requires_grad_(), h.requires_grad_()), fast_mode=True
        )


@pytest.mark.parametrize("source", ["f", "h"])
def test_detach_true_sends_no_sync_gradient_to_the_source_head(source):
    f, graw, h, y = _inputs(seed=7)
    g = torch.sigmoid(graw)
    sn = SelectiveNetLoss(0.8)
    idx = 0 if source == "f" else 1

    def grad_of_source(loss_fn):
        ff, hh = f.clone().requires_grad_(True), h.clone().requires_grad_(True)
        val = loss_fn(SelectiveOutput(ff, g, hh), y)
        return torch.autograd.grad(val, (ff, hh))[idx]

    base = grad_of_source(sn)
    detached = grad_of_source(SyncLoss(0.8, mu=5.0, source=source, detach=True))
    flowing = grad_of_source(SyncLoss(0.8, mu=5.0, source=source, detach=False))
    torch.testing.assert_close(detached, base)  # the sync term adds nothing to the head
    assert (flowing - base).abs().max() > 1e-3  # ...unless gradients are allowed to flow


def test_sync_mu_zero_equals_selectivenet():
    f, graw, h, y = _inputs(seed=8)
    out = SelectiveOutput(f, torch.sigmoid(graw), h)
    torch.testing.assert_close(SyncLoss(0.6, 0.0)(out, y), SelectiveNetLoss(0.6)(out, y))


def test_sync_prior_replaces_the_head_probabilities():
    f, graw, h, y = _inputs(seed=9)
    g = torch.sigmoid(graw)
    loss = SyncLoss(0.8, 2.0, score="smp", gamma=2.0)
    from_head = loss(SelectiveOutput(f, g, h), y)
    from_prior = loss(SelectiveOutput(f, g, h), y, prior=torch.softmax(f, -1))
    torch.testing.assert_close(from_prior, from_head)
    # an external prior: the target is score(prior), written out
    prior = torch.softmax(torch.randn(B, C, dtype=torch.float64), -1)
    val = loss(SelectiveOutput(f, g, h), y, prior=prior)
    sn = SelectiveNetLoss(0.8)(SelectiveOutput(f, g, h), y)
    torch.testing.assert_close(val, sn + 2.0 * ((g - prior.max(-1).values ** 2) ** 2).mean())


def test_sync_prior_gradient_follows_detach():
    f, graw, h, y = _inputs(seed=10)
    g = torch.sigmoid(graw)
    prior = torch.softmax(torch.randn(B, C, dtype=torch.float64), -1).requires_grad_(True)
    val = SyncLoss(0.8, 1.0, detach=True)(SelectiveOutput(f, g, h), y, prior=prior)
    assert val.grad_fn is None  # nothing upstream requires grad once the prior is detached
    val = SyncLoss(0.8, 1.0, detach=False)(SelectiveOutput(f, g, h), y, prior=prior)
    (gp,) = torch.autograd.grad(val, prior)
    assert float(gp.abs().max()) > 0


def test_sync_prior_broadcast_over_members_equals_expanded_prior():
    M = 3
    f, graw, h, y = _inputs(seed=11, m=M)
    out = SelectiveOutput(f, torch.sigmoid(graw), h)
    prior = torch.softmax(torch.randn(B, C, dtype=torch.float64), -1)
    loss = SyncLoss(0.8, 1.5, score="sr")
    a = loss(out, y, prior=prior)
    b = loss(out, y, prior=prior.unsqueeze(1).expand(B, M, C))
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="prior must have shape"):
        loss(out, y, prior=prior[:, :2])


# --- Deep Gamblers --------------------------------------------------------------------------


def _dg_reference(z, y, o):
    p = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)  # softmax written out
    return torch.stack([-torch.log(p[i, y[i]] + p[i, -1] / o) for i in range(len(y))]).mean()


@pytest.mark.parametrize("reward", [1.2, 2.5, 4.0])
def test_deep_gamblers_equals_equation_with_gradients(reward):
    gen = torch.Generator().manual_seed(12)
    z = torch.randn(B, C + 1, generator=gen, dtype=torch.float64) * 2
    y = torch.randint(0, C, (B,), generator=gen)
    loss = DeepGamblersLoss(reward)
    v1, g1 = _grads(lambda z: loss(z, y), z)
    v2, g2 = _grads(lambda z: _dg_reference(z, y, reward), z)
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(g1[0], g2[0])
    assert torch.autograd.gradcheck(lambda z: loss(z, y), (z.requires_grad_(),), fast_mode=True)
    torch.testing.assert_close(loss.last["abstain"], torch.softmax(z, -1)[:, -1].mean().detach())


def test_deep_gamblers_warmup_is_cross_entropy_on_first_k_outputs():
    gen = torch.Generator().manual_seed(13)
    z = torch.randn(B, C + 1, generator=gen, dtype=torch.float64)
    y = torch.randint(0, C, (B,), generator=gen)
    loss = DeepGamblersLoss(2.0, warmup_epochs=2)
    ce = _ce_loop(z[:, :C], y).mean()
    dg = _dg_reference(z, y, 2.0)
    torch.testing.assert_close(loss(z, y), ce)  # epoch 0
    loss.set_epoch(1)
    torch.testing.assert_close(loss(z, y), ce)
    assert float(loss.last["warmup"]) == 1.0
    loss.set_epoch(2)
    torch.testing.assert_close(loss(z, y), dg)
    assert float(loss.last["warmup"]) == 0.0
    torch.testing.assert_close(loss(z, y, epoch=0), ce)  # per-call override
    assert loss.epoch == 2
    # member logits: mean over members
    zm = torch.stack([z, z.flip(0)], dim=1)
    torch.testing.assert_close(loss(zm, y), (dg + _dg_reference(z.flip(0), y, 2.0)) / 2)


def test_sync_entropy_gradient_is_finite_when_softmax_underflows():
    f = torch.tensor(
        [[0.0, -200.0, 1.0], [3.0, 0.0, -150.0]], requires_grad=True
    )  # float32: p underflows to 0
    g = torch.tensor([0.4, 0.7], requires_grad=True)
    out = SelectiveOutput(f, g, f.detach())
    SyncLoss(0.5, 1.0, score="entropy", detach=False)(out, torch.tensor([0, 0])).backward()
    assert bool(torch.isfinite(f.grad).all()) and bool(torch.isfinite(g.grad).all())


def test_narrow_integer_labels_give_the_int64_losses():
    f, graw, h, y = _inputs(seed=7, m=2)
    out = SelectiveOutput(f, torch.sigmoid(graw), h)
    for loss in (SelectiveNetLoss(0.7), SyncLoss(0.7, mu=0.5)):
        for dtype in (torch.int32, torch.uint8):
            torch.testing.assert_close(loss(out, y.to(dtype)), loss(out, y), rtol=0, atol=0)
    z = torch.randn(B, C + 1, dtype=torch.float64)
    dg = DeepGamblersLoss(2.0)
    torch.testing.assert_close(dg(z, y.to(torch.uint8)), dg(z, y), rtol=0, atol=0)
