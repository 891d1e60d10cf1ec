"""End to end on a toy 2-D problem: a trained SelectiveNet abstains where it errs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import make_moons
from torch import nn

from ensemblize.selective import SelectiveNet, SelectiveNetLoss, SyncLoss, predict_selective


def _moons(n, seed, flip):
    x, y = make_moons(n_samples=n, noise=0.3, random_state=seed)
    rng = np.random.default_rng(seed)
    flipped = rng.random(n) < flip  # label noise
    y = np.where(flipped, 1 - y, y)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def _top_risk(conf, errors, coverage):
    k = int(round(coverage * len(conf)))
    order = torch.argsort(conf, descending=True, stable=True)
    return float(errors[order[:k]].mean())


@pytest.mark.slow
@pytest.mark.parametrize("loss_fn", [SelectiveNetLoss(0.5), SyncLoss(0.5, mu=1.0, score="smp", gamma=2.0)])
def test_selective_risk_at_half_coverage_beats_full_coverage(loss_fn):
    torch.manual_seed(0)
    x, y = _moons(600, seed=0, flip=0.1)
    x_test, y_test = _moons(2000, seed=1, flip=0.1)
    features = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
    net = SelectiveNet(features, 32, 2, hidden=16)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        idx = torch.randint(0, len(x), (128,), generator=gen)
        loss = loss_fn(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert 0.3 < float(loss_fn.last["coverage"]) < 0.8  # the coverage constraint is in force
    pred = predict_selective(net, x_test)
    errors = (pred.probs.argmax(-1) != y_test).double()
    full = float(errors.mean())
    half = _top_risk(pred.selection, errors, 0.5)
    assert full < 0.35  # it learned the moons
    assert half < full - 0.05, (half, full)
