"""Tiny seeded problem and model shared by the training test scripts (imported by path)."""

from __future__ import annotations

import torch
from torch import nn


def make_data(n_train: int, n_val: int, *, seed: int = 0) -> tuple[tuple, tuple]:
    """Two-feature, three-class synthetic problem: ``(X_train, y_train), (X_val, y_val)``."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_train + n_val, 6, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])


class TinyEnsemble(nn.Module):
    """(B, 6) -> (B, M, 3): an MLP with BatchNorm and Dropout whose last layer emits M heads."""

    def __init__(self, members: int = 3) -> None:
        super().__init__()
        self.members = members
        self.net = nn.Sequential(
            nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3 * members)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).view(x.shape[0], self.members, 3)
