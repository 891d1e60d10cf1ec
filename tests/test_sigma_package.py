"""The σN package: one home per piece, the ownership rule at exactly ½, and named errors for bad knobs."""

import math

import numpy as np
import pytest
import torch

import ensemblize as ez
import ensemblize.convert as old_convert
import ensemblize.diversity as contract_diversity
from ensemblize import sigma
from ensemblize.nn import SigmaBatchNorm1d
from ensemblize.sigma.convert import GATE_INIT_BOUND


def _net():
    return torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))


def test_every_path_resolves_to_one_definition():
    assert ez.sigma_ensemble is sigma.sigma_ensemble is old_convert.sigma_ensemble
    assert contract_diversity.softmax_temperature_loss is sigma.softmax_temperature_loss
    assert contract_diversity.sharing is sigma.sharing
    assert contract_diversity.sigma_layers is sigma.sigma_layers
    ens = sigma.sigma_ensemble(_net(), members=2, seed=0)
    assert ens.sigma_layers() == sigma.sigma_layers(ens)


@pytest.mark.parametrize("members", [1, 3, 5])
def test_noise_zero_conversion_counts_every_member_as_owner(members):
    """Gates of exactly ½ count as owned (rule: gate ≥ threshold), so identical members share everything."""
    ens = sigma.sigma_ensemble(_net(), members=members, noise=0.0)
    (s,) = sigma.sharing(ens)
    assert s.owners.tolist() == [members] * 6
    assert s.histogram.tolist() == [0] * members + [6]
    assert s.mean_owners == members and s.to_dict()["threshold"] == 0.5
    assert s.soft_owners.tolist() == [members * 0.5] * 6


def test_ownership_is_gate_at_least_threshold():
    layer = SigmaBatchNorm1d(4, 3)
    with torch.no_grad():  # gates: exactly ½, just below, just above, well above
        layer.gate_logits.copy_(torch.tensor([[0.0, -1e-3, 1e-3, 3.0]] * 3))
    (s,) = sigma.sharing(layer)
    assert s.owners.tolist() == [3, 0, 3, 3]
    (hi,) = sigma.sharing(layer, threshold=float(torch.sigmoid(torch.tensor(3.0))))
    assert hi.owners.tolist() == [0, 0, 0, 3]


@pytest.mark.parametrize("bad", [2, 0, 1, -0.5, float("nan"), float("inf")])
def test_sharing_threshold_outside_open_unit_interval_is_a_named_error(bad):
    with pytest.raises(ValueError, match="threshold"):
        sigma.sharing(SigmaBatchNorm1d(2, 2), threshold=bad)


@pytest.mark.parametrize("bad", ["0.5", None, True])
def test_sharing_threshold_of_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="threshold"):
        sigma.sharing(SigmaBatchNorm1d(2, 2), threshold=bad)


@pytest.mark.parametrize(
    "gate_init", [float("nan"), -200.0, 200.0, float("inf"), -float("inf"), GATE_INIT_BOUND + 1e-9]
)
def test_gate_init_nan_infinite_or_saturated_is_a_named_error(gate_init):
    with pytest.raises(ValueError, match="gate_init"):
        ez.sigma_ensemble(_net(), members=2, gate_init=gate_init)
    with pytest.raises(ValueError, match="gate_init"):
        sigma.convert_norms(_net(), members=2, gate_init=gate_init)


def test_gate_init_within_bound_is_function_preserving():
    torch.manual_seed(0)
    net = _net().eval()
    x = torch.randn(5, 3)
    for g0 in (-GATE_INIT_BOUND, -3.0, 2.5, GATE_INIT_BOUND):
        ens = ez.sigma_ensemble(net, members=3, noise=0.0, gate_init=g0).eval()
        out = ens(x)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, net(x).unsqueeze(1).expand(-1, 3, -1), rtol=1e-4, atol=1e-4)


def test_gate_init_of_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="gate_init"):
        ez.sigma_ensemble(_net(), members=2, gate_init="0")


@pytest.mark.parametrize("members", [np.int64(2), np.int32(3), torch.tensor(2).item()])
def test_numpy_integer_members_are_accepted_everywhere(members):
    ens = ez.sigma_ensemble(_net(), members=members, seed=0)
    assert type(ens.members) is int and ens.members == int(members)
    assert ens(torch.randn(4, 3)).shape == (4, int(members), 2)
    assert ez.nn.SigmaBatchNorm1d(3, members).members == int(members)
    assert ez.nn.BatchEnsembleLinear(2, 3, members).members == int(members)
    assert ez.nn.PackedLinear(4, 4, members, 3, first=True).members == int(members)
    assert ez.nn.PackedConv2d(4, 4, 3, members, 3, first=True).members == int(members)
    assert ez.members.expand(torch.zeros(2, 3), members).shape == (2, int(members), 3)


@pytest.mark.parametrize(
    ("members", "exc"), [(0, ValueError), (2.0, TypeError), (True, TypeError), ("2", TypeError)]
)
def test_bad_members_are_named_errors(members, exc):
    with pytest.raises(exc, match="members"):
        ez.sigma_ensemble(_net(), members=members)


@pytest.mark.parametrize(("seed", "exc"), [(-1, ValueError), (1.5, TypeError)])
def test_bad_seed_is_a_named_error(seed, exc):
    with pytest.raises(exc, match="seed"):
        ez.sigma_ensemble(_net(), members=2, seed=seed)


def test_layer_selection_by_a_single_string_is_a_type_error():
    ens = ez.sigma_ensemble(_net(), members=2)
    with pytest.raises(TypeError, match="layers"):
        sigma.softmax_temperature_loss(ens, 1.0, 1.0, layers="backbone.1")
    with pytest.raises(TypeError, match="model"):
        sigma.sigma_layers("not a module")


def test_optimal_owners_limits():
    # k* → M·τ as τ → 0 (1/(e^{1/τ} − 1) vanishes), and → M/2 as τ → ∞
    assert sigma.optimal_owners(1e-4, 4) == pytest.approx(4e-4)
    assert sigma.optimal_owners(1e4, 4) == pytest.approx(2.0, abs=1e-3)
    assert sigma.optimal_owners(1.0, 4) == pytest.approx(4 * (1 - 1 / math.expm1(1.0)))
    assert sigma.optimal_owners(1.0, np.int64(4)) == sigma.optimal_owners(1.0, 4)


def test_members_are_bounded_before_allocation():
    from ensemblize.members import MAX_MEMBERS

    with pytest.raises(ValueError, match=f"members must be <= {MAX_MEMBERS}, got 1000000000"):
        ez.sigma_ensemble(_net(), members=10**9)
    with pytest.raises(ValueError, match="members must be <="):
        ez.nn.BatchEnsembleLinear(2, 2, MAX_MEMBERS + 1)
