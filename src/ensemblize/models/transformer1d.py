"""A small transformer for short 1-D signals (MNIST-1D: ``(B, 1, 40)``), with LayerNorm.

Non-overlapping patches of ``patch_size`` samples are embedded by a strided ``nn.Conv1d``
(``(B, C, L) -> (B, L / patch_size, dim)`` tokens), a class token and a learnable position
embedding are added, then ``depth`` pre-LN blocks ``x = x + Attn(LN(x)); x = x + MLP(LN(x))`` (the
:class:`~ensemblize.models.vit.ViT`'s blocks), a final ``nn.LayerNorm`` and a linear head on
the class token (``pool="cls"``) or the mean of the patch tokens (``pool="mean"``):
``(B, C, L) -> (B, num_classes)``. Every norm is an ``nn.LayerNorm`` module, so
:func:`ensemblize.sigma_ensemble` converts it (to ``SigmaLayerNorm``); nothing depends on the batch size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ensemblize.models.resnet import check_channels
from ensemblize.models.vit import ViT

__all__ = ["Transformer1d", "transformer1d"]


class Transformer1d(ViT):
    """Patch-embedding transformer for signals: ``(B, in_channels, length) -> (B, num_classes)``.

    The :class:`~ensemblize.models.vit.ViT` with a 1-D patch embedding: its blocks, class token,
    position embedding (``length / patch_size + 1`` tokens), final norm and head, and its checks of
    ``dim``, ``heads``, ``mlp_ratio``, ``dropout`` and ``pool``.

    Args:
        length: the signal length ``L``; the position embedding is sized for ``L / patch_size`` tokens.
        in_channels, num_classes: input channels and output classes.
        patch_size: samples per token (must divide ``length``).
        dim: token width. depth: number of blocks. heads: attention heads (must divide ``dim``).
        mlp_ratio: MLP hidden width / ``dim``. dropout: dropout in the MLPs.
        pool: ``"cls"`` (class token) or ``"mean"`` (mean of the patch tokens).
    """

    def __init__(
        self,
        *,
        length: int,
        in_channels: int = 1,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 3,
        **vit_options: Any,
    ) -> None:
        check_channels([length], name="length")
        check_channels([patch_size], name="patch_size")
        if length % patch_size:
            raise ValueError(f"patch_size={patch_size} does not divide length={length}")
        # a (patch_size × length) "image" has exactly length / patch_size patches of patch_size²;
        # num_classes (10), heads (4), mlp_ratio (2), dropout (0) and pool ("cls") keep ViT's defaults
        size = {"image_size": (patch_size, length), "patch_size": patch_size, "dim": dim, "depth": depth}
        super().__init__(in_channels=in_channels, **size, **vit_options)
        self.length = length
        self.patch_embed = nn.Conv1d(in_channels, dim, patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, length) -> (B, num_classes)``."""
        if x.dim() != 3 or x.shape[1] != self.in_channels or x.shape[2] != self.length:
            raise ValueError(
                f"Transformer1d expects (B, {self.in_channels}, {self.length}) input, got shape {tuple(x.shape)}"
            )
        t = self.patch_embed(x).transpose(1, 2)  # (B, T, dim)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1) + self.pos_embed
        t = self.norm(self.blocks(t))
        return self.head(t[:, 0] if self.pool == "cls" else t[:, 1:].mean(dim=1))


def transformer1d(*, length: int, **kwargs: object) -> Transformer1d:
    """The default 1-D transformer (:class:`Transformer1d`'s defaults: patches of 4 samples, dim 64,
    depth 3, 4 heads, MLP ratio 2, class-token pooling); keywords as :class:`Transformer1d`."""
    return Transformer1d(length=length, **kwargs)
