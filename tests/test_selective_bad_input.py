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
    # SelectiveOutput is a NamedTuple: the same three tensors as a plain tuple (or any object with the
    # three attributes) are the same output; anything else is named
    assert torch.equal(loss((out.logits, out.selection, out.aux_logits), y), loss(out, y))
    with pytest.raises(TypeError, match="SelectiveOutput.*got tuple of length 2"):
        loss((out.logits, out.selection), y)
    with pytest.raises(TypeError, match="output.selection must be a torch.Tensor, got list"):
        loss((out.logits, out.selection.tolist(), out.aux_logits), y)
    with pytest.raises(TypeError, match="SelectiveOutput.*got dict"):
        loss({"logits": out.logits}, y)


def test_sync_prior_not_probabilities():
    out = _output()
    y = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="prior"):
        SyncLoss(0.5, 1.0)(out, y, prior=torch.randn(5, 3) * 3)
    bad = torch.full((5, 3), 1 / 3)
    bad[2, 1], bad[2, 2] = -0.5, 1.1667
    with pytest.raises(ValueError, match=r"prior has a negative probability -0\.5 at index \(2, 1\)"):
        SyncLoss(0.5, 1.0)(out, y, prior=bad)  # the caller's index, not that of an internal (B, 1, C) view


@pytest.mark.parametrize("reward", [1.0, 0.5, -2.0, float("inf"), float("nan")])
def test_deep_gamblers_reward_not_above_one(reward):
    with pytest.raises(ValueError, match=r"reward must (lie in \(1, K\]|be finite)"):
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
    with pytest.raises(ValueError, match="epoch must be >= 0, got -1"):
        loss.set_epoch(-1)
    with pytest.raises(ValueError, match="warmup_epochs"):
        DeepGamblersLoss(2.0, warmup_epochs=-1)
    with pytest.raises(ValueError, match="expected num_classes"):
        DeepGamblersLoss(2.0, num_classes=3)(torch.randn(2, 6), torch.tensor([0, 1]))


def test_feature_width_mismatch():
    net = SelectiveNet(nn.Linear(4, 10), 8, 3)
    with pytest.raises(ValueError, match=r"features output width 10 does not match feature_dim=8"):
        net(torch.randn(3, 4))


# --- issue 12: named errors instead of NaN / internal errors -----------------------------------


@pytest.mark.parametrize("cls", [SelectiveNetLoss, lambda c: SyncLoss(c, 1.0)])
def test_all_zero_selection_is_a_named_error_not_nan(cls):
    out = _output()
    dead = SelectiveOutput(out.logits, torch.zeros(5), out.aux_logits)
    with pytest.raises(ValueError, match=r"selection is 0 for every sample of member\(s\) \[0\]"):
        cls(0.5)(dead, torch.zeros(5, dtype=torch.long))
    # per member: member 1 collapsed, member 0 fine
    g = torch.stack([torch.rand(5), torch.zeros(5)], dim=1)
    members = SelectiveOutput(torch.randn(5, 2, 3), g, torch.randn(5, 2, 3))
    with pytest.raises(ValueError, match=r"member\(s\) \[1\]"):
        cls(0.5)(members, torch.zeros(5, dtype=torch.long))


def test_all_zero_selection_is_finite_without_normalisation():
    out = _output()
    dead = SelectiveOutput(out.logits, torch.zeros(5), out.aux_logits)
    loss = SelectiveNetLoss(0.5, normalize_by_coverage=False)(dead, torch.zeros(5, dtype=torch.long))
    assert torch.isfinite(loss)
    # r̂ = 0 and the penalty is λ·c²
    assert float(loss.detach()) == pytest.approx(
        0.5 * 32 * 0.25
        + 0.5 * float(nn.functional.cross_entropy(out.aux_logits, torch.zeros(5, dtype=torch.long)))
    )


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), float("inf")])
@pytest.mark.parametrize("cls", [SelectiveNetLoss, lambda c: SyncLoss(c, 1.0)])
def test_selection_outside_unit_interval_is_a_named_error(cls, bad):
    out = _output()
    g = out.selection.clone()
    g[2] = bad
    with pytest.raises(ValueError, match=r"selection must lie in \[0, 1\]"):
        cls(0.5)(SelectiveOutput(out.logits, g, out.aux_logits), torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("field", ["logits", "aux_logits"])
def test_non_finite_logits_are_named(field):
    out = _output()._asdict()
    out[field] = out[field].clone()
    out[field][1, 0] = float("nan")
    with pytest.raises(ValueError, match=f"output.{field} contains 1 non-finite"):
        SelectiveNetLoss(0.5)(SelectiveOutput(**out), torch.zeros(5, dtype=torch.long))


def test_integer_outputs_are_a_type_error():
    out = _output()
    with pytest.raises(TypeError, match="floating point"):
        SelectiveNetLoss(0.5)(
            SelectiveOutput(out.logits.long(), out.selection, out.aux_logits.long()),
            torch.zeros(5, dtype=torch.long),
        )


@pytest.mark.parametrize("shape", [(0, 4), (0, 2, 4)])
def test_deep_gamblers_empty_batch_is_a_named_error_like_selectivenet(shape):
    with pytest.raises(ValueError, match="empty batch"):
        DeepGamblersLoss(2.0)(torch.randn(*shape), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="empty batch"):
        SelectiveNetLoss(0.5)(
            SelectiveOutput(torch.randn(0, 3), torch.rand(0), torch.randn(0, 3)),
            torch.zeros(0, dtype=torch.long),
        )


def test_deep_gamblers_non_finite_logits_are_named():
    z = torch.randn(3, 4)
    z[0, 1] = float("inf")
    with pytest.raises(ValueError, match="logits contain 1 non-finite"):
        DeepGamblersLoss(2.0)(z, torch.zeros(3, dtype=torch.long))


def test_numpy_integers_accepted_for_counts():
    np = pytest.importorskip("numpy")
    loss = DeepGamblersLoss(2.0, warmup_epochs=np.int64(1), num_classes=np.int64(3))
    loss.set_epoch(np.int64(2))
    assert loss.epoch == 2 and type(loss.warmup_epochs) is int and type(loss.num_classes) is int


def test_a_scalar_coverage_names_the_argument():
    import numpy as np

    from ensemblize.evaluation.selective import selective_report

    conf = np.random.default_rng(1).random(100)
    with pytest.raises(
        TypeError, match=r"coverages must be a sequence of target coverages such as \(0.8,\), got 0.8"
    ):
        selective_report(conf, (conf < 0.3).astype(float), coverages=0.8)


def test_fit_of_a_selectivenet_without_its_loss_is_refused():
    """The default cross-entropy reads only the prediction head's logits: the selection and auxiliary
    heads stayed at their initial weights and 'w/o SR' ranked by noise, silently."""
    from ensemblize.training import fit

    torch.manual_seed(0)
    net = SelectiveNet(nn.Sequential(nn.Linear(5, 8), nn.ReLU()), 8, 3, hidden=4)
    data = (torch.randn(32, 5), torch.randint(0, 3, (32,)))
    with pytest.raises(ValueError, match=r"returns a SelectiveOutput.*loss_fn=SelectiveNetLoss"):
        fit(net, data, epochs=1, progress=False)
    fit(net, data, epochs=1, progress=False, loss_fn=SelectiveNetLoss(0.8))  # with its loss: trains


def test_probabilities_given_as_logits_warn_in_every_selective_loss():
    """A model ending in Softmax fed its probabilities to the losses, which softmaxed them again and
    trained on flattened predictions, silently; logits do not warn."""
    import warnings

    torch.manual_seed(0)
    y = torch.randint(0, 3, (6,))
    probs = torch.randn(6, 4).softmax(-1)
    with pytest.warns(
        UserWarning, match=r"DeepGamblersLoss \(logits\): the model's outputs look like probabilities"
    ):
        DeepGamblersLoss(2.0)(probs, y)
    p3 = torch.randn(6, 3).softmax(-1)
    for make in (lambda: SelectiveNetLoss(0.5), lambda: SyncLoss(0.5, 1.0)):
        name = type(make()).__name__
        with pytest.warns(
            UserWarning, match=rf"{name} \(output.logits\): the model's outputs look like probabilities"
        ):
            make()(SelectiveOutput(p3, torch.rand(6), torch.randn(6, 3)), y)
        with pytest.warns(
            UserWarning, match=rf"{name} \(output.aux_logits\): the model's outputs look like probabilities"
        ):
            make()(SelectiveOutput(torch.randn(6, 3), torch.rand(6), p3), y)
    # checked on a loss's first call only: no per-step host sync for a diagnosis
    loss = DeepGamblersLoss(2.0)
    loss(torch.randn(6, 4), y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(probs, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DeepGamblersLoss(2.0)(torch.randn(6, 4), y)
        SyncLoss(0.5, 1.0)(SelectiveOutput(torch.randn(6, 2, 3), torch.rand(6, 2), torch.randn(6, 2, 3)), y)
