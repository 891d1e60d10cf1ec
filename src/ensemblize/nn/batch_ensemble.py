"""Rank-1 (BatchEnsemble / TabM) ensemble layers.

Member ``k`` uses the shared weight modulated by a rank-1 mask, ``W_k = W ⊙ (s_k r_kᵀ)``, which is
computed without ever forming ``W_k`` for the linear layer: ``y_k = s_k ⊙ (W (r_k ⊙ x_k)) + b_k``.

Parameter names and shapes (**contract**, DESIGN.md): ``weight`` ``(out, in[, kh, kw])`` shared;
``bias`` ``(K, out)``; ``r`` ``(K, in)``; ``s`` ``(K, out)``.

Initialisation of ``r`` and ``s`` (``init=``):

* ``"tabm"`` (TabM): ``s = 1``; ``r = 1`` except in the first layer (``first_layer=True``), where ``r``
  holds random ±1 signs. With ``chunks=[c_1, ..., c_F]`` (e.g. the embedding width of each original
  feature after piecewise-linear embeddings), one sign is drawn per member and chunk and shared by the
  ``c_f`` consecutive input dims of that chunk.
* ``"normal"`` (BatchEnsemble): ``r, s ~ N(1, 0.5²)`` (mean 1, std 0.5); ``chunks`` shares ``r``'s draw
  within a chunk as above.
* ``"random-signs"``: ``r, s`` iid ±1 with probability 1/2 (``chunks`` applies to ``r``).

``weight`` and ``bias`` follow ``nn.Linear`` / ``nn.Conv2d`` bounds, ``U(-1/√fan_in, 1/√fan_in)`` with
``fan_in = in·kh·kw``; the bias is drawn once and copied to all members (TabM).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_bool, check_choice, check_float_input, check_int
from .._keywords import passes_keywords
from ._conv import check_conv_input, conv_geometry
from .lome import _check_ensemble_input, _init_weight_and_bias_, _member_bias, _member_sizes, _MemberLinear

__all__ = ["BatchEnsembleLinear", "BatchEnsembleConv2d"]

Init = Literal["tabm", "normal", "random-signs"]
_INITS = ("tabm", "normal", "random-signs")


def _check_init(init: object, first_layer: object) -> None:
    check_choice(init, _INITS, name="init")
    check_bool(first_layer, name="first_layer")


def _check_chunks(chunks: object, in_features: int, init: str, first_layer: bool) -> tuple[int, ...] | None:
    if chunks is None:
        return None
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence) or len(chunks) == 0:
        raise TypeError(f"chunks must be a non-empty sequence of positive ints, got {chunks!r}")
    chunks = tuple(check_int(c, name="chunks entries", minimum=1) for c in chunks)
    if sum(chunks) != in_features:
        raise ValueError(
            f"chunks must sum to in_features={in_features}, got sum {sum(chunks)} ({list(chunks)})"
        )
    if init == "tabm" and not first_layer:
        raise ValueError("chunks only shapes a random r; with init='tabm' pass first_layer=True")
    return chunks


@torch.no_grad()
def _draw_(t: Tensor, dist: str, chunks: tuple[int, ...] | None) -> Tensor:
    """Fill ``t`` (``(K, n)``) with ``dist``; with ``chunks``, one draw per member and chunk."""
    n_draws = t.shape[1] if chunks is None else len(chunks)
    v = torch.empty(t.shape[0], n_draws, dtype=t.dtype, device=t.device)
    if dist == "ones":
        v.fill_(1.0)
    elif dist == "normal":
        v.normal_(1.0, 0.5)
    else:  # random-signs
        v.bernoulli_(0.5).mul_(2.0).sub_(1.0)
    if chunks is not None:
        v = v.repeat_interleave(torch.tensor(chunks, device=t.device), dim=1)
    return t.copy_(v)


@torch.no_grad()
def _init_scalings_(
    r: Tensor, s: Tensor, init: str, first_layer: bool, chunks: tuple[int, ...] | None
) -> None:
    if init == "tabm":
        _draw_(r, "random-signs" if first_layer else "ones", chunks)
        s.fill_(1.0)
    else:
        _draw_(r, init, chunks)
        _draw_(s, init, None)


@passes_keywords(_MemberLinear)
class BatchEnsembleLinear(_MemberLinear):
    r"""Rank-1 ensemble linear layer (BatchEnsemble; TabM's ``LinearEfficientEnsemble``).

    ``W_k = W ⊙ (s_k r_kᵀ)``, computed as ``y_k = s_k ⊙ (W (r_k ⊙ x_k)) + b_k`` — one GEMM of the shared
    ``W`` over all ``B·K`` rows, no per-member weights formed.

    Shapes: input ``(B, K, in_features)``, output ``(B, K, out_features)``. Parameters: ``weight``
    ``(out, in)``, ``bias`` ``(K, out)``, ``r`` ``(K, in)``, ``s`` ``(K, out)``.

    Args:
        in_features, out_features: sizes of the plain linear layer.
        members: number of members ``K``.
        bias: learn a per-member bias.
        init: ``"tabm"`` (default), ``"normal"`` or ``"random-signs"``; see the module docstring.
        first_layer: with ``init="tabm"``, draw ``r`` as random signs (TabM does this for the first
            layer only; all other ``r`` and ``s`` start at 1).
        chunks: sizes of the input chunks sharing one random draw of ``r`` (must sum to ``in_features``),
            e.g. ``[d_embedding] * n_features`` after piecewise-linear embeddings.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        members: int,
        *,
        init: Init = "tabm",
        first_layer: bool = False,
        chunks: Sequence[int] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(in_features, out_features, members, **kwargs)
        _check_init(init, first_layer)
        self.init = init
        self.first_layer = first_layer
        self.chunks = _check_chunks(chunks, self.in_features, init, first_layer)
        self.r = self._new_parameter(self.members, self.in_features)
        self.s = self._new_parameter(self.members, self.out_features)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw all parameters with the initialisation chosen at construction."""
        super().reset_parameters()
        _init_scalings_(self.r, self.s, self.init, self.first_layer, self.chunks)

    def member_weights(self) -> Tensor:
        """The materialised per-member weights ``W ⊙ (s_k r_kᵀ)``, shape ``(K, out, in)``."""
        return self.weight * (self.s.unsqueeze(2) * self.r.unsqueeze(1))

    def forward(self, x: Tensor) -> Tensor:
        """``(B, K, in) -> (B, K, out)``."""
        _check_ensemble_input(x, self.members, self.in_features, type(self).__name__)
        check_float_input(x, like=self.weight, name=type(self).__name__)
        y = F.linear(x * self.r, self.weight) * self.s
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, members={self.members}, "
            f"bias={self.bias is not None}, init={self.init!r}, first_layer={self.first_layer}"
        )


class BatchEnsembleConv2d(nn.Module):
    r"""Rank-1 ensemble 2-D convolution on the interleaved ``(B·K, C, H, W)`` layout.

    Member ``k`` uses ``W_k = s_k[:, None, None, None] · W · r_k[None, :, None, None]`` and computes
    ``y_k = conv(x_k, W_k) + b_k = s_k ⊙ conv(r_k ⊙ x_k, W) + b_k``.

    Shapes: input ``(B·K, in_channels, H, W)`` in ``repeat_interleave`` order (row ``b·K + k`` is
    sample ``b`` for member ``k``), output ``(B·K, out_channels, H', W')`` in the same order.
    Parameters: ``weight`` ``(out, in, kh, kw)``, ``bias`` ``(K, out)``, ``r`` ``(K, in)``,
    ``s`` ``(K, out)``.

    Computation: ``r`` and ``s`` are folded into the ``K`` per-member kernels (``K·out·in·kh·kw``
    values, small next to the activations), the input is viewed as ``(B, K·in, H, W)`` and ONE grouped
    convolution with ``groups=K`` does all members; the output ``(B, K·out, H', W')`` is viewed back
    as ``(B·K, out, H', W')``. No full-activation multiplies, no copies of the activations.

    Args:
        in_channels, out_channels, kernel_size, stride, padding: as ``nn.Conv2d`` (ints or pairs).
        members: number of members ``K``.
        bias: learn a per-member bias.
        init: ``"random-signs"`` (default, BatchEnsemble's sign init), ``"normal"`` or ``"tabm"``;
            see the module docstring (``"tabm"`` leaves members identical unless ``first_layer``).
        first_layer: with ``init="tabm"``, draw ``r`` as random signs.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        members: int,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        bias: bool = True,
        *,
        init: Init = "random-signs",
        first_layer: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = conv_geometry(kernel_size, stride, padding)
        sizes = _member_sizes(in_channels, out_channels, members, unit="channels")
        self.in_channels, self.out_channels, self.members = sizes
        _check_init(init, first_layer)
        self.init = init
        self.first_layer = first_layer
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size, **kw))
        self.bias = _member_bias(members, out_channels, bias=bias, **kw)
        self.r = nn.Parameter(torch.empty(members, in_channels, **kw))
        self.s = nn.Parameter(torch.empty(members, out_channels, **kw))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-draw all parameters with the initialisation chosen at construction."""
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        _init_weight_and_bias_(self.weight, self.bias, fan_in, shared_bias=True)
        _init_scalings_(self.r, self.s, self.init, self.first_layer, None)

    def member_weights(self) -> Tensor:
        """Per-member kernels ``s_k · W · r_k``, shape ``(K, out, in, kh, kw)`` (differentiable)."""
        return self.s[:, :, None, None, None] * self.weight * self.r[:, None, :, None, None]

    def forward(self, x: Tensor) -> Tensor:
        """``(B·K, in, H, W) -> (B·K, out, H', W')``, interleaved member order."""
        k = self.members
        check_conv_input(x, self, members=k)
        batch = x.shape[0] // k
        weight = self.member_weights().reshape(k * self.out_channels, self.in_channels, *self.kernel_size)
        bias = None if self.bias is None else self.bias.reshape(-1)
        xg = x.reshape(batch, k * self.in_channels, *x.shape[2:])
        y = F.conv2d(xg, weight, bias, self.stride, self.padding, 1, k)
        return y.reshape(batch * k, self.out_channels, *y.shape[2:])

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, members={self.members}, "
            f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}, init={self.init!r}"
        )
