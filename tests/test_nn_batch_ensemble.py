"""BatchEnsembleLinear / BatchEnsembleConv2d against K explicit nn.Linear / nn.Conv2d modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ensemblize.members import interleave
from ensemblize.nn import BatchEnsembleConv2d, BatchEnsembleLinear


def randomize_(layer) -> None:
    """Give every member its own r, s and bias (initialisations may leave them equal)."""
    with torch.no_grad():
        layer.r.normal_(1.0, 0.5)
        layer.s.normal_(1.0, 0.5)
        if layer.bias is not None:
            layer.bias.normal_()


def check_linear(layer: BatchEnsembleLinear, x: torch.Tensor, g: torch.Tensor) -> None:
    k_members = layer.members
    w, r, s = layer.weight.detach(), layer.r.detach(), layer.s.detach()
    mods = []
    for k in range(k_members):  # explicit W_k = W ⊙ (s_k r_kᵀ)
        m = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, dtype=w.dtype)
        with torch.no_grad():
            m.weight.copy_(w * torch.outer(s[k], r[k]))
            if layer.bias is not None:
                m.bias.copy_(layer.bias[k])
        mods.append(m)
    xr = x.clone().requires_grad_(True)
    ref = torch.stack([mods[k](xr[:, k]) for k in range(k_members)], dim=1)
    (ref * g).sum().backward()
    gw = torch.stack([m.weight.grad for m in mods])  # dL/dW_k, (K, out, in)

    xl = x.clone().requires_grad_(True)
    layer.zero_grad()
    y = layer(xl)
    (y * g).sum().backward()
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(xl.grad, xr.grad)
    torch.testing.assert_close(layer.weight.grad, (gw * s[:, :, None] * r[:, None, :]).sum(0))
    torch.testing.assert_close(layer.s.grad, ((gw * w) @ r.unsqueeze(2)).squeeze(2))
    torch.testing.assert_close(layer.r.grad, ((gw * w).transpose(1, 2) @ s.unsqueeze(2)).squeeze(2))
    if layer.bias is not None:
        torch.testing.assert_close(layer.bias.grad, torch.stack([m.bias.grad for m in mods]))


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 5),
    members=st.integers(1, 4),
    fin=st.integers(1, 7),
    fout=st.integers(1, 7),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linear_matches_explicit_members(batch, members, fin, fout, bias, seed):
    torch.manual_seed(seed)
    layer = BatchEnsembleLinear(fin, fout, members, bias=bias).double()
    randomize_(layer)
    x = torch.randn(batch, members, fin, dtype=torch.double)
    g = torch.randn(batch, members, fout, dtype=torch.double)
    check_linear(layer, x, g)


def check_conv(layer: BatchEnsembleConv2d, x: torch.Tensor, g: torch.Tensor) -> None:
    k_members = layer.members
    w, r, s = layer.weight.detach(), layer.r.detach(), layer.s.detach()
    mods = []
    for k in range(k_members):
        m = nn.Conv2d(
            layer.in_channels,
            layer.out_channels,
            layer.kernel_size,
            stride=layer.stride,
            padding=layer.padding,
            bias=layer.bias is not None,
            dtype=w.dtype,
        )
        with torch.no_grad():
            m.weight.copy_(s[k][:, None, None, None] * w * r[k][None, :, None, None])
            if layer.bias is not None:
                m.bias.copy_(layer.bias[k])
        mods.append(m)
    xr = x.clone().requires_grad_(True)
    ref = torch.empty_like(g)
    for k in range(k_members):  # interleaved rows b·K + k belong to member k
        ref[k::k_members] = mods[k](xr[k::k_members])
    (ref * g).sum().backward()
    gw = torch.stack([m.weight.grad for m in mods])  # (K, out, in, kh, kw)

    xl = x.clone().requires_grad_(True)
    layer.zero_grad()
    y = layer(xl)
    (y * g).sum().backward()
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(xl.grad, xr.grad)
    rr, ss = r[:, None, :, None, None], s[:, :, None, None, None]
    torch.testing.assert_close(layer.weight.grad, (gw * ss * rr).sum(0))
    torch.testing.assert_close(layer.s.grad, (gw * w * rr).sum((2, 3, 4)))
    torch.testing.assert_close(layer.r.grad, (gw * w * ss).sum((1, 3, 4)))
    if layer.bias is not None:
        torch.testing.assert_close(layer.bias.grad, torch.stack([m.bias.grad for m in mods]))


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    members=st.integers(1, 3),
    cin=st.integers(1, 4),
    cout=st.integers(1, 4),
    kernel=st.sampled_from([1, 3, (3, 2)]),
    stride=st.sampled_from([1, 2]),
    padding=st.sampled_from([0, 1, (1, 0)]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv_matches_explicit_members(batch, members, cin, cout, kernel, stride, padding, bias, seed):
    torch.manual_seed(seed)
    layer = BatchEnsembleConv2d(cin, cout, kernel, members, stride, padding, bias).double()
    randomize_(layer)
    x = torch.randn(batch * members, cin, 6, 5, dtype=torch.double)
    out_h = (6 + 2 * layer.padding[0] - layer.kernel_size[0]) // stride + 1
    out_w = (5 + 2 * layer.padding[1] - layer.kernel_size[1]) // stride + 1
    g = torch.randn(batch * members, cout, out_h, out_w, dtype=torch.double)
    check_conv(layer, x, g)


def test_conv_equals_multiply_form_on_interleaved_batch():
    torch.manual_seed(0)
    k = 3
    layer = BatchEnsembleConv2d(4, 5, 3, k, padding=1, init="normal").double()
    x = interleave(torch.randn(2, 4, 7, 7, dtype=torch.double), k)
    r = layer.r.repeat(2, 1)[:, :, None, None]  # row b·K + k -> r_k
    s = layer.s.repeat(2, 1)[:, :, None, None]
    ref = F.conv2d(x * r, layer.weight, None, 1, 1) * s + layer.bias.repeat(2, 1)[:, :, None, None]
    torch.testing.assert_close(layer(x), ref)
    # members see the same sample but give different outputs
    y = layer(x)
    assert not torch.allclose(y[0], y[1])


def test_tabm_init():
    torch.manual_seed(1)
    first = BatchEnsembleLinear(40, 8, 16, first_layer=True)
    assert set(first.r.detach().unique().tolist()) == {-1.0, 1.0}
    assert torch.equal(first.s, torch.ones_like(first.s))
    assert torch.equal(first.bias, first.bias[0].expand_as(first.bias))
    assert first.weight.abs().max() <= 40**-0.5
    hidden = BatchEnsembleLinear(40, 8, 16)
    assert torch.equal(hidden.r, torch.ones_like(hidden.r)) and torch.equal(
        hidden.s, torch.ones_like(hidden.s)
    )


def test_chunked_signs():
    torch.manual_seed(2)
    chunks = [3, 1, 4, 2]
    layer = BatchEnsembleLinear(10, 4, 64, first_layer=True, chunks=chunks)
    r = layer.r.detach()
    bounds = torch.tensor([0, *chunks]).cumsum(0).tolist()
    firsts = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        block = r[:, lo:hi]
        assert torch.equal(block, block[:, :1].expand_as(block))  # one sign per member and chunk
        firsts.append(block[:, 0])
    signs = torch.stack(firsts, 1)
    assert set(signs.unique().tolist()) == {-1.0, 1.0}
    # the chunks draw independently: 64 members × 4 chunks are not all equal across chunks
    assert not torch.equal(signs[:, 0], signs[:, 2])
    normal = BatchEnsembleLinear(10, 4, 64, init="normal", chunks=chunks)
    assert torch.equal(normal.r[:, 4:8], normal.r[:, 4:5].expand(64, 4))


def test_normal_and_random_sign_init():
    torch.manual_seed(3)
    layer = BatchEnsembleLinear(300, 200, 32, init="normal")
    for p in (layer.r, layer.s):
        assert abs(p.mean().item() - 1) < 0.02 and abs(p.std().item() - 0.5) < 0.02
    signs = BatchEnsembleLinear(300, 200, 32, init="random-signs")
    for p in (signs.r, signs.s):
        assert set(p.detach().unique().tolist()) == {-1.0, 1.0}
        assert abs(p.mean().item()) < 0.05
    conv = BatchEnsembleConv2d(16, 8, 3, 4)  # default init: random signs
    assert set(conv.r.detach().unique().tolist()) == {-1.0, 1.0}
    assert conv.weight.abs().max() <= (16 * 9) ** -0.5


def test_parameter_contract():
    lin = BatchEnsembleLinear(7, 5, 4)
    assert {n: tuple(p.shape) for n, p in lin.named_parameters()} == {
        "weight": (5, 7),
        "bias": (4, 5),
        "r": (4, 7),
        "s": (4, 5),
    }
    conv = BatchEnsembleConv2d(3, 6, 3, 2, bias=False)
    assert {n: tuple(p.shape) for n, p in conv.named_parameters()} == {
        "weight": (6, 3, 3, 3),
        "r": (2, 3),
        "s": (2, 6),
    }


def test_bad_arguments():
    with pytest.raises(ValueError, match="members must be >= 1, got 0"):
        BatchEnsembleLinear(4, 3, 0)
    with pytest.raises(ValueError, match="init must be one of .* got 'ones'"):
        BatchEnsembleLinear(4, 3, 2, init="ones")
    with pytest.raises(ValueError, match="chunks must sum to in_features=4, got sum 5"):
        BatchEnsembleLinear(4, 3, 2, first_layer=True, chunks=[2, 3])
    with pytest.raises(ValueError, match="first_layer=True"):
        BatchEnsembleLinear(4, 3, 2, chunks=[2, 2])
    with pytest.raises(ValueError, match="chunks entries must be >= 1, got 0"):
        BatchEnsembleLinear(4, 3, 2, first_layer=True, chunks=[4, 0])
    with pytest.raises(ValueError, match="kernel_size must be >= 1, got 0"):
        BatchEnsembleConv2d(3, 4, 0, 2)
    with pytest.raises(ValueError, match=r"\(B, K, in\) = \(B, 2, 4\), got \(3, 4\)"):
        BatchEnsembleLinear(4, 3, 2)(torch.randn(3, 4))
    conv = BatchEnsembleConv2d(3, 4, 3, 2)
    with pytest.raises(ValueError, match=r"\(B·K, C, H, W\) with K=2 .* got \(5, 3, 8, 8\)"):
        conv(torch.randn(5, 3, 8, 8))
    with pytest.raises(ValueError, match=r"C=3, got \(4, 2, 8, 8\)"):
        conv(torch.randn(4, 2, 8, 8))
