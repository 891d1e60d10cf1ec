"""save_ensemble / load_ensemble: a converted model round-trips bitwise; a wrong base model is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import ensemblize as ez
from ensemblize.sigma.convert import DEFAULT_NOISE
from ensemblize.sigma_io import load_ensemble, save_ensemble
from ensemblize.training import fit, predict


def _cnn(width: int = 8, *, layernorm: bool = True) -> nn.Module:
    layers = [
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    if layernorm:
        layers.append(nn.LayerNorm(width))
    return nn.Sequential(*layers, nn.Linear(width, 4))


def _images(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 6, 6, generator=g)
    return x, (x.mean((1, 2, 3)) > 0).long() + 2 * (x[:, 0, 0, 0] > 0).long()


def test_round_trip_is_bitwise_and_json_holds_the_settings(tmp_path: Path):
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(_cnn(), members=3, noise=0.5, seed=1)
    fit(ens, _images(), epochs=2, batch_size=8, progress=False)  # gates, biases, running stats all move
    x, _ = _images(10, seed=2)
    before = predict(ens, x)
    save_ensemble(ens, tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "model.safetensors"]
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["settings"]["members"] == 3 and meta["settings"]["gate_init"] == 0.0
    assert meta["converted"] == ens.converted == ["1", "5"]
    assert meta["entries"][0] == ["backbone.0.weight", [8, 3, 3, 3], "torch.float32"]
    torch.manual_seed(123)  # a base model with other weights: everything comes from the file
    loaded = load_ensemble(tmp_path / "model", _cnn())
    assert not loaded.training and loaded.members == 3
    assert torch.equal(predict(loaded, x), before)
    for (k, a), (k2, b) in zip(ens.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)


def test_wrong_base_model_names_the_first_mismatch(tmp_path: Path):
    torch.manual_seed(0)
    save_ensemble(ez.sigma_ensemble(_cnn(8), members=2), tmp_path / "m")
    with pytest.raises(ValueError, match=r"first mismatch at entry 0: saved 'backbone.0.weight' \(8, 3, 3, 3\) "
                                         r"torch.float32 vs base model 'backbone.0.weight' \(6, 3, 3, 3\)"):  # fmt: skip
        load_ensemble(tmp_path / "m", _cnn(6))
    with pytest.raises(
        ValueError,
        match=r"first mismatch in the converted norm layers: the base model lacks the norm layer '5'",
    ):
        load_ensemble(tmp_path / "m", _cnn(8, layernorm=False))
    with pytest.raises(ValueError, match="torch.float64"):
        load_ensemble(tmp_path / "m", _cnn(8).double())
    with pytest.raises(TypeError, match="expects a SigmaEnsemble"):
        save_ensemble(_cnn(), tmp_path / "plain")


def test_tampered_tensor_file_is_detected(tmp_path: Path):
    save_ensemble(ez.sigma_ensemble(_cnn(), members=2), tmp_path / "m")
    path = tmp_path / "m.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match its metadata"):
        load_ensemble(tmp_path / "m", _cnn())


def test_huggingface_round_trip_is_bitwise(tmp_path: Path):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)  # fmt: skip
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(BertForSequenceClassification(config), members=2, seed=0)
    batch = {"input_ids": torch.randint(0, 30, (5, 7)), "attention_mask": torch.ones(5, 7, dtype=torch.long)}
    before = predict(ens, batch)
    save_ensemble(ens, tmp_path / "bert")
    torch.manual_seed(1)
    loaded = load_ensemble(tmp_path / "bert", BertForSequenceClassification(config))
    assert torch.equal(predict(loaded, batch), before)


def test_json_records_the_real_settings_and_a_layer_selection_round_trips(tmp_path: Path):
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(_cnn(), members=3, noise=0.7, seed=5, gate_init=1.5, layers=["1"])
    assert ens.converted == ["1"] and isinstance(ens.backbone[5], nn.LayerNorm)  # the LayerNorm stays plain
    assert ens.settings == {"members": 3, "noise": 0.7, "seed": 5, "gate_init": 1.5, "layers": ["1"]}
    fit(ens, _images(), epochs=1, batch_size=8, progress=False)
    x, _ = _images(9, seed=3)
    before = predict(ens, x)
    save_ensemble(ens, tmp_path / "sel")
    meta = json.loads((tmp_path / "sel.json").read_text())
    assert meta["settings"] == {"members": 3, "noise": 0.7, "seed": 5, "gate_init": 1.5, "layers": ["1"]}
    assert meta["converted"] == ["1"]
    torch.manual_seed(9)
    loaded = load_ensemble(tmp_path / "sel", _cnn())
    assert loaded.converted == ["1"] and loaded.settings["layers"] == ["1"]
    assert torch.equal(predict(loaded, x), before)


def test_predicate_selection_is_saved_as_the_names_it_chose(tmp_path: Path):
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(
        _cnn(), members=2, noise=0.3, seed=0, layers=lambda n, m: isinstance(m, nn.LayerNorm)
    )
    assert ens.converted == ["5"] and ens.settings["layers"] == ["5"]
    x, _ = _images(6, seed=4)
    before = predict(ens, x)
    save_ensemble(ens, tmp_path / "p")
    assert json.loads((tmp_path / "p.json").read_text())["settings"]["layers"] == ["5"]
    assert torch.equal(predict(load_ensemble(tmp_path / "p", _cnn()), x), before)


def test_default_settings_are_written_not_null(tmp_path: Path):
    ens = ez.sigma_ensemble(_cnn(), members=2)
    save_ensemble(ens, tmp_path / "d")
    settings = json.loads((tmp_path / "d.json").read_text())["settings"]
    assert settings == {"members": 2, "noise": DEFAULT_NOISE, "seed": None, "gate_init": 0.0, "layers": None}
    assert DEFAULT_NOISE == 0.65  # the MNIST-1D-validation default (docs/results/sigma_search_mnist1d.md)


def test_bad_layer_selection_is_named():
    with pytest.raises(
        ValueError, match=r"layers: unknown norm layer name\(s\) \['0'\]; available: \['1', '5'\]"
    ):
        ez.sigma_ensemble(_cnn(), layers=["0"])
    with pytest.raises(TypeError, match="layers must be a list of norm-layer names or a predicate"):
        ez.sigma_ensemble(_cnn(), layers="1")
    with pytest.raises(ValueError, match="matched no norm layer"):
        ez.sigma_ensemble(_cnn(), layers=lambda n, m: False)


def test_settings_with_an_unknown_keyword_are_refused(tmp_path: Path):
    from ensemblize.checkpoint import load_checkpoint, save_checkpoint

    save_ensemble(ez.sigma_ensemble(_cnn(), members=2), tmp_path / "m")
    tensors, meta = load_checkpoint(tmp_path / "m")
    body = {k: v for k, v in meta.items() if k not in ("fingerprint", "sha256", "meta_sha256")}
    save_checkpoint(tmp_path / "m", tensors, {**body, "settings": {**body["settings"], "width": 3}})
    with pytest.raises(
        ValueError, match=r"key 'settings' holds unknown sigma_ensemble keyword\(s\) \['width'\]"
    ):
        load_ensemble(tmp_path / "m", _cnn())
    save_checkpoint(tmp_path / "m", tensors, {k: v for k, v in body.items() if k != "entries"})
    with pytest.raises(ValueError, match="required key 'entries' is missing"):
        load_ensemble(tmp_path / "m", _cnn())


def test_frozen_parameters_stay_frozen_through_save_and_load(tmp_path):
    import torch
    from torch import nn

    import ensemblize as ez

    def base():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))

    ens = ez.sigma_ensemble(base(), members=2, seed=0)
    ens.backbone[2].weight.requires_grad_(False)
    back = ez.load_ensemble(ez.save_ensemble(ens, tmp_path / "e"), base())
    grads = {n: p.requires_grad for n, p in back.named_parameters()}
    assert grads["backbone.2.weight"] is False and sum(not g for g in grads.values()) == 1


class _Relu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn, self.out = nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x))))


class _Tanh(_Relu):  # the same parameters, another function
    def forward(self, x):
        return self.out(torch.tanh(self.bn(self.fc(x))))


def test_a_base_model_of_another_class_is_refused_even_with_the_same_parameters(tmp_path: Path):
    """Parameters alone cannot tell _Relu from _Tanh: loading into _Tanh succeeded, outputs off by 0.58."""
    torch.manual_seed(0)
    ens = ez.sigma_ensemble(_Relu(), members=2, seed=0).eval()
    save_ensemble(ens, tmp_path / "m")
    x = torch.randn(5, 4)
    assert torch.equal(load_ensemble(tmp_path / "m", _Relu())(x), ens(x))
    with pytest.raises(
        ValueError, match=r"saved from a .*_Relu, but base_model is a .*_Tanh.*check_class=False"
    ):
        load_ensemble(tmp_path / "m", _Tanh())
    renamed = load_ensemble(tmp_path / "m", _Tanh(), check_class=False)  # the explicit opt-out
    assert not torch.equal(renamed(x), ens(x))
    # the class's module may differ (a script's __main__ vs an import path): only its name is compared
    meta = json.loads((tmp_path / "m.json").read_text())
    assert meta["backbone_class"].endswith("._Relu")


def test_another_ensemblize_file_is_named_with_how_it_loads(tmp_path: Path):
    from ensemblize.tabular import LoMETabRegressor

    rng = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=rng).numpy()
    est = LoMETabRegressor(members=2, n_blocks=1, d_block=8, max_epochs=1, n_networks=1, n_bins=4).fit(
        X, X[:, 0]
    )
    est.save(tmp_path / "est")
    with pytest.raises(ValueError, match=r"not a saved σN ensemble .*LoMETabRegressor.load\(path\)"):
        load_ensemble(tmp_path / "est", _Relu())
