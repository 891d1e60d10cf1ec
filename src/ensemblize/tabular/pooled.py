"""Several independently trained tabular ensembles used as one: their members concatenated.

:class:`PooledNetworks` is what a tabular estimator's ``model_`` is when ``n_networks > 1``: S
networks of the same architecture, each trained on its own (own initialisation, batch order and
early stopping: :meth:`ensemblize.tabular.estimator_base.TabularEnsembleEstimator.fit`), whose
members are pooled on the member axis. With K members each the pool has S·K members, so every
consumer of ``(B, K, C)`` outputs (``predict_members``, the ensemble mean, the uncertainty
decomposition, temperature scaling) works on it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ensemblize._checks import check_int
from ensemblize.training.data import derive_seed

__all__ = ["PooledNetworks", "network_seed"]


def network_seed(seed: int, index: int) -> int:
    """The torch seed of network ``index`` of an estimator whose resolved seed is ``seed``.

    Network 0 uses ``seed`` itself, so a one-network estimator is network 0 of the pooled one.
    Network ``s ≥ 1`` uses a hash of ``(seed, s)`` (:func:`ensemblize.training.data.derive_seed`,
    in ``[0, 2³¹)``), so estimators with different ``random_state`` share no network: with the former
    ``seed + s``, ``random_state`` 0 and 1 trained two of their three networks identically, and
    repeated fits over consecutive seeds were correlated.
    """
    seed = check_int(seed, name="seed", minimum=0)
    index = check_int(index, name="index", minimum=0)
    return seed if index == 0 else derive_seed(seed, index) % 2**31


class PooledNetworks(nn.Module):
    """Member-axis concatenation of S ensembles: ``f(x) = concat_s f_s(x)`` along dim 1.

    Args:
        networks: S ≥ 2 modules, each mapping ``(B, F)`` to ``(B, K_s, C)`` logits or ``(B, K_s)``
            predictions (the member axis second, as everywhere in ensemblize).

    Shapes: ``(B, F)`` in, ``(B, Σ_s K_s, C)`` or ``(B, Σ_s K_s)`` out; member ``Σ_{s'<s} K_{s'} + k``
    of the output is member ``k`` of network ``s``. Only the shared-row input ``(B, F)`` is
    accepted: each network is trained on its own, never through the pool.
    """

    def __init__(self, networks: Sequence[nn.Module]) -> None:
        super().__init__()
        networks = list(networks)
        if len(networks) < 2:
            raise ValueError(f"PooledNetworks needs at least 2 networks, got {len(networks)}")
        self.networks = nn.ModuleList(networks)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 2:
            raise ValueError(f"PooledNetworks takes (B, F) inputs, got shape {tuple(x.shape)}")
        return torch.cat([net(x) for net in self.networks], dim=1)
