"""σN-Ens's own knobs, by value: fit's gate learning-rate scale and the runner's norm-layer selection."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ensemblize as ez
from ensemblize.data.images import ImageSplits
from ensemblize.models.registry import build_ensemble, build_model
from ensemblize.runner import (
    SIGMA_NORMS,
    MethodSpec,
    TrainConfig,
    build_method,
    sigma_norm_selection,
    train_method,
)
from ensemblize.training import fit, member_cross_entropy, parameter_groups

QUIET = dict(progress=False)


def _tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(3, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 3)
    )
    return ez.sigma_ensemble(net, members=3, noise=0.7, seed=seed)


def _data(n: int = 12):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, generator=g), torch.randint(0, 3, (n,), generator=g)


def _plain_sgd_step(model: nn.Module, x, y, lr: float) -> dict[str, torch.Tensor]:
    """-lr × the gradient of fit's default loss on the whole batch (the plain-SGD step), per parameter."""
    model.train()
    model.zero_grad()
    member_cross_entropy(model(x), y).backward()
    return {n: -lr * p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("scale", [0.25, 1.0, 7.0])
def test_gate_step_is_scale_times_the_plain_sgd_step(scale):
    x, y = _data()
    lr = 0.1
    reference = _plain_sgd_step(_tiny(), x, y, lr)
    model = _tiny()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # one full-batch step, no momentum, no decay, constant lr: the update is -lr_group × gradient
    fit(model, (x, y), epochs=1, batch_size=len(x), lr=lr, momentum=0.0, weight_decay=0.0, schedule="none",
        gate_lr_scale=scale, **QUIET)  # fmt: skip
    gates = 0
    for n, p in model.named_parameters():
        step = p.detach() - before[n]
        factor = scale if n.endswith("gate_logits") else 1.0
        gates += n.endswith("gate_logits")
        assert torch.allclose(step, factor * reference[n], rtol=1e-4, atol=1e-7), n
    assert gates == 2


def test_scale_one_keeps_the_groups_and_the_weights_bitwise():
    ens = _tiny()
    assert parameter_groups(ens, weight_decay=0.1, gate_lr_scale=1.0) == parameter_groups(
        ens, weight_decay=0.1
    )
    assert all("lr_scale" not in g for g in parameter_groups(ens, weight_decay=0.1))
    x, y = _data()
    runs = []
    for kw in ({}, {"gate_lr_scale": 1.0}):
        model = _tiny()
        result = fit(model, (x, y), epochs=2, batch_size=4, **kw, **QUIET)
        assert "gate_lr_scale" not in result.config  # checkpoints written before the option still resume
        runs.append(model.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_scaled_gates_get_their_own_group_with_their_decay_verdict():
    ens = _tiny()
    groups = parameter_groups(ens, weight_decay=0.1, gate_lr_scale=3.0)
    gate_groups = [g for g in groups if "lr_scale" in g]
    assert [(g["weight_decay"], g["lr_scale"], g["names"]) for g in gate_groups] == [
        (0.0, 3.0, ["backbone.1.gate_logits", "backbone.4.gate_logits"])
    ]
    assert not any(n.endswith("gate_logits") for g in groups if "lr_scale" not in g for n in g["names"])
    everything = parameter_groups(ens, weight_decay=0.1, decay_filter="all", gate_lr_scale=3.0)
    assert [(g["weight_decay"], g.get("lr_scale")) for g in everything] == [(0.1, None), (0.1, 3.0)]
    x, y = _data()
    result = fit(ens, (x, y), epochs=1, batch_size=6, gate_lr_scale=3.0, **QUIET)
    assert result.config["gate_lr_scale"] == 3.0


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), (True, TypeError),
     ("2", TypeError)],
)  # fmt: skip
def test_bad_gate_lr_scale_is_named(bad, error):
    x, y = _data()
    with pytest.raises(error, match="gate_lr_scale"):
        fit(_tiny(), (x, y), epochs=1, gate_lr_scale=bad, **QUIET)
    with pytest.raises(error, match="gate_lr_scale"):
        parameter_groups(_tiny(), weight_decay=0.0, gate_lr_scale=bad)
    with pytest.raises(error, match="gate_lr_scale"):
        MethodSpec("sigma", gate_lr_scale=bad)


# ------------------------------------------------------------------------------------ norm selection

SHAPE = {"in_channels": 1, "num_classes": 10, "image_size": 40}


def test_norm_presets_name_the_layers():
    resnet = build_model("resnet1d", **SHAPE)
    assert sigma_norm_selection("all", resnet) is None
    assert sigma_norm_selection("no_stem", resnet) == [
        "stages.0.0.bn1", "stages.0.0.bn2", "stages.1.0.bn1", "stages.1.0.bn2", "stages.1.0.shortcut.1",
        "stages.2.0.bn1", "stages.2.0.bn2", "stages.2.0.shortcut.1",
    ]  # fmt: skip
    assert sigma_norm_selection("last_stage", resnet) == [
        "stages.2.0.bn1",
        "stages.2.0.bn2",
        "stages.2.0.shortcut.1",
    ]
    transformer = build_model("transformer1d", **SHAPE)
    assert sigma_norm_selection("last_stage", transformer) == ["blocks.2.norm1", "blocks.2.norm2"]
    assert sigma_norm_selection("no_stem", transformer)[0] == "blocks.0.norm2"
    with pytest.raises(ValueError, match="norms"):
        sigma_norm_selection("stem", resnet)
    with pytest.raises(ValueError, match="last_stage"):
        sigma_norm_selection("last_stage", nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    with pytest.raises(ValueError, match="norms"):
        MethodSpec("sigma", norms="first")
    assert SIGMA_NORMS == ("all", "no_stem", "last_stage")


def test_norm_presets_on_named_containers_and_stems_without_norms():
    """``last_stage`` takes the last child holding norms, whatever its name; ``no_stem`` drops the
    norms under ``stem`` (none for the wide ResNet) and names an empty result."""

    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleDict({"early": nn.LayerNorm(4), "late": nn.Sequential(nn.LayerNorm(4))})
            self.tail = nn.Linear(4, 2)

    assert sigma_norm_selection("last_stage", Named()) == ["blocks.late.0"]
    wrn = build_model("wrn28", in_channels=3, num_classes=10, image_size=32)
    from ensemblize.sigma.convert import norm_layer_names

    assert sigma_norm_selection("no_stem", wrn) == norm_layer_names(wrn)  # its stem is a bare conv
    with pytest.raises(ValueError, match=r"no_stem.*leaves no norm layer.*\['1'\]"):
        sigma_norm_selection("no_stem", nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))


def _signals(n: int = 16) -> ImageSplits:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 1, 40, generator=g), torch.arange(n) % 10
    return ImageSplits(name="toy", x_train=x, y_train=y, x_val=x, y_val=y, x_test=x, y_test=y,
                       mean=torch.zeros(1), std=torch.ones(1), num_classes=10,
                       class_names=tuple(map(str, range(10))))  # fmt: skip


def test_build_method_converts_the_selected_norms_only():
    splits = _signals()
    spec = MethodSpec("sigma", model="resnet1d", members=2, norms="last_stage", model_kwargs={"width": 4})
    model = build_method(spec, splits)
    assert model.converted == ["stages.2.0.bn1", "stages.2.0.bn2", "stages.2.0.shortcut.1"]
    assert isinstance(model.backbone.stem[1], nn.BatchNorm1d)
    # "all" is the registry's σN-Ens, bitwise (same initialisation and gate noise from the same seed)
    torch.manual_seed(3)
    spec = MethodSpec("sigma", model="resnet1d", members=2, norms="all", noise=0.5, model_kwargs={"width": 4})
    ours = build_method(spec, splits)
    torch.manual_seed(3)
    theirs = build_ensemble("sigma", "resnet1d", members=2, noise=0.5, width=4, **SHAPE)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(v, theirs.state_dict()[k]) for k, v in ours.state_dict().items())


def test_train_method_passes_the_gate_lr_scale_to_sigma_only():
    splits = _signals()
    train = TrainConfig(epochs=1, batch_size=8)
    for method, expected in (("sigma", 4.0), ("deep", None)):
        spec = MethodSpec(method, model="resnet1d", members=2, gate_lr_scale=4.0, model_kwargs={"width": 4})
        torch.manual_seed(0)
        result = train_method(build_method(spec, splits), spec, splits, train, seed=0, progress=False)
        assert result.config.get("gate_lr_scale") == expected
