"""Image backbones: shapes on digits/CIFAR inputs, batch-composition independence, training, errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ensemblize.models.ensembles import count_parameters
from ensemblize.models.registry import IMAGE_MODELS, MODEL_NAMES, build_model
from ensemblize.models.vit import default_patch_size

# small configurations so the suite stays fast; defaults are checked separately
TINY = {
    "resnet_small": {"width": 4},
    "resnet18": {"width": 4},
    "wrn28": {"widen_factor": 1},
    "vit_small": {"dim": 16, "depth": 2, "heads": 2},
}
INPUTS = [(1, 8), (3, 32)]  # (channels, side): digits, CIFAR


@pytest.mark.parametrize("name", IMAGE_MODELS)
@pytest.mark.parametrize(("channels", "side"), INPUTS)
def test_eval_output_does_not_depend_on_batch_composition(name, channels, side):
    torch.manual_seed(0)
    model = build_model(name, in_channels=channels, num_classes=7, image_size=side, **TINY[name])
    x = torch.randn(6, channels, side, side)
    model.train()
    model(x)  # move BN running statistics away from their initial values
    model.eval()
    with torch.no_grad():
        y = model(x)
        assert y.shape == (6, 7)
        assert torch.isfinite(y).all()
        perm = torch.tensor([3, 0, 5, 1, 4, 2])
        torch.testing.assert_close(model(x[perm]), y[perm], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model(x[2:3]), y[2:3], atol=1e-5, rtol=1e-5)
        # a different batch-mate never changes a sample's output
        other = torch.cat([x[:1], torch.randn(2, channels, side, side)])
        torch.testing.assert_close(model(other)[:1], y[:1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_norms_are_modules_sigma_ensemble_can_find(name):
    model = build_model(name, in_channels=1, num_classes=10, image_size=8, **TINY[name])
    kinds = {type(m) for m in model.modules()}
    expected = nn.LayerNorm if name == "vit_small" else nn.BatchNorm2d
    assert expected in kinds
    n_norms = sum(isinstance(m, expected) for m in model.modules())
    assert n_norms == {"resnet_small": 9, "resnet18": 20, "wrn28": 25, "vit_small": 5}[name]


@pytest.mark.parametrize(
    ("name", "spatial"), [("resnet18", [8, 4, 2, 1]), ("resnet_small", [8, 4, 2]), ("wrn28", [8, 4, 2])]
)
def test_stages_shrink_8x8_to_at_least_1x1(name, spatial):
    model = build_model(name, in_channels=1, num_classes=10, image_size=8, **TINY[name])
    sizes = []
    for stage in model.stages:
        stage.register_forward_hook(lambda _m, _i, out: sizes.append(tuple(out.shape[2:])))
    model.eval()(torch.randn(2, 1, 8, 8))
    assert sizes == [(s, s) for s in spatial]


@pytest.mark.parametrize("name", ["resnet_small", "vit_small"])
def test_backbone_fits_a_tiny_problem(name):
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_classes=4, image_size=8, **TINY[name])
    x = torch.randn(32, 1, 8, 8)
    y = torch.randint(0, 4, (32,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# parameter counts of the default configurations (10 classes); the classic CIFAR counts are
# ResNet-18 11,173,962 and WRN-28-10 36,479,194
PARAMS = {
    ("resnet_small", 1): 77_754,
    ("resnet_small", 3): 78_042,
    ("resnet18", 1): 11_172_810,
    ("resnet18", 3): 11_173_962,
    ("wrn28", 1): 36_478_906,
    ("wrn28", 3): 36_479_194,
    ("vit_small", 1): 799_370,
    ("vit_small", 3): 811_146,
}


@pytest.mark.parametrize(("name", "channels"), sorted(PARAMS))
def test_default_parameter_counts(name, channels):
    side = 8 if channels == 1 else 32
    model = build_model(name, in_channels=channels, num_classes=10, image_size=side)
    assert count_parameters(model) == PARAMS[(name, channels)]


def test_resnet_small_parameter_count_by_hand():
    # stem conv 1->16 (3x3) + BN; blocks 16->16, 16->32 (+1x1 shortcut), 32->64 (+1x1 shortcut); head 64->10
    conv = lambda i, o, k=3: i * o * k * k  # noqa: E731
    bn = lambda c: 2 * c  # noqa: E731
    total = conv(1, 16) + bn(16)
    total += conv(16, 16) + bn(16) + conv(16, 16) + bn(16)
    total += conv(16, 32) + bn(32) + conv(32, 32) + bn(32) + conv(16, 32, 1) + bn(32)
    total += conv(32, 64) + bn(64) + conv(64, 64) + bn(64) + conv(32, 64, 1) + bn(64)
    total += 64 * 10 + 10
    assert total == PARAMS[("resnet_small", 1)]


def test_default_patch_size():
    assert default_patch_size(8) == 2
    assert default_patch_size(28) == 4
    assert default_patch_size(32) == 4
    assert default_patch_size(64) == 8
    assert default_patch_size((8, 16)) == 2
    assert default_patch_size(7) == 7  # a prime side: one patch per side
    with pytest.raises(ValueError, match="image_size=1"):
        default_patch_size(1)


def test_vit_mean_pool_and_explicit_patch():
    torch.manual_seed(0)
    model = build_model(
        "vit_small",
        in_channels=3,
        num_classes=5,
        image_size=32,
        patch_size=8,
        pool="mean",
        dim=16,
        depth=1,
        heads=2,
    )
    assert model.patch_size == 8 and model.pos_embed.shape == (1, 17, 16)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 5)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="unknown model name 'resnet50'"):
        build_model("resnet50", in_channels=3, num_classes=10, image_size=32)
    with pytest.raises(TypeError, match="alpha"):
        build_model("resnet18", in_channels=3, num_classes=10, image_size=32, alpha=2)
    model = build_model("resnet_small", in_channels=1, num_classes=10, image_size=8)
    with pytest.raises(ValueError, match=r"\(B, 1, H, W\).*\(2, 3, 8, 8\)"):
        model(torch.randn(2, 3, 8, 8))
    vit = build_model("vit_small", in_channels=1, num_classes=10, image_size=8, **TINY["vit_small"])
    with pytest.raises(ValueError, match=r"\(2, 1, 16, 16\)"):
        vit(torch.randn(2, 1, 16, 16))
    with pytest.raises(ValueError, match="depth must be 6n \\+ 4"):
        from ensemblize.models.wide_resnet import WideResNet

        WideResNet(depth=27)
    with pytest.raises(ValueError, match="dropout"):
        build_model("wrn28", in_channels=3, num_classes=10, image_size=32, dropout=1.0)
    with pytest.raises(ValueError, match="heads=3"):
        build_model("vit_small", in_channels=3, num_classes=10, image_size=32, dim=16, heads=3)
    with pytest.raises(ValueError, match="in_channels must be >= 1, got 0"):
        build_model("resnet18", in_channels=0, num_classes=10, image_size=32)


def test_lazy_public_names():
    import ensemblize.models as em

    assert em.build_model is build_model
    assert em.MODEL_NAMES == MODEL_NAMES
    assert isinstance(em.resnet18(), em.ResNet)
    assert isinstance(em.wide_resnet28(widen_factor=1), em.WideResNet)
    assert isinstance(em.vit_small(image_size=8, dim=16, depth=1, heads=2), em.ViT)


def test_backbone_arguments_are_checked_by_the_shared_validators():
    import numpy as np

    from ensemblize.models import PackedLayers, TemperatureScaled, fit_temperature
    from ensemblize.models.resnet import ResNet
    from ensemblize.models.vit import ViT
    from ensemblize.models.wide_resnet import WideResNet

    assert callable(fit_temperature) and issubclass(TemperatureScaled, nn.Module)  # exported with the models
    ResNet([np.int64(1)], [np.int64(4)], num_classes=3)  # NumPy integers count as integers
    with pytest.raises(TypeError, match=r"widths must be an int >= 1, got 4.0"):
        ResNet([1], [4.0])
    with pytest.raises(ValueError, match="blocks must be >= 1, got 0"):
        ResNet([0], [4])
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\), got 1.0"):
        WideResNet(depth=10, widen_factor=1, dropout=1.0)
    with pytest.raises(TypeError, match="dropout must be a real number"):
        WideResNet(depth=10, widen_factor=1, dropout=True)
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\), got nan"):
        ViT(image_size=8, dim=8, depth=1, heads=2, dropout=float("nan"))
    with pytest.raises(ValueError, match=r"pool must be one of \('cls', 'mean'\), got 'max'"):
        ViT(image_size=8, dim=8, depth=1, heads=2, pool="max")
    with pytest.raises(ValueError, match="mlp_ratio must be finite and > 0, got 0"):
        ViT(image_size=8, dim=8, depth=1, heads=2, mlp_ratio=0)
    with pytest.raises(ValueError, match="image_size must be an int or a pair of ints"):
        ViT(image_size=(8, 8, 8), dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match="alpha must be finite and > 0, got nan"):
        PackedLayers(members=2, alpha=float("nan"))
