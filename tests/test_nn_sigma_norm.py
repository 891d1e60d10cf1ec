"""σNorm layers equal M independent plain norm layers carrying the same parameters (values, not shapes)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ensemblize.nn import SigmaBatchNorm1d, SigmaBatchNorm2d, SigmaGroupNorm, SigmaLayerNorm
from ensemblize.nn.sigma_norm import SigmaBatchNorm3d

TOL = dict(atol=1e-5, rtol=1e-5)


def _randomize(layer, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
        if getattr(layer, "running_mean", None) is not None:
            layer.running_mean.copy_(torch.randn(layer.running_mean.shape, generator=g))
            layer.running_var.copy_(torch.rand(layer.running_var.shape, generator=g) + 0.5)
    return layer


def _plain_bn_members(layer, plain_cls):
    """M independent plain BatchNorm layers with weight σ(γ_t)·w, bias σ(γ_t)·b_t and member t's running stats."""
    scale, shift = layer.member_scale_shift()
    out = []
    for t in range(layer.members):
        bn = plain_cls(layer.num_features, eps=layer.eps, momentum=layer.momentum)
        with torch.no_grad():
            bn.weight.copy_(scale[t])
            bn.bias.copy_(shift[t])
            bn.running_mean.copy_(layer.running_mean[t])
            bn.running_var.copy_(layer.running_var[t])
        out.append(bn)
    return out


@pytest.mark.parametrize(
    ("cls", "plain", "spatial"),
    [
        (SigmaBatchNorm1d, nn.BatchNorm1d, ()),
        (SigmaBatchNorm1d, nn.BatchNorm1d, (5,)),
        (SigmaBatchNorm2d, nn.BatchNorm2d, (3, 4)),
        (SigmaBatchNorm3d, nn.BatchNorm3d, (2, 2, 3)),
    ],
)
@pytest.mark.parametrize("members", [1, 3])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_equals_independent_layers(cls, plain, spatial, members, training, momentum):
    B, C = 6, 4
    layer = _randomize(cls(C, members, momentum=momentum), seed=members)
    refs = _plain_bn_members(layer, plain)
    for r in refs:
        r.momentum = momentum
        r.train(training)
    layer.train(training)
    x = torch.randn(B * members, C, *spatial, generator=torch.Generator().manual_seed(1), requires_grad=True)
    up = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    for _ in range(2):  # two steps so cumulative (momentum=None) averaging is exercised
        y = layer(x)
        x_ref = x.detach().clone().requires_grad_(True)
        y_ref = torch.stack([refs[t](x_ref[t::members]) for t in range(members)], dim=1).reshape(y.shape)
        torch.testing.assert_close(y, y_ref, **TOL)
        (g,) = torch.autograd.grad((y * up).sum(), x)
        (g_ref,) = torch.autograd.grad((y_ref * up).sum(), x_ref)
        torch.testing.assert_close(g, g_ref, **TOL)
    for t in range(members):
        torch.testing.assert_close(layer.running_mean[t], refs[t].running_mean, **TOL)
        torch.testing.assert_close(layer.running_var[t], refs[t].running_var, **TOL)
    if training:
        assert int(layer.num_batches_tracked) == 2


def test_batchnorm_parameter_gradients_follow_the_equation():
    """d/d(weight, bias, gate_logits) of σ(γ_t)(w x̂_t + b_t) match an explicit per-member loop."""
    M, B, C = 3, 5, 4
    layer = _randomize(SigmaBatchNorm2d(C, M), seed=7).train()
    x = torch.randn(B * M, C, 3, 3, generator=torch.Generator().manual_seed(3))
    up = torch.randn(x.shape, generator=torch.Generator().manual_seed(4))
    grads = torch.autograd.grad((layer(x) * up).sum(), [layer.weight, layer.bias, layer.gate_logits])
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    gam = layer.gate_logits.detach().clone().requires_grad_(True)
    total = 0
    for t in range(M):
        xt = x[t::M]
        mean = xt.mean(dim=(0, 2, 3), keepdim=True)
        var = xt.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
        xhat = (xt - mean) / torch.sqrt(var + layer.eps)
        yt = torch.sigmoid(gam[t]).view(1, C, 1, 1) * (w.view(1, C, 1, 1) * xhat + b[t].view(1, C, 1, 1))
        total = total + (yt * up[t::M]).sum()
    ref = torch.autograd.grad(total, [w, b, gam])
    for a, r in zip(grads, ref, strict=True):
        torch.testing.assert_close(a, r, **TOL)


@settings(max_examples=25, deadline=None)
@given(
    members=st.integers(1, 4),
    batch=st.integers(2, 4),
    channels=st.integers(1, 5),
    training=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_batchnorm2d_property(members, batch, channels, training, seed):
    layer = _randomize(SigmaBatchNorm2d(channels, members), seed=seed).train(training)
    refs = _plain_bn_members(layer, nn.BatchNorm2d)
    x = torch.randn(batch * members, channels, 2, 2, generator=torch.Generator().manual_seed(seed))
    y = layer(x)
    for t in range(members):
        refs[t].train(training)
        torch.testing.assert_close(y[t::members], refs[t](x[t::members]), **TOL)


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
@pytest.mark.parametrize("middle", [(), (5,)])
def test_layernorm_equals_independent_layers(shape, middle):
    M, B = 3, 4
    layer = _randomize(SigmaLayerNorm(shape, M), seed=11)
    scale, shift = layer.member_scale_shift()
    x = torch.randn(B * M, *middle, *shape, generator=torch.Generator().manual_seed(5), requires_grad=True)
    up = torch.randn(x.shape, generator=torch.Generator().manual_seed(6))
    y = layer(x)
    x_ref = x.detach().clone().requires_grad_(True)
    outs = []
    for t in range(M):
        ln = nn.LayerNorm(shape, eps=layer.eps)
        with torch.no_grad():
            ln.weight.copy_(scale[t].view(shape))
            ln.bias.copy_(shift[t].view(shape))
        outs.append(ln(x_ref[t::M]))
    y_ref = torch.stack(outs, dim=1).reshape(y.shape)
    torch.testing.assert_close(y, y_ref, **TOL)
    torch.testing.assert_close(
        torch.autograd.grad((y * up).sum(), x)[0], torch.autograd.grad((y_ref * up).sum(), x_ref)[0], **TOL
    )


def test_groupnorm_equals_independent_layers():
    M, B, C = 2, 3, 6
    layer = _randomize(SigmaGroupNorm(3, C, M), seed=12)
    scale, shift = layer.member_scale_shift()
    x = torch.randn(B * M, C, 4, 4, generator=torch.Generator().manual_seed(8))
    y = layer(x)
    for t in range(M):
        ref = F.group_norm(x[t::M], 3, scale[t], shift[t], layer.eps)
        torch.testing.assert_close(y[t::M], ref, **TOL)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="members"):
        SigmaBatchNorm2d(4, 0)
    with pytest.raises(TypeError, match="members"):
        SigmaLayerNorm(4, 2.5)
    layer = SigmaBatchNorm2d(4, 3)
    with pytest.raises(ValueError, match="multiple of members=3"):
        layer(torch.randn(4, 4, 2, 2))
    with pytest.raises(ValueError, match="expected 4 channels, got 5"):
        layer(torch.randn(6, 5, 2, 2))
    with pytest.raises(ValueError, match="trailing shape"):
        SigmaLayerNorm(8, 2)(torch.randn(4, 7))
    with pytest.raises(ValueError, match="divisible"):
        SigmaGroupNorm(4, 6, 2)


def test_default_gate_is_bounded_and_initial_member_equals_identity_affine():
    """A fresh layer starts with σ(γ)=½ and amplitude 2, i.e. exactly a plain norm with weight 1, bias 0."""
    layer = SigmaLayerNorm(5, 4)
    g = layer.gates()
    assert torch.all((g > 0) & (g < 1))
    x = torch.randn(8, 5)
    torch.testing.assert_close(layer(x), F.layer_norm(x, (5,)), **TOL)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: SigmaBatchNorm2d(4, 2, eps=float("nan")), ValueError, "eps must be finite"),
        (lambda: SigmaBatchNorm2d(4, 2, eps=-1e-5), ValueError, "eps must be finite and >= 0"),
        (lambda: SigmaBatchNorm1d(4, 2, eps=float("inf")), ValueError, "eps"),
        (lambda: SigmaBatchNorm2d(4, 2, momentum=1.5), ValueError, "momentum must lie in"),
        (lambda: SigmaBatchNorm2d(4, 2, momentum=float("nan")), ValueError, "momentum"),
        (lambda: SigmaBatchNorm2d(4.0, 2), TypeError, "num_features must be an int"),
        (lambda: SigmaBatchNorm2d(0, 2), ValueError, "num_features must be >= 1, got 0"),
        (lambda: SigmaBatchNorm2d(4, 2, track_running_stats=1), TypeError, "track_running_stats"),
        (lambda: SigmaBatchNorm2d(4, 2, gate_init=float("nan")), ValueError, "gate_init must be finite"),
        (lambda: SigmaBatchNorm2d(4, 2, gate_init=-200), ValueError, r"gate_init must lie in \[-10, 10\]"),
        (lambda: SigmaLayerNorm((2.5,), 2), TypeError, "normalized_shape must be an int"),
        (lambda: SigmaLayerNorm(2.5, 2), TypeError, "normalized_shape must be an int >= 1, got 2.5"),
        (lambda: SigmaLayerNorm("ab", 2), TypeError, "normalized_shape must be an int >= 1, got 'ab'"),
        (lambda: SigmaLayerNorm((4, True), 2), TypeError, "normalized_shape"),
        (lambda: SigmaLayerNorm((), 2), ValueError, "normalized_shape must not be empty"),
        (lambda: SigmaLayerNorm((4, 0), 2), ValueError, "normalized_shape must be >= 1, got 0"),
        (lambda: SigmaLayerNorm(4, 2, eps=float("nan")), ValueError, "eps must be finite"),
        (lambda: SigmaGroupNorm(2, 4, 2, eps=float("nan")), ValueError, "eps must be finite"),
        (lambda: SigmaGroupNorm(2.0, 4, 2), TypeError, "num_groups must be an int"),
        (lambda: SigmaGroupNorm(0, 4, 2), ValueError, "num_groups must be >= 1"),
        (lambda: SigmaLayerNorm(4, True), TypeError, "members"),
    ],
)
def test_bad_constructor_arguments_raise_named_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_numpy_integers_are_accepted_and_equal_python_ints():
    np = pytest.importorskip("numpy")
    a = SigmaBatchNorm2d(np.int64(4), np.int64(2))
    b = SigmaLayerNorm((np.int64(3), np.int32(5)), np.int64(2))
    c = SigmaGroupNorm(np.int64(2), np.int64(4), np.int64(3))
    assert (a.members, a.num_features, type(a.members)) == (2, 4, int)
    assert b.normalized_shape == (3, 5) and all(type(d) is int for d in b.normalized_shape)
    assert (c.members, c.num_groups, c.num_channels) == (3, 2, 4)
    x = torch.randn(4, 4, 3, 3)
    torch.testing.assert_close(a(x), SigmaBatchNorm2d(4, 2)(x))


def test_bad_forward_inputs_and_loads_raise_named_errors():
    bn, ln, gn = SigmaBatchNorm2d(4, 2), SigmaLayerNorm(8, 2), SigmaGroupNorm(2, 4, 2)
    for layer, ok_shape in ((bn, (4, 4, 2, 2)), (ln, (4, 8)), (gn, (4, 4, 3))):
        with pytest.raises(TypeError, match="floating-point input, got dtype torch.int64"):
            layer(torch.ones(ok_shape, dtype=torch.long))
        with pytest.raises(TypeError, match="expects a torch.Tensor, got ndarray"):
            layer(torch.ones(ok_shape).numpy())
    with pytest.raises(ValueError, match="after a batch axis"):
        ln(torch.randn(8))  # no batch axis: would otherwise be read as B·M = 8 rows of 1 feature
    with pytest.raises(ValueError, match="cannot load a BatchNorm with num_features=5"):
        bn.load_from_norm_module(nn.BatchNorm2d(5))
    with pytest.raises(ValueError, match=r"cannot load a LayerNorm with normalized_shape=\(7,\)"):
        ln.load_from_norm_module(nn.LayerNorm(7))
    with pytest.raises(ValueError, match="cannot load a GroupNorm"):
        gn.load_from_norm_module(nn.GroupNorm(1, 4))
    with pytest.raises(ValueError, match="cannot load a LayerNorm: it needs a BatchNorm with num_features=4"):
        bn.load_from_norm_module(nn.LayerNorm(4))
    broken = nn.BatchNorm2d(4)
    broken.running_var[1] = float("nan")
    with pytest.raises(ValueError, match="running_var contains NaN or inf"):
        bn.load_from_norm_module(broken)
    with pytest.raises(ValueError, match="weight must hold 4 values, got \\(3,\\)"):
        bn.load_from_norm(torch.ones(3), None)
    with pytest.raises(ValueError, match="bias contains NaN or inf"):
        bn.load_from_norm(None, torch.tensor([0.0, float("nan"), 0.0, 0.0]))
    with pytest.raises(ValueError, match="noise must be finite and >= 0"):
        bn.load_from_norm(None, None, noise=float("nan"))
    with pytest.raises(ValueError, match="noise"):
        bn.load_from_norm(None, None, noise=-1.0)


def _explicit_member_grads(layer, x, up, plain_fn):
    """Gradients of Σ up ⊙ y w.r.t. (x, weight, bias, gate_logits) from M explicit plain norms.

    ``plain_fn(x_t, weight_t, bias_t)`` is the plain norm of member t with affine ``σ(γ_t)·w``,
    ``σ(γ_t)·b_t``; the affine is built from fresh leaves so the gradients flow to them.
    """
    M = layer.members
    xr = x.detach().clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    gam = layer.gate_logits.detach().clone().requires_grad_(True)
    total = 0
    for t in range(M):
        g = torch.sigmoid(gam[t])
        total = total + (plain_fn(xr[t::M], g * w, g * b[t]) * up[t::M]).sum()
    return torch.autograd.grad(total, [xr, w, b, gam])


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
@pytest.mark.parametrize("middle", [(), (5,)])
def test_layernorm_all_gradients_equal_independent_layers(shape, middle):
    M, B = 3, 4
    layer = _randomize(SigmaLayerNorm(shape, M), seed=13).double()
    x = torch.randn(B * M, *middle, *shape, dtype=torch.double, requires_grad=True)
    up = torch.randn(x.shape, dtype=torch.double)
    got = torch.autograd.grad((layer(x) * up).sum(), [x, layer.weight, layer.bias, layer.gate_logits])

    def plain(xt, wt, bt):
        return F.layer_norm(xt, shape, wt.view(shape), bt.view(shape), layer.eps)

    for a, r in zip(got, _explicit_member_grads(layer, x, up, plain), strict=True):
        torch.testing.assert_close(a, r)


def test_groupnorm_all_gradients_equal_independent_layers():
    M, B, C = 2, 3, 6
    layer = _randomize(SigmaGroupNorm(3, C, M), seed=14).double()
    x = torch.randn(B * M, C, 4, 2, dtype=torch.double, requires_grad=True)
    up = torch.randn(x.shape, dtype=torch.double)
    got = torch.autograd.grad((layer(x) * up).sum(), [x, layer.weight, layer.bias, layer.gate_logits])

    def plain(xt, wt, bt):
        return F.group_norm(xt, 3, wt, bt, layer.eps)

    for a, r in zip(got, _explicit_member_grads(layer, x, up, plain), strict=True):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize(
    "make_input",
    [
        lambda: (SigmaLayerNorm((3,), 2), torch.randn(4, 3, dtype=torch.double)),
        lambda: (SigmaLayerNorm((2, 3), 2), torch.randn(2, 2, 2, 3, dtype=torch.double)),
        lambda: (SigmaGroupNorm(2, 4, 2), torch.randn(4, 4, 3, dtype=torch.double)),
        lambda: (SigmaBatchNorm1d(3, 2), torch.randn(6, 3, 2, dtype=torch.double)),
    ],
)
def test_gradcheck_float64(make_input):
    layer, x = make_input()
    layer = _randomize(layer, seed=15).double().train()
    if getattr(layer, "track_running_stats", False):
        layer.track_running_stats = False  # gradcheck re-runs forward: keep it free of state updates
        layer.running_mean = layer.running_var = None
    x.requires_grad_(True)
    names = ("weight", "bias", "gate_logits")
    params = [getattr(layer, n) for n in names]

    def fn(x, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps, strict=True)), (x,))

    assert torch.autograd.gradcheck(fn, (x, *params))


def test_member_affine_handles_empty_batch_and_no_input_grad():
    layer = SigmaLayerNorm(5, 2)
    y = layer(torch.randn(0, 5))
    y.sum().backward()
    assert y.shape == (0, 5) and torch.equal(layer.weight.grad, torch.zeros(5))
    layer.zero_grad()
    x = torch.randn(4, 5)  # no grad on the input: parameter gradients only
    (layer(x) ** 2).sum().backward()
    assert layer.gate_logits.grad is not None and torch.isfinite(layer.gate_logits.grad).all()


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: SigmaBatchNorm1d(3, 2), (4, 3)),
        (lambda: SigmaBatchNorm2d(3, 2), (4, 3, 2, 2)),
        (lambda: SigmaLayerNorm(3, 2), (4, 3)),
        (lambda: SigmaGroupNorm(1, 3, 2), (4, 3, 2)),
    ],
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.float64])
def test_input_dtype_other_than_the_parameters_raises_named_error(make, shape, dtype):
    layer = make()
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.ones(shape).to(dtype))
    assert torch.isfinite(layer.double()(torch.randn(shape, dtype=torch.float64))).all()


@pytest.mark.parametrize(
    ("cls", "shape"),
    [(SigmaBatchNorm1d, (2, 3)), (SigmaBatchNorm1d, (0, 3)), (SigmaBatchNorm2d, (2, 3, 1, 1))],
)
def test_batchnorm_with_one_value_per_channel_and_member_raises_named_error(cls, shape):
    layer = cls(3, 2).train()
    with pytest.raises(ValueError, match="needs more than one value per channel and member"):
        layer(torch.randn(shape))
    layer.eval()  # running statistics: any batch size works
    assert layer(torch.randn(shape)).shape == shape


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: SigmaBatchNorm2d(3, 2), (4, 3, 2, 2)),
        (lambda: SigmaLayerNorm(3, 2), (4, 3)),
        (lambda: SigmaGroupNorm(1, 3, 2), (4, 3, 2)),
    ],
)
def test_bfloat16_autocast_forward_and_backward_stay_close_to_float32(make, shape):
    torch.manual_seed(16)
    layer = _randomize(make(), seed=16)
    x = torch.randn(shape)
    xb = x.to(torch.bfloat16).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xb)
    y.float().sum().backward()
    ref = layer(x.to(torch.bfloat16).float())
    torch.testing.assert_close(y.float(), ref, atol=0.1, rtol=0.05)
    assert torch.isfinite(xb.grad.float()).all() and layer.gate_logits.grad.dtype == torch.float32


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: SigmaLayerNorm(6, 2), (4, 3, 6)),
        (lambda: SigmaGroupNorm(2, 4, 2), (4, 4, 3)),
        (lambda: SigmaBatchNorm1d(4, 2), (4, 4, 3)),
    ],
)
def test_training_after_an_inference_mode_call_and_across_dtypes(make, shape):
    """The kernels' cached constants: none kept from inference mode (they could not be saved for
    backward), and one set per dtype, so a float64 copy of the layer gives the float32 values."""
    layer = _randomize(make(), seed=17).train()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(18))
    with torch.inference_mode():
        y_inf = layer(x)
    y = layer(x.clone().requires_grad_(True))
    y.sum().backward()
    assert layer.gate_logits.grad is not None
    torch.testing.assert_close(y.detach(), y_inf)
    y64 = layer.double()(x.double())
    torch.testing.assert_close(y64.float(), y.detach(), **TOL)
