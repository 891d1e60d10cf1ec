"""Edges a user's own model meets in σN-Ens: a model converted twice, dataclass outputs, norm layers
that are not converted, a save/load record, and training errors that name their cause."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import ensemblize as ez
from ensemblize.training import fit
from ensemblize.training.fit import TrainingDiverged


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.n1, self.b, self.n2, self.o = (
            nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 3)
        )  # fmt: skip

    def forward(self, x):
        return self.o(self.n2(self.b(self.n1(self.a(x)))))


def test_a_partly_converted_model_or_an_ensemble_is_refused():
    part = ez.sigma_ensemble(Two(), members=2, seed=0, layers=["n1"])
    with pytest.raises(ValueError, match=r"already a σN ensemble, or partly one: \['n1'\]"):
        ez.sigma_ensemble(part.backbone, members=3)
    with pytest.raises(ValueError, match=r"already a σN ensemble, or partly one: \['\(the model\)'"):
        ez.sigma_ensemble(part, members=2)


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    features: torch.Tensor
    note: str = "kept"


class DataclassNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.n, self.l2 = nn.Linear(4, 6), nn.LayerNorm(6), nn.Linear(6, 3)

    def forward(self, x):
        h = self.n(self.l1(x))
        return Out(logits=self.l2(h), features=h)


def test_dataclass_outputs_get_the_member_axis_with_the_original_values():
    torch.manual_seed(0)
    net = DataclassNet()
    ens = ez.sigma_ensemble(net, members=3, noise=0.0)
    x = torch.randn(5, 4)
    out = ens(x)
    assert isinstance(out, Out) and out.note == "kept"
    assert out.logits.shape == (5, 3, 3) and out.features.shape == (5, 3, 6)
    ref = net(x)
    for k in range(3):  # noise 0: every member is the original model
        torch.testing.assert_close(out.logits[:, k], ref.logits)
        torch.testing.assert_close(out.features[:, k], ref.features)


class WithRMS(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.rms, self.l2 = nn.Linear(4, 6), nn.LayerNorm(6), nn.RMSNorm(6), nn.Linear(6, 2)

    def forward(self, x):
        return self.l2(self.rms(self.ln(self.l1(x))))


def test_norm_layers_left_shared_are_named():
    with pytest.warns(UserWarning, match=r"left \['rms'\] shared: their class\(es\) \['RMSNorm'\]"):
        ens = ez.sigma_ensemble(WithRMS(), members=2)
    assert ens.converted == ["ln"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit selection is what the user asked for: no warning
        ez.sigma_ensemble(WithRMS(), members=2, layers=["ln"])


def test_load_keeps_the_conversion_record_and_the_row_check(tmp_path):
    ens = ez.sigma_ensemble(Two(), members=3, noise=0.4, seed=7)
    ens.check_rows = False
    stem = ez.save_ensemble(ens, tmp_path / "e")
    back = ez.load_ensemble(stem, Two())
    assert back.settings == ens.settings and back.settings["noise"] == 0.4 and back.settings["seed"] == 7
    assert back.check_rows is False
    x = torch.randn(4, 4)
    torch.testing.assert_close(back(x), ens.eval()(x), rtol=0, atol=0)
    again = ez.load_ensemble(ez.save_ensemble(back, tmp_path / "f"), Two())
    assert again.settings == ens.settings  # saving a loaded ensemble writes the same record


def test_probabilities_of_a_float32_softmax_over_many_classes_pass_in_float64():
    torch.manual_seed(0)
    p = (torch.randn(64, 21841) * 3).softmax(-1)
    y = torch.randint(0, 21841, (64,))
    assert ez.metrics.ece(p.double(), y) == pytest.approx(ez.metrics.ece(p, y), abs=1e-6)
    near = np.full((2, 4), 0.25)
    near[0] *= 1.004
    with pytest.raises(ValueError, match=r"sums to 1\.004.*renormalise the rows"):
        ez.metrics.ece(near, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"not logits"):
        ez.metrics.ece(np.full((2, 4), 0.5), np.array([0, 1]))


def test_fit_names_the_probe_batch_and_a_non_finite_regularizer():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    X, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    ens = ez.sigma_ensemble(Two(), members=2)  # (B, 2, 3) outputs: not a regression model's layout
    with pytest.raises(ValueError, match=r"on a probe batch of the first 2 training rows: .*shape \(2,\)"):
        fit(ens, (X, y.float()), epochs=1, batch_size=16, task="regression", progress=False)
    with pytest.raises(TrainingDiverged, match=r"the regularizer is nan in epoch 1"):
        fit(
            net,
            (X, y),
            epochs=1,
            batch_size=16,
            progress=False,
            regularizer=lambda m: torch.tensor(float("nan")),
        )


class _Attention(nn.Module):
    """Sequence-first attention around a LayerNorm; ``transpose``: the model takes (B, T, D) and
    transposes for the attention (a correct σN backbone), else it takes (T, B, D)."""

    def __init__(self, transpose):
        super().__init__()
        self.transpose = transpose
        self.att, self.ln = nn.MultiheadAttention(8, 2), nn.LayerNorm(8)

    def forward(self, x):
        t = x.transpose(0, 1) if self.transpose else x
        y = self.att(t, t, t)[0]
        return self.ln(x + (y.transpose(0, 1) if self.transpose else y))


def test_sequence_first_attention_that_would_mix_members_is_refused_at_forward():
    """A (T, B, D) model puts the members along T, where attention mixes them, and the norms see
    T·M rows, so no norm notices: the attention's own check names it. Transposing for it is exact."""
    torch.manual_seed(0)
    x = torch.randn(4, 5, 8)
    bad = ez.sigma_ensemble(_Attention(False).eval(), members=3, noise=1.0, seed=0).eval()
    with pytest.raises(
        ValueError, match=r"att is a sequence-first nn.MultiheadAttention .* \(12, 5, 8\).* 12 rows"
    ):
        bad(x)
    good = _Attention(True).eval()
    ens = ez.sigma_ensemble(good, members=3, noise=0.0).eval()
    assert torch.equal(ens(x), good(x)[:, None].expand(4, 3, 5, 8))
    ens.check_rows = False  # the user's switch silences this check too
    bad.check_rows = False
    assert bad(x).shape[1] == 3


def test_a_hand_built_ensemble_gets_the_same_guards():
    """SigmaEnsemble around convert_norms' output: the attention row check (once per layer, however
    many wrappers), the sequence-first transformer refusal and the fast-path switch, as sigma_ensemble."""
    torch.manual_seed(0)
    x = torch.randn(4, 5, 8)
    backbone = _Attention(False).eval()
    names = ez.sigma.convert_norms(backbone, members=3, noise=1.0)
    ens = ez.sigma.SigmaEnsemble(backbone, 3, names).eval()
    with pytest.raises(ValueError, match=r"att is a sequence-first nn.MultiheadAttention .* 12 rows"):
        ens(x)
    again = ez.sigma.SigmaEnsemble(backbone, 3, names)
    assert len(backbone.att._forward_pre_hooks) == 1 and again.backbone is backbone
    good = _Attention(True).eval()
    ref = ez.sigma_ensemble(good, members=3, noise=1.0, seed=0).eval()
    hand = _Attention(True).eval()
    hand.load_state_dict(good.state_dict())
    gen = torch.Generator().manual_seed(0)  # sigma_ensemble's seed=0 draws the same gate noise
    hand_names = ez.sigma.convert_norms(hand, members=3, noise=1.0, generator=gen)
    assert torch.equal(ez.sigma.SigmaEnsemble(hand, 3, hand_names).eval()(x), ref(x))
    seq_first = nn.TransformerEncoderLayer(8, 2, 16, batch_first=False)
    with pytest.raises(ValueError, match=r"sequence-first TransformerEncoderLayer"):
        ez.sigma.SigmaEnsemble(seq_first, 2, ez.sigma.convert_norms(seq_first, members=2))
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    ez.sigma.SigmaEnsemble(layer, 2, ez.sigma.convert_norms(layer, members=2))
    assert layer.activation_relu_or_gelu == 0  # torch's fused path would skip the σNorm gates


def test_pooled_running_statistics_and_dropped_parametrizations_are_named():
    """A tracking InstanceNorm after a σNorm pools running statistics over all members (with or
    without its own affine); a parametrization on a converted norm is not carried over."""
    for affine in (False, True):
        net = nn.Sequential(
            nn.Conv1d(2, 4, 3),
            nn.BatchNorm1d(4),
            nn.InstanceNorm1d(4, affine=affine, track_running_stats=True),
        )
        with pytest.warns(UserWarning, match=r"\['2'\] as shared layers that pool statistics"):
            ez.sigma_ensemble(net, members=2, seed=0)
    stem = nn.Sequential(
        nn.Conv1d(2, 4, 3), nn.InstanceNorm1d(4, affine=True, track_running_stats=True), nn.BatchNorm1d(4)
    )
    with pytest.warns(UserWarning, match=r"left \['1'\] shared: their class\(es\) \['InstanceNorm1d'\]"):
        ez.sigma_ensemble(stem, members=2, seed=0)  # before every σNorm: not pooling, but still not converted

    class Abs(nn.Module):
        def forward(self, w):
            return w.abs()

    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    nn.utils.parametrize.register_parametrization(net[1], "weight", Abs())
    with pytest.warns(UserWarning, match=r"dropped the parametrizations registered on \['1'\]"):
        ens = ez.sigma_ensemble(net, members=2, noise=0.0)
    x = torch.randn(5, 3)
    assert torch.equal(ens(x), net(x)[:, None].expand(5, 2, 4))  # the parametrized value is what is kept
