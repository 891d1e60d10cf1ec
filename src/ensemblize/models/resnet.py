"""CIFAR-style ResNets for small images (8×8 digits up to 32×32 CIFAR), any channel count.

A 3×3 stride-1 stem, no max-pool, BasicBlocks, global adaptive average pooling and a linear head:
``(B, C, H, W) -> (B, num_classes)``. Downsampling stages use stride 2 with padding 1, so a spatial
size ``s`` becomes ``ceil(s / 2)`` and never drops below 1×1 (8×8 → 8, 4, 2, 1 in ResNet-18).

Every layer is built through a :class:`Layers` factory. The default builds plain ``nn.Conv2d`` /
``nn.BatchNorm2d`` / ``nn.Linear`` (a backbone :func:`ensemblize.sigma_ensemble` can convert: its norms
are ``nn.Module`` s and nothing depends on the batch size); ensemble variants (Packed-Ensembles,
BatchEnsemble, see :mod:`ensemblize.models.ensembles`) pass another factory and reuse this code.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from ensemblize._checks import check_int

__all__ = ["BasicBlock", "Layers", "ResNet", "resnet18", "resnet_small"]


def check_channels(values: Sequence[object], *, name: str) -> None:
    """Raise unless every value is an int >= 1 (naming ``name`` and the bad value; :func:`check_int`)."""
    for v in values:
        check_int(v, name=name)


class Layers:
    """Layer factory: how a backbone builds its convolutions, norms, head and input/output adapters.

    The plain factory builds single-model layers. Subclasses override the methods to build ensemble
    layers; widths passed in are always the *base* network's widths.
    """

    def conv(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
        first: bool = False,
        bias: bool = False,
    ) -> nn.Module:
        """A 2-D convolution; ``first`` marks the stem (it reads the raw input)."""
        return nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)

    def norm(self, channels: int) -> nn.Module:
        """A 2-D batch norm over ``channels`` base channels."""
        return nn.BatchNorm2d(channels)

    def head(self, in_features: int, num_classes: int) -> nn.Module:
        """The classifier on pooled features ``(N, in_features)``."""
        return nn.Linear(in_features, num_classes)

    def enter(self) -> nn.Module:
        """Maps the input ``(B, C, H, W)`` to the layout the layers expect (plain: identity)."""
        return nn.Identity()

    def exit(self) -> nn.Module:
        """Maps the head's output to the model's output (plain: identity, ``(B, num_classes)``)."""
        return nn.Identity()


class BasicBlock(nn.Module):
    """``y = relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))``; shortcut is a 1×1 conv + BN when the
    shape changes. ``(N, in_channels, H, W) -> (N, out_channels, ceil(H/stride), ceil(W/stride))``."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1, layers: Layers) -> None:
        super().__init__()
        self.conv1 = layers.conv(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = layers.norm(out_channels)
        self.conv2 = layers.conv(out_channels, out_channels, 3, stride=1, padding=1)
        self.bn2 = layers.norm(out_channels)
        self.relu = nn.ReLU()
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Sequential(
                layers.conv(in_channels, out_channels, 1, stride=stride), layers.norm(out_channels)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


def attach_head(
    model: nn.Module, layers: Layers, *, features: int, in_channels: int, num_classes: int
) -> None:
    """Give ``model`` the shared tail: ``pool`` (global average), ``head`` ``(B, features) -> (B, num_classes)``,
    ``exit`` and the ``in_channels`` / ``num_classes`` / ``feature_dim`` attributes."""
    model.pool = nn.AdaptiveAvgPool2d(1)
    model.head = layers.head(features, num_classes)
    model.exit = layers.exit()
    model.in_channels = in_channels
    model.num_classes = num_classes
    model.feature_dim = features


def check_image_input(x: Tensor, in_channels: int, *, model: str) -> None:
    """Raise ValueError naming ``model`` unless ``x`` is ``(B, in_channels, H, W)``."""
    if x.dim() != 4 or x.shape[1] != in_channels:
        raise ValueError(f"{model} expects (B, {in_channels}, H, W) input, got shape {tuple(x.shape)}")


class ResNet(nn.Module):
    """CIFAR-style ResNet: 3×3 stem, stages of BasicBlocks, adaptive average pool, linear head.

    Stage ``i`` has ``blocks[i]`` blocks of width ``widths[i]``; the first stage keeps the resolution,
    each later one halves it (stride 2). Plain factory: ``(B, in_channels, H, W) -> (B, num_classes)``;
    an ensemble factory returns ``(B, M, num_classes)``.

    Args:
        blocks: blocks per stage, e.g. ``(2, 2, 2, 2)`` for ResNet-18.
        widths: channels per stage, e.g. ``(64, 128, 256, 512)``.
        in_channels: input channels (1 for digits, 3 for CIFAR).
        num_classes: output classes.
        layers: layer factory (default: plain layers).
    """

    def __init__(
        self,
        blocks: Sequence[int],
        widths: Sequence[int],
        *,
        in_channels: int = 3,
        num_classes: int = 10,
        layers: Layers | None = None,
    ) -> None:
        super().__init__()
        blocks, widths = list(blocks), list(widths)
        if not blocks or len(blocks) != len(widths):
            raise ValueError(f"blocks {blocks} and widths {widths} must be non-empty and of equal length")
        check_channels(blocks, name="blocks")
        check_channels(widths, name="widths")
        check_channels([in_channels], name="in_channels")
        check_channels([num_classes], name="num_classes")
        layers = Layers() if layers is None else layers
        self.enter = layers.enter()
        self.stem = nn.Sequential(
            layers.conv(in_channels, widths[0], 3, padding=1, first=True), layers.norm(widths[0]), nn.ReLU()
        )
        stages = []
        c = widths[0]
        for i, (n, w) in enumerate(zip(blocks, widths, strict=True)):
            stage = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                stage.append(BasicBlock(c, w, stride=stride, layers=layers))
                c = w
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        attach_head(self, layers, features=c, in_channels=in_channels, num_classes=num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, H, W) -> (B, num_classes)`` (or ``(B, M, num_classes)`` for an ensemble)."""
        check_image_input(x, self.in_channels, model="ResNet")
        h = self.stages(self.stem(self.enter(x)))
        return self.exit(self.head(self.pool(h).flatten(1)))


def resnet18(
    *, in_channels: int = 3, num_classes: int = 10, width: int = 64, layers: Layers | None = None
) -> ResNet:
    """CIFAR ResNet-18: BasicBlocks ``[2, 2, 2, 2]``, widths ``width·(1, 2, 4, 8)`` (64..512 by default)."""
    check_channels([width], name="width")
    return ResNet(
        (2, 2, 2, 2),
        tuple(width * k for k in (1, 2, 4, 8)),
        in_channels=in_channels,
        num_classes=num_classes,
        layers=layers,
    )


def resnet_small(
    *, in_channels: int = 3, num_classes: int = 10, width: int = 16, layers: Layers | None = None
) -> ResNet:
    """A light ResNet-8 for quick CPU runs: BasicBlocks ``[1, 1, 1]``, widths ``width·(1, 2, 4)`` (16/32/64)."""
    check_channels([width], name="width")
    return ResNet(
        (1, 1, 1),
        tuple(width * k for k in (1, 2, 4)),
        in_channels=in_channels,
        num_classes=num_classes,
        layers=layers,
    )
