"""Post-hoc temperature scaling (Guo et al. 2017): the cheap calibration baseline users reach for first.

``T* = argmin_T NLL(softmax(z / T), y)`` on a held-out validation split (never on test), fitted on
``log T`` so ``T`` stays positive. :class:`TemperatureScaled` wraps a model and divides its member
logits by ``T``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import check_finite, check_labels

__all__ = ["fit_temperature", "TemperatureScaled"]


def fit_temperature(logits: Tensor, labels: Tensor, *, max_iter: int = 200) -> float:
    """The temperature minimising the NLL of ``softmax(logits / T)``; ``logits`` (N, C) or (N, M, C).

    With member logits the NLL is that of the mean probability ``p̄ = mean_m softmax(z_m / T)``.
    """
    z = logits.detach().double()
    if z.dim() == 2:
        z = z.unsqueeze(1)
    if z.dim() != 3 or z.shape[0] != labels.shape[0]:
        raise ValueError(
            f"logits must be (N, C) or (N, M, C) matching labels (N,), got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    check_finite(z, name="logits")
    check_labels(labels, z.shape[-1])
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.1, max_iter=max_iter, line_search_fn="strong_wolfe")
    m = z.shape[1]

    def closure() -> Tensor:
        opt.zero_grad()
        logp = torch.logsumexp(torch.log_softmax(z / log_t.exp(), dim=-1), dim=1) - torch.log(
            torch.tensor(float(m))
        )
        loss = -logp.gather(1, labels.view(-1, 1).long()).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp())


class TemperatureScaled(nn.Module):
    """``model`` with its logits divided by a fixed ``temperature``: (B, ...) -> same output shape."""

    def __init__(self, model: nn.Module, temperature: float) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.model = model
        self.register_buffer("temperature", torch.tensor(float(temperature)))

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x) / self.temperature
