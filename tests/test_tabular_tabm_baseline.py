"""Official TabM estimators: the network is tabm.TabM.make itself, with its init and decay rule."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import rtdl_num_embeddings as rtdl
import tabm
import torch

from ensemblize.tabular import TabMClassifier, TabMRegressor
from ensemblize.tabular.tabm_baseline import TabMNetwork, tabm_no_decay

TINY = dict(members=4, d_block=16, d_embedding=4, n_bins=8, max_epochs=3, patience=2, random_state=0)


def _frame(n=160, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "z": rng.exponential(size=n),
            "city": rng.choice(["a", "b", "c"], n),
            "flag": rng.random(n) < 0.3,
        }
    )
    X.loc[::17, "z"] = np.nan
    y = np.where(X["x"] + (X["city"] == "b") > 0.3, "yes", "no")
    return X, y


def test_network_equals_tabm_make_on_the_same_inputs():
    """Same seed, same arguments: TabMNetwork's output is tabm.TabM.make's, bitwise."""
    x_num = torch.randn(64, 3)
    bins = rtdl.compute_bins(x_num, 8)
    codes = torch.randint(0, 4, (64, 2))  # cardinalities 3 and 2 (+1 for "unseen")
    codes[:, 1] = codes[:, 1].clamp(max=2)
    onehot = [
        torch.nn.functional.one_hot(codes[:, 0], 4)[:, :3],
        torch.nn.functional.one_hot(codes[:, 1], 3)[:, :2],
    ]
    flat = torch.cat([x_num, *[o.float() for o in onehot]], dim=1)
    torch.manual_seed(0)
    net = TabMNetwork(n_num=3, cat_cardinalities=[3, 2], n_out=3, regression=False, members=4, bins=bins)
    torch.manual_seed(0)
    ref = tabm.TabM.make(
        n_num_features=3,
        cat_cardinalities=[4, 3],
        d_out=3,
        num_embeddings=rtdl.PiecewiseLinearEmbeddings(bins, 16, activation=False, version="B"),
        k=4,
    )
    net.eval(), ref.eval()
    torch.testing.assert_close(net(flat), ref(x_num, codes), rtol=0, atol=0)
    # TabM's defaults with numeric embeddings: 2 blocks of 512, first adapter drawn from N(0, 1)
    assert len(net.tabm.backbone.blocks) == 2 and net.tabm.backbone.blocks[0][0].weight.shape[0] == 512
    r = net.tabm.backbone.blocks[0][0].r.detach()  # (k, d_in): one N(0, 1) draw per member and feature
    chunks = torch.split(r, [16, 16, 16, 4, 3], dim=1)
    assert all(torch.all(c == c[:, :1]) for c in chunks)
    assert not torch.all(r.abs() == 1)


def test_all_zero_block_is_the_unseen_code():
    net = TabMNetwork(n_num=0, cat_cardinalities=[3, 1], n_out=2, regression=False, members=2, d_block=8)
    x = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    assert net._codes(x).tolist() == [[1, 0], [3, 1]]


def test_training_decays_exactly_the_parameters_official_tabm_decays():
    from ensemblize.training.optim import parameter_groups

    bins = rtdl.compute_bins(torch.randn(50, 2), 8)
    net = TabMNetwork(
        n_num=2, cat_cardinalities=[2], n_out=1, regression=True, members=2, bins=bins, d_block=8
    )
    exempt = tabm_no_decay(net)
    assert exempt == {
        "tabm.num_module.linear0.weight",
        "tabm.num_module.linear0.bias",
        "tabm.backbone.blocks.0.0.bias",
        "tabm.backbone.blocks.1.0.bias",
        "tabm.output.bias",
    }
    groups = parameter_groups(net, weight_decay=3e-4)  # what train_model -> training.fit uses
    by_decay = {g["weight_decay"]: set(g["names"]) for g in groups}
    assert by_decay[0.0] == exempt
    assert by_decay[3e-4] == {n for n, _ in net.named_parameters()} - exempt


@pytest.mark.parametrize("cls", [TabMClassifier, TabMRegressor], ids=["clf", "reg"])
def test_raw_frame_fit_predict_save_load(cls, tmp_path):
    X, y = _frame()
    target = y if cls is TabMClassifier else X["x"].to_numpy() * 3.0
    est = cls(**TINY).fit(X, target)
    assert isinstance(est.model_.tabm, tabm.TabM) and est.model_.tabm.k == 4
    assert est.preprocessor_.indicators_ == ["z"]
    if cls is TabMClassifier:
        p = est.predict_proba(X)
        assert p.dtype == np.float64 and np.abs(p.sum(1) - 1).max() <= 1e-12
        assert est.predict_members(X).shape == (len(X), 4, 2)
        assert set(est.predict_uncertainty(X).columns) == {
            "total_entropy",
            "expected_entropy",
            "mutual_information",
        }
    else:
        assert est.predict_members(X).shape == (len(X), 4)
    loaded = cls.load(est.save(tmp_path / "tabm"), device="cpu")
    assert loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.predict_members(X), est.predict_members(X))


def test_a_two_valued_numeric_column_fits_and_loads_without_rtdls_positional_warning(tmp_path):
    """rtdl warned "The 1-th feature has just two bin edges" (a position among the numeric columns, no
    name) at every fit and load of the TabM baseline; LoMETab filtered it. Both build the embedding alike."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=120), "flag": rng.integers(0, 2, 120).astype(float)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = TabMRegressor(**TINY).fit(X, X["a"] + X["flag"])
        TabMRegressor.load(est.save(tmp_path / "m"))


def test_defaults_are_tabms_and_bad_params_are_named():
    p = TabMClassifier().get_params()
    assert (p["members"], p["d_block"], p["n_blocks"], p["dropout"], p["arch_type"]) == (
        32,
        512,
        None,
        0.1,
        "tabm",
    )
    assert (p["lr"], p["weight_decay"], p["n_bins"], p["d_embedding"], p["impute"]) == (
        2e-3,
        3e-4,
        48,
        16,
        True,
    )
    X, y = _frame()
    with pytest.raises(ValueError, match="arch_type"):
        TabMClassifier(**{**TINY, "arch_type": "mlp"}).fit(X, y)
    with pytest.raises(ValueError, match="embedding"):
        TabMClassifier(**{**TINY, "embedding": "linear"}).fit(X, y)


def test_sklearn_check_estimator_classifier():
    from sklearn.utils import estimator_checks as E

    check = dict(
        members=2, d_block=16, d_embedding=4, n_bins=8, max_epochs=4, patience=4, batch_size=32, lr=2e-2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = E.check_estimator(TabMClassifier(**check, random_state=0), on_fail=None, on_skip=None)
    assert not [(r["check_name"], repr(r["exception"])) for r in results if r["status"] == "failed"]
