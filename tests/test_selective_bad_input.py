"""Bad input to the selective losses and network: ValueError/TypeError naming the problem."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ensemblize.selective import DeepGamblersLoss, SelectiveNet, SelectiveNetLoss, SelectiveOutput, SyncLoss


def _output(b=5, c=3):
    torch.manual_seed(0)
    return SelectiveOutput(torch.randn(b, c), torch.rand(b), torch.randn(b, c))


@pytest.mark.parametrize("coverage", [0, 0.0, -0.5, 1.5, float("nan")])
@pytest.mark.parametrize("cls", [SelectiveNetLoss, lambda c: SyncLoss(c, 1.0)])
def test_coverage_outside_unit_interval(cls, coverage):
    with pytest.raises(ValueError, match=r"coverage must lie in \(0, 1\]"):
        cls(coverage)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mu": -0.1}, "mu must be finite and >= 0"),
        ({"lam": -1.0}, "lam must be finite and >= 0"),
        ({"gamma": 0.0}, "gamma must be finite and > 0"),
        ({"gamma": -2.0}, "gamma must be finite and > 0"),
        ({"alpha": 1.5}, r"alpha must lie in \[0, 1\]"),
        ({"score": "max"}, "score must be one of"),
        ({"source": "g"}, "source must be one of"),
    ],
)
def test_sync_hyperparameters(kwargs, match):
    args = {"coverage": 0.5, "mu": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        SyncLoss(**args)


def test_selectivenet_lam_negative():
    with pytest.raises(ValueError, match="lam"):
        SelectiveNetLoss(0.5, lam=-3.0)


def test_non_numeric_hyperparameters_are_type_errors():
    with pytest.raises(TypeError, match="coverage"):
        SelectiveNetLoss("0.5")
    with pytest.raises(TypeError, match="detach"):
        SyncLoss(0.5, 1.0, detach="yes")
    with pytest.raises(TypeError, match="normalize_by_coverage"):
        SelectiveNetLoss(0.5, normalize_by_coverage=1)


@pytest.mark.parametrize("labels", [torch.tensor([0, 1, 2, 3, 0]), torch.tensor([0, -1, 2, 1, 0])])
@pytest.mark.parametrize("loss", [SelectiveNetLoss(0.5), SyncLoss(0.5, 1.0)])
def test_label_outside_classes(loss, labels):
    bad = int(labels.max()) if int(labels.max()) >= 3 else int(labels.min())
    with pytest.raises(ValueError, match=rf"labels has value {bad} outside \[0, 3\)"):
        loss(_output(), labels)


def test_label_shape_and_dtype():
    loss = SelectiveNetLoss(0.5)
    with pytest.raises(ValueError, match=r"labels must have shape \(5,\)"):
        loss(_output(), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer class indices"):
        loss(_output(), torch.zeros(5))


def test_output_shape_mismatches():
    out = _output()
    loss = SelectiveNetLoss(0.5)
    y = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="output.selection has shape"):
        loss(SelectiveOutput(out.logits, out.selection[:4], out.aux_logits), y)
    with pytest.raises(ValueError, match="output.aux_logits has shape"):
        loss(SelectiveOutput(out.logits, out.selection, out.aux_logits[:, :2]), y)
    with pytest.raises(TypeError, match="SelectiveOutput"):
        loss((out.logits, out.selection, out.aux_logits), y)


def test_sync_prior_not_probabilities():
    out = _output()
    y = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="prior"):
        SyncLoss(0.5, 1.0)(out, y, prior=torch.randn(5, 3) * 3)


@pytest.mark.parametrize("reward", [1.0, 0.5, -2.0, float("inf"), float("nan")])
def test_deep_gamblers_reward_not_above_one(reward):
    with pytest.raises(ValueError, match=r"reward must lie in \(1, K\]"):
        DeepGamblersLoss(reward)


def test_deep_gamblers_reward_above_k():
    with pytest.raises(ValueError, match=r"reward must lie in \(1, 3\]"):
        DeepGamblersLoss(3.5, num_classes=3)
    loss = DeepGamblersLoss(3.5)  # K only known at the call
    with pytest.raises(ValueError, match=r"reward must lie in \(1, 3\] for K = 3"):
        loss(torch.randn(5, 4), torch.zeros(5, dtype=torch.long))


def test_deep_gamblers_labels_and_epochs():
    loss = DeepGamblersLoss(2.0, warmup_epochs=1)
    with pytest.raises(ValueError, match=r"labels has value 3 outside \[0, 3\)"):
        loss(torch.randn(2, 4), torch.tensor([0, 3]))  # 3 is the abstain slot, not a class
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        loss.set_epoch(-1)
    with pytest.raises(ValueError, match="warmup_epochs"):
        DeepGamblersLoss(2.0, warmup_epochs=-1)
    with pytest.raises(ValueError, match="expected num_classes"):
        DeepGamblersLoss(2.0, num_classes=3)(torch.randn(2, 6), torch.tensor([0, 1]))


def test_feature_width_mismatch():
    net = SelectiveNet(nn.Linear(4, 10), 8, 3)
    with pytest.raises(ValueError, match=r"features output width 10 does not match feature_dim=8"):
        net(torch.randn(3, 4))
