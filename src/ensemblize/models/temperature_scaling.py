"""Post-hoc temperature scaling (Guo et al. 2017): the cheap calibration baseline users reach for first.

It lives with the other baselines in :mod:`ensemblize.models`; ``ensemblize.calibration`` re-exports it.

``T* = argmin_T NLL(softmax(z / T), y)`` on a held-out validation split (never on test), fitted on
``log T`` so ``T`` stays positive. :class:`TemperatureScaled` wraps a model and divides its member
logits by ``T``.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn

from .._checks import (
    check_finite,
    check_int,
    check_labels,
    check_module,
    check_not_probabilities,
    check_positive,
)

__all__ = ["fit_temperature", "TemperatureScaled"]


def fit_temperature(logits: Tensor, labels: Tensor, *, max_iter: int = 200) -> float:
    """The temperature minimising the NLL of ``softmax(logits / T)``; ``logits`` (N, C) or (N, M, C).

    With member logits the NLL is that of the mean probability ``p̄ = mean_m softmax(z_m / T)``.
    ``labels`` (N,) are integer class indices; ``max_iter`` (≥ 1) bounds the L-BFGS iterations.
    Fit on a validation split, never on test. The fit is scale-equivariant:
    ``fit_temperature(c·z) = c·fit_temperature(z)`` for ``c > 0`` (it runs on ``z / s``, ``s`` the
    logits' mean per-row spread). Returns 1.0 when every row's logits are equal (no temperature changes
    anything) and, with a warning, when every row is classified correctly by every member: the NLL then
    has no finite minimiser (it falls as ``T → 0``).
    """
    if not isinstance(logits, Tensor) or not isinstance(labels, Tensor):
        raise TypeError(
            f"logits and labels must be torch.Tensors, got {type(logits).__name__} and {type(labels).__name__}"
        )
    max_iter = check_int(max_iter, name="max_iter", minimum=1)
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
    z = logits.detach().double()
    if z.dim() == 2:
        z = z.unsqueeze(1)
    if z.dim() != 3 or labels.dim() != 1 or z.shape[0] != labels.shape[0] or z.shape[0] == 0:
        raise ValueError(
            "logits must be (N, C) or (N, M, C) with N >= 1 matching labels (N,), got "
            f"{tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    check_finite(z, name="logits")
    check_not_probabilities(z, name="logits")
    check_labels(labels, z.shape[-1])
    # T = s * exp(u), s the logits' spread: the fit is the same problem at every logit scale (starting
    # at T = 1, L-BFGS stopped at once on logits of order 1e-5, their gradient below its tolerance)
    spread = float(z.std(dim=-1, unbiased=False).mean()) if z.shape[-1] > 1 else 0.0
    if not spread > 0:
        return 1.0  # every row's logits are equal: softmax(z / T) is uniform at every T
    if bool((z.argmax(dim=-1) == labels.view(-1, 1).to(z.device)).all()):
        # the NLL falls monotonically as T -> 0: there is no finite minimiser, and whatever small T an
        # optimiser stops at sharpens every later probability towards 0 or 1
        warnings.warn(
            f"fit_temperature: every one of the {z.shape[0]} rows is classified correctly (by every member), "
            "so the NLL has no finite minimum (it falls as T -> 0); returning T = 1 (no scaling). Fit on a "
            "larger validation split that the model gets partly wrong",
            UserWarning,
            stacklevel=2,
        )
        return 1.0
    zs = z / spread
    u = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [u],
        lr=0.1,
        max_iter=max_iter,
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
        line_search_fn="strong_wolfe",
    )
    m = z.shape[1]

    def closure() -> Tensor:
        opt.zero_grad()
        logp = torch.logsumexp(torch.log_softmax(zs / u.exp(), dim=-1), dim=1) - torch.log(
            torch.tensor(float(m))
        )
        loss = -logp.gather(1, labels.view(-1, 1).long()).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return float(spread * math.exp(float(u.detach())))


class TemperatureScaled(nn.Module):
    """``model`` with its logits divided by a fixed ``temperature`` (finite, > 0): (B, ...) -> same output shape."""

    def __init__(self, model: nn.Module, temperature: float) -> None:
        super().__init__()
        check_module(model, name="model")
        temperature = check_positive(temperature, name="temperature")
        self.model = model
        self.register_buffer("temperature", torch.tensor(float(temperature)))

    def forward(self, x: Tensor) -> Tensor:
        """``model(x) / T``."""
        return self.model(x) / self.temperature
