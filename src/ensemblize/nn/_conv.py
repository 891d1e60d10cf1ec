"""What the member-aware 2-D convolutions (BatchEnsemble, Packed-Ensembles) share: the checked
geometry (kernel, stride, padding, as ``nn.Conv2d`` takes them) and the check of their input."""

from __future__ import annotations

from torch import Tensor, nn

from .._checks import check_float_input, check_instance, check_int_pair


def conv_geometry(
    kernel_size: object, stride: object, padding: object
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """``(kernel_size, stride, padding)`` as pairs of ints: kernel and stride >= 1, padding >= 0."""
    return (
        check_int_pair(kernel_size, name="kernel_size", minimum=1),
        check_int_pair(stride, name="stride", minimum=1),
        check_int_pair(padding, name="padding", minimum=0),
    )


def check_conv_input(x: object, layer: nn.Module, *, members: int | None = None) -> None:
    """Raise unless ``x`` suits the convolution ``layer`` (its ``in_channels``, ``kernel_size``,
    ``padding`` and ``weight``): a floating-point ``(N, in_channels, H, W)`` tensor of the weight's dtype
    whose sides, padded, cover the kernel (``H + 2·padding[0] >= kernel_size[0]``, likewise ``W``); with
    ``members`` the rows are the interleaved ``(B·K, ...)`` layout and ``K`` must divide ``N``. The
    messages name the layer's class."""
    name, channels = type(layer).__name__, layer.in_channels
    check_instance(x, Tensor, name=f"{name} input", what="a torch.Tensor")
    if x.dim() != 4 or x.shape[1] != channels or x.shape[0] % (members or 1):
        if members is None:
            expected = f"(B, {channels}, H, W)"
        else:
            expected = f"(B·K, C, H, W) with K={members} dividing the leading size and C={channels}"
        raise ValueError(f"{name} expects input of shape {expected}, got {tuple(x.shape)}")
    check_float_input(x, like=layer.weight, name=name)
    for axis in (0, 1):
        side, pad, kernel = x.shape[2 + axis], layer.padding[axis], layer.kernel_size[axis]
        if side + 2 * pad < kernel:
            raise ValueError(
                f"{name} input {tuple(x.shape)}: spatial size {side} (+2·padding {pad}) "
                f"is smaller than the kernel {kernel}"
            )
