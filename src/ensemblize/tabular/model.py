"""The LoMETab network: shared feature embeddings, a member-aware MLP, per-member heads.

Shapes (``B`` rows, ``K`` members, ``F = n_num + sum(cat_cardinalities)`` input columns):

* input ``x``: ``(B, F)`` — every member sees every row — or ``(B, K, F)`` — member ``k`` sees
  row ``x[:, k]`` (per-member batches). The first ``n_num`` columns are the (already
  quantile-transformed) numeric features, the rest the one-hot categorical blocks, in order.
* numeric embedding: ``(·, n_num) -> (·, n_num, d_embedding) -> (·, n_num·d_embedding)`` with
  ``"piecewise"`` (:class:`rtdl_num_embeddings.PiecewiseLinearEmbeddings`, version ``"B"``),
  ``"linear"`` (:class:`rtdl_num_embeddings.LinearEmbeddings`) or the raw values (``"none"``);
  the one-hot blocks are appended unchanged. The embedding is shared by all members.
* the flat representation ``(B, d_in)`` is broadcast to ``(B, K, d_in)`` with
  :func:`ensemblize.members.expand` (a view), then ``n_blocks`` blocks
  ``h <- Dropout(ReLU(L_i(h)))`` map ``(B, K, ·) -> (B, K, d_block)``;
* the head is one linear map per member, ``(B, K, d_block) -> (B, K, n_out)``;
* output: ``(B, K, C)`` member logits for classification, ``(B, K)`` member predictions for
  regression (``n_out = 1`` squeezed).

Layer kinds ``L_i`` (all ``(B, K, in) -> (B, K, out)``):

========================  ======================================================================
``"lome"``                :class:`ensemblize.nn.LoMELinear`: ``W_k = W ⊙ (1 + A_k B_kᵀ)``, rank r
``"additive"``            :class:`ensemblize.nn.AdditiveLowRankLinear`: ``W_k = W + A_k B_kᵀ``
``"batchensemble"``       TabM: :class:`ensemblize.nn.BatchEnsembleLinear` with ``init="tabm"``;
                          the first layer's input scale ``r_k`` has random signs, one sign per
                          embedded feature (chunks of ``d_embedding`` / one-hot block width)
``"plain"``               one ``nn.Linear`` shared by every member (``K = 1``: the MLP baseline)
``"independent"``         :class:`ensemblize.nn.EnsembleLinear`: K unrelated MLPs (deep ensemble)
========================  ======================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import rtdl_num_embeddings as rtdl
import torch
from torch import Tensor, nn

from ensemblize._checks import check_choice, check_int, check_rate
from ensemblize.members import check_members, expand
from ensemblize.tabular.bins import piecewise_embeddings

__all__ = ["LAYERS", "EMBEDDINGS", "LoMETabModel"]

LAYERS = ("lome", "additive", "batchensemble", "plain", "independent")
EMBEDDINGS = ("piecewise", "linear", "none")


class LoMETabModel(nn.Module):
    """A K-member tabular MLP whose hidden layers are one of :data:`LAYERS`.

    Args (keyword-only):
        n_num: number of numeric input columns (the leading columns of ``x``).
        cat_cardinalities: width of each one-hot categorical block that follows them.
        n_out: classes ``C`` (classification) or ``1`` (regression: the output is squeezed).
        regression: whether the output is ``(B, K)`` (True) or ``(B, K, C)`` (False).
        members: ensemble size ``K``.
        layer: hidden layer kind, one of :data:`LAYERS`.
        n_blocks, d_block, dropout: depth, width and dropout rate of the MLP.
        embedding: numeric embedding, one of :data:`EMBEDDINGS`.
        bins: per-feature bin edges (from :func:`rtdl_num_embeddings.compute_bins`), required
            for ``embedding="piecewise"`` when ``n_num > 0``.
        d_embedding: embedding width per numeric feature.
        rank, init_scale: LoMELinear / AdditiveLowRankLinear adapter rank r and init scale σ_init.

    Forward: ``x`` ``(B, F)`` or ``(B, K, F)`` float -> ``(B, K, C)`` logits or ``(B, K)``.
    """

    def __init__(
        self,
        *,
        n_num: int,
        cat_cardinalities: Sequence[int] = (),
        n_out: int,
        regression: bool,
        members: int,
        layer: str = "lome",
        n_blocks: int = 3,
        d_block: int = 256,
        dropout: float = 0.1,
        embedding: str = "piecewise",
        bins: Sequence[Tensor] | None = None,
        d_embedding: int = 16,
        rank: int = 2,
        init_scale: float = 0.5,
    ) -> None:
        super().__init__()
        self.members = check_members(members)
        self.n_num = check_int(n_num, name="n_num", minimum=0)
        self.cat_cardinalities = [
            check_int(c, name="cat_cardinalities[i]", minimum=1) for c in cat_cardinalities
        ]
        self.n_out = check_int(n_out, name="n_out", minimum=1)
        self.regression = bool(regression)
        if self.regression and n_out != 1:
            raise ValueError(f"regression models have n_out=1, got n_out={n_out}")
        check_choice(layer, LAYERS, name="layer")
        check_choice(embedding, EMBEDDINGS, name="embedding")
        check_int(n_blocks, name="n_blocks", minimum=1)
        check_int(d_block, name="d_block", minimum=1)
        check_int(d_embedding, name="d_embedding", minimum=1)
        check_rate(dropout, name="dropout")
        self.layer = layer
        self.embedding_kind = embedding
        self.n_features = self.n_num + sum(self.cat_cardinalities)
        if self.n_features == 0:
            raise ValueError("the model needs at least one input column, got n_num=0 and no categoricals")

        # --- shared numeric embedding: (N, n_num) -> (N, n_num * d_num) -----------------------
        self.num_embedding: nn.Module | None
        if self.n_num == 0 or embedding == "none":
            self.num_embedding, d_num = None, 1
        elif embedding == "linear":
            self.num_embedding, d_num = rtdl.LinearEmbeddings(self.n_num, d_embedding), d_embedding
        else:
            if bins is None or len(bins) != self.n_num:
                got = None if bins is None else len(bins)
                raise ValueError(
                    f"embedding='piecewise' needs one bin tensor per numeric feature ({self.n_num}), got {got}"
                )
            self.num_embedding = piecewise_embeddings(list(bins), d_embedding)
            d_num = d_embedding
        d_in = self.n_num * d_num + sum(self.cat_cardinalities)
        # chunks: one per input feature, so that TabM's random signs are shared within a feature
        chunks = [d_num] * self.n_num + list(self.cat_cardinalities)

        # --- member-aware MLP -----------------------------------------------------------------
        blocks: list[nn.Module] = []
        for i in range(n_blocks):
            d = d_in if i == 0 else d_block
            blocks += [
                self._make_layer(
                    layer, d, d_block, first=i == 0, chunks=chunks, rank=rank, init_scale=init_scale
                )
            ]
            blocks += [nn.ReLU(), nn.Dropout(float(dropout))]
        self.backbone = nn.Sequential(*blocks)
        from ensemblize.nn import EnsembleLinear

        self.head = EnsembleLinear(d_block, self.n_out, self.members)

    def _make_layer(
        self,
        kind: str,
        d_in: int,
        d_out: int,
        *,
        first: bool,
        chunks: list[int],
        rank: int,
        init_scale: float,
    ) -> nn.Module:
        import ensemblize.nn as enn

        k = self.members
        if kind == "lome":
            return enn.LoMELinear(d_in, d_out, k, rank, init_scale)
        if kind == "additive":
            return enn.AdditiveLowRankLinear(d_in, d_out, k, rank, init_scale)
        if kind == "batchensemble":
            return enn.BatchEnsembleLinear(
                d_in, d_out, k, init="tabm", first_layer=first, chunks=chunks if first else None
            )
        if kind == "independent":
            return enn.EnsembleLinear(d_in, d_out, k)
        return nn.Linear(d_in, d_out)  # "plain": broadcasts over (B, K, in)

    def embed(self, x: Tensor) -> Tensor:
        """Shared input representation: ``(*, F) -> (*, d_in)`` (any leading shape)."""
        if x.shape[-1] != self.n_features:
            raise ValueError(f"expected {self.n_features} input columns, got x of shape {tuple(x.shape)}")
        if self.num_embedding is None:
            return x
        lead = x.shape[:-1]
        x_num, x_cat = x[..., : self.n_num], x[..., self.n_num :]
        e = self.num_embedding(x_num.reshape(-1, self.n_num))  # (N, n_num, d)
        e = e.reshape(*lead, -1)
        return torch.cat([e, x_cat], dim=-1) if x_cat.shape[-1] else e

    def forward(self, x: Tensor) -> Tensor:
        """``(B, F)`` or ``(B, K, F)`` -> ``(B, K, C)`` member logits / ``(B, K)`` member predictions."""
        if x.dim() == 2:
            h = expand(self.embed(x), self.members)  # (B, K, d_in), a broadcast view
        elif x.dim() == 3 and x.shape[1] == self.members:
            h = self.embed(x)  # (B, K, d_in): member k sees its own rows
        else:
            raise ValueError(
                f"expected x of shape (B, {self.n_features}) or (B, {self.members}, {self.n_features}), "
                f"got {tuple(x.shape)}"
            )
        out = self.head(self.backbone(h))  # (B, K, n_out)
        return out.squeeze(-1) if self.regression else out
