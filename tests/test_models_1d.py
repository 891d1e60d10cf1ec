"""1-D backbones (ResNet1d, Transformer1d): values of the adapters, σN conversion, registry, errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ensemblize as ez
from ensemblize.models.ensembles import PackedLayers
from ensemblize.models.registry import ENSEMBLE_METHODS, SIGNAL_MODELS, build_ensemble, build_model
from ensemblize.models.resnet1d import Conv1dAs2d, resnet1d
from ensemblize.models.transformer1d import Transformer1d

TINY = {"resnet1d": {"width": 4}, "transformer1d": {"dim": 16, "depth": 2, "heads": 2}}
NORM = {"resnet1d": nn.BatchNorm1d, "transformer1d": nn.LayerNorm}


def _model(name: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, in_channels=1, num_classes=10, image_size=40, **{**TINY[name], **kw})


def _warm(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Move BatchNorm running statistics (and nothing else) away from their initial values."""
    model.train()
    with torch.no_grad():
        model(x)
    return model.eval()


def test_conv1d_as_2d_equals_conv1d_with_the_same_weights():
    torch.manual_seed(0)
    conv1 = nn.Conv1d(3, 5, 3, stride=2, padding=1)
    conv2 = nn.Conv2d(3, 5, (1, 3), stride=(1, 2), padding=(0, 1))
    with torch.no_grad():
        conv2.weight.copy_(conv1.weight.unsqueeze(2))
        conv2.bias.copy_(conv1.bias)
    x = torch.randn(4, 3, 11)
    torch.testing.assert_close(Conv1dAs2d(conv2)(x), conv1(x), atol=1e-6, rtol=1e-6)


def test_resnet1d_stages_halve_the_length_and_norms_are_batchnorm1d():
    model = _model("resnet1d")
    lengths = []
    for stage in model.stages:
        stage.register_forward_hook(lambda _m, _i, out: lengths.append(out.shape[-1]))
    model.eval()(torch.randn(2, 1, 40))
    assert lengths == [40, 20, 10]
    assert sum(isinstance(m, nn.BatchNorm1d) for m in model.modules()) == 9  # stem + 2·3 blocks + 2 shortcuts
    assert not any(isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) for m in model.modules())


def test_transformer1d_has_2_depth_plus_1_layernorms_and_checks_its_input():
    model = _model("transformer1d")
    assert sum(isinstance(m, nn.LayerNorm) for m in model.modules()) == 2 * 2 + 1
    with pytest.raises(ValueError, match=r"expects \(B, 1, 40\)"):
        model(torch.randn(2, 1, 36))
    with pytest.raises(ValueError, match="patch_size=3 does not divide length=40"):
        Transformer1d(length=40, patch_size=3)
    with pytest.raises(ValueError, match="divisible by heads"):
        Transformer1d(length=40, dim=10, heads=3)


@pytest.mark.parametrize("name", SIGNAL_MODELS)
def test_eval_output_does_not_depend_on_batch_composition(name):
    x = torch.randn(6, 1, 40)
    model = _warm(_model(name), x)
    with torch.no_grad():
        y = model(x)
        assert y.shape == (6, 10) and torch.isfinite(y).all()
        perm = torch.tensor([3, 0, 5, 1, 4, 2])
        torch.testing.assert_close(model(x[perm]), y[perm], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model(x[2:3]), y[2:3], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", SIGNAL_MODELS)
def test_sigma_ensemble_with_noise_0_is_function_preserving(name):
    x = torch.randn(5, 1, 40)
    model = _warm(_model(name), x)
    ens = ez.sigma_ensemble(model, members=3, noise=0.0).eval()
    converted = sum(isinstance(m, NORM[name]) for m in ens.modules())
    assert converted == 0  # every norm became its σNorm twin
    with torch.no_grad():
        out = ens(x)
        ref = model(x)
    assert out.shape == (5, 3, 10)
    for m in range(3):
        torch.testing.assert_close(out[:, m], ref, atol=1e-5, rtol=1e-5)
    # train mode (batch statistics) too: every member equals the plain model on the same batch
    ens.train()
    model.train()
    with torch.no_grad():
        out, ref = ens(x), model(x)
    for m in range(3):
        torch.testing.assert_close(out[:, m], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", SIGNAL_MODELS)
def test_sigma_ensemble_members_differ_with_noise(name):
    x = torch.randn(5, 1, 40)
    model = _warm(_model(name), x)
    torch.manual_seed(1)
    ens = ez.sigma_ensemble(model, members=3, noise=0.5).eval()
    with torch.no_grad():
        out = ens(x)
    assert (out[:, 0] - out[:, 1]).abs().max() > 1e-3
    assert (out[:, 1] - out[:, 2]).abs().max() > 1e-3


def test_packed_resnet1d_with_one_member_and_alpha_1_equals_the_plain_resnet1d():
    x = torch.randn(4, 1, 40)
    plain = resnet1d(width=4)
    packed = resnet1d(width=4, layers=PackedLayers(members=1, alpha=1.0, gamma=1))
    plain_params, packed_params = list(plain.parameters()), list(packed.parameters())
    assert len(plain_params) == len(packed_params)
    with torch.no_grad():
        for p, q in zip(plain_params, packed_params, strict=True):
            q.copy_(p.reshape(q.shape))  # (out, in, k) -> (out, in, 1, k)
    _warm(plain, x)
    _warm(packed, x)
    with torch.no_grad():
        torch.testing.assert_close(packed(x)[:, 0], plain(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ENSEMBLE_METHODS)
def test_every_ensemble_method_builds_resnet1d(method):
    members = 1 if method == "single" else 2
    torch.manual_seed(0)
    ens = build_ensemble(
        method, "resnet1d", members=members, in_channels=1, num_classes=10, image_size=40, width=4
    )
    x = torch.randn(4, 1, 40)
    out = _warm(ens, x)(x)
    assert out.shape == (4, members, 10) and torch.isfinite(out).all()
    if members > 1:
        assert (out[:, 0] - out[:, 1]).abs().max() > 1e-4  # members are distinct functions


def test_transformer1d_has_no_layer_factory():
    kw = dict(members=2, in_channels=1, num_classes=10, image_size=40)
    with pytest.raises(ValueError, match="supports the models"):
        build_ensemble("packed", "transformer1d", **kw)
    assert build_ensemble("deep", "transformer1d", dim=16, depth=1, heads=2, **kw)(
        torch.randn(3, 1, 40)
    ).shape == (
        3,
        2,
        10,
    )


def test_resnet1d_checks_its_arguments_and_input():
    with pytest.raises(ValueError, match="stem_kernel must be odd"):
        resnet1d(stem_kernel=4)
    with pytest.raises(ValueError, match=r"expects \(B, 1, L\)"):
        resnet1d()(torch.randn(2, 1, 8, 8))
    with pytest.raises(TypeError, match="width"):
        resnet1d(width=2.0)


@pytest.mark.parametrize("name", SIGNAL_MODELS)
def test_backbone_fits_a_tiny_problem(name):
    torch.manual_seed(0)
    model = _model(name)
    x = torch.randn(32, 1, 40)
    y = torch.randint(0, 10, (32,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_default_sizes_are_small():
    from ensemblize.models.ensembles import count_parameters

    sizes = {
        n: count_parameters(build_model(n, in_channels=1, num_classes=10, image_size=40))
        for n in SIGNAL_MODELS
    }
    assert sizes == {"resnet1d": 111_338, "transformer1d": 102_282}
