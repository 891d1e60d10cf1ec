"""LoMELinear / AdditiveLowRankLinear / EnsembleLinear against K explicit nn.Linear modules."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ensemblize.nn import AdditiveLowRankLinear, BatchEnsembleLinear, EnsembleLinear, LoMELinear

FORMS = ("materialized", "factored")


def explicit_weights(layer) -> torch.Tensor:
    """Per-member weights (K, out, in) built member by member from the layer's equation."""
    w = layer.weight.detach()
    out = []
    for k in range(layer.members):
        residual = layer.A[k].detach() @ layer.B[k].detach().T
        out.append(w * (1 + residual) if isinstance(layer, LoMELinear) else w + residual)
    return torch.stack(out)


def run_explicit(weights: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, g: torch.Tensor):
    """K independent nn.Linear modules carrying ``weights[k]``: output, dL/dx, dL/dW_k, dL/db_k."""
    k_members, fout, fin = weights.shape
    mods = []
    for k in range(k_members):
        m = nn.Linear(fin, fout, bias=bias is not None, dtype=weights.dtype)
        with torch.no_grad():
            m.weight.copy_(weights[k])
            if bias is not None:
                m.bias.copy_(bias[k])
        mods.append(m)
    xr = x.detach().clone().requires_grad_(True)
    y = torch.stack([mods[k](xr[:, k]) for k in range(k_members)], dim=1)
    (y * g).sum().backward()
    gw = torch.stack([m.weight.grad for m in mods])
    gb = torch.stack([m.bias.grad for m in mods]) if bias is not None else None
    return y.detach(), xr.grad, gw, gb


def run_layer(layer, x, g):
    xr = x.detach().clone().requires_grad_(True)
    layer.zero_grad()
    y = layer(xr)
    (y * g).sum().backward()
    return y.detach(), xr.grad


def check_low_rank(layer, x, g):
    ref_y, ref_dx, gw, gb = run_explicit(explicit_weights(layer), layer.bias, x, g)
    y, dx = run_layer(layer, x, g)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(dx, ref_dx)
    w, a, b = layer.weight.detach(), layer.A.detach(), layer.B.detach()
    if isinstance(layer, LoMELinear):
        # W_k = W ⊙ (1 + A_k B_kᵀ): chain rule written out
        mask = 1 + a @ b.transpose(1, 2)
        ref_dw = (gw * mask).sum(0)
        ref_da = (gw * w) @ b
        ref_db = (gw * w).transpose(1, 2) @ a
    else:
        ref_dw = gw.sum(0)
        ref_da = gw @ b
        ref_db = gw.transpose(1, 2) @ a
    torch.testing.assert_close(layer.weight.grad, ref_dw)
    torch.testing.assert_close(layer.A.grad, ref_da)
    torch.testing.assert_close(layer.B.grad, ref_db)
    if gb is not None:
        torch.testing.assert_close(layer.bias.grad, gb)
    else:
        assert layer.bias is None


@pytest.mark.parametrize("cls", [LoMELinear, AdditiveLowRankLinear])
@pytest.mark.parametrize("form", FORMS)
def test_matches_explicit_members(cls, form):
    torch.manual_seed(0)
    layer = cls(7, 5, 4, 3, 0.8, form=form).double()
    with torch.no_grad():  # members must differ in bias too
        layer.bias.normal_()
    x = torch.randn(6, 4, 7, dtype=torch.double)
    g = torch.randn(6, 4, 5, dtype=torch.double)
    check_low_rank(layer, x, g)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 5),
    members=st.integers(1, 4),
    fin=st.integers(1, 7),
    fout=st.integers(1, 7),
    rank=st.integers(1, 4),
    bias=st.booleans(),
    multiplicative=st.booleans(),
    form=st.sampled_from(FORMS),
    seed=st.integers(0, 2**16),
)
def test_matches_explicit_members_property(batch, members, fin, fout, rank, bias, multiplicative, form, seed):
    torch.manual_seed(seed)
    cls = LoMELinear if multiplicative else AdditiveLowRankLinear
    layer = cls(fin, fout, members, rank, 1.3, bias=bias, form=form).double()
    x = torch.randn(batch, members, fin, dtype=torch.double)
    g = torch.randn(batch, members, fout, dtype=torch.double)
    check_low_rank(layer, x, g)


@pytest.mark.parametrize("cls", [LoMELinear, AdditiveLowRankLinear])
def test_auto_form_follows_rule_and_matches(cls):
    torch.manual_seed(1)
    layer = cls(64, 64, 3, 2, 0.5).double()
    small, big = layer.resolved_form(1), layer.resolved_form(512)
    assert (small, big) == ("factored", "materialized")
    for batch in (1, 512):
        x = torch.randn(batch, 3, 64, dtype=torch.double)
        y = layer(x)
        layer.form = "materialized"
        torch.testing.assert_close(y, layer(x))
        layer.form = "factored"
        torch.testing.assert_close(y, layer(x))
        layer.form = "auto"


def test_auto_rule_values():
    # multiplicative: factored iff 4·r·B < sqrt(in·out); additive: iff B·(in+out) < 2·in·out
    mul = LoMELinear(512, 512, 2, 4, 0.1)
    assert mul.resolved_form(31) == "factored" and mul.resolved_form(32) == "materialized"
    assert LoMELinear(512, 512, 2, 1, 0.1).resolved_form(127) == "factored"
    assert LoMELinear(256, 256, 32, 2, 0.1).resolved_form(256) == "materialized"  # LoMETab defaults
    add = AdditiveLowRankLinear(512, 512, 2, 4, 0.1)
    assert add.resolved_form(511) == "factored" and add.resolved_form(512) == "materialized"
    fixed = LoMELinear(512, 512, 2, 4, 0.1, form="materialized")
    assert fixed.resolved_form(1) == "materialized"


def test_rank2_lome_represents_any_batch_ensemble_mask():
    torch.manual_seed(2)
    k, fin, fout = 5, 6, 4
    be = BatchEnsembleLinear(fin, fout, k, init="normal").double()
    with torch.no_grad():
        be.bias.normal_()
    for form in FORMS:
        lome = LoMELinear(fin, fout, k, 2, 0.0, form=form).double()
        with torch.no_grad():
            lome.weight.copy_(be.weight)
            lome.bias.copy_(be.bias)
            # s rᵀ − 1 = [s, −1] [r, 1]ᵀ
            lome.A.copy_(torch.stack([be.s, -torch.ones_like(be.s)], dim=2))
            lome.B.copy_(torch.stack([be.r, torch.ones_like(be.r)], dim=2))
        x = torch.randn(9, k, fin, dtype=torch.double)
        torch.testing.assert_close(lome(x), be(x))
        torch.testing.assert_close(lome.member_weights(), be.member_weights())


@pytest.mark.parametrize("rank", [1, 4, 16])
@pytest.mark.parametrize("scale", [0.1, 1.5])
def test_lome_residual_init_std(rank, scale):
    torch.manual_seed(3)
    layer = LoMELinear(128, 96, 8, rank, scale)
    residual = layer.A.detach() @ layer.B.detach().transpose(1, 2)
    assert abs(residual.std().item() / scale - 1) < 0.06
    assert abs(residual.mean().item()) < 0.05 * scale
    # parameter std τ = (σ/√r)^{1/2}
    tau = math.sqrt(scale / math.sqrt(rank))
    assert abs(layer.A.std().item() / tau - 1) < 0.05


def test_additive_residual_init_matches_multiplicative_perturbation():
    torch.manual_seed(4)
    fin, scale = 100, 0.7
    add = AdditiveLowRankLinear(fin, 120, 8, 4, scale)
    mul = LoMELinear(fin, 120, 8, 4, scale)
    add_pert = add.A.detach() @ add.B.detach().transpose(1, 2)
    mul_pert = mul.weight.detach() * (mul.A.detach() @ mul.B.detach().transpose(1, 2))
    assert abs(add_pert.std().item() / (scale / math.sqrt(3 * fin)) - 1) < 0.06
    assert abs(add_pert.std().item() / mul_pert.std().item() - 1) < 0.1


@pytest.mark.parametrize("cls", [LoMELinear, AdditiveLowRankLinear])
def test_shared_init(cls):
    torch.manual_seed(5)
    layer = cls(200, 150, 4, 2, 0.5)
    bound = 200**-0.5
    w = layer.weight.detach()
    assert w.abs().max() <= bound and abs(w.std().item() / (bound / math.sqrt(3)) - 1) < 0.03
    assert torch.equal(layer.bias[0].expand_as(layer.bias), layer.bias)  # one draw for all members
    assert layer.bias.detach().abs().max() <= bound
    zero = cls(5, 4, 3, 2, 0.0)
    assert not zero.A.any() and not zero.B.any()


def test_parameter_contract():
    layer = LoMELinear(7, 5, 4, 3, 0.1)
    shapes = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    assert shapes == {"weight": (5, 7), "bias": (4, 5), "A": (4, 5, 3), "B": (4, 7, 3)}
    assert {n for n, _ in LoMELinear(7, 5, 4, 3, 0.1, bias=False).named_parameters()} == {"weight", "A", "B"}
    ens = EnsembleLinear(7, 5, 4)
    assert {n: tuple(p.shape) for n, p in ens.named_parameters()} == {"weight": (4, 7, 5), "bias": (4, 5)}


@pytest.mark.parametrize("bias", [True, False])
def test_ensemble_linear_matches_independent_layers(bias):
    torch.manual_seed(6)
    layer = EnsembleLinear(6, 3, 4, bias=bias).double()
    x = torch.randn(5, 4, 6, dtype=torch.double)
    g = torch.randn(5, 4, 3, dtype=torch.double)
    weights = layer.weight.detach().transpose(1, 2)  # nn.Linear stores (out, in)
    ref_y, ref_dx, gw, gb = run_explicit(weights, layer.bias, x, g)
    y, dx = run_layer(layer, x, g)
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(dx, ref_dx)
    torch.testing.assert_close(layer.weight.grad, gw.transpose(1, 2))
    if bias:
        torch.testing.assert_close(layer.bias.grad, gb)
        assert not torch.equal(layer.bias[0], layer.bias[1])  # independent draws
    assert not torch.equal(layer.weight[0], layer.weight[1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, "rank must be >= 1, got 0"),
        ({"init_scale": -0.5}, "init_scale must be finite and >= 0, got -0.5"),
        ({"init_scale": float("nan")}, "init_scale"),
        ({"members": 0}, "members must be >= 1, got 0"),
        ({"in_features": 0}, "in_features must be >= 1, got 0"),
        ({"form": "fast"}, "form must be one of .* got 'fast'"),
    ],
)
@pytest.mark.parametrize("cls", [LoMELinear, AdditiveLowRankLinear])
def test_bad_arguments(cls, kwargs, match):
    args = {"in_features": 4, "out_features": 3, "members": 2, "rank": 2, "init_scale": 0.1, **kwargs}
    form = args.pop("form", "auto")
    with pytest.raises(ValueError, match=match):
        cls(**args, form=form)


def test_bad_types_and_input_shapes():
    with pytest.raises(TypeError, match="rank must be an int"):
        LoMELinear(4, 3, 2, 1.5, 0.1)
    with pytest.raises(TypeError, match="members"):
        EnsembleLinear(4, 3, True)
    for layer in (
        LoMELinear(4, 3, 2, 1, 0.1),
        AdditiveLowRankLinear(4, 3, 2, 1, 0.1),
        EnsembleLinear(4, 3, 2),
    ):
        for bad in (torch.randn(5, 4), torch.randn(5, 3, 4), torch.randn(5, 2, 5)):
            with pytest.raises(ValueError, match=r"\(B, K, in\) = \(B, 2, 4\), got \(5, "):
                layer(bad)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bias", [True, False])
def test_lome_gradcheck_float64(form, bias):
    torch.manual_seed(7)
    layer = LoMELinear(4, 3, 3, 2, 0.9, bias=bias, form=form).double()
    x = torch.randn(5, 3, 4, dtype=torch.double, requires_grad=True)
    params = [p for p in (layer.weight, layer.A, layer.B, layer.bias) if p is not None]

    def fn(x, *ps):
        names = ("weight", "A", "B", "bias")
        return torch.func.functional_call(layer, dict(zip(names, ps, strict=False)), (x,))

    assert torch.autograd.gradcheck(fn, (x, *params))


@pytest.mark.parametrize("form", FORMS)
def test_lome_shared_input_matches_explicit_members(form):
    """A broadcast input (LoMETab's first layer) gives the same outputs and gradients as a copy of it."""
    torch.manual_seed(8)
    layer = LoMELinear(6, 5, 4, 3, 0.8, form=form).double()
    with torch.no_grad():
        layer.bias.normal_()
    base = torch.randn(7, 6, dtype=torch.double)
    g = torch.randn(7, 4, 5, dtype=torch.double)
    # through a broadcast view of a leaf: the leaf's gradient is the sum over members
    leaf = base.clone().requires_grad_(True)
    y = layer(leaf.unsqueeze(1).expand(7, 4, 6))
    (y * g).sum().backward()
    got = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad()
    copy = base.unsqueeze(1).expand(7, 4, 6).contiguous().requires_grad_(True)
    ref_y = layer(copy)
    (ref_y * g).sum().backward()
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(leaf.grad, copy.grad.sum(1))
    for n, p in layer.named_parameters():
        torch.testing.assert_close(got[n], p.grad)
    # and against K explicit nn.Linear layers, including a stride-0 leaf's per-member gradient
    check_low_rank(layer, base.unsqueeze(1).expand(7, 4, 6), g)
    x0 = base.unsqueeze(1).expand(7, 4, 6).detach().requires_grad_(True)
    (layer(x0) * g).sum().backward()
    torch.testing.assert_close(x0.grad, copy.grad)


def test_lome_materialized_keeps_no_member_weights_for_backward():
    """The materialized form saves x and the parameters only, never a (K, out, in) tensor."""
    layer = LoMELinear(16, 12, 8, 2, 0.5, form="materialized")
    x = torch.randn(32, 8, 16, requires_grad=True)
    saved: list[tuple[int, ...]] = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x).sum()
    assert (8, 12, 16) not in saved
    assert sum(math.prod(s) for s in saved) <= x.numel() + sum(p.numel() for p in layer.parameters())


def test_lome_materialized_workspace_shared_by_layers_of_other_shapes():
    """The CPU workspace the materialized form reuses for its weight buffers is one per thread and
    dtype: layers of different shapes (a larger one growing it, a smaller one then using a prefix),
    interleaved forward and backward, each still equal K explicit layers, and steady-state steps
    allocate no new weight buffer."""
    import ensemblize.nn.lome as lome_mod

    torch.manual_seed(4)
    small = LoMELinear(6, 5, 4, 2, 0.7, form="materialized").double()
    large = LoMELinear(9, 11, 4, 3, 0.7, form="materialized").double()
    with torch.no_grad():
        small.bias.normal_()
        large.bias.normal_()
    for layer, fin, fout in [(small, 6, 5), (large, 9, 11), (small, 6, 5), (large, 9, 11)]:
        x = torch.randn(7, 4, fin, dtype=torch.double)
        g = torch.randn(7, 4, fout, dtype=torch.double)
        check_low_rank(layer, x, g)
    buffers = lome_mod._WORKSPACE.buffers
    before = {key: buf.data_ptr() for key, buf in buffers.items() if key[1] == torch.double}
    assert {slot for slot, _ in before} == {"weights", "products"}
    check_low_rank(small, torch.randn(3, 4, 6, dtype=torch.double), torch.randn(3, 4, 5, dtype=torch.double))
    after = {key: buf.data_ptr() for key, buf in buffers.items() if key[1] == torch.double}
    assert after == before


@pytest.mark.parametrize("first", ["inference_mode", "no_grad"])
def test_lome_materialized_workspace_made_in_inference_mode_still_trains(first):
    """A forward under torch.inference_mode (or no_grad) that first sizes the shared CPU workspace does
    not break a later training step (an inference tensor cannot be written with autograd on)."""
    import ensemblize.nn.lome as lome_mod

    torch.manual_seed(5)
    layer = LoMELinear(9, 9, 3, 2, 0.6, form="materialized").double()
    x = torch.randn(4, 3, 9, dtype=torch.double)
    lome_mod._WORKSPACE.__dict__.pop("buffers", None)  # so this test's first call allocates the buffers
    with torch.inference_mode() if first == "inference_mode" else torch.no_grad():
        layer(x)
    check_low_rank(layer, x, torch.randn(4, 3, 9, dtype=torch.double))
    with torch.inference_mode():
        y = layer(x)
    torch.testing.assert_close(y, run_explicit(explicit_weights(layer), layer.bias, x, torch.ones_like(y))[0])


def test_lome_materialized_blocks_over_the_workspace_cap_are_not_kept(monkeypatch):
    """Weight blocks larger than ``_WORKSPACE_MAX_BYTES`` are allocated per call (not kept for the
    thread's lifetime) and the layer still equals K explicit layers."""
    import ensemblize.nn.lome as lome_mod

    monkeypatch.setattr(lome_mod, "_WORKSPACE_MAX_BYTES", 0)
    lome_mod._WORKSPACE.__dict__.pop("buffers", None)
    torch.manual_seed(8)
    layer = LoMELinear(7, 6, 3, 2, 0.8, form="materialized").double()
    check_low_rank(layer, torch.randn(5, 3, 7, dtype=torch.double), torch.randn(5, 3, 6, dtype=torch.double))
    assert not lome_mod._WORKSPACE.__dict__.get("buffers")


def test_lome_materialized_compiles_fullgraph():
    """torch.compile(fullgraph=True) traces the materialized Function (no side effect on the CPU
    workspace while compiling) and gives eager's output and gradients."""
    torch.manual_seed(6)
    layer = LoMELinear(8, 6, 4, 2, 0.9, form="materialized")
    x = torch.randn(5, 4, 8)
    g = torch.randn(5, 4, 6)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    xc = x.clone().requires_grad_(True)
    (compiled(xc) * g).sum().backward()
    got = [p.grad.clone() for p in layer.parameters()] + [xc.grad]
    layer.zero_grad()
    xe = x.clone().requires_grad_(True)
    (layer(xe) * g).sum().backward()
    for a, b in zip(got, [p.grad for p in layer.parameters()] + [xe.grad], strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("block_bytes", [1, 2 * 5 * 7 * 8])  # one member per block; two members per block
@pytest.mark.parametrize("bias", [True, False])
def test_lome_materialized_blocks_match_explicit_members(monkeypatch, block_bytes, bias):
    """The cache-blocked materialized form (several member blocks) equals K explicit layers."""
    import ensemblize.nn.lome as lome_mod

    monkeypatch.setattr(lome_mod, "_BLOCK_BYTES", block_bytes)
    assert len(lome_mod._member_blocks(5, 5, 7, 8)) == (5 if block_bytes == 1 else 3)
    torch.manual_seed(9)
    layer = LoMELinear(7, 5, 5, 3, 0.8, bias=bias, form="materialized").double()
    if bias:
        with torch.no_grad():
            layer.bias.normal_()
    x = torch.randn(6, 5, 7, dtype=torch.double)
    g = torch.randn(6, 5, 5, dtype=torch.double)
    check_low_rank(layer, x, g)
    # broadcast input through the blocked shared path
    base = torch.randn(6, 7, dtype=torch.double, requires_grad=True)
    layer.zero_grad()
    (layer(base.unsqueeze(1).expand(6, 5, 7)) * g).sum().backward()
    got = [p.grad.clone() for p in layer.parameters()] + [base.grad.clone()]
    layer.zero_grad()
    copy = base.detach().unsqueeze(1).expand(6, 5, 7).contiguous().requires_grad_(True)
    (layer(copy) * g).sum().backward()
    want = [p.grad for p in layer.parameters()] + [copy.grad.sum(1)]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    params = [p for p in (layer.weight, layer.A, layer.B, layer.bias) if p is not None]
    xg = torch.randn(3, 5, 7, dtype=torch.double, requires_grad=True)

    def fn(x, *ps):
        return torch.func.functional_call(
            layer, dict(zip(("weight", "A", "B", "bias"), ps, strict=False)), (x,)
        )

    assert torch.autograd.gradcheck(fn, (xg, *params))


@pytest.mark.parametrize(
    "make",
    [
        lambda: LoMELinear(3, 2, 2, 1, 0.1),
        lambda: LoMELinear(3, 2, 2, 1, 0.1, form="materialized"),
        lambda: AdditiveLowRankLinear(3, 2, 2, 1, 0.1),
        lambda: EnsembleLinear(3, 2, 2),
    ],
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.float64])
def test_input_dtype_other_than_the_parameters_raises_named_error(make, dtype):
    layer = make()
    with pytest.raises(TypeError, match=f"expects input of dtype torch.float32 .* got {dtype}"):
        layer(torch.ones(4, 2, 3).to(dtype))
    assert layer(torch.ones(0, 2, 3)).shape == (0, 2, 2)  # an empty batch is fine
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts for the kernels itself
        assert torch.isfinite(layer(torch.ones(4, 2, 3, dtype=torch.bfloat16)).float()).all()
