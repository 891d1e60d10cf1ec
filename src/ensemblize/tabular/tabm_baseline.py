"""Official TabM (Gorishniy et al., ICLR 2025) as scikit-learn estimators: the baseline LoMETab is compared to.

The network is the ``tabm`` package's own :class:`tabm.TabM` built by ``tabm.TabM.make`` — its
layers, its initialisation (with numeric embeddings the first adapter is drawn from N(0, 1),
``start_scaling_init='normal'``; without them ±1 random signs) and its defaults (``k = 32``,
``d_block = 512``, ``n_blocks = 2`` with numeric embeddings else 3, ``dropout = 0.1``, ReLU,
``arch_type='tabm'``) — with rtdl's piecewise-linear embeddings
(``rtdl_num_embeddings.PiecewiseLinearEmbeddings(bins, d_embedding=16, activation=False,
version='B')`` on 48 quantile bins, the package's documented recipe). Nothing of TabM is
re-implemented here; :class:`TabMNetwork` only maps the library's flat input layout onto TabM's
``(x_num, x_cat)`` arguments.

Training and everything around it are the shared implementation of
:mod:`ensemblize.tabular.estimator_base` (the same preprocessing, split, bins, early stopping,
outputs and persistence as :class:`~ensemblize.tabular.LoMETabClassifier`), through
:func:`ensemblize.tabular.train.train_model`: AdamW (lr 2e-3, weight decay 3e-4, TabM's values),
mean member loss, gradient clipping at 1, patience 16. Weight decay follows TabM's rule
(:func:`tabm_no_decay`: no decay on biases, normalisation layers or rtdl's linear embeddings), which
the training path's standard parameter groups reproduce exactly on this network.

Categorical inputs: TabM one-hot encodes integer codes itself. Each one-hot block of the shared
preprocessor (width ``c``) becomes one code — the index of its 1, or ``c`` when the block is all
zero (a category unseen in training) — and TabM is told the cardinality ``c + 1``. A missing-value
indicator (a width-1 block) thus becomes a 2-category feature.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ensemblize._checks import check_choice, check_int
from ensemblize.tabular.estimator_base import (
    TRAINING_DEFAULTS,
    EnsembleClassifierMixin,
    EnsembleRegressorMixin,
    TabularEnsembleEstimator,
    estimator_init,
)
from ensemblize.tabular.inputs import check_real

__all__ = ["TabMNetwork", "TabMClassifier", "TabMRegressor", "tabm_no_decay", "ARCH_TYPES"]

ARCH_TYPES = ("tabm", "tabm-mini", "tabm-packed")
_NORMS = (nn.BatchNorm1d, nn.LayerNorm, nn.InstanceNorm1d)


def tabm_no_decay(model: nn.Module) -> set[str]:
    """Names of the parameters official TabM trains without weight decay (its ``make_parameter_groups``).

    TabM's rule: a parameter is exempt when its name ends in ``bias``, or when it belongs (directly or
    through a parent module) to a normalisation layer (``BatchNorm1d``, ``LayerNorm``,
    ``InstanceNorm1d``) or to rtdl's ``LinearEmbeddings`` / ``LinearReLUEmbeddings`` / periodic
    embeddings. With piecewise-linear embeddings this exempts their ``linear0`` (a
    ``LinearEmbeddings``) and every bias; the embeddings' per-feature ``linear`` weight is decayed.
    The training path's ``"standard"`` groups (:mod:`ensemblize.training.optim`) give exactly this set
    on :class:`TabMNetwork` (tested).
    """
    import rtdl_num_embeddings as rtdl

    exempt_modules = (*_NORMS, rtdl.LinearEmbeddings, rtdl.LinearReLUEmbeddings, rtdl._Periodic)
    names = set()
    for mod_name, mod in model.named_modules():
        for leaf, _ in mod.named_parameters():
            full = f"{mod_name}.{leaf}" if mod_name else leaf
            if leaf.endswith("bias") or isinstance(mod, exempt_modules):
                names.add(full)
    return names


class TabMNetwork(nn.Module):
    """:class:`tabm.TabM` (built by ``TabM.make``) behind the library's flat input layout.

    Input ``x``: ``(B, F)`` or ``(B, K, F)`` with ``F = n_num + Σ cat_cardinalities``: the
    quantile-transformed numeric columns, then one-hot blocks. Output: ``(B, K, n_out)`` member
    logits, or ``(B, K)`` member predictions for regression.

    Args (keyword-only): ``n_num``, ``cat_cardinalities`` (one-hot block widths), ``n_out``,
    ``regression``, ``members`` (TabM's ``k``), ``arch_type``, ``n_blocks`` / ``d_block`` /
    ``dropout`` (``None``: TabM's default), ``embedding`` (``"piecewise"`` or ``"none"``),
    ``d_embedding``, ``bins`` (per-feature edges, required for piecewise embeddings).
    """

    def __init__(
        self,
        *,
        n_num: int,
        cat_cardinalities: list[int],
        n_out: int,
        regression: bool,
        members: int,
        arch_type: str = "tabm",
        n_blocks: int | None = None,
        d_block: int | None = None,
        dropout: float | None = None,
        embedding: str = "piecewise",
        d_embedding: int = 16,
        bins: list[Tensor] | None = None,
    ) -> None:
        import tabm

        from ensemblize.tabular.bins import piecewise_embeddings

        super().__init__()
        self.n_num = check_int(n_num, name="n_num", minimum=0)
        self.cat_cardinalities = [
            check_int(c, name="cat_cardinalities[i]", minimum=1) for c in cat_cardinalities
        ]
        self.regression = bool(regression)
        num_embeddings = None
        if self.n_num and embedding == "piecewise":
            if bins is None or len(bins) != self.n_num:
                raise ValueError(
                    f"piecewise embeddings need {self.n_num} bin tensors, got {bins and len(bins)}"
                )
            num_embeddings = piecewise_embeddings(bins, d_embedding)
        optional = {"n_blocks": n_blocks, "d_block": d_block, "dropout": dropout}
        self.tabm = tabm.TabM.make(
            n_num_features=self.n_num,
            cat_cardinalities=[c + 1 for c in self.cat_cardinalities],
            d_out=check_int(n_out, name="n_out", minimum=1),
            num_embeddings=num_embeddings,
            k=check_int(members, name="members", minimum=1),
            arch_type=arch_type,
            **{k: v for k, v in optional.items() if v is not None},
        )
        starts = torch.tensor([0, *self.cat_cardinalities[:-1]]).cumsum(0) + self.n_num
        self.register_buffer("_block_starts", starts, persistent=False)

    def _codes(self, x: Tensor) -> Tensor:
        """One-hot blocks ``(…, Σ c)`` -> codes ``(…, n_cat)``: the index of the 1, or ``c`` if all zero."""
        codes = []
        for start, c in zip(self._block_starts.tolist(), self.cat_cardinalities, strict=True):
            block = x[..., start : start + c]
            unseen = torch.full_like(block[..., 0], c, dtype=torch.long)
            codes.append(torch.where(block.sum(-1) > 0, block.argmax(-1), unseen))
        return torch.stack(codes, dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, F)`` / ``(B, K, F)`` -> ``(B, K, C)`` member logits or ``(B, K)`` member predictions."""
        x_num = x[..., : self.n_num] if self.n_num else None
        x_cat = self._codes(x) if self.cat_cardinalities else None
        out = self.tabm(x_num, x_cat)
        return out.squeeze(-1) if self.regression else out


class _TabMBase(TabularEnsembleEstimator):
    """Official-TabM hyper-parameters and network; use :class:`TabMClassifier` or :class:`TabMRegressor`."""

    _embeddings = ("piecewise", "none")

    __init__ = estimator_init(
        {
            "members": 32,
            "arch_type": "tabm",
            "n_blocks": None,
            "d_block": 512,
            "dropout": 0.1,
            **TRAINING_DEFAULTS,
        }
    )

    def _validate_model_params(self) -> None:
        check_choice(self.arch_type, ARCH_TYPES, name="arch_type")
        if self.n_blocks is not None:
            check_int(self.n_blocks, name="n_blocks", minimum=1)
        check_int(self.d_block, name="d_block", minimum=1)
        check_real(self.dropout, "dropout", low=0.0, low_open=False, high=1.0)
        check_int(self.d_embedding, name="d_embedding", minimum=1)

    def _network_options(self) -> dict[str, Any]:
        return {"arch_type": self.arch_type}

    @classmethod
    def _network(cls, config: dict[str, Any], bins: list[Tensor] | None) -> TabMNetwork:
        return TabMNetwork(**config, bins=bins)


_PARAMS_DOC = """
    Hyper-parameters (keyword-only; TabM's own defaults; ``fit`` validates and names a bad one):
        members (32): TabM's ``k``.
        arch_type ("tabm"): ``"tabm"``, ``"tabm-mini"`` or ``"tabm-packed"``.
        n_blocks (None: TabM's default, 2 with numeric embeddings else 3), d_block (512), dropout (0.1).
        embedding ("piecewise" | "none"), n_bins (48), bin_method ("quantile" | "tree"), d_embedding (16).
        lr (2e-3), weight_decay (3e-4, TabM's groups: see :func:`tabm_no_decay`), batch_size ("auto"),
        max_epochs (200), patience (16), lr_schedule ("constant" | "plateau": see LoMETab),
        ema_decay (None: TabM's recipe; see LoMETab), refit_full (False: see LoMETab),
        per_member_batches (False), val_fraction (0.2).
        impute (True), random_state (None), device ("cpu"), verbose (False): as in LoMETab.
"""


class TabMClassifier(EnsembleClassifierMixin, _TabMBase):
    __doc__ = (
        """Official TabM classifier (the ``tabm`` package) with the library's preprocessing and outputs.
"""
        + _PARAMS_DOC
    )


class TabMRegressor(EnsembleRegressorMixin, _TabMBase):
    __doc__ = (
        """Official TabM regressor (the ``tabm`` package) with the library's preprocessing and outputs.
"""
        + _PARAMS_DOC
    )
