"""fit(ema_decay=...): the weight average against its equation, what validation scores, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ensemblize.training import fit
from ensemblize.training.averaging import WeightAverage, check_ema_decay, ema_decay_at
from test_training_fit import FAST, _data, _model, _same_weights


def _reference_average(trajectory: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    """w̄_0 = w_0; w̄_t = d_t w̄_{t-1} + (1 - d_t) w_t, d_t = min(decay, (1+t)/(10+t)) — in float64."""
    avg = {k: v.double().clone() for k, v in trajectory[0].items()}
    for t, w in enumerate(trajectory[1:], start=1):
        d = min(decay, (1 + t) / (10 + t))
        avg = {k: d * avg[k] + (1 - d) * w[k].double() for k in avg}
    return avg


@settings(max_examples=30, deadline=None)
@given(decay=st.floats(0.01, 0.999), step=st.integers(1, 10_000))
def test_the_warm_up_decay_never_exceeds_the_cap_and_only_grows(decay, step):
    d = ema_decay_at(decay, step)
    assert 2 / 11 <= d <= decay or d == decay  # the warm-up starts at (1 + 1) / (10 + 1)
    assert d <= ema_decay_at(decay, step + 1)


def test_the_warm_up_decay_by_hand():
    assert ema_decay_at(0.999, 1) == pytest.approx(2 / 11)  # warm-up binds early
    assert ema_decay_at(0.999, 90) == pytest.approx(91 / 100)
    assert ema_decay_at(0.9, 90) == 0.9  # the cap binds once (1 + t) / (10 + t) > 0.9, i.e. t > 80
    assert ema_decay_at(0.9, 80) == pytest.approx(81 / 90)


@settings(max_examples=15, deadline=None)
@given(decay=st.floats(0.05, 0.99), steps=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_weight_average_matches_the_equation_and_copies_integer_buffers(decay, steps, seed):
    g = torch.Generator().manual_seed(seed)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    trajectory = [{k: v.clone() for k, v in module.state_dict().items()}]
    avg = WeightAverage(module, decay=decay)
    for _ in range(steps):
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn(p.shape, generator=g))
            module[1].running_mean.add_(torch.randn(4, generator=g))
            module[1].num_batches_tracked.add_(1)
        avg.update(module)
        trajectory.append({k: v.clone() for k, v in module.state_dict().items()})
    ref = _reference_average(trajectory, decay)
    got = avg.averaged.state_dict()
    assert avg.steps == steps
    for k, v in got.items():
        if k.endswith("num_batches_tracked"):
            assert int(v) == steps  # copied, not averaged
        else:
            torch.testing.assert_close(v.double(), ref[k], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_a_decay_outside_the_open_interval_is_named(bad):
    with pytest.raises(ValueError, match="ema_decay must lie in"):
        check_ema_decay(bad)
    with pytest.raises(ValueError, match="ema_decay"):
        fit(_model(), _data()[0], epochs=1, ema_decay=bad, **FAST)
    with pytest.raises(TypeError, match="ema_decay"):
        check_ema_decay("0.9")
    assert check_ema_decay(None) is None


def test_fit_ends_with_the_average_of_the_raw_trajectory():
    """Same seed with and without averaging: the raw steps are identical, and the averaged run ends
    with the equation's average of the raw run's weights before every training forward + its end."""
    train, _ = _data()
    raw = _model(dropout=0.0)
    trajectory: list[dict[str, torch.Tensor]] = []

    def record(module, args):
        if module.training:  # training forwards only (the set-up probe runs in eval mode)
            trajectory.append({k: v.detach().clone() for k, v in module.state_dict().items()})

    raw.register_forward_pre_hook(record)
    fit(raw, train, epochs=3, optimizer="adamw", **FAST)
    trajectory.append({k: v.detach().clone() for k, v in raw.state_dict().items()})
    averaged = _model(dropout=0.0)
    fit(averaged, train, epochs=3, optimizer="adamw", ema_decay=0.9, **FAST)
    ref = _reference_average(trajectory, 0.9)
    assert len(trajectory) == 3 * 4 + 1  # 64 rows / batch 16 = 4 steps an epoch
    for k, v in averaged.state_dict().items():
        torch.testing.assert_close(v.double(), ref[k], rtol=1e-5, atol=1e-6)
    assert not _same_weights(raw, averaged)


def test_validation_and_the_restored_best_epoch_are_the_averaged_weights():
    train, val = _data()
    model = _model()
    res = fit(
        model, train, val, epochs=6, optimizer="adamw", ema_decay=0.8, early_stopping_patience=10, **FAST
    )
    model.eval()
    with torch.no_grad():
        p = torch.softmax(model(val[0]).double(), dim=-1).mean(dim=1)  # the ensemble on probabilities
    nll = float(-torch.log(p[torch.arange(len(val[1])), val[1]]).mean())
    best = res.history[res.best_epoch - 1]
    assert nll == pytest.approx(best["val_nll"], abs=1e-5)
    assert float((p.argmax(1) == val[1]).double().mean()) == pytest.approx(best["val_accuracy"])
    assert res.best_epoch < 6 or res.history[-1]["val_nll"] == best["val_nll"]


def test_resume_with_averaging_matches_uninterrupted(tmp_path: Path):
    train, val = _data()
    kw = dict(epochs=4, optimizer="adamw", ema_decay=0.9, early_stopping_patience=3, **FAST)
    full = _model()
    full_res = fit(full, train, val, **kw)

    class Crash(Exception):
        pass

    def crash(epoch, record, model):
        if epoch == 3:
            raise Crash

    with pytest.raises(Crash):
        fit(_model(), train, val, checkpoint_dir=tmp_path, callbacks=[crash], **kw)
    meta = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert meta["epoch"] == 2 and meta["config"]["ema_decay"] == 0.9
    resumed = _model()
    res = fit(resumed, train, val, checkpoint_dir=tmp_path, **kw)
    assert res.resumed_from_epoch == 2 and res.history[2:] == [
        {**h, "seconds": r["seconds"]} for h, r in zip(full_res.history[2:], res.history[2:], strict=True)
    ]
    assert _same_weights(full, resumed)
    # a checkpoint written with averaging does not resume a run without it (and vice versa)
    with pytest.raises(ValueError, match="ema_decay: checkpoint 0.9 vs now None"):
        fit(_model(), train, val, checkpoint_dir=tmp_path, **{**kw, "ema_decay": None})
