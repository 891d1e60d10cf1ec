"""A DeepEnsemble member trains exactly like the single model it is (issue 10, item 1)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ensemblize.models import DeepEnsemble
from ensemblize.training import fit, member_cross_entropy

SGD = dict(epochs=1, batch_size=16, optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=5e-4, schedule="cosine",
           seed=3, progress=False)  # fmt: skip


def _data(n=200):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] + x[:, 1] ** 2 > 0.7).long() + (x[:, 2] > 0.5).long()


def _member():
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


def _members_vs_singles(ensemble_cls, members=3):
    torch.manual_seed(0)
    models = [_member() for _ in range(members)]
    singles = [copy.deepcopy(m) for m in models]  # the same initial weights
    initial = [copy.deepcopy(m) for m in models]
    train = _data()
    fit(ensemble_cls(models), train, **SGD)
    for single in singles:
        fit(single, train, **SGD)  # the same seed: the same batch order
    moved = [_max_diff(s, i) for s, i in zip(singles, initial, strict=True)]
    return [_max_diff(m, s) for m, s in zip(models, singles, strict=True)], moved


def test_deep_ensemble_member_equals_single_model_after_one_epoch_sgd_weight_decay():
    diffs, moved = _members_vs_singles(DeepEnsemble)
    print("fair DeepEnsemble: max |member - single| per member:", diffs)
    assert max(diffs) <= 1e-6
    assert min(moved) > 1e-2  # the models did train (the comparison is not between untouched weights)


def test_the_mean_convention_would_not_be_fair():
    class MeanEnsemble(DeepEnsemble):
        member_loss_reduction = "mean"

    diffs, _ = _members_vs_singles(MeanEnsemble)
    print("mean-over-members DeepEnsemble: max |member - single| per member:", diffs)
    assert min(diffs) > 1e-3  # lr/M: a visibly different model after one epoch


def test_member_loss_sum_reduction_and_declared_convention():
    z = torch.randn(7, 3, 5)
    y = torch.randint(0, 5, (7,))
    torch.testing.assert_close(member_cross_entropy(z, y, reduction="sum"), 3 * member_cross_entropy(z, y))
    assert DeepEnsemble([nn.Linear(2, 2)]).member_loss_reduction == "sum"
    with pytest.raises(ValueError, match="reduction must be one of"):
        member_cross_entropy(z, y, reduction="max")

    class Bad(nn.Linear):
        member_loss_reduction = "median"

    with pytest.raises(
        ValueError, match=r"Bad.member_loss_reduction must be one of \('mean', 'sum'\), got 'median'"
    ):
        fit(Bad(6, 3), _data(), epochs=1, progress=False)
