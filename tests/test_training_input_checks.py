"""fit / predict on inputs an audit found slipping through: 2-D labels through a Dataset or DataLoader,
a model that drops or pools rows at predict, one logit under classification, a one-row BatchNorm batch,
keyword inputs to a DeepEnsemble."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ensemblize.models import DeepEnsemble
from ensemblize.training import fit, predict
from ensemblize.training.data import batch_bounds


def _two_member_ensemble():
    torch.manual_seed(0)
    return DeepEnsemble([nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)) for _ in range(2)])


@pytest.mark.parametrize("wrap", ["dataset", "loader"])
def test_two_dimensional_labels_are_refused_through_datasets_and_loaders_as_for_tensors(wrap):
    """One-hot labels with as many classes as members were read as per-member labels: member 0 learnt
    the inverted task (accuracy 0.06)."""
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    onehot = nn.functional.one_hot(y, 2)
    data = TensorDataset(x, onehot)
    train = data if wrap == "dataset" else DataLoader(data, batch_size=16)
    with pytest.raises(ValueError, match=r"train labels must have shape \(N,\), got \(\d+, 2\)"):
        fit(_two_member_ensemble(), train, epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"labels must have shape \(N,\)"):
        fit(_two_member_ensemble(), (x, onehot), epochs=1, progress=False)
    # (N,) labels through the same containers still train
    fit(_two_member_ensemble(), DataLoader(TensorDataset(x, y), batch_size=16), epochs=1, progress=False)


class DropsARow(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x):
        return self.lin(x)[:-1]


class PoolsTheBatch(DropsARow):
    def forward(self, x):
        return self.lin(x).mean(0, keepdim=True)


@pytest.mark.parametrize("model", [DropsARow(), PoolsTheBatch()])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_predict_refuses_a_model_that_does_not_return_one_row_per_input_row(model, task):
    with pytest.raises(
        ValueError,
        match=r"returned an output of shape \(\d+, (1, )?3\) for a batch of 16 .*one output row per input row",
    ):
        predict(model, torch.randn(64, 8), batch_size=16, task=task)


def test_predict_row_check_accepts_a_good_model_unchanged():
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    x = torch.randn(37, 8)
    p = predict(model, x, batch_size=16)
    torch.testing.assert_close(p[:, 0], torch.softmax(model(x), -1), rtol=0, atol=1e-6)


def test_one_logit_under_classification_is_refused_naming_the_output():
    x, y = torch.randn(32, 8), torch.zeros(32, dtype=torch.long)
    with pytest.raises(ValueError, match=r"needs at least 2 logits per row, but the model returns 1"):
        fit(nn.Linear(8, 1), (x, y), epochs=1, progress=False)
    # a loss_fn for the single logit is the documented way
    fit(nn.Linear(8, 1), (x, y.float()), epochs=1, progress=False,
        loss_fn=lambda out, t: nn.functional.binary_cross_entropy_with_logits(out.reshape(-1), t))  # fmt: skip


def test_a_one_row_batch_reaching_batchnorm_is_a_named_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    x, y = torch.randn(33, 8), (torch.arange(33) % 2)
    with pytest.raises(ValueError, match=r"one row reached a BatchNorm layer.*drop_last=True"):
        fit(model, DataLoader(TensorDataset(x, y), batch_size=16), epochs=1, progress=False)
    with pytest.raises(ValueError, match="batch_size >= 2"):
        fit(model, (x, y), epochs=1, batch_size=1, progress=False)


def test_batch_bounds_keep_single_rows_only_when_asked_for():
    assert batch_bounds(5, 2) == [(0, 2), (2, 5)]  # a trailing single row joins the previous batch
    assert batch_bounds(4, 2) == [(0, 2), (2, 4)]
    assert batch_bounds(3, 1) == [(0, 1), (1, 2), (2, 3)]  # batch_size=1: every batch one row


class KeywordNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, *, feats, mask):
        return self.lin(feats * mask)


def test_a_deep_ensemble_passes_keyword_inputs_to_every_member():
    torch.manual_seed(0)
    members = [KeywordNet(), KeywordNet()]
    ens = DeepEnsemble(members)
    feats, mask = torch.randn(20, 8), torch.ones(20, 8)
    out = ens(feats=feats, mask=mask)
    assert out.shape == (20, 2, 3)
    for m, net in enumerate(members):
        torch.testing.assert_close(out[:, m], net(feats=feats, mask=mask), rtol=0, atol=0)
    data = {"feats": feats, "mask": mask, "labels": torch.arange(20) % 3}
    fit(ens, data, epochs=1, batch_size=8, progress=False)
    assert predict(ens, {"feats": feats, "mask": mask}).shape == (20, 2, 3)


def test_per_member_batches_on_a_deep_ensemble_is_refused_before_training():
    """Each member got the (B, M, ...) per-member input and training failed at its first step on the
    logits' shape."""
    x, y = torch.randn(32, 8), torch.arange(32) % 2
    with pytest.raises(ValueError, match="per_member_batches is not supported by a DeepEnsemble"):
        fit(_two_member_ensemble(), (x, y), epochs=1, per_member_batches=True, progress=False)
