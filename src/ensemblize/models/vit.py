"""A small Vision Transformer for small images (8×8 digits, 32×32 CIFAR), any channel count.

Patches of ``patch_size × patch_size`` are embedded by a strided convolution, a class token and a
learnable position embedding are added, then ``depth`` pre-LN blocks
``x = x + Attn(LN(x)); x = x + MLP(LN(x))``, a final ``nn.LayerNorm`` and a linear head on the class
token (``pool="cls"``) or on the mean of the patch tokens (``pool="mean"``):
``(B, C, H, W) -> (B, num_classes)``. Every norm is an ``nn.LayerNorm`` module, so
:func:`ensemblize.sigma_ensemble` can convert it; nothing depends on the batch size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ensemblize._checks import check_choice, check_int_pair, check_positive, check_rate
from ensemblize._keywords import passes_keywords
from ensemblize.models.resnet import check_channels

__all__ = ["ViT", "default_patch_size", "vit_small"]


def _pair(image_size: int | tuple[int, int]) -> tuple[int, int]:
    return check_int_pair(image_size, name="image_size")


def default_patch_size(image_size: int | tuple[int, int]) -> int:
    """The smallest patch ``p >= 2`` dividing the image sides with at most 8 patches per side.

    8×8 → 2 (4×4 patches), 28×28 → 4 (7×7), 32×32 → 4 (8×8), 64×64 → 8. Raises ``ValueError``
    when no such ``p`` exists (then pass ``patch_size`` explicitly).
    """
    h, w = _pair(image_size)
    for p in range(2, max(h, w) + 1):
        if h % p == 0 and w % p == 0 and h // p <= 8 and w // p <= 8:
            return p
    raise ValueError(
        f"no patch size >= 2 divides image_size={image_size!r} into <= 8 patches per side; pass patch_size"
    )


class Attention(nn.Module):
    """Multi-head self-attention: ``softmax(Q Kᵀ / √d_head) V`` per head; ``(N, T, dim) -> (N, T, dim)``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(n, t, d))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + Attn(LN(x))`` then ``x + MLP(LN(x))``; ``(N, T, dim)`` in and out."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        hidden = round(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Vision Transformer: ``(B, in_channels, H, W) -> (B, num_classes)``.

    Args:
        image_size: input side (int) or ``(H, W)``; the position embedding is sized for it.
        in_channels, num_classes: input channels and output classes.
        patch_size: patch side; default :func:`default_patch_size` (2 for 8×8, 4 for 32×32).
        dim: token width. depth: number of blocks. heads: attention heads (must divide ``dim``).
        mlp_ratio: MLP hidden width / ``dim``. dropout: dropout in the MLPs.
        pool: ``"cls"`` (class token) or ``"mean"`` (mean of patch tokens).
    """

    def __init__(
        self,
        *,
        image_size: int | tuple[int, int],
        in_channels: int = 3,
        num_classes: int = 10,
        patch_size: int | None = None,
        dim: int = 128,
        depth: int = 6,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        pool: str = "cls",
    ) -> None:
        super().__init__()
        h, w = _pair(image_size)
        p = default_patch_size((h, w)) if patch_size is None else patch_size
        check_channels([p], name="patch_size")
        if h % p or w % p:
            raise ValueError(f"patch_size={p} does not divide image_size={(h, w)}")
        named = {
            "in_channels": in_channels,
            "num_classes": num_classes,
            "dim": dim,
            "depth": depth,
            "heads": heads,
        }
        for label, value in named.items():
            check_channels([value], name=label)
        check_choice(pool, ("cls", "mean"), name="pool")
        dropout = check_rate(dropout, name="dropout")
        mlp_ratio = check_positive(mlp_ratio, name="mlp_ratio")
        self.image_size = (h, w)
        self.patch_size = p
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.pool = pool
        self.feature_dim = dim
        tokens = (h // p) * (w // p)
        self.patch_embed = nn.Conv2d(in_channels, dim, p, stride=p)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_ratio, dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, H, W) -> (B, num_classes)``."""
        if x.dim() != 4 or x.shape[1] != self.in_channels or tuple(x.shape[2:]) != self.image_size:
            raise ValueError(
                f"ViT expects (B, {self.in_channels}, {self.image_size[0]}, {self.image_size[1]}) input, "
                f"got shape {tuple(x.shape)}"
            )
        t = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, T, dim)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1) + self.pos_embed
        t = self.norm(self.blocks(t))
        feat = t[:, 0] if self.pool == "cls" else t[:, 1:].mean(dim=1)
        return self.head(feat)


@passes_keywords(ViT)
def vit_small(**kwargs) -> ViT:
    """A small ViT (dim 128, depth 6, 4 heads, MLP ratio 2, class-token pooling by default).

    Keyword-only arguments as :class:`ViT` (``image_size`` required).
    """
    return ViT(**kwargs)
