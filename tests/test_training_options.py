"""fit's options, by value: weight-decay groups, regression, monitors, per-member batches, singleton batches, resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import ensemblize as ez
from ensemblize.training import fit, member_mse, parameter_groups
from ensemblize.training.data import batch_bounds
from ensemblize.training.validation import monitor_key

QUIET = dict(progress=False)


def _cls(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()


# ----------------------------------------------------------------------------- weight-decay groups


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lin = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.ln = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3, bias=False)

    def forward(self, x):
        return self.head(self.ln(self.bn(self.lin(x + self.emb.weight[:1]))))


def test_standard_groups_exempt_norms_biases_embeddings_and_gates():
    groups = parameter_groups(Mixed(), weight_decay=0.1)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert groups[0]["names"] == ["lin.weight", "head.weight"]
    assert groups[1]["names"] == ["emb.weight", "lin.bias", "bn.weight", "bn.bias", "ln.weight", "ln.bias"]
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(Mixed(), members=2)
    names = parameter_groups(ens, weight_decay=0.1)[1]["names"]
    assert {
        "backbone.bn.gate_logits",
        "backbone.ln.gate_logits",
        "backbone.bn.weight",
        "backbone.ln.bias",
    } <= set(names)
    assert parameter_groups(ens, weight_decay=0.1)[0]["names"] == [
        "backbone.lin.weight",
        "backbone.head.weight",
    ]
    assert len(parameter_groups(Mixed(), weight_decay=0.1, decay_filter="all")) == 1
    only_head = parameter_groups(
        Mixed(), weight_decay=0.1, decay_filter=lambda name, p, mod: name == "head.weight"
    )
    assert only_head[0]["names"] == ["head.weight"]
    with pytest.raises(ValueError, match="decay_filter must be one of"):
        parameter_groups(Mixed(), weight_decay=0.1, decay_filter="none")


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_fit_decays_exactly_the_decayed_group(optimizer):
    """With a zero-gradient loss, one step moves decayed weights by the decay alone and nothing else."""
    torch.manual_seed(0)
    model = Mixed()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(8, 4)
    fit(model, (x, torch.zeros(8, dtype=torch.long)), epochs=1, batch_size=8, optimizer=optimizer, lr=0.1,
        weight_decay=0.5, momentum=0.0, schedule="none", loss_fn=lambda o, y: (o * 0).sum(), **QUIET)  # fmt: skip
    for name, p in model.named_parameters():
        want = before[name] * (1 - 0.1 * 0.5) if name in ("lin.weight", "head.weight") else before[name]
        torch.testing.assert_close(p.detach(), want, rtol=1e-6, atol=1e-7, msg=name)


# ------------------------------------------------------------------------------------- regression


class MemberRegressor(nn.Module):
    """(B, F) or (B, M, F) -> (B, M): M linear members (a TabM-like per-member input is accepted)."""

    def __init__(self, members=3, d_out=None):
        super().__init__()
        self.members, self.d_out = members, d_out
        self.lin = nn.Linear(4, members * (d_out or 1))

    def forward(self, x):
        if x.dim() == 3:  # per-member rows: member m reads x[:, m]
            full = self.lin(x).view(x.shape[0], self.members, self.members, -1)
            out = full[:, torch.arange(self.members), torch.arange(self.members)]
        else:
            out = self.lin(x).view(x.shape[0], self.members, -1)
        return out if self.d_out else out[..., 0]


def test_regression_loss_and_val_rmse_values():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=g)
    t = x @ torch.tensor([1.0, -1.0, 0.5, 0.0]) + 0.1 * torch.randn(60, generator=g)
    torch.manual_seed(0)
    model = MemberRegressor()
    res = fit(model, (x[:40], t[:40]), (x[40:], t[40:]), epochs=12, task="regression", optimizer="adamw", lr=0.1,
              batch_size=8, **QUIET)  # fmt: skip
    assert res.monitor == "val_rmse" and "val_nll" not in res.history[-1]
    with torch.no_grad():
        f = model.eval()(x[40:])
    assert res.history[-1]["val_rmse"] == pytest.approx(
        math.sqrt(float(((f.mean(1) - t[40:]) ** 2).mean())), rel=1e-6
    )
    assert res.history[-1]["val_loss"] == pytest.approx(float(member_mse(f, t[40:])), rel=1e-5)
    assert res.history[-1]["val_rmse"] < 0.5 * res.history[0]["val_rmse"]
    # the member loss is its equation: mean over members of each member's MSE, (B, M, D) too
    f3, t3 = torch.randn(5, 3, 2), torch.randn(5, 2)
    want = sum(((f3[:, m] - t3) ** 2).mean() for m in range(3)) / 3
    torch.testing.assert_close(member_mse(f3, t3), want)
    res = fit(MemberRegressor(d_out=2), (x, torch.stack([t, -t], 1)), (x, torch.stack([t, -t], 1)), epochs=1,
              task="regression", **QUIET)  # fmt: skip
    assert math.isfinite(res.history[0]["val_rmse"])
    with pytest.raises(
        ValueError, match=r"targets have shape \(2, 2\); expected \(2,\) \(shared by the members\)"
    ):
        fit(MemberRegressor(), (x[:8], torch.zeros(8, 2)), epochs=1, task="regression", **QUIET)


# --------------------------------------------------------------------------------------- monitors


def test_monitor_keys_and_val_accuracy_tie_break():
    assert monitor_key({"val_accuracy": 0.9, "val_nll": 0.3}, "val_accuracy") < monitor_key(
        {"val_accuracy": 0.9, "val_nll": 0.4}, "val_accuracy"
    )
    assert monitor_key({"val_accuracy": 0.91, "val_nll": 9.0}, "val_accuracy") < monitor_key(
        {"val_accuracy": 0.9, "val_nll": 0.1}, "val_accuracy"
    )
    torch.manual_seed(0)
    train, val = _cls(), _cls(30, seed=1)
    res = fit(nn.Linear(4, 3), train, val, epochs=6, batch_size=8, lr=0.2, monitor="val_accuracy",
              early_stopping_patience=6, **QUIET)  # fmt: skip
    ranked = sorted(res.history, key=lambda h: (-h["val_accuracy"], h["val_nll"]))
    assert res.monitor == "val_accuracy" and res.best_epoch == ranked[0]["epoch"]
    with pytest.raises(ValueError, match="monitor='val_rmse' needs task='regression'"):
        fit(nn.Linear(4, 3), train, val, epochs=1, monitor="val_rmse", **QUIET)
    with pytest.raises(ValueError, match="unknown monitor 'val_auc'"):
        fit(nn.Linear(4, 3), train, val, epochs=1, monitor="val_auc", **QUIET)
    with pytest.raises(ValueError, match="needs validation data"):
        fit(nn.Linear(4, 3), train, epochs=1, monitor="val_nll", **QUIET)


# ----------------------------------------------------------------------------- per-member batches


class RowRecorder(nn.Module):
    """(B, M, 1) row ids -> (B, M, 2) logits; remembers which rows each member saw, in order."""

    def __init__(self, members=3):
        super().__init__()
        self.members = members
        self.w = nn.Parameter(torch.zeros(2))
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        if x.dim() == 2:
            x = x[:, None].expand(-1, self.members, -1)
        if self.training:
            self.seen.append(x[..., 0].detach().long())
        return x * self.w


def test_per_member_batches_give_each_member_its_own_permutation():
    n = 37
    x = torch.arange(n, dtype=torch.float32)[:, None]
    y = torch.zeros(n, dtype=torch.long)
    model = RowRecorder()
    fit(model, (x, y), epochs=1, batch_size=8, per_member_batches=True, **QUIET)
    seen = torch.cat(model.seen)  # (N, M)
    assert [s.shape[0] for s in model.seen] == [8, 8, 8, 8, 5]
    for m in range(3):
        assert torch.equal(seen[:, m].sort().values, torch.arange(n))  # every row once per member
    assert not torch.equal(seen[:, 0], seen[:, 1]) and not torch.equal(seen[:, 1], seen[:, 2])
    shared = RowRecorder()
    fit(shared, (x, y), epochs=1, batch_size=8, **QUIET)
    s = torch.cat(shared.seen)
    assert torch.equal(s[:, 0], s[:, 1])  # by default the members share rows


# -------------------------------------------------------------------------------- singleton batch


def test_trailing_singleton_batch_is_merged_for_batchnorm_and_sigma_norm():
    assert batch_bounds(33, 16) == [(0, 16), (16, 33)]
    assert batch_bounds(17, 16) == [(0, 17)]
    assert batch_bounds(34, 16) == [(0, 16), (16, 32), (32, 34)]
    assert batch_bounds(1, 16) == [(0, 1)]
    x, y = _cls(33)
    torch.manual_seed(0)
    bn = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    sizes = []
    bn.register_forward_hook(lambda mod, inp, out: sizes.append(inp[0].shape[0]) if mod.training else None)
    fit(bn, (x, y), epochs=1, batch_size=16, **QUIET)
    assert sizes == [16, 17]
    sigma = ez.sigma_ensemble(bn, members=2)
    res = fit(sigma, (x, y), epochs=2, batch_size=16, **QUIET)
    assert all(math.isfinite(h["train_loss"]) for h in res.history)
    with pytest.raises(ValueError, match="single sample per step; a BatchNorm"):
        fit(bn, (x[:1], y[:1]), epochs=1, batch_size=16, **QUIET)


# ---------------------------------------------------------------------------------------- resume


def test_resume_refuses_other_seed_data_or_initial_weights_and_announces(tmp_path: Path, capsys):
    train = _cls()

    def model(seed=0):
        torch.manual_seed(seed)
        return nn.Linear(4, 3)

    fit(
        model(),
        train,
        epochs=2,
        batch_size=8,
        checkpoint_dir=tmp_path,
        callbacks=[lambda e, r, m: e == 1],
        **QUIET,
    )
    capsys.readouterr()
    with pytest.raises(ValueError, match=r"different configuration \(seed: checkpoint 0 vs now 1\)"):
        fit(model(), train, epochs=2, batch_size=8, checkpoint_dir=tmp_path, seed=1, **QUIET)
    with pytest.raises(
        ValueError, match=r"different configuration \(train_data: checkpoint '[0-9a-f]{16}' vs now"
    ):
        fit(model(), (train[0] + 1, train[1]), epochs=2, batch_size=8, checkpoint_dir=tmp_path, **QUIET)
    with pytest.raises(ValueError, match=r"different configuration \(initial_weights: checkpoint"):
        fit(model(seed=5), train, epochs=2, batch_size=8, checkpoint_dir=tmp_path, **QUIET)
    with pytest.raises(ValueError, match=r"\(epochs: checkpoint 2 vs now 3; seed: checkpoint 0 vs now 4"):
        fit(model(), train, epochs=3, batch_size=8, checkpoint_dir=tmp_path, seed=4, **QUIET)
    res = fit(model(), train, epochs=2, batch_size=8, checkpoint_dir=tmp_path, **QUIET)
    assert res.resumed_from_epoch == 1 and res.epochs_run == 1  # a callback stop is final
    assert f"fit: resuming from epoch 1 in {tmp_path}" in capsys.readouterr().err


def test_data_fingerprint_is_stable_under_random_augmentation_and_sees_changes():
    import random

    from torch.utils.data import Dataset

    from ensemblize.training.data import make_source

    class Noisy(Dataset):
        def __init__(self, x):
            self.x = x

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i] + 0.1 * torch.randn(4) + random.random(), 0

    x, _ = _cls(40)
    torch.manual_seed(1)
    random.seed(1)
    first = make_source(Noisy(x), name="train").fingerprint()
    state = torch.get_rng_state()
    torch.manual_seed(2)
    random.seed(2)
    assert make_source(Noisy(x), name="train").fingerprint() == first
    torch.manual_seed(1)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG was restored
    assert make_source(Noisy(x * 2), name="train").fingerprint() != first
    assert make_source(Noisy(x[:39]), name="train").fingerprint() != first
