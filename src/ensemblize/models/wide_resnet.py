"""Wide residual networks (Zagoruyko & Komodakis, 2016) for small images, any channel count.

WRN-``depth``-``k``: a 3×3 stem to 16 channels, three stages of ``n = (depth - 4) / 6`` pre-activation
blocks of widths ``16k, 32k, 64k`` (strides 1, 2, 2), BN-ReLU, adaptive average pooling and a linear
head: ``(B, C, H, W) -> (B, num_classes)``. 8×8 inputs end at 2×2 before pooling.

Layers come from a :class:`ensemblize.models.resnet.Layers` factory, so the Packed-Ensembles and
BatchEnsemble variants reuse this code.
"""

from __future__ import annotations

from torch import Tensor, nn

from ensemblize._checks import check_rate
from ensemblize._keywords import passes_keywords
from ensemblize.models.resnet import Layers, attach_head, check_channels, check_image_input

__all__ = ["WideBlock", "WideResNet", "wide_resnet28"]


class WideBlock(nn.Module):
    """Pre-activation wide block:
    ``y = conv3x3(dropout(relu(bn2(conv3x3_s(relu(bn1(x))))))) + shortcut(x)``, shortcut a 1×1
    stride-``s`` conv when the shape changes. ``(N, c_in, H, W) -> (N, c_out, ceil(H/s), ceil(W/s))``."""

    def __init__(
        self, in_channels: int, out_channels: int, *, stride: int, dropout: float, layers: Layers
    ) -> None:
        super().__init__()
        self.bn1 = layers.norm(in_channels)
        self.conv1 = layers.conv(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn2 = layers.norm(out_channels)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = layers.conv(out_channels, out_channels, 3, padding=1)
        self.relu = nn.ReLU()
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = layers.conv(in_channels, out_channels, 1, stride=stride)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(self.relu(self.bn1(x)))
        out = self.conv2(self.dropout(self.relu(self.bn2(out))))
        return out + self.shortcut(x)


class WideResNet(nn.Module):
    """WRN-``depth``-``widen_factor``: ``(B, in_channels, H, W) -> (B, num_classes)`` (plain factory) or
    ``(B, M, num_classes)`` (ensemble factory).

    Args:
        depth: total depth; ``depth - 4`` must be a positive multiple of 6 (28 → 4 blocks per stage).
        widen_factor: ``k``; stage widths are ``16k, 32k, 64k``.
        dropout: dropout probability between the two convolutions of each block, in ``[0, 1)``.
        in_channels, num_classes: input channels and output classes.
        layers: layer factory (default: plain layers).
    """

    def __init__(
        self,
        *,
        depth: int = 28,
        widen_factor: int = 10,
        dropout: float = 0.0,
        in_channels: int = 3,
        num_classes: int = 10,
        layers: Layers | None = None,
    ) -> None:
        super().__init__()
        check_channels([depth], name="depth")
        if (depth - 4) % 6 or depth < 10:
            raise ValueError(f"depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, ...), got {depth}")
        check_channels([widen_factor], name="widen_factor")
        check_channels([in_channels], name="in_channels")
        check_channels([num_classes], name="num_classes")
        dropout = check_rate(dropout, name="dropout")
        layers = Layers() if layers is None else layers
        n = (depth - 4) // 6
        widths = [16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.enter = layers.enter()
        self.stem = layers.conv(in_channels, 16, 3, padding=1, first=True)
        stages, c = [], 16
        for i, w in enumerate(widths):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(WideBlock(c, w, stride=stride, dropout=float(dropout), layers=layers))
                c = w
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.final = nn.Sequential(layers.norm(c), nn.ReLU())
        attach_head(self, layers, features=c, in_channels=in_channels, num_classes=num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, H, W) -> (B, num_classes)`` (or ``(B, M, num_classes)`` for an ensemble)."""
        check_image_input(x, self.in_channels, model="WideResNet")
        h = self.final(self.stages(self.stem(self.enter(x))))
        return self.exit(self.head(self.pool(h).flatten(1)))


@passes_keywords(WideResNet, drop=("depth",))
def wide_resnet28(**kwargs) -> WideResNet:
    """WRN-28-``widen_factor`` (WRN-28-10 by default: 4 pre-activation blocks per stage, widths 160/320/640).

    Keyword-only arguments as :class:`WideResNet` except ``depth`` (28 here).
    """
    return WideResNet(depth=28, **kwargs)
