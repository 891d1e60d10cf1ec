"""Low-rank ensemble linear layers: LoMETab's multiplicative rank-r form, the additive ablation, and
K fully independent linear layers.

Every layer maps ``(B, K, in_features) -> (B, K, out_features)``: ``B`` samples, ``K`` members,
member ``k`` reads ``x[:, k]`` and writes ``y[:, k]``. Nothing loops over single members or ranks in
Python; LoMELinear's materialized form walks the members in cache-sized blocks (one block for small
layers), each block batched.

Parameter names and shapes (**contract**, DESIGN.md):

* ``weight``: ``(out, in)`` shared by all members (``EnsembleLinear``: ``(K, in, out)``, one per member);
* ``bias``: ``(K, out)`` per member (``None`` with ``bias=False``);
* ``A``: ``(K, out, r)`` and ``B``: ``(K, in, r)`` per member (low-rank layers).

Initialisation of the shared part follows TabM / ``nn.Linear``: ``weight ~ U(-1/√in, 1/√in)`` and
``bias ~ U(-1/√in, 1/√in)``, the bias drawn once and copied to all K members (as TabM does), so at
initialisation members differ only through their adapters.
"""

from __future__ import annotations

import math
import threading
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .._checks import check_bool, check_choice, check_instance, check_int, check_positive
from .._keywords import passes_keywords
from ..members import check_members

__all__ = ["LoMELinear", "AdditiveLowRankLinear", "EnsembleLinear"]

Form = Literal["auto", "materialized", "factored"]
_FORMS = ("auto", "materialized", "factored")


# ----------------------------------------------------------------------------------------------
# helpers shared with ensemblize.nn.batch_ensemble
# ----------------------------------------------------------------------------------------------


def _member_sizes(in_size: object, out_size: object, members: object, *, unit: str) -> tuple[int, int, int]:
    """``(in, out, members)`` validated: ``in_{unit}`` and ``out_{unit}`` ints >= 1, ``members`` as
    :func:`~ensemblize.members.check_members` (``unit`` is ``"features"`` or ``"channels"``, for the messages)."""
    return (
        check_int(in_size, name=f"in_{unit}", minimum=1),
        check_int(out_size, name=f"out_{unit}", minimum=1),
        check_members(members),
    )


def _member_bias(members: int, out_features: int, *, bias: bool, **kw) -> nn.Parameter | None:
    """An uninitialised per-member bias ``(members, out_features)`` when ``bias``, else ``None``.

    ``bias`` must be a bool (``"no"`` or ``0`` are a TypeError, never read by truthiness)."""
    return nn.Parameter(torch.empty(members, out_features, **kw)) if check_bool(bias, name="bias") else None


def _check_ensemble_input(
    x: object, members: int, in_features: int, layer: str, dtype: torch.dtype | None = None
) -> Tensor:
    """Raise unless ``x`` is a ``(B, K, in)`` tensor with the layer's K and ``in``.

    With ``dtype`` (the layer's parameter dtype) also raise TypeError unless ``x`` has that dtype,
    except under autocast, which casts for the kernels itself.
    """
    check_instance(x, Tensor, name=f"{layer} input", what="a torch.Tensor of shape (B, K, in)")
    if x.dim() != 3 or x.shape[1] != members or x.shape[2] != in_features:
        raise ValueError(
            f"{layer} expects input of shape (B, K, in) = (B, {members}, {in_features}), got {tuple(x.shape)}"
        )
    if dtype is not None and x.dtype != dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(f"{layer} expects input of dtype {dtype} (its parameters' dtype), got {x.dtype}")
    return x


@torch.no_grad()
def _init_rsqrt_uniform_(t: Tensor, fan_in: int) -> Tensor:
    """``t ~ U(-1/√fan_in, 1/√fan_in)`` in place (TabM's and ``nn.Linear``'s default bound)."""
    bound = fan_in**-0.5
    return t.uniform_(-bound, bound)


@torch.no_grad()
def _init_member_bias_(bias: Tensor, fan_in: int) -> Tensor:
    """One ``U(-1/√fan_in, 1/√fan_in)`` draw of shape ``(out,)`` copied to all K rows of ``bias``."""
    row = _init_rsqrt_uniform_(torch.empty_like(bias[0]), fan_in)
    return bias.copy_(row.expand_as(bias))


@torch.no_grad()
def _init_weight_and_bias_(weight: Tensor, bias: Tensor | None, fan_in: int, *, shared_bias: bool) -> None:
    """``weight ~ U(-1/√fan_in, 1/√fan_in)``, then ``bias`` (if any): one such draw copied to every
    member (``shared_bias``, TabM) or an independent draw per entry."""
    _init_rsqrt_uniform_(weight, fan_in)
    if bias is not None:
        (_init_member_bias_ if shared_bias else _init_rsqrt_uniform_)(bias, fan_in)


class _MemberLinear(nn.Module):
    """What every ``(B, K, in) -> (B, K, out)`` layer here shares: validated sizes, the weight, a
    per-member bias ``(K, out)`` and their initialisation (:meth:`reset_parameters`).

    The weight is ``(out, in)``, shared by the members, or ``(K, in, out)``, one per member, when
    :attr:`_member_weights` is set (:class:`EnsembleLinear`). The bias is one draw copied to all members
    (TabM) unless :attr:`_member_weights`. Subclasses add their own parameters after ``__init__`` and
    then call :meth:`reset_parameters`.

    Args:
        in_features, out_features: sizes of the plain linear layer (ints >= 1).
        members: number of members ``K``.
        bias: learn a per-member bias.
        device, dtype: of the parameters.
    """

    _member_weights = False

    def __init__(
        self,
        in_features: int,
        out_features: int,
        members: int,
        *,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        sizes = _member_sizes(in_features, out_features, members, unit="features")
        self.in_features, self.out_features, self.members = sizes
        kw = {"device": device, "dtype": dtype}
        if self._member_weights:
            shape = (self.members, self.in_features, self.out_features)
        else:
            shape = (self.out_features, self.in_features)
        self.weight = nn.Parameter(torch.empty(shape, **kw))
        self.bias = _member_bias(self.members, self.out_features, bias=bias, **kw)

    def _new_parameter(self, *shape: int) -> nn.Parameter:
        """An uninitialised parameter of ``shape`` on the weight's device, in its dtype."""
        return nn.Parameter(self.weight.new_empty(shape))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``weight`` and ``bias`` from ``U(-1/√in, 1/√in)`` (``nn.Linear``'s bound); the bias is one draw
        shared by the members, or independent draws with :attr:`_member_weights`."""
        _init_weight_and_bias_(self.weight, self.bias, self.in_features, shared_bias=not self._member_weights)


# ----------------------------------------------------------------------------------------------
# LoMELinear's materialized form as one autograd Function
# ----------------------------------------------------------------------------------------------
#: Bytes of member weights ``W_k`` the materialized form builds at a time. Forward and backward
#: make several passes over the ``(K, out, in)`` weights (build, GEMM, gradient products); done for
#: all K at once these stream from memory (33 MB at in = out = 512, K = 32), done for a block of
#: members that fits in a core's L2 cache they do not. Measured (1 thread, d = 512 / 256, K = 32,
#: B = 256): blocks of ~1 MiB cut the step from 1.36× / 0.93× to 1.03× / 0.73× the official
#: ``tabm.LinearBatchEnsemble``; 2 MiB and more were slower. Small layers (K·out·in·bytes ≤ 1 MiB)
#: run as one block.
_BLOCK_BYTES = 1 << 20


def _member_blocks(members: int, fout: int, fin: int, itemsize: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(members)`` with about ``_BLOCK_BYTES`` of weights each."""
    size = max(1, _BLOCK_BYTES // max(1, fout * fin * itemsize))
    return [(s, min(members, s + size)) for s in range(0, members, size)]


_WORKSPACE = threading.local()
#: Larger weight blocks (one member of a layer wider than ~1448 × 1448 in float32) are allocated per
#: call rather than kept alive for the thread's lifetime.
_WORKSPACE_MAX_BYTES = 8 << 20


def _workspace(slot: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """An uninitialised ``shape`` tensor of ``like``'s dtype and device, reused across calls on CPU.

    The materialized form needs one to two ``(block, out, in)`` weight buffers per forward and
    backward, used only within that call. A fresh CPU allocation of that size (1 MiB at K = 16,
    d = 128) is served by ``mmap`` and page-faults on first touch: measured at 1 thread, d = 128,
    K = 16, B = 128, that made the weight build ~10× slower than on warm memory and cost ~20 % of the
    layer's training step. So on CPU each thread keeps one growing buffer per ``slot`` (at most a
    block of weights, ~``_BLOCK_BYTES`` and never over ``_WORKSPACE_MAX_BYTES``, per slot, dtype and
    thread; freed with the thread), allocated
    outside inference mode so that calls under ``torch.inference_mode`` and with autograd can share it.
    Callers must not return or save the buffer. Other devices allocate normally (CUDA's caching allocator
    already reuses memory, and a reused buffer would need stream ordering).
    """
    numel = math.prod(shape)
    if (
        like.device.type != "cpu"
        or torch.compiler.is_compiling()  # a compiled graph plans its own memory
        or numel * like.element_size() > _WORKSPACE_MAX_BYTES  # page faults are minor next to its GEMMs
    ):
        return like.new_empty(shape)
    cache = _WORKSPACE.__dict__.setdefault("buffers", {})
    key = (slot, like.dtype)
    buf = cache.get(key)
    if buf is None or buf.numel() < numel:
        # never an inference tensor: one made under torch.inference_mode could not be written to
        # (``out=``) by a later call with autograd on
        with torch.inference_mode(False):
            buf = cache[key] = like.new_empty(numel)
    return buf[:numel].view(shape)


def _lome_member_weights(weight: Tensor, a: Tensor, b: Tensor, buf: Tensor) -> Tensor:
    """``W_k = W ⊙ (1 + A_k B_kᵀ)`` for the k members in ``a``/``b``, written into ``buf[:k]``.

    One thin bmm and one fused pass; ``buf`` (``(≥k, out, in)``) is reused across member blocks.
    """
    residual = torch.bmm(a, b.transpose(1, 2), out=buf[: a.shape[0]])
    return torch.addcmul(weight, weight, residual, out=residual)


class _LoMEMaterialized(torch.autograd.Function):
    r"""``y_k = x_k W_kᵀ + b_k`` with ``W_k = W ⊙ (1 + A_k B_kᵀ)`` built inside forward and backward.

    Autograd through :meth:`LoMELinear.member_weights` keeps the ``(K, out, in)`` weights (and the
    residual) for backward and back-propagates through them in several full passes. This Function
    saves only ``x`` and the parameters; backward rebuilds the weights and computes, with
    ``G_k = gy_kᵀ x_k`` (``(K, out, in)``) and ``P_k = 1 + A_k B_kᵀ``:

    * ``dx_k = gy_k W_k``;
    * ``dW = Σ_k G_k ⊙ P_k``;
    * ``dA_k = (G_k ⊙ W) B_k``, ``dB_k = (G_k ⊙ W)ᵀ A_k``;
    * ``db_k = Σ_b gy_{b,k}``.

    Members are processed in blocks of about ``_BLOCK_BYTES`` of weights (:func:`_member_blocks`),
    a cache-blocking loop: one block whenever ``K·out·in`` is small, one member per block at
    in = out = 512 in float32. Every block is batched over its members (no per-member logic).

    Shared input (``x`` a broadcast view, ``x.stride(1) == 0``, as the first layer of LoMETab gets):
    ``x_k = x_0`` for all k, so the forward is a GEMM ``x_0 [W_1ᵀ … W_Kᵀ]`` per block and ``G`` a
    GEMM ``gyᵀ x_0`` with ``gy`` viewed as ``(B, K·out)``; ``dx`` stays per member (the broadcast's
    own backward sums it), so the gradient is exact for any stride-0 input.

    Not twice differentiable (``once_differentiable``).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
        members, fout, fin = a.shape[0], weight.shape[0], weight.shape[1]
        batch = x.shape[0]
        shared = members > 1 and x.stride(1) == 0
        blocks = _member_blocks(members, fout, fin, weight.element_size())
        buf = _workspace("weights", (blocks[0][1] - blocks[0][0], fout, fin), weight)  # one block, reused
        if shared:
            x0 = x[:, 0]
            y = x0.new_empty(batch, members, fout)
            for s, e in blocks:
                flat = _lome_member_weights(weight, a[s:e], b[s:e], buf).view((e - s) * fout, fin).t()
                yb = torch.mm(x0, flat) if bias is None else torch.addmm(bias[s:e].reshape(-1), x0, flat)
                if len(blocks) == 1:
                    y = yb.view(batch, members, fout)
                else:
                    y[:, s:e] = yb.view(batch, e - s, fout)
            ctx.save_for_backward(x0, weight, a, b)
        else:
            xk = x.transpose(0, 1)
            yk = x.new_empty(members, batch, fout)
            for s, e in blocks:
                wt = _lome_member_weights(weight, a[s:e], b[s:e], buf).transpose(1, 2)
                if bias is None:
                    torch.bmm(xk[s:e], wt, out=yk[s:e])
                else:
                    torch.baddbmm(bias[s:e].unsqueeze(1), xk[s:e], wt, out=yk[s:e])
            y = yk.transpose(0, 1)
            ctx.save_for_backward(x, weight, a, b)
        ctx.shared = shared
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, a, b = ctx.saved_tensors
        members, fout, fin = a.shape[0], weight.shape[0], weight.shape[1]
        need_x, need_w, need_a, need_b, need_bias = ctx.needs_input_grad
        gyk = gy.transpose(0, 1)  # (K, B, out)
        gxk = gy.new_empty(members, gy.shape[0], fin) if need_x else None
        gw = torch.zeros_like(weight) if need_w else None
        ga = torch.empty_like(a) if need_a else None
        gb = torch.empty_like(b) if need_b else None
        gy2 = gy.reshape(gy.shape[0], members * fout) if ctx.shared else None
        blocks = _member_blocks(members, fout, fin, weight.element_size())
        size = blocks[0][1] - blocks[0][0]
        res_buf = _workspace("weights", (size, fout, fin), weight)
        wk_buf = _workspace("products", (size, fout, fin), weight)
        # the thin gradients as (r, out) @ (out, in)-shaped products: 3-5x faster on CPU than
        # (out, in) @ (in, r) (measured at d = 128, K = 16, r = 2), the factor's transpose made contiguous once
        a_t = a.transpose(1, 2).contiguous() if gb is not None else None  # (K, r, out)
        b_t = b.transpose(1, 2).contiguous() if ga is not None else None  # (K, r, in)
        for s, e in blocks:
            residual = torch.bmm(a[s:e], b[s:e].transpose(1, 2), out=res_buf[: e - s])
            wk = torch.addcmul(weight, weight, residual, out=wk_buf[: e - s])
            if gxk is not None:
                torch.bmm(gyk[s:e], wk, out=gxk[s:e])
            if gy2 is not None:  # G = gyᵀ x_0 as one GEMM, written into the weights' buffer
                g = torch.mm(gy2[:, s * fout : e * fout].t(), x, out=wk.view(-1, fin)).view(e - s, fout, fin)
            else:
                g = torch.bmm(gyk[s:e].transpose(1, 2), x.transpose(0, 1)[s:e], out=wk)
            if gw is not None:
                gw.add_(torch.addcmul(g, g, residual, out=residual).sum(0))
            if ga is not None or gb is not None:
                h = g.mul_(weight)
                if ga is not None:  # dA_kᵀ = B_kᵀ Hᵀ
                    ga[s:e] = torch.bmm(b_t[s:e], h.transpose(1, 2)).transpose(1, 2)
                if gb is not None:  # dB_kᵀ = A_kᵀ H
                    gb[s:e] = torch.bmm(a_t[s:e], h).transpose(1, 2)
        gx = gxk.transpose(0, 1) if gxk is not None else None
        gbias = gy.sum(0) if ctx.has_bias and need_bias else None
        return gx, gw, ga, gb, gbias


# ----------------------------------------------------------------------------------------------
# rank-r layers
# ----------------------------------------------------------------------------------------------
# ``auto`` rule, fitted to forward+backward step times measured on CPU (float32, 1-2 threads) for
# in = out ∈ {64, 512}, K ∈ {8, 32}, B ∈ {1, 8, 64, 256}, r ∈ {1, 4, 16} (factored/materialized ratios
# from 0.01 to 48; the table is reproduced by benchmarks/bench_lome.py --forms):
#
# * multiplicative: the factored form costs B·K·(r+1)·in·out multiply-adds (one GEMM on the rank-folded
#   batch), the materialized one (``_LoMEMaterialized``) K·in·out·(B + 3r) plus a handful of
#   memory-bound passes over the (K, out, in) weights that cost like c·K·in·out extra multiply-adds.
#   Factored iff B·r < c. Re-fitted after the materialized form became one autograd Function
#   (in = out ∈ {64, 256, 512}, K ∈ {8, 32}, B ∈ {4, 16, 32, 64, 128}, r ∈ {1, 2, 4}, 1 thread): the
#   crossover sits at B·r ≈ √(in·out)/4 (d = 512: B ≈ 128 / 64 / 32 for r = 1 / 2 / 4), hence
#   factored iff 4·r·B < √(in·out).
# * additive: the shared GEMM is the same in both forms; the thin rank-r products of the factored form
#   ran at roughly rank-independent cost ∝ B·K·(in+out), against ~2·K·in·out to build the weights and
#   back-propagate through them. Factored iff B·(in+out) < 2·in·out: within 25 % of the faster form in
#   47 of the 48 measured cells (the earlier threshold in·out: 44 of 48; it picked the slower form at
#   in = out = 512, B = 256).


@passes_keywords(_MemberLinear)
class _LowRankEnsembleLinear(_MemberLinear):
    """Shared machinery of the rank-r layers (parameters, validation, form dispatch)."""

    _multiplicative: bool

    def __init__(
        self,
        in_features: int,
        out_features: int,
        members: int,
        rank: int,
        init_scale: float,
        *,
        form: Form = "auto",
        **kwargs,
    ) -> None:
        super().__init__(in_features, out_features, members, **kwargs)
        self.rank = check_int(rank, name="rank", minimum=1)
        self.init_scale = check_positive(init_scale, name="init_scale", allow_zero=True)
        self.form = check_choice(form, _FORMS, name="form")
        self.A = self._new_parameter(self.members, self.out_features, self.rank)
        self.B = self._new_parameter(self.members, self.in_features, self.rank)
        self.reset_parameters()

    def _adapter_std(self) -> float:
        """Std of each entry of the residual ``A_k B_kᵀ`` at initialisation."""
        raise NotImplementedError

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw all parameters with the initialisation documented on the class."""
        super().reset_parameters()
        # A, B iid N(0, τ²) ⇒ (A_k B_kᵀ)_{oi} = Σ_j A_oj B_ij has variance r·τ⁴; τ = (std/√r)^{1/2}.
        tau = math.sqrt(self._adapter_std() / math.sqrt(self.rank))
        self.A.normal_(0.0, tau)
        self.B.normal_(0.0, tau)

    def resolved_form(self, batch_size: int) -> str:
        """The form ``forward`` uses for a batch of ``batch_size`` samples (``form`` unless it is ``auto``)."""
        if self.form != "auto":
            return self.form
        fin, fout, r = self.in_features, self.out_features, self.rank
        if self._multiplicative:
            factored = 4 * r * batch_size < math.sqrt(fin * fout)
        else:
            factored = batch_size * (fin + fout) < 2 * fin * fout
        return "factored" if factored else "materialized"

    def member_weights(self) -> Tensor:
        """The materialised per-member weights ``W_k``, shape ``(K, out, in)`` (differentiable)."""
        raise NotImplementedError

    def _factored(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        """``(B, K, in) -> (B, K, out)``."""
        _check_ensemble_input(x, self.members, self.in_features, type(self).__name__, self.weight.dtype)
        if self.resolved_form(x.shape[0]) == "factored":
            y = self._factored(x)
            return y if self.bias is None else y + self.bias
        return self._materialized(x)

    def _materialized(self, x: Tensor) -> Tensor:
        # generic materialized form, autograd through ``member_weights``: one batched matmul (K, B, in) × (K, in, out) -> (K, B, out)
        wt = self.member_weights().transpose(1, 2)
        xk = x.transpose(0, 1)
        y = torch.bmm(xk, wt) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), xk, wt)
        return y.transpose(0, 1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, members={self.members}, "
            f"rank={self.rank}, init_scale={self.init_scale}, bias={self.bias is not None}, form={self.form!r}"
        )


class LoMELinear(_LowRankEnsembleLinear):
    r"""LoMETab's rank-r multiplicative ensemble linear layer.

    Member ``k`` uses ``W_k = W ⊙ (1 + A_k B_kᵀ)`` and computes ``y_k = W_k x_k + b_k``.

    Shapes: input ``(B, K, in_features)``, output ``(B, K, out_features)``. Parameters: ``weight``
    ``(out, in)`` shared; ``bias`` ``(K, out)``; ``A`` ``(K, out, r)``; ``B`` ``(K, in, r)``.

    Initialisation (``reset_parameters``):

    * ``weight ~ U(-1/√in, 1/√in)``; ``bias`` one ``U(-1/√in, 1/√in)`` draw shared by all members;
    * ``A, B ~ N(0, τ²)`` iid with ``τ = (σ_init / √r)^{1/2}``, ``σ_init = init_scale``. Each residual
      entry ``(A_k B_kᵀ)_{oi} = Σ_j A_{k,o,j} B_{k,i,j}`` then has mean 0 and standard deviation exactly
      ``σ_init`` for every rank (variance ``r·τ⁴``), so ``init_scale`` sets the relative size of the
      member perturbation independently of ``r``. ``init_scale=0`` makes ``A = B = 0``, a stationary
      point where ``A`` and ``B`` receive zero gradient (members stay identical).

    Computation (``form``), never a per-member or per-rank Python loop:

    * ``"materialized"``: build ``W_k`` for all members (``(K, out, in)``) then one batched matmul,
      inside one autograd Function that keeps only ``x`` and the parameters for backward and rebuilds
      ``W_k`` there, block by block of members (~1 MiB of weights per block, to stay in cache) (the forward + backward costs the three GEMMs of a plain linear layer on ``B·K``
      rows plus a few passes over the ``(K, out, in)`` weights); a broadcast input (``x.stride(1) == 0``)
      runs as plain GEMMs against all K weights at once;
    * ``"factored"``: never builds ``W_k``: ``(W ⊙ A_k B_kᵀ) x = Σ_j a_{kj} ⊙ W (b_{kj} ⊙ x)``; with ``a_{k0} = b_{k0} = 1``
      this gives ``y_k = Σ_{j=0..r} a_{kj} ⊙ W (b_{kj} ⊙ x_k) + b_k``, evaluated as one GEMM of the shared
      ``W`` on the rank-expanded batch ``(B, K, r+1, in)``;
    * ``"auto"``: per call, the form with the smaller estimated cost (see :meth:`resolved_form`):
      factored iff ``4·r·B < √(in·out)`` (a rule fitted to CPU step times: the factored form costs
      ``r`` extra GEMMs on ``B·K`` rows, the materialized one memory-bound passes over the weights).

    The materialized form's backward is not itself differentiable: a second-order gradient (a gradient
    penalty, ``torch.autograd.grad(..., create_graph=True)`` then ``backward``) needs
    ``form="factored"``; with ``"auto"`` it works or raises depending on the batch size.

    Args:
        in_features, out_features: sizes of the plain linear layer.
        members: number of members ``K`` (≥ 1).
        rank: adapter rank ``r`` (≥ 1).
        init_scale: ``σ_init`` ≥ 0, the std of the residual entries at initialisation.
        bias: learn a per-member bias.
        form: ``"auto"``, ``"materialized"`` or ``"factored"``.
    """

    _multiplicative = True

    def _adapter_std(self) -> float:
        return self.init_scale

    def member_weights(self) -> Tensor:
        """``W_k = W ⊙ (1 + A_k B_kᵀ)``, shape ``(K, out, in)`` (differentiable)."""
        residual = torch.bmm(self.A, self.B.transpose(1, 2))
        return torch.addcmul(self.weight, self.weight, residual)

    def _materialized(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):  # autocast does not cast inside a Function
            return super()._materialized(x)
        return _LoMEMaterialized.apply(x, self.weight, self.A, self.B, self.bias)

    def _factored(self, x: Tensor) -> Tensor:
        ones_a = self.A.new_ones(self.members, self.out_features, 1)
        ones_b = self.B.new_ones(self.members, self.in_features, 1)
        a = torch.cat([ones_a, self.A], dim=2).transpose(1, 2)  # (K, r+1, out)
        b = torch.cat([ones_b, self.B], dim=2).transpose(1, 2)  # (K, r+1, in)
        u = F.linear(x.unsqueeze(2) * b, self.weight)  # (B, K, r+1, out): one GEMM
        return (u * a).sum(dim=2)


class AdditiveLowRankLinear(_LowRankEnsembleLinear):
    r"""Additive low-rank ensemble linear layer (LoMETab's ablation).

    Member ``k`` uses ``W_k = W + A_k B_kᵀ`` and computes ``y_k = W_k x_k + b_k``.

    Shapes: input ``(B, K, in_features)``, output ``(B, K, out_features)``. Parameters as
    :class:`LoMELinear`: ``weight`` ``(out, in)``, ``bias`` ``(K, out)``, ``A`` ``(K, out, r)``,
    ``B`` ``(K, in, r)``.

    Initialisation: ``weight`` and ``bias`` as :class:`LoMELinear`. The multiplicative perturbation
    ``W ⊙ (A_k B_kᵀ)`` has entries of std ``σ_init · std(W) = σ_init / √(3·in)`` (``W`` uniform on
    ``±1/√in``); to make the same ``init_scale`` mean the same perturbation size, the additive residual
    ``A_k B_kᵀ`` is drawn with entry std ``σ_init / √(3·in)``: ``A, B ~ N(0, τ²)`` with
    ``τ = (σ_init / √(3·in·r))^{1/2}``.

    Computation (``form``):

    * ``"materialized"``: ``W_k = W + A_k B_kᵀ`` for all members, one batched matmul;
    * ``"factored"``: ``y_k = W x_k + A_k (B_kᵀ x_k) + b_k`` — one GEMM of the shared ``W`` over all
      ``B·K`` rows plus two thin batched products;
    * ``"auto"``: factored iff ``B·(in+out) < 2·in·out`` (fitted to CPU step times; see
      :meth:`resolved_form`).
    """

    _multiplicative = False

    def _adapter_std(self) -> float:
        return self.init_scale / math.sqrt(3.0 * self.in_features)

    def member_weights(self) -> Tensor:
        """``W_k = W + A_k B_kᵀ``, shape ``(K, out, in)``."""
        return torch.baddbmm(self.weight, self.A, self.B.transpose(1, 2))

    def _factored(self, x: Tensor) -> Tensor:
        shared = F.linear(x, self.weight)  # (B, K, out): one GEMM over B·K rows
        # (K, B, in) @ (K, in, r) -> (K, B, r) @ (K, r, out) -> (K, B, out)
        low = torch.bmm(torch.bmm(x.transpose(0, 1), self.B), self.A.transpose(1, 2))
        return shared + low.transpose(0, 1)


# ----------------------------------------------------------------------------------------------
# K independent layers
# ----------------------------------------------------------------------------------------------
@passes_keywords(_MemberLinear)
class EnsembleLinear(_MemberLinear):
    r"""K fully independent linear layers applied as one batched matmul (the deep-ensemble layer).

    ``y_k = x_k W_k + b_k`` with ``W_k = weight[k]`` of shape ``(in, out)``.

    Shapes: input ``(B, K, in_features)``, output ``(B, K, out_features)``. Parameters: ``weight``
    ``(K, in, out)``, ``bias`` ``(K, out)``.

    Initialisation: each member independently, ``weight[k], bias[k] ~ U(-1/√in, 1/√in)``
    (``nn.Linear``'s bound), so the K layers start as K independent draws.
    """

    _member_weights = True

    def __init__(self, in_features: int, out_features: int, members: int, **kwargs) -> None:
        super().__init__(in_features, out_features, members, **kwargs)
        self.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        """``(B, K, in) -> (B, K, out)``."""
        _check_ensemble_input(x, self.members, self.in_features, type(self).__name__, self.weight.dtype)
        xk = x.transpose(0, 1)
        y = (
            torch.bmm(xk, self.weight)
            if self.bias is None
            else torch.baddbmm(self.bias.unsqueeze(1), xk, self.weight)
        )
        return y.transpose(0, 1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, members={self.members}, "
            f"bias={self.bias is not None}"
        )
