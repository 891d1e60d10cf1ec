"""σN-Ens on tables: a normalised tabular MLP turned into an implicit ensemble by :func:`ensemblize.sigma_ensemble`.

No paper reports this baseline; it is built here from the library's parts:

* :class:`NormalizedTabMLP` — the embeddings of :class:`~ensemblize.tabular.model.LoMETabModel`
  (it *is* one, with ``members=1``, ``layer="plain"``), followed by ``n_blocks`` blocks
  ``h <- Dropout(ReLU(Norm(Linear(h))))`` and a linear head; ``Norm`` is ``nn.BatchNorm1d`` or
  ``nn.LayerNorm``. Shapes: ``(B, F) -> (B, C)`` logits, or ``(B,)`` for regression;
* :func:`build_sigma_tab_mlp` — converts it with :func:`ensemblize.sigma_ensemble`: every norm
  becomes a per-member σNorm (per-member statistics, gate ``σ(γ_t)`` and shift; everything else
  shared), giving ``(B, F) -> (B, K, C)`` / ``(B, K)``;
* training is :func:`ensemblize.tabular.train.train_model` with
  ``regularizer=sigma_regularizer(tau, lam)``, i.e. the σN-Ens softmax-temperature loss
  :func:`ensemblize.diversity.softmax_temperature_loss` added to the task loss.

With ``noise=0`` every member equals the unconverted :class:`NormalizedTabMLP`.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ensemblize._checks import check_choice
from ensemblize._keywords import passes_keywords

from .model import LoMETabModel

__all__ = ["NORMS", "NormalizedTabMLP", "build_sigma_tab_mlp", "sigma_regularizer"]

NORMS = ("batchnorm", "layernorm")


@passes_keywords(LoMETabModel, drop=("members", "layer", "rank", "init_scale"))
class NormalizedTabMLP(LoMETabModel):
    """A single tabular MLP with a norm layer after each hidden linear map (the σN-Ens base model).

    Args (keyword-only): as :class:`~ensemblize.tabular.model.LoMETabModel` (``n_num``,
    ``cat_cardinalities``, ``n_out``, ``regression``, ``n_blocks``, ``d_block``, ``dropout``,
    ``embedding``, ``bins``, ``d_embedding``) plus ``norm`` (one of :data:`NORMS`).

    Each block computes ``h <- Dropout(ReLU(Norm(W h + b)))``; the head is ``nn.Linear(d_block, n_out)``.

    Forward: ``x`` ``(B, F)`` -> ``(B, C)`` logits (classification) or ``(B,)`` (regression).
    """

    def __init__(self, *, norm: str = "batchnorm", **kwargs) -> None:
        check_choice(norm, NORMS, name="norm")
        super().__init__(members=1, layer="plain", **kwargs)
        n_blocks, d_block, dropout = kwargs["n_blocks"], kwargs["d_block"], kwargs["dropout"]
        self.norm = norm
        d_in = self.backbone[0].in_features
        blocks: list[nn.Module] = []
        for i in range(n_blocks):
            blocks += [
                nn.Linear(d_in if i == 0 else d_block, d_block),
                nn.BatchNorm1d(d_block) if norm == "batchnorm" else nn.LayerNorm(d_block),
                nn.ReLU(),
                nn.Dropout(float(dropout)),
            ]
        self.backbone = nn.Sequential(*blocks)
        self.head = nn.Linear(d_block, self.n_out)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, F)`` -> ``(B, C)`` logits / ``(B,)`` predictions."""
        if x.dim() != 2:
            raise ValueError(f"expected x of shape (B, {self.n_features}), got {tuple(x.shape)}")
        out = self.head(self.backbone(self.embed(x)))
        return out.squeeze(-1) if self.regression else out


def build_sigma_tab_mlp(
    *,
    members: int,
    noise: float = 0.5,
    seed: int | None = None,
    **mlp_kwargs,
) -> nn.Module:
    """σN-Ens of a :class:`NormalizedTabMLP`: ``(B, F) -> (B, K, C)`` logits or ``(B, K)`` predictions.

    ``mlp_kwargs`` go to :class:`NormalizedTabMLP`; ``members``, ``noise`` (std of the gate-logit
    noise; 0 gives identical members) and ``seed`` (of that noise) to :func:`ensemblize.sigma_ensemble`.
    """
    from ensemblize.convert import sigma_ensemble

    return sigma_ensemble(NormalizedTabMLP(**mlp_kwargs), members=members, noise=noise, seed=seed)


def sigma_regularizer(tau: float, lam: float) -> Callable[[nn.Module], Tensor] | None:
    """The σN-Ens diversity term as a ``train_model`` regulariser, or ``None`` when ``lam == 0``.

    ``model -> λ Σ_ℓ Σ_i Σ_m log softmax_τ(σ(γ_{·,ℓ,i}))_m`` (see :mod:`ensemblize.diversity`).
    """
    from ensemblize._checks import check_positive
    from ensemblize.diversity import softmax_temperature_loss

    tau = check_positive(tau, name="tau")
    lam = check_positive(lam, name="lam", allow_zero=True)
    if lam == 0:
        return None
    return lambda model: softmax_temperature_loss(model, tau, lam)
