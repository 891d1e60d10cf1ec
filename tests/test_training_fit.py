"""Unit tests of ensemblize.training: loss, schedules, early stopping, determinism, checkpoints, validation."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import Dataset, TensorDataset

import ensemblize.metrics as ez_metrics
from ensemblize.training import FitResult, fit, member_cross_entropy, predict, seed_everything
from ensemblize.training import state as S
from ensemblize.training.optim import lr_factor as _lr_factor


def _data(n_train: int = 64, n_val: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_train + n_val, 4, generator=g)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).long() + (X[:, 2] > 0.8).long()
    return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])


class Heads(nn.Module):
    """(B, 4) -> (B, M, 3) with dropout, so determinism covers the RNG."""

    def __init__(self, members: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.members = members
        self.body = nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Dropout(dropout))
        self.head = nn.Linear(12, 3 * members)

    def forward(self, x):
        return self.head(self.body(x)).view(x.shape[0], self.members, 3)


def _model(seed: int = 0, **kw) -> nn.Module:
    torch.manual_seed(seed)
    return Heads(**kw)


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


FAST = dict(batch_size=16, progress=False, lr=0.1)


# ------------------------------------------------------------------------------------------- losses


def test_member_cross_entropy_is_the_mean_over_members_of_ce():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(7, 4, 5, generator=g)
    y = torch.randint(0, 5, (7,), generator=g)
    manual = sum(-torch.log_softmax(z[:, m], dim=-1)[torch.arange(7), y].mean() for m in range(4)) / 4
    torch.testing.assert_close(member_cross_entropy(z, y), manual)
    # a (B, C) output is one member
    torch.testing.assert_close(member_cross_entropy(z[:, 0], y), F.cross_entropy(z[:, 0], y))
    # narrow integer indices are read as int64; bool labels are refused, as fit and the metrics refuse them
    torch.testing.assert_close(member_cross_entropy(z, y.to(torch.uint8)), manual)
    with pytest.raises(ValueError, match=r"torch\.bool.*targets\.long\(\)"):
        member_cross_entropy(z[:, :, :2], y < 2)


def test_val_nll_is_nll_of_mean_probability_and_predict_matches_softmax():
    train, val = _data()
    model = _model()
    res = fit(model, train, val, epochs=2, schedule="none", **FAST)
    probs = predict(model, val[0], batch_size=5)
    model.eval()
    with torch.no_grad():
        z = model(val[0])
    torch.testing.assert_close(probs, torch.softmax(z, dim=-1))
    assert probs.shape == (32, 2, 3)
    # loop reference: p̄_i = mean_m softmax(z_im), nll = -mean_i log p̄_i[y_i]
    ref = 0.0
    hits = 0
    for i in range(32):
        pbar = sum(torch.softmax(z[i, m].double(), dim=0) for m in range(2)) / 2
        ref -= math.log(pbar[val[1][i]]) / 32
        hits += int(pbar.argmax() == val[1][i])
    last = res.history[-1]
    assert last["val_nll"] == pytest.approx(ref, rel=1e-9)
    assert last["val_accuracy"] == hits / 32
    assert last["val_count"] == 32
    # the same value as the metrics package's stable from-logits NLL
    assert last["val_nll"] == pytest.approx(ez_metrics.nll(z, val[1], from_logits=True), rel=1e-9)
    assert last["val_accuracy"] == ez_metrics.accuracy(probs, val[1])
    assert last["val_loss"] == pytest.approx(float(member_cross_entropy(z, val[1])), rel=1e-5)


def test_predict_two_dim_output_is_one_member_and_mode_is_restored():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    model.train()
    X = torch.randn(10, 4)
    p = predict(model, X)
    assert p.shape == (10, 1, 3)
    torch.testing.assert_close(p[:, 0], torch.softmax(model(X), dim=-1).detach())
    assert model.training
    torch.testing.assert_close(predict(model, TensorDataset(X)), p)


def test_loss_falls_and_history_fields():
    train, val = _data(128, 64)
    res = fit(_model(), train, val, epochs=4, optimizer="adamw", lr=0.02, batch_size=16, progress=False)
    assert isinstance(res, FitResult)
    assert res.epochs_run == 4 and [h["epoch"] for h in res.history] == [1, 2, 3, 4]
    assert res.history[-1]["train_loss"] < 0.85 * res.history[0]["train_loss"]
    assert res.history[-1]["val_accuracy"] > 0.7
    assert res.monitor == "val_nll" and res.best_epoch in range(1, 5)
    assert res.train_seconds == pytest.approx(sum(h["seconds"] for h in res.history))
    assert all(h["regularizer"] is None for h in res.history)


def test_regularizer_is_logged_separately_and_added_to_the_loss():
    train, _ = _data()
    base = _model()
    fit(base, train, epochs=2, **FAST)
    # a constant regulariser changes no gradient: same weights bitwise, same task loss, logged value 5
    const = _model()
    res = fit(const, train, epochs=2, regularizer=lambda m: torch.tensor(5.0), **FAST)
    assert _same_weights(base, const)
    assert all(h["regularizer"] == 5.0 for h in res.history)
    # an L2 penalty does act on the weights and is logged as its batch-weighted mean
    seen = []

    def l2(m):
        r = 0.5 * sum((p**2).sum() for p in m.parameters())
        seen.append(float(r.detach()))
        return r

    shrunk = _model()
    res = fit(shrunk, train, epochs=1, regularizer=l2, **FAST)
    sizes = [16] * 4
    assert res.history[0]["regularizer"] == pytest.approx(np.dot(seen, sizes) / 64, rel=1e-6)
    norm = lambda m: sum(float((p.detach() ** 2).sum()) for p in m.parameters())  # noqa: E731
    assert norm(shrunk) < norm(base)


def test_custom_loss_fn_with_object_output_and_regression():
    @dataclass
    class Out:
        logits: torch.Tensor

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return Out(self.lin(x))

    train, val = _data()
    torch.manual_seed(0)
    wrapped = Wrapped()
    res = fit(wrapped, train, val, epochs=2, loss_fn=lambda o, y: F.cross_entropy(o.logits, y), **FAST)
    # a custom loss is monitored by default; the ensemble scores still come from the `.logits` field
    assert res.monitor == "val_loss"
    with torch.no_grad():
        z = wrapped.eval()(val[0]).logits
    assert res.history[-1]["val_nll"] == pytest.approx(ez_metrics.nll(z, val[1], from_logits=True), rel=1e-9)
    # regression: float targets, (B, 1) output; no label checks
    torch.manual_seed(0)
    X = torch.randn(64, 4)
    t = X @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1
    reg = nn.Linear(4, 1)
    mse = lambda o, y: F.mse_loss(o[:, 0], y)  # noqa: E731
    res = fit(
        reg, (X, t), (X, t), epochs=8, loss_fn=mse, schedule="none", weight_decay=0.0, momentum=0.0, **FAST
    )
    assert res.history[-1]["val_loss"] < 0.1 * res.history[0]["val_loss"]
    with torch.no_grad():
        assert res.history[-1]["val_loss"] == pytest.approx(float(mse(reg(X), t)), rel=1e-5)


# --------------------------------------------------------------------------------------- schedules


def test_lr_factor_equations():
    T = 40
    for t in range(T):
        assert _lr_factor("cosine", step=t, total_steps=T, epoch=0, step_size=1, gamma=0.1) == 0.5 * (
            1 + math.cos(math.pi * t / T)
        )
    assert [_lr_factor("step", step=0, total_steps=1, epoch=e, step_size=2, gamma=0.1) for e in range(5)] == [
        1.0,
        1.0,
        0.1,
        0.1,
        0.1**2,
    ]
    assert _lr_factor("none", step=3, total_steps=4, epoch=3, step_size=1, gamma=0.5) == 1.0
    assert [_lr_factor("plateau", step=9, total_steps=10, epoch=9, step_size=1, gamma=0.3, plateau_cuts=c)
            for c in range(3)] == [1.0, 0.3, 0.3**2]  # fmt: skip
    factors = [1.0, 0.3, 0.3, 0.09]  # a replayed schedule: epoch e's multiplier, whatever the step
    assert [
        _lr_factor(factors, step=99, total_steps=100, epoch=e, step_size=1, gamma=0.5) for e in range(4)
    ] == factors


def test_a_per_epoch_schedule_is_replayed_and_checked():
    train, _ = _data()
    res = fit(_model(), train, epochs=3, schedule=(1.0, 0.25, 0.5), **FAST)
    assert [h["lr"] for h in res.history] == [0.1, 0.1 * 0.25, 0.1 * 0.5]
    with pytest.raises(ValueError, match="one lr multiplier per epoch: got 2 for epochs=3"):
        fit(_model(), train, epochs=3, schedule=[1.0, 1.0], **FAST)
    with pytest.raises(ValueError, match=r"schedule\[1\] must be finite and > 0, got nan"):
        fit(_model(), train, epochs=3, schedule=[1.0, float("nan"), 1.0], **FAST)
    with pytest.raises(TypeError, match="schedule must be one of .* or a sequence"):
        fit(_model(), train, epochs=3, schedule=0.5, **FAST)


def test_schedules_drive_the_optimizer():
    train, _ = _data()  # 64 samples, batch 16 -> 4 steps per epoch
    res = fit(_model(), train, epochs=5, schedule="step", step_size=2, gamma=0.5, **FAST)
    assert [h["lr"] for h in res.history] == [0.1, 0.1, 0.1 * 0.5, 0.1 * 0.5, 0.1 * 0.25]
    res = fit(_model(), train, epochs=3, schedule="cosine", **FAST)
    assert [h["lr"] for h in res.history] == [
        0.1 * 0.5 * (1 + math.cos(math.pi * (4 * e + 3) / 12)) for e in range(3)
    ]
    # plain SGD step really uses that lr: w' = w - lr * grad
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    X, y = train
    w0 = lin.weight.detach().clone()
    lin.zero_grad()
    F.cross_entropy(lin(X), y).backward()
    expected = w0 - 0.3 * lin.weight.grad
    fit(
        lin,
        (X, y),
        epochs=1,
        batch_size=64,
        lr=0.3,
        momentum=0.0,
        weight_decay=0.0,
        schedule="none",
        progress=False,
    )
    torch.testing.assert_close(lin.weight.detach(), expected)


# ---------------------------------------------------------------------------------- early stopping


def test_early_stopping_restores_best_weights():
    train, val = _data()
    flipped = (val[0], 2 - val[1])  # the more the model learns, the worse it gets on these labels
    model = _model(dropout=0.0)
    res = fit(model, train, flipped, epochs=8, schedule="none", early_stopping_patience=2, **FAST)
    assert res.stopped_early and res.epochs_run == res.best_epoch + 2 < 8
    nlls = [h["val_nll"] for h in res.history]
    assert res.best_epoch == 1 + int(np.argmin(nlls))
    # the restored weights are exactly those after best_epoch epochs of the same run
    again = _model(dropout=0.0)
    fit(again, train, epochs=res.best_epoch, schedule="none", **FAST)
    assert _same_weights(model, again)


# ------------------------------------------------------------------------------------- determinism


def test_same_seed_bitwise_identical_and_caller_rng_untouched():
    train, val = _data()
    a, b, c = _model(), _model(), _model()
    before = torch.get_rng_state()
    fit(a, train, val, epochs=2, seed=7, **FAST)
    assert torch.equal(torch.get_rng_state(), before)
    fit(b, train, val, epochs=2, seed=7, **FAST)
    fit(c, train, val, epochs=2, seed=8, **FAST)
    assert _same_weights(a, b)
    assert not _same_weights(a, c)


def test_datasets_give_the_same_run_as_tensor_pairs():
    class Plain(Dataset):
        def __init__(self, X, y):
            self.X, self.y = X, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return self.X[i], int(self.y[i])

    train, val = _data()
    a, b, c = _model(), _model(), _model()
    ra = fit(a, train, val, epochs=2, **FAST)
    rb = fit(b, TensorDataset(*train), TensorDataset(*val), epochs=2, **FAST)
    rc = fit(c, Plain(*train), Plain(*val), epochs=2, **FAST)
    assert _same_weights(a, b) and _same_weights(a, c)
    assert ra.history[-1]["val_nll"] == rb.history[-1]["val_nll"] == rc.history[-1]["val_nll"]
    with pytest.raises(ValueError, match="train labels has value 5"):
        fit(_model(), Plain(train[0], torch.full((64,), 5)), epochs=1, **FAST)


def test_seed_everything():
    import random

    seed_everything(3)
    a = (random.random(), np.random.rand(), torch.rand(1))  # noqa: NPY002
    seed_everything(3)
    b = (random.random(), np.random.rand(), torch.rand(1))  # noqa: NPY002
    assert a[:2] == b[:2] and torch.equal(a[2], b[2])
    with pytest.raises(ValueError, match="-1"):
        seed_everything(-1)


# -------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epochs": 0}, "epochs must be >= 1, got 0"),
        ({"optimizer": "adam"}, "'adam'"),
        ({"schedule": "linear"}, "'linear'"),
        ({"lr": -1.0}, "-1.0"),
        ({"early_stopping_patience": 2, "val": None}, "early_stopping_patience"),
        ({"momentum": 1.5}, "1.5"),
    ],
)
def test_bad_arguments(kwargs, match):
    train, val = _data()
    kw = {"epochs": 1, "val": val, **FAST, **kwargs}
    v = kw.pop("val")
    with pytest.raises(ValueError, match=match):
        fit(_model(), train, v, **kw)


def test_bad_data():
    (X, y), (Xv, yv) = _data()
    bad = X.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="train X contains 1 non-finite"):
        fit(_model(), (bad, y), epochs=1, **FAST)
    badv = Xv.clone()
    badv[0, 0] = float("inf")
    with pytest.raises(ValueError, match="val X contains 1 non-finite"):
        fit(_model(), (X, y), (badv, yv), epochs=1, **FAST)
    with pytest.raises(ValueError, match=r"train labels has value 3 outside \[0, 3\)"):
        fit(_model(), (X, torch.where(y == 2, 3, y)), epochs=1, **FAST)
    with pytest.raises(ValueError, match=r"val labels has value -1"):
        fit(_model(), (X, y), (Xv, yv - 1), epochs=1, **FAST)
    with pytest.raises(ValueError, match="64 rows but y has 63"):
        fit(_model(), (X, y[:-1]), epochs=1, **FAST)
    with pytest.raises(TypeError, match="ndarray"):
        fit(_model(), X.numpy(), epochs=1, **FAST)
    model = _model()
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError):
        fit(model, (X, y + 5), epochs=1, **FAST)
    assert all(torch.equal(snapshot[k], v) for k, v in model.state_dict().items())  # untouched on error


# ------------------------------------------------------------------------------------- checkpoints


def test_checkpoints_are_pickle_free_and_resume_finished_run(tmp_path: Path):
    train, val = _data()
    model = _model()
    res = fit(model, train, val, epochs=3, optimizer="adamw", checkpoint_dir=tmp_path, **FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_0003.json", "epoch_0003.safetensors"]
    meta = json.loads((tmp_path / "epoch_0003.json").read_text())
    assert meta["epoch"] == 3 and len(meta["history"]) == 3
    # resuming a finished run trains nothing more and gives back the same weights and history
    again = _model()  # the same initial weights: the weights it ends with come from the checkpoint
    res2 = fit(again, train, val, epochs=3, optimizer="adamw", checkpoint_dir=tmp_path, **FAST)
    assert res2.resumed_from_epoch == 3 and res2.history == res.history
    assert _same_weights(model, again)


def test_resume_from_mid_run_matches_uninterrupted(tmp_path: Path):
    train, val = _data()
    full = _model()
    fit(full, train, val, epochs=4, optimizer="adamw", early_stopping_patience=3, **FAST)

    # crash during epoch 3 (after epoch 2's checkpoint was written), then resume the same call to 4
    class Crash(Exception):
        pass

    def crash(epoch, record, model):
        if epoch == 3:
            raise Crash

    part = _model()
    with pytest.raises(Crash):
        fit(part, train, val, epochs=4, optimizer="adamw", early_stopping_patience=3, checkpoint_dir=tmp_path,
            callbacks=[crash], **FAST)  # fmt: skip
    meta = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert meta["epoch"] == 2 and not meta["stopped"]
    resumed = _model()
    res = fit(resumed, train, val, epochs=4, optimizer="adamw", early_stopping_patience=3, checkpoint_dir=tmp_path,
              **FAST)  # fmt: skip
    assert res.resumed_from_epoch == 2 and res.epochs_run == 4
    assert _same_weights(full, resumed)


def _plateau_reference(history: list[dict], *, lr: float, step_size: int, gamma: float, patience: int):
    """The plateau rule replayed from the recorded validation losses: the lr each epoch should have had."""
    lrs, best, since, cuts = [], math.inf, 0, 0
    for h in history:
        lrs.append(lr * gamma**cuts)
        if h["val_loss"] < best:
            best, since = h["val_loss"], 0
        else:
            since += 1
            if since < patience and since % step_size == 0:
                cuts += 1
    return lrs


def _noisy_labels():
    """Random labels: validation stalls after a few epochs, so the plateau rule has to cut."""
    (xt, _), (xv, _) = _data(n_train=64, n_val=32)
    g = torch.Generator().manual_seed(1)
    return (xt, torch.randint(0, 3, (64,), generator=g)), (xv, torch.randint(0, 3, (32,), generator=g))


def test_plateau_schedule_cuts_the_lr_by_its_rule():
    train, val = _noisy_labels()
    kw = dict(epochs=30, optimizer="adamw", schedule="plateau", step_size=2, gamma=0.5, monitor="val_loss",
              early_stopping_patience=7, batch_size=16, progress=False, lr=0.05)  # fmt: skip
    res = fit(_model(), train, val, **kw)
    lrs = [h["lr"] for h in res.history]
    assert lrs == _plateau_reference(res.history, lr=0.05, step_size=2, gamma=0.5, patience=7)
    assert min(lrs) < 0.05  # the rule did cut at least once on this run
    # the default step is 5 epochs; without validation data the schedule is refused by name
    res5 = fit(_model(), train, val, **{**kw, "step_size": None})
    assert [h["lr"] for h in res5.history] == _plateau_reference(res5.history, lr=0.05, step_size=5, gamma=0.5,
                                                                  patience=7)  # fmt: skip
    with pytest.raises(ValueError, match="schedule='plateau'.*needs val"):
        fit(_model(), train, epochs=2, schedule="plateau", **FAST)


def test_resume_keeps_the_plateau_cuts(tmp_path: Path):
    train, val = _noisy_labels()
    kw = dict(epochs=14, optimizer="adamw", schedule="plateau", step_size=2, gamma=0.5, monitor="val_loss",
              early_stopping_patience=9, batch_size=16, progress=False, lr=0.05)  # fmt: skip
    full = _model()
    ref = fit(full, train, val, **kw)
    cut_at = next(i for i, h in enumerate(ref.history) if h["lr"] < 0.05)  # first epoch at a cut lr (0-based)

    class Crash(Exception):
        pass

    def crash(epoch, record, model):
        if epoch == cut_at + 2:  # after a cut was made and recorded in a checkpoint
            raise Crash

    with pytest.raises(Crash):
        fit(_model(), train, val, checkpoint_dir=tmp_path, callbacks=[crash], **kw)
    resumed = _model()
    res = fit(resumed, train, val, checkpoint_dir=tmp_path, **kw)
    assert res.resumed_from_epoch == cut_at + 1
    assert [h["lr"] for h in res.history] == [h["lr"] for h in ref.history]
    assert _same_weights(full, resumed)


def test_resume_rejects_other_model_and_other_config(tmp_path: Path):
    train, _ = _data()
    fit(_model(), train, epochs=1, checkpoint_dir=tmp_path, **FAST)
    with pytest.raises(ValueError, match=r"different model.*head\.weight"):
        fit(_model(members=3), train, epochs=1, checkpoint_dir=tmp_path, **FAST)
    with pytest.raises(ValueError, match=r"different configuration \(lr: checkpoint 0.1 vs now 0.2\)"):
        fit(_model(), train, epochs=1, checkpoint_dir=tmp_path, **{**FAST, "lr": 0.2})
    # resume=False starts afresh and replaces the old checkpoints
    res = fit(_model(), train, epochs=1, checkpoint_dir=tmp_path, resume=False, **{**FAST, "lr": 0.2})
    assert res.resumed_from_epoch is None


class _Opaque:
    pass


@settings(max_examples=25, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
        lambda kids: (
            st.lists(kids, max_size=3)
            | st.tuples(kids, kids)
            | st.dictionaries(st.text(max_size=4) | st.integers(), kids, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_state_encoding_roundtrips_through_json(obj):
    tensors = {}
    skeleton = S.encode(obj, "x.", tensors)
    assert S.decode(json.loads(json.dumps(skeleton)), tensors) == obj


def test_optimizer_state_roundtrip_exact():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    tensors = {}
    sd = opt.state_dict()
    back = S.decode(json.loads(json.dumps(S.encode(sd, "optim.", tensors))), tensors)
    assert back["param_groups"] == sd["param_groups"]
    assert back["state"].keys() == sd["state"].keys()
    for k in sd["state"]:
        for name, v in sd["state"][k].items():
            assert torch.equal(back["state"][k][name], v)
    with pytest.raises(TypeError, match="_Opaque"):
        S.encode({"a": _Opaque()}, "x.", {})


# ---------------------------------------------------------------------------------------- progress


def test_progress_lines_off_and_bar(monkeypatch):
    train, val = _data()

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    # not a terminal (CI log, file): one line per epoch, labelled by desc, with the scores and an ETA
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    fit(_model(), train, val, epochs=2, batch_size=16, desc="heads/toy/s0")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert (
        lines[0].startswith("heads/toy/s0 [1/2 epochs] loss ") and "val_nll" in lines[0] and "ETA" in lines[0]
    )
    assert lines[1].startswith("heads/toy/s0 [2/2 epochs]") and lines[1].endswith("ETA 0:00")
    # progress=False: silent
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    fit(_model(), train, epochs=1, batch_size=16, progress=False)
    assert buf.getvalue() == ""
    # a terminal: a tqdm bar labelled by desc (carriage returns, not lines)
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    fit(_model(), train, epochs=2, batch_size=16, desc="bar-run")
    assert "bar-run" in term.getvalue() and "\r" in term.getvalue() and "ETA" not in term.getvalue()


def test_a_stopping_callback_stops_after_that_epoch_and_every_callback_sees_it():
    train, val = _data()
    seen: list[int] = []
    res = fit(_model(), train, val, epochs=5,
              callbacks=[lambda e, r, m: e == 2, lambda e, r, m: seen.append(e)], **FAST)  # fmt: skip
    assert res.epochs_run == 2 and seen == [1, 2]


def test_narrow_integer_labels_train_like_int64_and_bool_labels_are_named():
    (x, y), (xv, yv) = _data()
    runs = []
    for dtype in (torch.int64, torch.int32, torch.uint8):
        res = fit(_model(), (x, y.to(dtype)), (xv, yv.to(dtype)), epochs=2, seed=0, **FAST)
        runs.append([h["val_nll"] for h in res.history])
    assert runs[1] == runs[0] and runs[2] == runs[0]
    with pytest.raises(ValueError, match="train labels must be integer class indices, got dtype torch.bool"):
        fit(_model(), (x, y > 0), epochs=1, **FAST)


def test_resume_refuses_another_regularizer_or_an_anonymous_loss_that_computes_something_else(tmp_path: Path):
    """Lambdas all share the name ``<lambda>``; the checkpoint records what they compute."""
    from ensemblize.training.identity import callable_identity

    train, val = _data()

    def reg(lam):
        return lambda m: lam * sum(p.square().sum() for p in m.parameters())

    class Crash(Exception):
        pass

    def crash(epoch, record, model):
        if epoch == 2:  # before epoch 2's checkpoint: the folder holds epoch 1
            raise Crash

    with pytest.raises(Crash):
        fit(
            _model(),
            train,
            val,
            epochs=2,
            checkpoint_dir=tmp_path,
            regularizer=reg(0.01),
            callbacks=[crash],
            **FAST,
        )
    with pytest.raises(ValueError, match=r"different configuration \(regularizer: checkpoint"):
        fit(_model(), train, val, epochs=2, checkpoint_dir=tmp_path, **FAST)
    with pytest.raises(ValueError, match="regularizer: checkpoint '.*<lambda>#[0-9a-f]{16}' vs now"):
        fit(_model(), train, val, epochs=2, checkpoint_dir=tmp_path, regularizer=reg(1.0), **FAST)
    res = fit(_model(), train, val, epochs=2, checkpoint_dir=tmp_path, regularizer=reg(0.01), **FAST)
    assert res.resumed_from_epoch == 1

    other = tmp_path / "loss"
    with pytest.raises(Crash):
        fit(_model(), train, val, epochs=2, checkpoint_dir=other, callbacks=[crash],
            loss_fn=lambda out, y: F.cross_entropy(out.mean(1), y), **FAST)  # fmt: skip
    with pytest.raises(ValueError, match="loss: checkpoint"):
        fit(_model(), train, val, epochs=2, checkpoint_dir=other, loss_fn=lambda out, y: 100 * F.cross_entropy(
            out.mean(1), y), **FAST)  # fmt: skip
    # identities: same computation -> same; other constants, closure values or settings -> different
    assert callable_identity(lambda x: x * 2) == callable_identity(lambda x: x * 2)
    assert callable_identity(lambda x: x * 2) != callable_identity(lambda x: x * 3)
    assert callable_identity(reg(0.01)) != callable_identity(reg(0.02))
    from ensemblize.selective import DeepGamblersLoss

    dg = DeepGamblersLoss(2.0)
    before = callable_identity(dg)
    dg.set_epoch(3)  # run-time state is not configuration
    assert callable_identity(dg) == before != callable_identity(DeepGamblersLoss(2.5))


def test_a_file_as_checkpoint_dir_and_per_member_batches_on_a_sigma_ensemble_are_named(tmp_path: Path):
    import ensemblize as ez

    train, _ = _data()
    file = tmp_path / "not_a_folder"
    file.write_text("")
    with pytest.raises(ValueError, match="checkpoint_dir .* is a file, not a folder"):
        fit(_model(), train, epochs=1, checkpoint_dir=file, **FAST)
    ens = ez.sigma_ensemble(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)), members=2)
    with pytest.raises(ValueError, match="per_member_batches is not supported by a σN ensemble"):
        fit(ens, train, epochs=1, per_member_batches=True, **FAST)


def test_a_regulariser_closing_over_a_trained_layer_keeps_its_identity_while_the_layer_trains():
    from ensemblize.training.identity import callable_identity

    head = nn.Linear(4, 3)
    reg = lambda m: head.bias.abs().sum()  # noqa: E731
    before = callable_identity(reg)
    with torch.no_grad():
        head.bias.add_(1.0)  # training moves the parameter; the regulariser is the same
    assert callable_identity(reg) == before


class _NaNOnce(torch.nn.Module):
    """A regressor whose evaluation output is NaN in the first epoch's validation only."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(5, 1)
        self.evals = 0

    def forward(self, x):
        z = self.lin(x)
        if not self.training:
            self.evals += 1
            if (
                self.evals == 3
            ):  # calls 1-2 are fit's probes (training, validation data), 3 the first validation
                z = z * float("nan")
        return z.squeeze(-1)


def test_a_nan_validation_epoch_is_the_worst_not_the_best_for_ever():
    """NaN compares False with everything: a NaN first epoch stayed best, early stopping stopped a run
    that was improving (0.71 → 0.59) and restored the NaN epoch's weights."""
    torch.manual_seed(0)
    X, Xv = torch.randn(64, 5), torch.randn(40, 5)
    torch.manual_seed(1)
    model = _NaNOnce()
    with pytest.warns(RuntimeWarning, match="epoch 1: the monitored val_rmse is nan; it counts as the worst"):
        res = fit(model, (X, X[:, 0] * 2), (Xv, Xv[:, 0] * 2), epochs=8, lr=0.2, early_stopping_patience=3,
                  progress=False, task="regression", batch_size=16)  # fmt: skip
    rmse = [h["val_rmse"] for h in res.history]
    assert math.isnan(rmse[0]) and res.best_epoch == 1 + int(np.nanargmin(rmse))
    assert res.best_epoch > 1


def test_predict_in_float64_casts_the_logits_before_the_softmax_and_names_a_bad_dtype():
    model = _model().eval()
    x = _data()[0][0]
    with torch.no_grad():
        z = model(x)
    p64 = predict(model, x, dtype=torch.float64)
    assert p64.dtype == torch.float64 and predict(model, x).dtype == torch.float32
    torch.testing.assert_close(p64, torch.softmax(z.double(), -1), rtol=0, atol=1e-15)
    reg = predict(nn.Linear(4, 3), x, task="regression", dtype=torch.float64)
    assert reg.dtype == torch.float64 and reg.shape == (len(x), 3)
    with pytest.raises(TypeError, match="dtype must be a floating torch dtype"):
        predict(model, x, dtype=torch.int64)


def test_fit_keeps_a_layer_the_caller_froze_in_eval_mode_frozen():
    """fit put every layer in train mode each epoch: a BatchNorm frozen for a fine-tune (eval mode,
    no gradients) had its running mean moved by up to 1.85. A model wholly in eval mode still trains."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 4) * 3 + 2, torch.randint(0, 3, (64,))
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 3))
    frozen, live = net[1], net[3]
    frozen.eval().requires_grad_(False)
    before = frozen.running_mean.clone(), frozen.running_var.clone()
    with pytest.warns(UserWarning, match=r"fit keeps 1 frozen layer\(s\) in eval mode .*\['1'\]"):
        fit(net, (x, y), (x[:16], y[:16]), epochs=2, batch_size=16, progress=False)
    assert not frozen.training and live.training and net.training
    assert torch.equal(frozen.running_mean, before[0]) and torch.equal(frozen.running_var, before[1])
    assert live.num_batches_tracked.item() == 8  # 4 steps an epoch
    whole = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)).eval()
    fit(whole, (x, y), epochs=1, batch_size=16, progress=False)
    assert whole[1].num_batches_tracked.item() == 4
    # a pretrained backbone loaded in eval mode (as from_pretrained returns it), given a new head in
    # train mode, is not frozen: it has trainable parameters, so it trains in train mode, without a warning
    backbone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5)).eval()
    model = nn.Sequential(backbone, nn.Linear(8, 3))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(model, (x, y), epochs=1, batch_size=16, progress=False)
    assert backbone.training and backbone[2].training and backbone[1].num_batches_tracked.item() == 4


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_validation_data_the_model_cannot_take_fails_before_training(task):
    """Validation rows of another width ran a whole epoch (changing the weights), then a raw torch error."""
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    y = (x[:, 0] > 0).long() if task == "classification" else x[:, 0].clone()
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2 if task == "classification" else 1))
    w0 = net[0].weight.detach().clone()
    with pytest.raises(
        ValueError, match=r"the model fails on the val data \(checked before training\): mat1 and mat2"
    ):
        fit(net, (x, y), (torch.randn(8, 5), y[:8]), epochs=3, batch_size=16, task=task, progress=False)
    assert torch.equal(net[0].weight, w0)
