"""Exponential moving average of a model's weights, for :func:`ensemblize.training.fit`'s ``ema_decay``.

After optimisation step ``t`` (``t = 1, 2, …``) every floating-point parameter and buffer ``w`` of the
model updates its average ``w̄``::

    d_t = min(decay, (1 + t) / (10 + t))
    w̄_t = d_t · w̄_{t-1} + (1 − d_t) · w_t          (w̄_0 = w_0, the weights before the first step)

The warm-up ``(1 + t) / (10 + t)`` (TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``)
keeps the average from being dominated by the random initialisation on short runs: the effective
window grows with the run until it reaches ``1 / (1 − decay)`` steps. Integer buffers (BatchNorm's
``num_batches_tracked``) are copied, not averaged. The averaging itself is
:class:`torch.optim.swa_utils.AveragedModel` (``use_buffers=True``: BatchNorm / σBatchNorm running
statistics are averaged like the weights); this module only supplies the warm-up rule and the
checkpoint round trip.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel

__all__ = ["WeightAverage", "ema_decay_at", "check_ema_decay"]


def check_ema_decay(decay: object) -> float | None:
    """``None`` (no averaging) or a float in ``(0, 1)``; anything else is a ValueError naming it."""
    if decay is None:
        return None
    if isinstance(decay, bool) or not isinstance(decay, (int, float)):
        raise TypeError(f"ema_decay must be None or a float in (0, 1), got {decay!r}")
    value = float(decay)
    if not 0.0 < value < 1.0:
        raise ValueError(f"ema_decay must lie in (0, 1) (or be None: no averaging), got {decay!r}")
    return value


def ema_decay_at(decay: float, step: int) -> float:
    """The decay applied at optimisation step ``step`` (1-based): ``min(decay, (1 + step) / (10 + step))``."""
    return min(float(decay), (1.0 + step) / (10.0 + step))


class WeightAverage:
    """The running average ``w̄`` of ``module``'s weights (module docstring), kept on its device.

    ``update(module)`` after every optimisation step; ``averaged`` is the module holding ``w̄``
    (score it, or copy its ``state_dict()`` into the trained model); ``state_dict()`` /
    ``load_state_dict()`` round-trip it through a checkpoint (tensors only, no pickle).
    """

    def __init__(self, module: nn.Module, *, decay: float) -> None:
        self.decay = check_ema_decay(decay)
        if self.decay is None:
            raise ValueError("WeightAverage needs a decay in (0, 1)")
        self._avg = AveragedModel(module, multi_avg_fn=self._blend, use_buffers=True)
        self._avg.update_parameters(module)  # w̄_0 = w_0: the weights before the first step

    def _blend(self, averaged: Sequence[Tensor], current: Sequence[Tensor], n_averaged: Tensor) -> None:
        # n_averaged counts the updates before this one (the first was the copy of w_0), so it is t
        weight = 1.0 - ema_decay_at(self.decay, int(n_averaged))
        with torch.no_grad():
            if averaged[0].is_floating_point() or averaged[0].is_complex():
                torch._foreach_lerp_(list(averaged), list(current), weight)
            else:
                for a, c in zip(averaged, current, strict=True):
                    a.copy_(c)

    @property
    def averaged(self) -> nn.Module:
        """The module whose weights and buffers are the running average."""
        return self._avg.module

    @property
    def steps(self) -> int:
        """Optimisation steps averaged so far (0 before the first)."""
        return max(0, int(self._avg.n_averaged) - 1)

    def update(self, module: nn.Module) -> None:
        """Fold ``module``'s current weights into the average (call after each optimisation step)."""
        self._avg.update_parameters(module)

    def state_dict(self) -> dict[str, Tensor]:
        """The averaged module's state plus the update count ``n_averaged``."""
        return {k: v.detach() for k, v in self._avg.state_dict().items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore what :meth:`state_dict` returned (strict: the same model)."""
        self._avg.load_state_dict(state, strict=True)
