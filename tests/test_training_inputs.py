"""fit / predict on models and data from any library: output forms, dict batches, DataLoaders, HuggingFace."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import ensemblize as ez
from ensemblize.training import fit, logits_of, predict, predict_outputs

FAST = dict(batch_size=8, progress=False, lr=0.05)


def _xy(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()


class Base(nn.Module):
    """(B, 5) -> (B, 2, 3) logits wrapped as ``form`` says."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form
        self.lin = nn.Linear(5, 6)

    def forward(self, x):
        z = self.lin(x).view(-1, 2, 3)
        if self.form == "dict":
            return {"logits": z, "hidden": x}
        if self.form == "tuple":
            return (z, x.sum())
        if self.form == "attr":
            return _Out(logits=z)
        return z


@dataclass
class _Out:
    logits: torch.Tensor


@pytest.mark.parametrize("form", ["dict", "tuple", "attr"])
def test_every_output_form_trains_and_predicts_like_the_tensor(form):
    train, val = _xy(), _xy(24, seed=1)
    torch.manual_seed(0)
    ref = Base("tensor")
    torch.manual_seed(0)
    other = Base(form)
    ra = fit(ref, train, val, epochs=2, **FAST)
    rb = fit(other, train, val, epochs=2, **FAST)
    assert torch.equal(ref.lin.weight, other.lin.weight)
    assert ra.history[-1]["val_nll"] == rb.history[-1]["val_nll"]
    assert torch.equal(predict(ref, val[0]), predict(other, val[0]))
    p = predict(other, val[0])
    assert p.shape == (24, 2, 3)
    torch.testing.assert_close(p, torch.softmax(ref.eval()(val[0]), -1), rtol=0, atol=0)


def test_output_without_logits_is_a_named_value_error():
    class NoLogits(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 3)

        def forward(self, x):
            return {"scores": self.lin(x)}

    with pytest.raises(
        ValueError, match=r"no logits to find: expected a tensor \(B, C\) or \(B, M, C\), an object"
    ):
        fit(NoLogits(), _xy(), epochs=1, **FAST)
    with pytest.raises(ValueError, match=r"with keys \['scores'\], with no logits"):
        predict(NoLogits(), _xy()[0])
    with pytest.raises(ValueError, match="no logits"):
        logits_of(("not a tensor",))


class DictModel(nn.Module):
    """``model(features=..., mask=...)`` -> (B, 3): a dict-batch model with no user wrapper."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, features, mask):
        return self.lin(features * mask)


def _dict_data(n=40, seed=0):
    x, y = _xy(n, seed)
    return {"features": x, "mask": torch.ones_like(x), "labels": y}


def test_dict_batches_equal_tuple_batches_and_labels_are_not_passed():
    torch.manual_seed(0)
    a = DictModel()
    torch.manual_seed(0)
    b = nn.Linear(5, 3)
    data, val = _dict_data(), _dict_data(16, seed=1)
    ra = fit(a, data, val, epochs=2, **FAST)
    rb = fit(b, (data["features"], data["labels"]), (val["features"], val["labels"]), epochs=2, **FAST)
    assert torch.equal(a.lin.weight, b.weight) and ra.history == [
        {**h, "seconds": ra.history[i]["seconds"]} for i, h in enumerate(rb.history)
    ]
    torch.testing.assert_close(predict(a, val), predict(b, val["features"]), rtol=0, atol=0)
    # (inputs dict, labels) pairs are the same data
    torch.manual_seed(0)
    c = DictModel()
    pairs = ({"features": data["features"], "mask": data["mask"]}, data["labels"])
    fit(c, pairs, ({"features": val["features"], "mask": val["mask"]}, val["labels"]), epochs=2, **FAST)
    assert torch.equal(a.lin.weight, c.lin.weight)
    # a custom labels key
    renamed = {"features": data["features"], "mask": data["mask"], "target": data["labels"]}
    fit(DictModel(), renamed, epochs=1, labels_key="target", **FAST)


def test_dict_batch_without_labels_is_a_named_value_error():
    data = _dict_data()
    del data["labels"]
    with pytest.raises(ValueError, match=r"no labels entry 'labels'; expected a 'labels' tensor"):
        fit(DictModel(), data, epochs=1, **FAST)
    with pytest.raises(ValueError, match="no labels"):
        fit(nn.Linear(5, 3), _xy()[0], epochs=1, **FAST)


class DictItems(Dataset):
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data["labels"])

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.data.items()}


def test_dataset_and_dataloader_of_dicts():
    data, val = _dict_data(), _dict_data(16, seed=1)
    torch.manual_seed(0)
    a = DictModel()
    torch.manual_seed(0)
    b = DictModel()
    fit(a, data, val, epochs=2, **FAST)
    fit(b, DictItems(data), DictItems(val), epochs=2, **FAST)
    assert torch.equal(a.lin.weight, b.lin.weight)  # a Dataset is batched exactly like the tensors
    # a DataLoader is iterated as given (its own shuffling, seeded per epoch by fit): reproducible
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = DictModel()
        res = fit(m, DataLoader(DictItems(data), batch_size=8, shuffle=True), DataLoader(DictItems(val), batch_size=5),
                  epochs=2, **FAST)  # fmt: skip
        runs.append((m.lin.weight.detach().clone(), res.history[-1]["val_nll"]))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert res.history[-1]["val_count"] == 16
    loader_probs = predict(m, DataLoader(DictItems(val), batch_size=5))
    torch.testing.assert_close(loader_probs, predict(m, val, batch_size=5), rtol=0, atol=0)


def test_predict_outputs_transform_and_structures():
    x, _ = _xy(30)
    model = Base("attr")
    probs, first = predict_outputs(
        model, x, batch_size=7, transform=lambda o: (o.logits.softmax(-1), o.logits[:, 0, 0])
    )
    with torch.no_grad():
        z = model(x).logits
    torch.testing.assert_close(probs, z.softmax(-1))
    torch.testing.assert_close(first, z[:, 0, 0])
    out = predict_outputs(Base("dict"), x, batch_size=7)  # raw dict outputs are concatenated key by key
    assert out["logits"].shape == (30, 2, 3) and torch.equal(out["hidden"], x)
    with pytest.raises(TypeError, match="cannot concatenate"):
        predict_outputs(Base("tensor"), x, transform=lambda o: "text")


def test_regression_predict_layouts():
    x = torch.randn(9, 5)
    lin = nn.Linear(5, 4)
    assert predict(lin, x, task="regression").shape == (9, 4)  # (B, M)
    assert predict(nn.Sequential(nn.Linear(5, 1), nn.Flatten(0)), x, task="regression").shape == (9, 1)
    with pytest.raises(ValueError, match="task must be one of"):
        predict(lin, x, task="ranking")


@pytest.fixture(scope="module")
def tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return BertForSequenceClassification(config)


def _token_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 40, (n, 8), generator=g)
    mask = torch.ones(n, 8, dtype=torch.long)
    mask[: n // 2, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids[:, 0] % 3}


def test_huggingface_bert_sigma_ensemble_fits_on_dict_batches_without_wrapper(tiny_bert):
    ens = ez.sigma_ensemble(tiny_bert, members=2, seed=0)
    train, val = _token_data(48, 0), _token_data(16, 1)
    res = fit(ens, train, val, epochs=4, batch_size=8, optimizer="adamw", lr=5e-3, progress=False, seed=0)
    assert res.history[-1]["train_loss"] < res.history[0]["train_loss"]
    assert res.history[-1]["val_count"] == 16 and res.monitor == "val_nll"
    probs = predict(ens, val, batch_size=5)
    assert probs.shape == (16, 2, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(16, 2))
    ens.eval()
    with torch.no_grad():
        z = ens(input_ids=val["input_ids"], attention_mask=val["attention_mask"]).logits
    torch.testing.assert_close(probs, z.softmax(-1), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(probs[:, 0], probs[:, 1])  # the members differ


@pytest.mark.parametrize(
    "loader_kw, why",
    [
        ({"shuffle": True}, "RandomSampler (shuffle=True)"),
        ({"drop_last": True}, "drop_last=True"),
        ({"sampler": torch.utils.data.SubsetRandomSampler(range(40))}, "SubsetRandomSampler"),
    ],
)
def test_predict_refuses_a_loader_that_would_reorder_or_skip_rows(loader_kw, why):
    """predict returns rows in dataset order; a shuffling loader gave them in shuffled order, silently."""
    from torch.utils.data import TensorDataset

    x, y = _xy()
    m = Base("tensor")
    with pytest.raises(ValueError, match=r"cannot predict from this DataLoader: .*" + re.escape(why)):
        predict(m, DataLoader(TensorDataset(x, y), batch_size=16, **loader_kw))
    # a sequential loader is accepted and agrees with the tensors, row for row
    assert torch.equal(predict(m, DataLoader(TensorDataset(x, y), batch_size=16)), predict(m, x))
    # a custom batch sampler cannot be checked: refused with its name
    batches = [list(range(i, min(i + 7, 40))) for i in range(0, 40, 7)]
    with pytest.raises(ValueError, match="batch sampler list"):
        predict(m, DataLoader(TensorDataset(x, y), batch_sampler=batches))


def test_a_model_ending_in_softmax_is_warned_about_in_fit_and_predict():
    """predict applied a second softmax to a Softmax-ended model: NLL 0.25 -> 1.60, no warning."""
    x, y = _xy()
    model = nn.Sequential(nn.Linear(5, 3), nn.Softmax(dim=-1))
    with pytest.warns(UserWarning, match="fit: the model's outputs look like probabilities"):
        fit(model, (x, y), epochs=1, **FAST)
    with pytest.warns(UserWarning, match="predict: the model's outputs look like probabilities"):
        predict(model, x, batch_size=8)  # warned once, not once per batch
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict(nn.Linear(5, 3), x)  # logits: no warning


def test_a_validation_loader_must_score_every_row_once():
    """drop_last / a DistributedSampler scored a subset, and val_loss divided by the whole dataset's size."""
    from torch.utils.data import DistributedSampler, TensorDataset

    from ensemblize.training import distributed as D
    from ensemblize.training.data import make_source
    from ensemblize.training.fit import _check_loaders

    x, y = _xy(41)
    ds = TensorDataset(x, y)
    with pytest.raises(
        ValueError, match=r"val: the DataLoader yields 40 of its dataset's 41 rows .*drop_last=True"
    ):
        fit(Base("tensor"), (x, y), DataLoader(ds, batch_size=8, drop_last=True), epochs=1, **FAST)
    shard = DataLoader(
        ds, batch_size=8, sampler=DistributedSampler(ds, num_replicas=2, rank=0, shuffle=False)
    )
    with pytest.raises(ValueError, match=r"yields 21 of its dataset's 41 rows .*DistributedSampler"):
        fit(Base("tensor"), (x, y), shard, epochs=1, **FAST)
    # a custom batch sampler cannot be sized up front: the count after the pass catches it
    batches = [list(range(i, min(i + 8, 40))) for i in range(0, 40, 8)]  # row 40 never scored
    with pytest.raises(ValueError, match="yielded 40 rows but its dataset has 41"):
        fit(Base("tensor"), (x, y), DataLoader(ds, batch_sampler=batches), epochs=1, **FAST)
    # a shuffled validation loader scores every row: accepted, and val_loss is the mean over the rows
    res = fit(Base("tensor"), (x, y), DataLoader(ds, batch_size=8, shuffle=True), epochs=1, **FAST)
    assert res.history[-1]["val_count"] == 41
    # under DDP a training loader without a DistributedSampler is warned about
    train = make_source(DataLoader(ds, batch_size=8), name="train", labels_key="labels")
    with pytest.warns(UserWarning, match="has no DistributedSampler, so every rank trains on every row"):
        _check_loaders(train, None, D.DistContext(rank=0, world_size=2))


def test_val_loss_is_the_mean_over_the_rows_scored():
    x, y = _xy(41)
    model = Base("tensor")
    res = fit(model, (x, y), (x, y), epochs=1, **FAST)
    with torch.no_grad():
        z = model(x)
        expected = float(nn.functional.cross_entropy(z.reshape(-1, 3), y.repeat_interleave(2)))
    assert abs(res.history[-1]["val_loss"] - expected) < 1e-5


def test_regression_target_layouts_of_one_output_members_and_multi_output_models():
    """(B,) targets of a σN ensemble of a Linear(h, 1) regressor were refused; a plain (B, 2)-output
    model with (B, 2) targets trained each column as another member's target, then crashed in validation."""
    torch.manual_seed(0)
    x = torch.randn(64, 5)
    y = 2 * x[:, 0]

    def net(out):
        return nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, out))

    kw = dict(epochs=1, batch_size=16, progress=False, task="regression")
    ens = ez.sigma_ensemble(net(1), members=2)
    res = fit(ens, (x, y), (x, y), **kw)
    assert math.isfinite(res.history[-1]["val_rmse"])
    with pytest.raises(ValueError, match=r"must return \(B, 1, 2\) \(e.g. out.unsqueeze\(1\)\)"):
        fit(net(2), (x, torch.stack([y, -y], 1)), **kw)


def test_numpy_arrays_in_a_tuple_are_named_with_the_fix():
    import numpy as np

    x = np.zeros((8, 5), dtype=np.float32)
    with pytest.raises(TypeError, match="got a tuple holding ndarray; convert them with torch.as_tensor"):
        fit(Base("tensor"), (x, np.zeros(8, dtype=np.int64)), epochs=1, **FAST)


def test_a_gate_learning_rate_on_a_model_without_gates_is_warned_about():
    x, y = _xy()
    with pytest.warns(
        UserWarning, match=r"gate_lr_scale=0.4 has no effect: the model has no trainable σN gate"
    ):
        fit(Base("tensor"), (x, y), epochs=1, gate_lr_scale=0.4, **FAST)


class _Rows(torch.utils.data.IterableDataset):
    """A sized IterableDataset yielding (x, y) rows in order."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __iter__(self):
        return iter(zip(self.x, self.y, strict=True))


def test_a_loader_over_an_iterable_dataset_predicts_and_validates_in_its_own_order():
    """Such a loader has no sampler to check; it was refused by predict and crashed fit's validation."""
    x, y = _xy()
    m = Base("tensor")
    assert torch.equal(predict(m, DataLoader(_Rows(x, y), batch_size=8)), predict(m, x))
    res = fit(m, (x, y), DataLoader(_Rows(x, y), batch_size=8), epochs=1, **FAST)
    assert res.history[-1]["val_count"] == 40
    with pytest.raises(ValueError, match="IterableDataset with num_workers=2"):
        predict(m, DataLoader(_Rows(x, y), batch_size=8, num_workers=2))


@pytest.mark.parametrize(
    "sampler",
    [
        lambda n: torch.utils.data.WeightedRandomSampler([1.0] * n, n),
        lambda n: torch.utils.data.RandomSampler(range(n), replacement=True),
    ],  # fmt: skip
)
def test_a_validation_loader_drawing_with_replacement_is_refused(sampler):
    from torch.utils.data import TensorDataset

    x, y = _xy()
    with pytest.raises(ValueError, match="draws rows with replacement"):
        fit(Base("tensor"), (x, y), DataLoader(TensorDataset(x, y), batch_size=8, sampler=sampler(40)), epochs=1,
            **FAST)  # fmt: skip


def test_a_numpy_array_is_refused_with_the_forms_accepted_and_the_conversion():
    """predict's message for a bare ndarray listed (X, y) pairs but not the bare tensor it takes."""
    import numpy as np

    from ensemblize.training import predict

    with pytest.raises(
        TypeError,
        match=r"must be a tensor X \(predict only\), an \(X, y\) pair.*got ndarray; convert it with torch\.as_tensor",
    ):
        predict(torch.nn.Linear(3, 2), np.zeros((4, 3), dtype=np.float32), progress=False)
