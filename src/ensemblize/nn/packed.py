"""Packed-Ensembles layers (Laurent et al., ICLR 2023): M members packed side by side in one wide layer.

A Packed-Ensemble ``PE(alpha, M, gamma)`` of a base network keeps the base topology and, in every
layer, multiplies the width by ``alpha`` and splits the channels into ``M·gamma`` independent groups:
member ``m`` owns the ``gamma`` consecutive groups ``[m·gamma, (m+1)·gamma)``, so it never reads another
member's activations. One grouped convolution / block-diagonal matrix product runs all members at once.

Channel arithmetic (exact; ``C_in``/``C_out`` are the *base* network's widths)::

    c_in  = C_in                  if first else round(alpha · C_in)
    c_out = M · C_out             if last  else round(alpha · C_out)
    groups = 1                    if first else M · gamma

``round`` is Python's ``round`` (half to even). A layer is valid only when ``groups`` divides both
``c_in`` and ``c_out`` (and, for a ``first`` layer, ``M`` divides ``c_out`` so every member owns a
slice). Otherwise the constructor raises ``ValueError`` naming the values of ``gamma`` and ``alpha``
that do work — ``gamma`` is never changed behind the caller's back.

* ``first=True``: the layer reads the raw input (shared by all members), so it is dense
  (``groups = 1``); a dense map from a shared input to ``M`` channel slices is exactly ``M``
  independent layers, one per slice.
* ``last=True``: the layer writes ``M · C_out`` channels, member ``m``'s at ``[m·C_out, (m+1)·C_out)``;
  ``y.view(B, M, C_out)`` gives the ``(B, M, C_out)`` member outputs of the ensemble contract.

Layout: Packed layers carry the members along the channel axis, ``(B, c, ...)`` with member ``m`` at
channels ``[m·c/M, (m+1)·c/M)``. This is the same memory as the interleaved ``(B·M, c/M, ...)`` layout
of :mod:`ensemblize.members` viewed as ``(B, M·c/M, ...)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ensemblize._checks import check_bool, check_float_input, check_instance, check_int, check_positive
from ensemblize._keywords import passes_keywords
from ensemblize.members import check_members
from ensemblize.nn._conv import check_conv_input, conv_geometry

__all__ = ["PackedConv2d", "PackedLinear", "packed_widths"]


def _widths(
    in_channels: int, out_channels: int, members: int, alpha: float, gamma: int, first: bool, last: bool
) -> tuple[int, int, int, str | None]:
    """Return ``(c_in, c_out, groups, problem)``; ``problem`` is None when the combination is valid."""
    c_in = in_channels if first else round(alpha * in_channels)
    c_out = members * out_channels if last else round(alpha * out_channels)
    groups = 1 if first else members * gamma
    if c_in < 1 or c_out < 1:
        return c_in, c_out, groups, f"the packed widths (c_in={c_in}, c_out={c_out}) must be >= 1"
    if first and c_out % members:
        return (
            c_in,
            c_out,
            groups,
            f"c_out=round(alpha·{out_channels})={c_out} is not divisible by members={members}",
        )
    if c_in % groups or c_out % groups:
        return (
            c_in,
            c_out,
            groups,
            f"groups=members·gamma={members}·{gamma}={groups} must divide c_in={c_in} and c_out={c_out}",
        )
    return c_in, c_out, groups, None


def packed_widths(
    in_channels: int,
    out_channels: int,
    members: int,
    alpha: float,
    gamma: int = 1,
    *,
    first: bool = False,
    last: bool = False,
) -> tuple[int, int, int]:
    """The packed layer's ``(c_in, c_out, groups)`` for base widths ``in_channels -> out_channels``.

    See the module docstring for the arithmetic. Raises ``ValueError`` when ``groups`` does not divide
    both widths; the message lists the ``gamma`` values that work for this ``alpha`` and the ``alpha``
    values (multiples of 1/4 up to 8) that work for this ``gamma``.
    """
    in_channels = check_int(in_channels, name="in_channels")
    out_channels = check_int(out_channels, name="out_channels")
    members = check_members(members)
    a = check_positive(alpha, name="alpha")
    gamma = check_int(gamma, name="gamma")
    first = check_bool(first, name="first")
    last = check_bool(last, name="last")
    c_in, c_out, groups, problem = _widths(in_channels, out_channels, members, a, gamma, first, last)
    if problem is None:
        return c_in, c_out, groups
    good_gammas = [
        g
        for g in range(1, max(c_in, c_out, 1) + 1)
        if _widths(in_channels, out_channels, members, a, g, first, last)[3] is None
    ]
    good_alphas = [
        q / 4
        for q in range(1, 33)
        if _widths(in_channels, out_channels, members, q / 4, gamma, first, last)[3] is None
    ]
    gam = f"gamma in {good_gammas}" if good_gammas else "no gamma"
    alp = f"alpha in {good_alphas[:8]}" if good_alphas else "no alpha that is a multiple of 1/4 up to 8"
    raise ValueError(
        f"Packed layer {in_channels}->{out_channels} with members={members}, alpha={alpha}, gamma={gamma}"
        f" (first={first}, last={last}): {problem}. With alpha={alpha}, {gam} works; "
        f"with gamma={gamma}, {alp} works."
    )


def _layer_options(
    *,
    first: bool = False,
    last: bool = False,
    bias: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[bool, bool, bool, dict[str, Any]]:
    """The keyword-only options both packed layers take, checked: ``first``, the layer reads the raw,
    shared input (``c_in`` = the base width, one dense group); ``last``, it writes ``M`` times the base
    output width; ``bias``, add a learnable bias (each a bool); ``device`` / ``dtype`` of the parameters,
    as torch's layers take them (returned as a dict of those given)."""
    factory = {k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}
    return (
        check_bool(first, name="first"),
        check_bool(last, name="last"),
        check_bool(bias, name="bias"),
        factory,
    )


def _keep_packing(layer: nn.Module, members: int, alpha: float, gamma: int, first: bool, last: bool) -> None:
    """Store a packed layer's arguments on it (``members``, ``alpha``, ``gamma``, ``first``, ``last``),
    already checked by :func:`packed_widths`."""
    layer.members = check_members(members)
    layer.alpha = float(alpha)
    layer.gamma = int(gamma)
    layer.first = first
    layer.last = last


@passes_keywords(_layer_options)
class PackedConv2d(nn.Conv2d):
    """Packed-Ensembles 2-D convolution: ``M·gamma`` independent groups in one grouped ``nn.Conv2d``.

    ``y = conv2d(x, weight, bias, stride, padding, groups)`` with ``groups = M·gamma`` (``1`` when
    ``first``); group ``j`` maps input channels ``[j·c_in/g, (j+1)·c_in/g)`` to output channels
    ``[j·c_out/g, (j+1)·c_out/g)`` and belongs to member ``j // gamma``.

    Shapes: ``(B, c_in, H, W) -> (B, c_out, H', W')`` with ``c_in``/``c_out`` from
    :func:`packed_widths` (module docstring): members ride along channels, member ``m`` at
    ``[m·c/M, (m+1)·c/M)``.

    Parameters: ``weight`` ``(c_out, c_in / groups, kh, kw)`` (PyTorch's grouped layout), ``bias``
    ``(c_out,)``. Initialisation is PyTorch's default for each group (fan-in ``c_in/groups · kh·kw``),
    i.e. the same as ``groups`` independent ``nn.Conv2d`` layers.

    Args:
        in_channels, out_channels: widths of the *base* (single-model) layer.
        kernel_size: as ``nn.Conv2d``.
        members: ensemble size ``M``.
        alpha: width factor.
        gamma: groups per member.
        stride, padding: as ``nn.Conv2d`` (ints or pairs; ``kernel_size``, ``stride`` ≥ 1, ``padding`` ≥ 0).
        first: the layer reads the raw, shared input (``c_in = in_channels``, ``groups = 1``).
        last: the layer writes ``M · out_channels`` channels.
        bias: add a learnable bias.
        device, dtype: of the parameters, as ``nn.Conv2d``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        members: int,
        alpha: float,
        gamma: int = 1,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        **options,
    ) -> None:
        first, last, bias, factory = _layer_options(**options)
        c_in, c_out, groups = packed_widths(
            in_channels, out_channels, members, alpha, gamma, first=first, last=last
        )
        kernel, strides, pads = conv_geometry(kernel_size, stride, padding)
        super().__init__(
            c_in, c_out, kernel, stride=strides, padding=pads, groups=groups, bias=bias, **factory
        )
        _keep_packing(self, members, alpha, gamma, first, last)
        self.base_in_channels = int(in_channels)
        self.base_out_channels = int(out_channels)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, c_in, H, W) -> (B, c_out, H', W')``; the input is checked first (rank, channels, size)."""
        check_conv_input(x, self)
        return super().forward(x)

    def extra_repr(self) -> str:
        return (
            super().extra_repr()
            + f", members={self.members}, alpha={self.alpha}, gamma={self.gamma}, first={self.first}, last={self.last}"
        )


@passes_keywords(_layer_options)
class PackedLinear(nn.Module):
    """Packed-Ensembles linear layer: a block-diagonal matrix with ``g = M·gamma`` blocks (``1`` if ``first``).

    With ``x`` split into ``g`` consecutive chunks ``x_j`` of ``c_in/g`` features,
    ``y_j = W_j x_j + b_j`` where ``W_j = weight[j·c_out/g : (j+1)·c_out/g]``; block ``j`` belongs to
    member ``j // gamma``.

    Shapes: ``(..., c_in) -> (..., c_out)`` with ``c_in``/``c_out`` from :func:`packed_widths`; members
    ride along the feature axis, member ``m`` at ``[m·c/M, (m+1)·c/M)``. For a ``last`` layer,
    ``y.unflatten(-1, (M, out_features))`` gives the ``(..., M, out_features)`` member outputs.

    Parameters: ``weight`` ``(c_out, c_in / g)`` (rows grouped like a grouped convolution's),
    ``bias`` ``(c_out,)``; each block initialised like ``nn.Linear(c_in/g, c_out/g)``.

    Args:
        in_features, out_features: widths of the *base* (single-model) layer.
        members: ensemble size ``M``.
        alpha: width factor.
        gamma: groups per member.
        first: the layer reads the raw, shared input (``c_in = in_features``, one dense block).
        last: the layer writes ``M · out_features`` features.
        bias: add a learnable bias.
        device, dtype: of the parameters, as ``nn.Linear``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        members: int,
        alpha: float,
        gamma: int = 1,
        **options,
    ) -> None:
        super().__init__()
        first, last, bias, factory = _layer_options(**options)
        c_in, c_out, groups = packed_widths(
            check_int(in_features, name="in_features"),
            check_int(out_features, name="out_features"),
            members,
            alpha,
            gamma,
            first=first,
            last=last,
        )
        self.in_features = c_in
        self.out_features = c_out
        self.groups = groups
        _keep_packing(self, members, alpha, gamma, first, last)
        self.base_in_features = int(in_features)
        self.base_out_features = int(out_features)
        self.weight = nn.Parameter(torch.empty(c_out, c_in // groups, **factory))
        self.bias = nn.Parameter(torch.empty(c_out, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``U(-1/√fan_in, 1/√fan_in)`` per block, ``fan_in = c_in / groups`` (``nn.Linear``'s default)."""
        bound = 1.0 / math.sqrt(self.in_features // self.groups)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., c_in) -> (..., c_out)``; at least 1-D, floating point."""
        check_instance(x, Tensor, name="PackedLinear input", what="a torch.Tensor")
        if x.dim() == 0:
            raise ValueError(
                f"PackedLinear expects input of shape (..., {self.in_features}), got a 0-d tensor (a scalar)"
            )
        check_float_input(x, like=self.weight, name="PackedLinear")
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"PackedLinear expects {self.in_features} input features (last axis), got shape {tuple(x.shape)}"
            )
        if self.groups == 1:
            return F.linear(x, self.weight, self.bias)
        g = self.groups
        w = self.weight.view(g, self.out_features // g, self.in_features // g)
        y = torch.einsum("...gi,goi->...go", x.unflatten(-1, (g, self.in_features // g)), w).flatten(-2)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, groups={self.groups}, "
            f"members={self.members}, alpha={self.alpha}, gamma={self.gamma}, first={self.first}, "
            f"last={self.last}, bias={self.bias is not None}"
        )
