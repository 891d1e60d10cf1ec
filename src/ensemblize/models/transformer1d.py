"""A small transformer for short 1-D signals (MNIST-1D: ``(B, 1, 40)``), with LayerNorm.

Non-overlapping patches of ``patch_size`` samples are embedded by a strided ``nn.Conv1d``
(``(B, C, L) -> (B, L / patch_size, dim)`` tokens), a class token and a learnable position
embedding are added, then ``depth`` pre-LN blocks ``x = x + Attn(LN(x)); x = x + MLP(LN(x))`` (the
:class:`~ensemblize.models.vit.Block` of the ViT), a final ``nn.LayerNorm`` and a linear head on
the class token (``pool="cls"``) or the mean of the patch tokens (``pool="mean"``):
``(B, C, L) -> (B, num_classes)``. Every norm is an ``nn.LayerNorm`` module, so
:func:`ensemblize.sigma_ensemble` converts it (to ``SigmaLayerNorm``); nothing depends on the batch size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ensemblize.models.resnet import check_channels
from ensemblize.models.vit import Block

__all__ = ["Transformer1d", "transformer1d"]


class Transformer1d(nn.Module):
    """Patch-embedding transformer for signals: ``(B, in_channels, length) -> (B, num_classes)``.

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
        num_classes: int = 10,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 3,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        pool: str = "cls",
    ) -> None:
        super().__init__()
        named = {
            "length": length,
            "in_channels": in_channels,
            "num_classes": num_classes,
            "patch_size": patch_size,
            "dim": dim,
            "depth": depth,
            "heads": heads,
        }
        for label, value in named.items():
            check_channels([value], name=label)
        if length % patch_size:
            raise ValueError(f"patch_size={patch_size} does not divide length={length}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be > 0, got {mlp_ratio!r}")
        self.length = length
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.pool = pool
        self.feature_dim = dim
        self.patch_embed = nn.Conv1d(in_channels, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, length // patch_size + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_ratio, dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

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
