"""Ensembles: DeepEnsemble, Packed / BatchEnsemble ResNets against explicit members, build_ensemble."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ensemblize.models.ensembles import (
    BatchEnsembleLayers,
    DeepEnsemble,
    PackedLayers,
    count_parameters,
)
from ensemblize.models.registry import ENSEMBLE_METHODS, LAYERED_MODELS, build_ensemble, build_model
from ensemblize.models.resnet import resnet_small
from ensemblize.models.wide_resnet import WideResNet


def _randomise_bn_(model: nn.Module) -> None:
    """Give every batch norm non-trivial affine parameters and running statistics."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 1.5)


def test_deep_ensemble_member_equals_model_alone_forward_and_backward():
    torch.manual_seed(0)
    models = [resnet_small(in_channels=1, num_classes=5, width=4) for _ in range(3)]
    ens = DeepEnsemble(models)
    assert ens.members == 3
    x = torch.randn(4, 1, 8, 8)
    y = ens(x)  # train mode: every member uses its own batch statistics, as alone
    assert y.shape == (4, 3, 5)
    for m, model in enumerate(models):
        torch.testing.assert_close(y[:, m], model(x))
    ens.zero_grad()
    ens(x)[:, 1].square().sum().backward()
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in models[0].parameters())
    grads = [p.grad.clone() for p in models[1].parameters()]
    models[1].zero_grad()
    models[1](x).square().sum().backward()
    for g, p in zip(grads, models[1].parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)


def test_deep_ensemble_rejects_bad_members():
    lin = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="at least one"):
        DeepEnsemble([])
    with pytest.raises(ValueError, match=r"models\[1\] is the same object"):
        DeepEnsemble([lin, lin])
    with pytest.raises(TypeError, match=r"models\[1\] must be a torch.nn.Module"):
        DeepEnsemble([lin, "x"])


def _member_state(packed: nn.Module, members: int, m: int) -> dict[str, torch.Tensor]:
    """Member m's slice of every packed tensor (gamma = 1: each group is one member)."""
    return {
        k: (v if v.dim() == 0 else v.chunk(members, dim=0)[m].clone()) for k, v in packed.state_dict().items()
    }


@pytest.mark.parametrize("train", [True, False])
def test_packed_resnet_equals_independent_narrow_resnets(train):
    # PE(alpha=2, M=4, gamma=1) of resnet_small(width=16): member m is a plain resnet_small of width
    # alpha·16/M = 8, whose parameters are member m's channel slices
    torch.manual_seed(0)
    members = 4
    packed = resnet_small(
        in_channels=3, num_classes=6, width=16, layers=PackedLayers(members=members, alpha=2.0)
    )
    _randomise_bn_(packed)
    packed.train(train)
    plain = []
    for m in range(members):
        net = resnet_small(in_channels=3, num_classes=6, width=8)
        net.load_state_dict(_member_state(packed, members, m))
        plain.append(net.train(train))
    x = torch.randn(5, 3, 8, 8)
    y = packed(x)
    assert y.shape == (5, members, 6)
    for m in range(members):
        torch.testing.assert_close(y[:, m], plain[m](x), atol=1e-5, rtol=1e-4)
    # backward: the gradient of member 2's output reaches only member 2's slices, with its values
    packed.zero_grad()
    packed(x)[:, 2].square().sum().backward()
    plain[2].zero_grad()
    plain[2](x).square().sum().backward()
    ref = dict(plain[2].named_parameters())
    for name, p in packed.named_parameters():
        chunks = p.grad.chunk(members, dim=0)
        torch.testing.assert_close(chunks[2], ref[name].grad, atol=1e-5, rtol=1e-4)
        for k in (0, 1, 3):
            assert chunks[k].abs().max() == 0, name


def test_packed_wide_resnet_equals_independent_members():
    torch.manual_seed(1)
    members = 2
    packed = WideResNet(
        depth=10, widen_factor=1, in_channels=1, num_classes=3, layers=PackedLayers(members=2)
    )
    _randomise_bn_(packed)
    packed.eval()
    x = torch.randn(3, 1, 8, 8)
    y = packed(x)
    for m in range(members):  # alpha = M = 2: each member is a full-width WRN-10-1
        net = WideResNet(depth=10, widen_factor=1, in_channels=1, num_classes=3)
        net.load_state_dict(_member_state(packed, members, m))
        torch.testing.assert_close(y[:, m], net.eval()(x), atol=1e-5, rtol=1e-4)


def test_packed_gamma_is_passed_through_and_bad_gamma_raises():
    model = build_ensemble(
        "packed",
        "resnet_small",
        members=2,
        in_channels=1,
        num_classes=10,
        image_size=8,
        alpha=2,
        gamma=2,
        width=8,
    )
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs[0].groups == 1 and all(c.groups == 4 for c in convs[1:])
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 2, 10)
    with pytest.raises(
        ValueError, match=r"4->4 .*gamma in \[1, 2, 4\]"
    ):  # 12 packed channels, groups 3·gamma
        build_ensemble(
            "packed",
            "resnet_small",
            members=3,
            in_channels=1,
            num_classes=10,
            image_size=8,
            alpha=3,
            gamma=3,
            width=4,
        )
    with pytest.raises(ValueError, match=r"members=3"):
        build_ensemble("packed", "resnet_small", members=3, in_channels=1, num_classes=10, image_size=8)


def test_batchensemble_resnet_member_equals_plain_resnet_with_member_weights():
    pytest.importorskip("ensemblize.nn.batch_ensemble")
    from ensemblize.nn.batch_ensemble import BatchEnsembleConv2d

    torch.manual_seed(0)
    members = 3
    be = resnet_small(in_channels=1, num_classes=4, width=4, layers=BatchEnsembleLayers(members=members))
    _randomise_bn_(be)
    be.eval()  # train-mode BN statistics are shared by the members (see BatchEnsembleLayers)
    x = torch.randn(5, 1, 8, 8)
    y = be(x)
    assert y.shape == (5, members, 4)
    for m in range(members):
        net = resnet_small(in_channels=1, num_classes=4, width=4).eval()
        with torch.no_grad():
            for name, mod in be.named_modules():
                if isinstance(mod, BatchEnsembleConv2d):
                    net.get_submodule(name).weight.copy_(mod.member_weights()[m])
                elif isinstance(mod, nn.BatchNorm2d):
                    net.get_submodule(name).load_state_dict(mod.state_dict())
            net.head.weight.copy_(be.head.linear.member_weights()[m])
            net.head.bias.copy_(be.head.linear.bias[m])
        torch.testing.assert_close(y[:, m], net(x), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(y[:, 0], y[:, 1])


SMALL = {
    "resnet_small": {"width": 4},
    "resnet18": {"width": 4},
    "wrn28": {"widen_factor": 1},
    "vit_small": {"dim": 16, "depth": 1, "heads": 2},
}


@pytest.mark.parametrize("method", ENSEMBLE_METHODS)
@pytest.mark.parametrize("name", ["resnet_small", "wrn28", "vit_small"])
def test_build_ensemble_outputs_member_axis(method, name):
    if method == "sigma":
        pytest.importorskip("ensemblize.convert")
    members = 1 if method == "single" else 2
    kw = dict(members=members, in_channels=3, num_classes=5, image_size=8, **SMALL[name])
    if method in ("packed", "batchensemble") and name not in LAYERED_MODELS:
        with pytest.raises(ValueError, match="supports the models"):
            build_ensemble(method, name, **kw)
        return
    torch.manual_seed(0)
    model = build_ensemble(method, name, **kw)
    y = model(torch.randn(4, 3, 8, 8))
    assert y.shape == (4, members, 5)
    assert torch.isfinite(y).all()
    assert count_parameters(model) > 0


def test_single_and_sigma_keep_the_backbone_function():
    pytest.importorskip("ensemblize.convert")
    x = torch.randn(3, 1, 8, 8)
    torch.manual_seed(0)
    plain = build_model("resnet_small", in_channels=1, num_classes=4, image_size=8, width=4).eval()
    for method, members, extra in [("single", 1, {}), ("sigma", 3, {"noise": 0.0})]:
        torch.manual_seed(0)
        ens = build_ensemble(
            method,
            "resnet_small",
            members=members,
            in_channels=1,
            num_classes=4,
            image_size=8,
            width=4,
            **extra,
        ).eval()
        y = ens(x)
        for m in range(members):
            torch.testing.assert_close(y[:, m], plain(x), atol=1e-5, rtol=1e-5)


def test_deep_ensemble_members_are_independently_initialised():
    torch.manual_seed(0)
    ens = build_ensemble(
        "deep", "resnet_small", members=2, in_channels=1, num_classes=4, image_size=8, width=4
    )
    assert not torch.equal(ens.models[0].head.weight, ens.models[1].head.weight)
    assert count_parameters(ens) == 2 * count_parameters(ens.models[0])


def test_parameter_counts_packed_matches_single_at_alpha2_m4():
    # PE(2, 4, 1): (alpha·C)² / M = C² per conv, so about the single model's size (classic PE result)
    kw = dict(in_channels=3, num_classes=10, image_size=32)
    single = count_parameters(build_model("resnet18", **kw))
    packed = count_parameters(build_ensemble("packed", "resnet18", members=4, **kw))
    assert single == 11_173_962
    assert packed == 11_190_440
    assert abs(packed - single) / single < 0.01


def test_count_parameters():
    lin = nn.Linear(3, 4)
    seq = nn.Sequential(lin, lin)  # shared module counted once
    assert count_parameters(seq) == 16
    lin.bias.requires_grad_(False)
    assert count_parameters(seq, trainable_only=True) == 12
    with pytest.raises(TypeError, match="nn.Module"):
        count_parameters([lin])


def test_build_ensemble_bad_arguments():
    kw = dict(in_channels=1, num_classes=4, image_size=8)
    with pytest.raises(ValueError, match="unknown ensemble method 'bagging'"):
        build_ensemble("bagging", "resnet_small", members=2, **kw)
    with pytest.raises(ValueError, match="exactly one member; got members=4"):
        build_ensemble("single", "resnet_small", members=4, **kw)
    with pytest.raises(ValueError, match="members must be >= 1"):
        build_ensemble("deep", "resnet_small", members=0, **kw)
    with pytest.raises(TypeError, match="alpha"):
        build_ensemble("deep", "resnet_small", members=2, alpha=2, **kw)
