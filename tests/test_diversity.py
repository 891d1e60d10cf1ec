"""The softmax-temperature regulariser: its equation, and what it does to the gates on its own."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemblize as ez
from ensemblize.diversity import optimal_owners, sharing, softmax_temperature_loss, uniform_gate_loss
from ensemblize.nn import SigmaBatchNorm1d, SigmaBatchNorm2d, SigmaLayerNorm

TAUS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


def test_loss_equals_its_equation_term_by_term():
    torch.manual_seed(0)
    model = torch.nn.Sequential(SigmaBatchNorm2d(3, 4), SigmaLayerNorm(5, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    tau, lam = 0.3, 0.7
    ref = 0.0
    for layer in model:
        g = torch.sigmoid(layer.gate_logits).tolist()  # (M, C)
        M, C = len(g), len(g[0])
        for i in range(C):
            z = [math.exp(g[m][i] / tau) for m in range(M)]
            ref += sum(math.log(z[m] / sum(z)) for m in range(M))
    assert softmax_temperature_loss(model, tau, lam).item() == pytest.approx(lam * ref, rel=1e-5)
    # a chosen subset of layers
    only_ln = softmax_temperature_loss(model, tau, lam, layers=["1"])
    assert only_ln.item() == pytest.approx(
        lam * torch.log_softmax(torch.sigmoid(model[1].gate_logits) / tau, dim=0).sum().item(), rel=1e-6
    )
    # equal gates give the uniform value −λ·C·M·log M
    with torch.no_grad():
        for layer in model:
            layer.gate_logits.fill_(0.3)
    assert softmax_temperature_loss(model, tau, lam).item() == pytest.approx(
        uniform_gate_loss(model, lam), rel=1e-6
    )


def test_loss_is_differentiable_and_validates_arguments():
    layer = SigmaBatchNorm1d(4, 3)
    with torch.no_grad():
        layer.gate_logits.normal_()
    softmax_temperature_loss(layer, 0.5, 1.0).backward()
    assert layer.gate_logits.grad is not None and layer.gate_logits.grad.abs().sum() > 0
    for bad in (0.0, -1.0, float("nan"), 1e-300):
        with pytest.raises(ValueError, match="tau"):
            softmax_temperature_loss(layer, bad, 1.0)
    assert torch.isfinite(softmax_temperature_loss(layer, 1e-12, 1.0))  # the smallest accepted τ
    with pytest.raises(ValueError, match="lam"):
        softmax_temperature_loss(layer, 1.0, -0.1)
    with pytest.raises(ValueError, match="no σNorm layer"):
        softmax_temperature_loss(torch.nn.Linear(2, 2), 1.0, 1.0)
    with pytest.raises(ValueError, match="unknown σNorm layer"):
        softmax_temperature_loss(layer, 1.0, 1.0, layers=["nope"])


def _settle(members, tau, *, lam=1.0, optimizer="adam", steps=400, features=128, seed=0, lr=0.05):
    """Optimise the regulariser alone from random gates; return (layer, loss history)."""
    torch.manual_seed(seed)
    layer = SigmaBatchNorm1d(features, members)
    with torch.no_grad():
        layer.gate_logits.normal_(0.0, 1.0)
    if optimizer == "adam":
        opt = torch.optim.Adam([layer.gate_logits], lr=lr)
    else:
        opt = torch.optim.SGD([layer.gate_logits], lr=lr)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        loss = softmax_temperature_loss(layer, tau, lam)
        loss.backward()
        opt.step()
        history.append(loss.item())
    return layer, history


@pytest.mark.parametrize("members", [4, 8])
def test_regulariser_alone_with_adam(members):
    owners, gaps = [], []
    for tau in TAUS:
        layer, hist = _settle(members, tau)
        s = sharing(layer)[0]
        assert s.binary_fraction > 0.99, (tau, s.binary_fraction)  # the gates become binary
        owners.append(s.mean_owners)
        gaps.append((uniform_gate_loss(layer, 1.0) - hist[-1]) / layer.num_gated)
        if tau == 0.05:
            hist_counts = s.histogram.tolist()
            # one owner is the most common outcome; under Adam a strict majority only for M = 4
            assert max(range(len(hist_counts)), key=hist_counts.__getitem__) == 1, hist_counts
            if members == 4:
                assert s.single_owner_fraction > 0.5
    # owners per feature rise with τ (from ~1 towards M/2, the limit of the loss's minimiser)
    assert all(b >= a - 0.02 for a, b in zip(owners, owners[1:], strict=False)), owners
    assert owners[-1] - owners[0] > 0.5 * members / 2 - 1
    assert abs(owners[-1] - members / 2) < 0.25 and optimal_owners(5.0, members) < members / 2
    # the gap to the uniform-gate value shrinks as τ grows
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False)), gaps


def test_sgd_partitions_hard_at_low_tau_for_eight_members():
    """Without Adam's per-coordinate normalisation near-ties resolve: one owner almost everywhere."""
    layer, _ = _settle(8, 0.05, optimizer="sgd", lr=0.0025, steps=600)
    assert sharing(layer)[0].single_owner_fraction > 0.85


def test_lambda_changes_speed_not_destination():
    """With plain SGD λ scales the step; the settled sharing is the same, reached sooner for larger λ."""
    settled = {}
    for lam in (0.25, 1.0):
        layer, hist = _settle(4, 0.25, lam=lam, optimizer="sgd", lr=0.02, steps=800)
        final = hist[-1] / lam
        normalised = [h / lam for h in hist]
        # first step within 1 % of the final (λ-normalised) value
        settle_step = next(i for i, v in enumerate(normalised) if abs(v - final) <= 0.01 * abs(final))
        settled[lam] = (sharing(layer)[0].mean_owners, settle_step)
    (own_lo, step_lo), (own_hi, step_hi) = settled[0.25], settled[1.0]
    assert abs(own_lo - own_hi) < 0.1, settled
    assert step_hi < step_lo, settled
    # Adam is invariant to the loss scale, so with the regulariser alone λ changes nothing at all
    a, _ = _settle(4, 0.25, lam=0.25)
    b, _ = _settle(4, 0.25, lam=4.0)
    assert abs(sharing(a)[0].mean_owners - sharing(b)[0].mean_owners) < 0.05


def test_sharing_reports_hard_and_soft_counts():
    layer = SigmaBatchNorm1d(3, 4)
    with torch.no_grad():
        layer.gate_logits.copy_(torch.tensor([[9.0, -9, 9], [-9, -9, 9], [-9, -9, 9], [-9, 9, -9]]))
    (s,) = sharing(layer)
    assert s.owners.tolist() == [1, 1, 3]
    assert s.histogram.tolist() == [0, 2, 0, 1, 0]
    torch.testing.assert_close(s.soft_owners, torch.sigmoid(layer.gate_logits).sum(0))
    assert s.binary_fraction == 1.0 and s.to_dict()["mean_owners"] == pytest.approx(5 / 3)


@settings(max_examples=60, deadline=None)
@given(
    gate_init=st.floats(-9.9, 9.9, allow_nan=False),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
)
def test_a_noise_free_conversion_has_m_owners_at_threshold_sigma_of_its_gate_init(gate_init, dtype):
    """The documented recipe: threshold=σ(γ₀) after noise=0 counts every member as an owner. In float32
    the gates rounded just below the float64 σ(γ₀) (γ₀ = -2.5, -0.1: 0 owners instead of M)."""
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8)).to(dtype)
    ens = ez.sigma_ensemble(net, members=4, noise=0.0, gate_init=gate_init)
    (s,) = sharing(ens, threshold=1.0 / (1.0 + math.exp(-gate_init)))
    assert s.owners.tolist() == [4] * 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_ownership_tolerance_is_two_units_in_the_last_place_of_the_gates_dtype(dtype):
    """4·eps·threshold was 0.0156 in bfloat16: a gate of 0.492 owned at threshold 0.5."""
    eps = torch.finfo(dtype).eps
    below = 0.5 - eps / 4  # one unit in the last place under 1/2 (the binade [1/4, 1/2))
    layer = SigmaBatchNorm1d(4, 1).to(dtype)
    with torch.no_grad():
        gates = torch.tensor([0.5, below, 0.5 - 2 * eps / 4, 0.5 - 3 * eps / 4], dtype=torch.float64)
        layer.gate_logits.copy_(torch.logit(gates).to(dtype)[None])
    g = layer.gates().detach().double()[0]
    want = (g >= 0.5 - 2 * eps / 4).int().tolist()
    assert want[0] == 1 and want[-1] == 0  # the cases span the boundary
    assert sharing(layer, threshold=0.5)[0].owners.tolist() == want
    if dtype == torch.bfloat16:
        with torch.no_grad():
            layer.gate_logits.fill_(-0.03)  # gate 0.4922: 4 units under 1/2
        assert sharing(layer, threshold=0.5)[0].owners.tolist() == [0] * 4


def test_regulariser_reaches_the_layers_of_a_converted_model():
    net = torch.nn.Sequential(
        torch.nn.Linear(3, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2), torch.nn.LayerNorm(2)
    )
    ens = ez.sigma_ensemble(net, members=3)
    names = [s.name for s in sharing(ens)]
    assert names == ["backbone.1", "backbone.3"]
    assert softmax_temperature_loss(ens, 1.0, 1.0).requires_grad


def test_regulariser_over_layers_of_different_members_and_dtypes_equals_the_per_layer_sum():
    """One concatenated evaluation per (members, dtype) group: value and every layer's gradient as
    layer by layer (to rounding: a feature's column may take the kernel's vectorised or scalar path)."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        SigmaBatchNorm2d(3, 4), SigmaLayerNorm(5, 2), SigmaBatchNorm1d(6, 4), SigmaLayerNorm(2, 4).double()
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 2.0)
    tau, lam = 0.4, 0.3
    got = softmax_temperature_loss(model, tau, lam)
    got.backward()
    for layer in model:
        ref_logits = layer.gate_logits.detach().clone().requires_grad_(True)
        ref = lam * torch.log_softmax(torch.sigmoid(ref_logits) / tau, dim=0).sum()
        ref.backward()
        torch.testing.assert_close(layer.gate_logits.grad, ref_logits.grad, rtol=1e-6, atol=1e-9)
    ref_total = sum(
        lam * torch.log_softmax(torch.sigmoid(layer.gate_logits.double()) / tau, dim=0).sum().item()
        for layer in model
    )
    assert got.item() == pytest.approx(ref_total, rel=1e-6)
