"""Forwarded keyword arguments (``ensemblize._keywords``) and the shared layer parts (``nn/_conv.py``,
``nn.lome._MemberLinear``): signatures shown, calls checked, values unchanged."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import ensemblize.nn as enn
from ensemblize._keywords import passes_keywords
from ensemblize.models.resnet import ResNet
from ensemblize.models.resnet1d import ResNet1d
from ensemblize.models.vit import ViT, vit_small
from ensemblize.models.wide_resnet import WideResNet, wide_resnet28
from ensemblize.tabular.model import LoMETabModel
from ensemblize.tabular.sigma_mlp import NormalizedTabMLP


def _target(*, a: int, b: int = 2, c: str = "x") -> tuple:
    return a, b, c


def test_passes_keywords_signature_defaults_and_errors():
    @passes_keywords(_target, drop=("c",), defaults={"b": 5})
    def preset(*, extra: float = 0.5, **kwargs) -> tuple:
        return extra, kwargs

    sig = inspect.signature(preset)
    assert list(sig.parameters) == ["extra", "a", "b"]
    assert sig.parameters["b"].default == 5 and sig.parameters["a"].default is inspect.Parameter.empty
    assert all(p.kind is p.KEYWORD_ONLY for p in sig.parameters.values())
    assert preset(a=1) == (0.5, {"a": 1, "b": 5})  # defaults applied: kwargs holds every forwarded one
    assert preset(a=1, b=3, extra=1.0) == (1.0, {"a": 1, "b": 3})
    with pytest.raises(TypeError, match=r"preset\(\) got an unexpected keyword argument 'c'"):
        preset(a=1, c="y")
    with pytest.raises(TypeError, match=r"preset\(\) missing a required argument: 'a'"):
        preset()
    with pytest.raises(TypeError, match="too many positional"):
        preset(1)
    with pytest.raises(TypeError, match=r"has no parameters \['nope'\]"):
        passes_keywords(_target, drop=("nope",))


def test_presets_show_their_targets_keywords():
    vit_kw = {n: p.default for n, p in inspect.signature(ViT).parameters.items()}
    assert {n: p.default for n, p in inspect.signature(vit_small).parameters.items()} == vit_kw
    wrn = {n: p.default for n, p in inspect.signature(WideResNet).parameters.items() if n != "depth"}
    assert {n: p.default for n, p in inspect.signature(wide_resnet28).parameters.items()} == wrn
    r1 = inspect.signature(ResNet1d).parameters
    assert list(r1)[:2] == ["blocks", "widths"]
    assert {n: r1[n].default for n in ("in_channels", "num_classes", "stem_kernel", "layers")} == {
        "in_channels": 1,
        "num_classes": 10,
        "stem_kernel": 5,
        "layers": None,
    }
    assert set(inspect.signature(ResNet).parameters) | {"stem_kernel"} == set(r1)
    tab = set(inspect.signature(NormalizedTabMLP).parameters)
    assert tab == set(inspect.signature(LoMETabModel).parameters) - {
        "members",
        "layer",
        "rank",
        "init_scale",
    } | {"norm"}
    with pytest.raises(TypeError, match="unexpected keyword argument 'rank'"):
        NormalizedTabMLP(n_num=2, n_out=2, regression=False, embedding="none", rank=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'depth'"):
        wide_resnet28(depth=16)
    for layer in (enn.BatchEnsembleLinear, enn.EnsembleLinear, enn.LoMELinear):
        params = inspect.signature(layer).parameters
        assert {"bias", "device", "dtype"} <= set(params) and params["bias"].default is True, layer


def test_presets_build_the_same_weights_as_their_targets():
    def weights(build):
        torch.manual_seed(0)
        return build().state_dict()

    pairs = [
        (
            lambda: vit_small(image_size=8, dim=16, depth=1, heads=2),
            lambda: ViT(image_size=8, dim=16, depth=1, heads=2),
        ),
        (
            lambda: wide_resnet28(widen_factor=1, num_classes=3),
            lambda: WideResNet(depth=28, widen_factor=1, num_classes=3),
        ),
    ]
    for preset, target in pairs:
        a, b = weights(preset), weights(target)
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    m = ResNet1d((1,), (4,))
    assert m.in_channels == 1 and m.stem[0].kernel_size == (5,) and m(torch.randn(2, 1, 12)).shape == (2, 10)


def test_member_linear_bias_shared_or_independent_and_bounded():
    torch.manual_seed(0)
    for layer in (enn.BatchEnsembleLinear(9, 5, 4), enn.LoMELinear(9, 5, 4, 2, 0.5)):
        assert torch.equal(layer.bias, layer.bias[:1].expand(4, 5))  # one draw copied to all members
        assert layer.weight.shape == (5, 9)
    ens = enn.EnsembleLinear(9, 5, 4)
    assert ens.weight.shape == (4, 9, 5) and not torch.equal(ens.bias[0], ens.bias[1])
    for t in (ens.weight, ens.bias):
        assert t.abs().max() <= 1 / math.sqrt(9)
    assert enn.EnsembleLinear(9, 5, 4, bias=False).bias is None
    half = enn.BatchEnsembleLinear(3, 2, 2, dtype=torch.float64)
    assert {p.dtype for p in half.parameters()} == {torch.float64}


def test_conv_input_checks_name_the_layer():
    be = enn.BatchEnsembleConv2d(3, 4, 3, 2)
    pk = enn.PackedConv2d(3, 4, 3, 2, 2.0, first=True)
    for layer in (be, pk):
        name = type(layer).__name__
        with pytest.raises(TypeError, match=f"{name} input must be a torch.Tensor, got list"):
            layer([1.0])
        with pytest.raises(
            ValueError, match=rf"{name} input \(2, 3, 2, 5\): spatial size 2 \(\+2·padding 0\)"
        ):
            layer(torch.zeros(2, 3, 2, 5))
    with pytest.raises(
        ValueError, match=r"\(B·K, C, H, W\) with K=2 dividing the leading size and C=3, got \(3, 3"
    ):
        be(torch.zeros(3, 3, 5, 5))
    with pytest.raises(
        ValueError, match=r"PackedConv2d expects input of shape \(B, 3, H, W\), got \(2, 4, 5, 5\)"
    ):
        pk(torch.zeros(2, 4, 5, 5))
    with pytest.raises(ValueError, match="padding must be"):
        enn.BatchEnsembleConv2d(3, 4, 3, 2, padding=-1)
