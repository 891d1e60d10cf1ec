"""A 1-D ResNet for short signals (MNIST-1D: ``(B, 1, 40)``): ``nn.Conv1d`` + ``nn.BatchNorm1d``.

The 2-D ResNet of :mod:`ensemblize.models.resnet` with every convolution one-dimensional: a
kernel-``stem_kernel`` stride-1 stem, stages of :class:`~ensemblize.models.resnet.BasicBlock`
(kernel 3, padding 1; stride 2 at the start of every stage after the first, so a length ``L``
becomes ``ceil(L / 2)``), global average pooling over time and a linear head:
``(B, C, L) -> (B, num_classes)``.

Layers come from a :class:`Layers1d` factory (``nn.Conv1d`` / ``nn.BatchNorm1d`` / ``nn.Linear``):
every norm is a module and nothing depends on the batch size, so :func:`ensemblize.sigma_ensemble`
converts the model (its BatchNorm1d become ``SigmaBatchNorm1d``). Ensemble factories for 2-D
networks (Packed-Ensembles, BatchEnsemble) are reused through :class:`Layers1dFrom2d`, which runs
each of their ``k × k`` convolutions as a ``1 × k`` convolution on ``(N, C, 1, L)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from ensemblize._keywords import passes_keywords
from ensemblize.models.resnet import Layers, ResNet, check_channels

__all__ = ["Layers1d", "Layers1dFrom2d", "ResNet1d", "resnet1d"]


class Layers1d(Layers):
    """The plain 1-D factory: ``nn.Conv1d``, ``nn.BatchNorm1d`` and ``nn.Linear``."""

    def conv(self, in_channels, out_channels, kernel_size, *, stride=1, padding=0, first=False, bias=False):
        """A 1-D convolution ``(N, in, L) -> (N, out, floor((L + 2·padding - kernel) / stride) + 1)``."""
        return nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)

    def norm(self, channels: int) -> nn.Module:
        """``nn.BatchNorm1d(channels)`` on ``(N, channels, L)``."""
        return nn.BatchNorm1d(channels)


class Conv1dAs2d(nn.Module):
    """Runs a 2-D convolution with a ``1 × k`` kernel on a signal: ``(N, C, L) -> (N, C', L')``.

    ``y = conv2d(x.unsqueeze(2)).squeeze(2)``: a ``(1, k)`` kernel with ``(1, s)`` stride and
    ``(0, p)`` padding is exactly a 1-D convolution of kernel ``k``, stride ``s``, padding ``p``.
    """

    def __init__(self, conv2d: nn.Module) -> None:
        super().__init__()
        self.conv = conv2d

    def forward(self, x: Tensor) -> Tensor:
        """``(N, C, L) -> (N, C', L')``."""
        return self.conv(x.unsqueeze(2)).squeeze(2)


class Layers1dFrom2d(Layers1d):
    """A 2-D ensemble factory (e.g. :class:`~ensemblize.models.ensembles.PackedLayers`) for 1-D networks.

    Convolutions are the 2-D factory's with kernel ``(1, k)``, stride ``(1, s)``, padding ``(0, p)``
    (wrapped in :class:`Conv1dAs2d`); norms are ``nn.BatchNorm1d`` with the 2-D factory's channel
    count (``round(alpha·C)`` for Packed-Ensembles); head, enter and exit are the 2-D factory's.
    """

    def __init__(self, layers2d: Layers) -> None:
        self.layers2d = layers2d

    def conv(self, in_channels, out_channels, kernel_size, *, stride=1, padding=0, first=False, bias=False):
        """The 2-D factory's convolution with a ``1 × kernel_size`` kernel, as a 1-D layer."""
        conv2d = self.layers2d.conv(
            in_channels,
            out_channels,
            (1, kernel_size),
            stride=(1, stride),
            padding=(0, padding),
            first=first,
            bias=bias,
        )
        return Conv1dAs2d(conv2d)

    def norm(self, channels: int) -> nn.Module:
        """``nn.BatchNorm1d`` over as many channels as the 2-D factory's norm has."""
        return nn.BatchNorm1d(self.layers2d.norm(channels).num_features)

    def head(self, in_features: int, num_classes: int) -> nn.Module:
        return self.layers2d.head(in_features, num_classes)

    def enter(self) -> nn.Module:
        return self.layers2d.enter()

    def exit(self) -> nn.Module:
        return self.layers2d.exit()


@passes_keywords(ResNet, defaults={"in_channels": 1})
class ResNet1d(ResNet):
    """1-D ResNet: ``(B, in_channels, L) -> (B, num_classes)`` (``(B, M, num_classes)`` with an ensemble factory).

    :class:`~ensemblize.models.resnet.ResNet` built from a 1-D factory: stem
    ``relu(bn(conv_k(x)))`` with ``k = stem_kernel`` (padding ``k // 2``, stride 1), then stage ``i``
    with ``blocks[i]`` BasicBlocks of width ``widths[i]`` (``y = relu(bn(conv(relu(bn(conv(x))))) +
    shortcut(x))``, kernel 3; stride 2 at the first block of stages ``i > 0``), then the mean over
    time and ``head``.

    Args:
        blocks: blocks per stage, e.g. ``(1, 1, 1)``.
        widths: channels per stage, e.g. ``(32, 64, 128)``.
        stem_kernel: the stem's kernel size (odd, so the stem keeps the length).
        layers: a 1-D layer factory (default :class:`Layers1d`).
        in_channels, num_classes: as :class:`~ensemblize.models.resnet.ResNet`, keyword-only
            (``in_channels`` defaults to 1 here, for MNIST-1D).
    """

    def __init__(
        self,
        blocks: Sequence[int],
        widths: Sequence[int],
        *,
        stem_kernel: int = 5,
        layers: Layers1d | None = None,
        **kwargs,
    ) -> None:
        check_channels([stem_kernel], name="stem_kernel")
        if stem_kernel % 2 == 0:
            raise ValueError(f"stem_kernel must be odd (the stem keeps the length), got {stem_kernel}")
        layers = Layers1d() if layers is None else layers
        super().__init__(blocks, widths, layers=layers, **kwargs)
        if stem_kernel != 3:  # the 2-D ResNet's stem is 3 wide
            self.stem[0] = layers.conv(
                self.in_channels, list(widths)[0], stem_kernel, padding=stem_kernel // 2, first=True
            )
        self.pool = nn.AdaptiveAvgPool1d(1)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, L) -> (B, num_classes)`` (or ``(B, M, num_classes)`` for an ensemble)."""
        if x.dim() != 3 or x.shape[1] != self.in_channels:
            raise ValueError(f"ResNet1d expects (B, {self.in_channels}, L) input, got shape {tuple(x.shape)}")
        h = self.stages(self.stem(self.enter(x)))
        return self.exit(self.head(self.pool(h).flatten(1)))


def resnet1d(
    *,
    in_channels: int = 1,
    num_classes: int = 10,
    width: int = 32,
    blocks: Sequence[int] = (1, 1, 1),
    stem_kernel: int = 5,
    layers: Layers | None = None,
) -> ResNet1d:
    """The default 1-D ResNet: BasicBlocks ``blocks`` (``(1, 1, 1)``), widths ``width·(1, 2, 4)`` (32/64/128).

    ``layers`` is a 1-D factory (:class:`Layers1d`, :class:`Layers1dFrom2d`); a 2-D ensemble factory
    is wrapped in :class:`Layers1dFrom2d` automatically.
    """
    check_channels([width], name="width")
    if layers is not None and not isinstance(layers, Layers1d):
        layers = Layers1dFrom2d(layers)
    widths = tuple(width * 2**i for i in range(len(tuple(blocks))))
    kw = {"in_channels": in_channels, "num_classes": num_classes, "stem_kernel": stem_kernel}
    return ResNet1d(blocks, widths, layers=layers, **kw)
