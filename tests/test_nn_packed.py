"""Packed-Ensembles layers against explicit independent layers carrying the same weights."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ensemblize.nn.packed import PackedConv2d, PackedLinear, packed_widths

# (members, alpha, gamma, base_in, base_out, first, last): all valid combinations
VALID = st.sampled_from(
    [
        (1, 1.0, 1, 3, 5, False, False),
        (2, 2.0, 1, 4, 6, False, False),
        (2, 2.0, 2, 4, 6, False, False),
        (4, 2.0, 2, 8, 4, False, False),
        (3, 1.5, 1, 4, 2, False, False),
        (2, 2.0, 1, 3, 4, True, False),
        (4, 1.0, 1, 5, 8, True, False),
        (2, 2.0, 1, 4, 3, False, True),
        (2, 2.0, 2, 4, 4, False, True),
        (3, 1.0, 1, 2, 5, True, True),
    ]
)


def _explicit_linear(layer: PackedLinear) -> list[nn.Linear]:
    g, ci, co = layer.groups, layer.in_features // layer.groups, layer.out_features // layer.groups
    out = []
    for j in range(g):
        lin = nn.Linear(ci, co)
        with torch.no_grad():
            lin.weight.copy_(layer.weight[j * co : (j + 1) * co])
            lin.bias.copy_(layer.bias[j * co : (j + 1) * co])
        out.append(lin)
    return out


def _explicit_conv(layer: PackedConv2d) -> list[nn.Conv2d]:
    g, ci, co = layer.groups, layer.in_channels // layer.groups, layer.out_channels // layer.groups
    out = []
    for j in range(g):
        conv = nn.Conv2d(ci, co, layer.kernel_size, stride=layer.stride, padding=layer.padding)
        with torch.no_grad():
            conv.weight.copy_(layer.weight[j * co : (j + 1) * co])
            conv.bias.copy_(layer.bias[j * co : (j + 1) * co])
        out.append(conv)
    return out


@settings(max_examples=20, deadline=None)
@given(spec=VALID, seed=st.integers(0, 2**16), batch=st.integers(1, 4))
def test_packed_linear_equals_independent_linears(spec, seed, batch):
    members, alpha, gamma, i, o, first, last = spec
    torch.manual_seed(seed)
    layer = PackedLinear(i, o, members, alpha, gamma, first=first, last=last)
    c_in, c_out, g = packed_widths(i, o, members, alpha, gamma, first=first, last=last)
    assert (layer.in_features, layer.out_features, layer.groups, layer.gamma) == (c_in, c_out, g, gamma)
    explicit = _explicit_linear(layer)
    x = torch.randn(batch, c_in, dtype=torch.float32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y = layer(x)
    y_ref = torch.cat([lin(chunk) for lin, chunk in zip(explicit, x2.chunk(g, dim=1), strict=True)], dim=1)
    torch.testing.assert_close(y, y_ref)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(layer.weight.grad, torch.cat([lin.weight.grad for lin in explicit]))
    torch.testing.assert_close(layer.bias.grad, torch.cat([lin.bias.grad for lin in explicit]))


def test_packed_linear_leading_axes_and_member_split():
    torch.manual_seed(0)
    layer = PackedLinear(4, 3, 2, 2.0, last=True)
    x = torch.randn(5, 7, 8)
    y = layer(x)
    assert y.shape == (5, 7, 6)
    torch.testing.assert_close(y, layer(x.reshape(35, 8)).reshape(5, 7, 6))
    # member m's logits depend only on member m's features
    x.requires_grad_(True)
    layer(x).unflatten(-1, (2, 3))[..., 0, :].sum().backward()
    assert x.grad[..., 4:].abs().max() == 0 and x.grad[..., :4].abs().max() > 0


@settings(max_examples=15, deadline=None)
@given(spec=VALID, seed=st.integers(0, 2**16), stride=st.sampled_from([1, 2]), k=st.sampled_from([1, 3]))
def test_packed_conv_equals_independent_convs(spec, seed, stride, k):
    members, alpha, gamma, i, o, first, last = spec
    torch.manual_seed(seed)
    layer = PackedConv2d(
        i, o, k, members, alpha, gamma, stride=stride, padding=k // 2, first=first, last=last
    )
    c_in, c_out, g = packed_widths(i, o, members, alpha, gamma, first=first, last=last)
    assert (layer.in_channels, layer.out_channels, layer.groups, layer.gamma) == (c_in, c_out, g, gamma)
    explicit = _explicit_conv(layer)
    x = torch.randn(2, c_in, 5, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y = layer(x)
    y_ref = torch.cat([conv(chunk) for conv, chunk in zip(explicit, x2.chunk(g, dim=1), strict=True)], dim=1)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        layer.weight.grad, torch.cat([c.weight.grad for c in explicit]), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        layer.bias.grad, torch.cat([c.bias.grad for c in explicit]), atol=1e-5, rtol=1e-5
    )


def test_first_layer_is_members_independent_layers_on_the_shared_input():
    torch.manual_seed(1)
    m, alpha = 3, 1.0
    layer = PackedConv2d(2, 6, 3, m, alpha, padding=1, first=True)
    assert (layer.in_channels, layer.out_channels, layer.groups) == (2, 6, 1)
    x = torch.randn(2, 2, 4, 4)
    y = layer(x)
    for k in range(m):
        conv = nn.Conv2d(2, 2, 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(layer.weight[2 * k : 2 * k + 2])
            conv.bias.copy_(layer.bias[2 * k : 2 * k + 2])
        torch.testing.assert_close(y[:, 2 * k : 2 * k + 2], conv(x))


def test_channel_arithmetic():
    assert packed_widths(16, 32, 4, 2.0, 1) == (32, 64, 4)
    assert packed_widths(16, 32, 4, 2.0, 2) == (32, 64, 8)
    assert packed_widths(3, 16, 4, 2.0, 2, first=True) == (3, 32, 1)
    assert packed_widths(64, 10, 4, 2.0, 1, last=True) == (128, 40, 4)
    assert packed_widths(10, 10, 2, 1.25, 1) == (12, 12, 2)  # round(12.5) = 12 (half to even)


def test_bad_gamma_raises_naming_workable_gammas_and_keeps_nothing_silent():
    with pytest.raises(ValueError, match=r"gamma=3.*gamma in \[1, 2, 4, 8\]"):
        PackedConv2d(16, 16, 3, 4, 2.0, 3)
    with pytest.raises(ValueError, match=r"gamma in \[1, 2, 4\]"):
        PackedLinear(16, 4, 2, 2.0, 3, last=True)  # c_in 32, c_out 2·4 = 8: groups 2·gamma must divide both
    # the layer never rewrites gamma: a valid gamma is stored as given
    assert PackedConv2d(16, 16, 3, 4, 2.0, 8).gamma == 8


def test_bad_alpha_raises_naming_workable_alphas():
    with pytest.raises(ValueError, match=r"no gamma works.*alpha in \[0\.75, 1\.5"):
        PackedLinear(16, 16, 3, 2.0)
    with pytest.raises(ValueError, match="not divisible by members=4"):
        PackedConv2d(3, 5, 3, 4, 1.0, first=True)


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"alpha": 0.0}, ValueError),
        ({"alpha": float("nan")}, ValueError),
        ({"alpha": "2"}, TypeError),
        ({"gamma": 0}, ValueError),
        ({"gamma": 1.0}, TypeError),
        ({"members": 0}, ValueError),
    ],
)
def test_bad_arguments(kwargs, exc):
    args = {"members": 2, "alpha": 2.0, "gamma": 1} | kwargs
    with pytest.raises(exc):
        PackedLinear(4, 4, args["members"], args["alpha"], args["gamma"])


def test_wrong_input_width_raises():
    with pytest.raises(ValueError, match="expects 8 input features"):
        PackedLinear(4, 4, 2, 2.0)(torch.randn(3, 4))


def test_public_namespace():
    import ensemblize

    assert ensemblize.nn.PackedLinear is PackedLinear
    assert ensemblize.nn.PackedConv2d is PackedConv2d


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"kernel_size": 0}, ValueError, "kernel_size"),
        ({"kernel_size": (3, 0)}, ValueError, "kernel_size"),
        ({"kernel_size": (3, 3, 3)}, ValueError, "kernel_size"),
        ({"kernel_size": 2.5}, TypeError, "kernel_size"),
        ({"stride": 0}, ValueError, "stride"),
        ({"padding": -1}, ValueError, "padding"),
        ({"bias": 1}, TypeError, "bias"),
    ],
)
def test_packed_conv_bad_geometry_is_a_named_error_before_any_kernel_runs(kwargs, exc, name):
    args = {"kernel_size": 3, "stride": 1, "padding": 0, "bias": True} | kwargs
    with pytest.raises(exc, match=name):
        PackedConv2d(4, 4, args["kernel_size"], 2, 2.0, 1, args["stride"], args["padding"], bias=args["bias"])


def test_packed_inputs_are_checked_before_torch_sees_them():
    lin = PackedLinear(4, 4, 2, 2.0)
    with pytest.raises(ValueError, match="0-d"):
        lin(torch.tensor(1.0))
    with pytest.raises(TypeError, match="floating"):
        lin(torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        lin([[1.0] * 8])
    conv = PackedConv2d(4, 4, 3, 2, 2.0)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        conv(torch.randn(1, 8, 2, 2))
    with pytest.raises(ValueError, match=r"\(B, 8, H, W\)"):
        conv(torch.randn(8, 2, 2))
    with pytest.raises(TypeError, match="floating"):
        conv(torch.ones(1, 8, 4, 4, dtype=torch.int32))
    assert conv(torch.randn(1, 8, 1, 1).expand(1, 8, 3, 3)).shape == (1, 8, 1, 1)


def test_numpy_integer_arguments_are_plain_ints_on_the_layer():
    np = pytest.importorskip("numpy")
    lin = PackedLinear(np.int64(4), np.int64(4), np.int64(2), 2.0, np.int64(2))
    conv = PackedConv2d(np.int64(4), 4, np.int64(3), np.int32(2), 2.0, stride=np.int64(1))
    for v in (lin.members, lin.gamma, lin.base_in_features, conv.members, conv.gamma, *conv.kernel_size):
        assert type(v) is int
