"""n_networks: several independently seeded networks pooled into one estimator (values, not shapes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer, load_diabetes

from ensemblize.checkpoint import HASH_KEYS, load_checkpoint, save_checkpoint
from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor, TabMClassifier
from ensemblize.tabular.model import LoMETabModel
from ensemblize.tabular.pooled import PooledNetworks, network_seed
from ensemblize.tabular.train import train_model

KW = dict(members=2, n_blocks=1, d_block=8, d_embedding=4, n_bins=8, max_epochs=4, patience=2)


def _cancer():
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X = X.iloc[:, :6]
    return X[:360], y[:360], X[360:], y[360:]


def test_pooled_forward_is_member_concatenation():
    torch.manual_seed(0)
    nets = [
        LoMETabModel(n_num=3, cat_cardinalities=[], n_out=4, regression=False, members=k, n_blocks=1,
                     d_block=8, dropout=0.0, embedding="none", d_embedding=4, layer="lome", rank=2,
                     init_scale=1.0, bins=None)
        for k in (2, 3)
    ]  # fmt: skip
    pool = PooledNetworks(nets).eval()
    x = torch.randn(5, 3)
    out = pool(x)
    assert out.shape == (5, 5, 4)
    torch.testing.assert_close(out[:, :2], nets[0](x), rtol=0, atol=0)
    torch.testing.assert_close(out[:, 2:], nets[1](x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="at least 2 networks, got 1"):
        PooledNetworks(nets[:1])
    with pytest.raises(ValueError, match=r"\(B, F\) inputs, got shape \(5, 2, 3\)"):
        pool(torch.randn(5, 2, 3))


def test_each_network_is_an_explicit_training_with_its_own_seed():
    """Network 0 is the one-network estimator itself; network s is train_model with seed
    ``network_seed(seed_, s)`` on the same preprocessed rows, bins and validation split."""
    Xt, yt, Xv, yv = _cancer()
    pooled = LoMETabClassifier(**KW, n_networks=3, random_state=5).fit(Xt, yt, eval_set=(Xv, yv))
    single = LoMETabClassifier(**KW, n_networks=1, random_state=5).fit(Xt, yt, eval_set=(Xv, yv))
    assert pooled.n_networks_ == 3 and isinstance(pooled.model_, PooledNetworks)
    members = pooled.predict_members(Xv)
    assert members.shape == (len(Xv), 6, 2)
    np.testing.assert_array_equal(members[:, :2], single.predict_members(Xv))

    x_tr = torch.from_numpy(pooled._transform_for_predict(Xt, fitted="model_"))
    x_va = torch.from_numpy(pooled._transform_for_predict(Xv, fitted="model_"))
    t_tr = torch.from_numpy(np.searchsorted(pooled.classes_, yt.to_numpy()))
    t_va = torch.from_numpy(np.searchsorted(pooled.classes_, yv.to_numpy()))
    for s in (1, 2):
        torch.manual_seed(network_seed(5, s))
        net = LoMETabModel(**pooled._model_config(), bins=pooled.bins_)
        res = train_model(net, x_tr, t_tr, x_va, t_va, regression=False, members=2, lr=2e-3, weight_decay=3e-4,
                          batch_size=pooled.batch_size_, max_epochs=4, patience=2, seed=network_seed(5, s), monitor="accuracy",
                          ema_decay=pooled.ema_decay)  # fmt: skip
        assert res.best_epoch == pooled.best_epochs_[s]
        torch.testing.assert_close(pooled.model_.networks[s].eval()(x_va), net.eval()(x_va), rtol=0, atol=0)
    # the ensemble is the mean over all 6 members, and the history says whose epoch each row is
    np.testing.assert_allclose(pooled.predict_proba(Xv), members.mean(axis=1), rtol=0, atol=1e-12)
    assert sorted({r["network"] for r in pooled.history_}) == [0, 1, 2]
    assert pooled.best_epoch_ == pooled.best_epochs_[0] and len(pooled.best_scores_) == 3


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_estimators_with_different_seeds_share_no_network(a, b):
    """With ``seed + s`` random_state 0 and 1 shared two of three networks; the hashed seeds share none
    (and network 0 stays the seed itself, so one network is unchanged)."""
    assume(a != b)
    nets_a = {network_seed(a, s) for s in range(8)}
    nets_b = {network_seed(b, s) for s in range(8)}
    assert network_seed(a, 0) == a and len(nets_a) == 8
    assert not nets_a & nets_b
    assert all(0 <= x < 2**31 for x in nets_a)


def test_consecutive_random_states_share_no_network_seed():
    seeds = [network_seed(r, s) for r in range(50) for s in range(5)]
    assert len(set(seeds)) == len(seeds)
    with pytest.raises(ValueError, match="index"):
        network_seed(0, -1)


def test_regressor_pools_predictions_and_std():
    X, y = load_diabetes(return_X_y=True, as_frame=True)
    est = LoMETabRegressor(**KW, n_networks=2, random_state=0).fit(X[:300], y[:300])
    m = est.predict_members(X[300:])
    assert m.shape == (142, 4)
    np.testing.assert_allclose(est.predict(X[300:]), m.mean(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.predict_uncertainty(X[300:])["std"], m.std(axis=1), rtol=0, atol=1e-9)


def test_save_load_pooled_and_files_from_before_n_networks(tmp_path):
    Xt, yt, Xv, yv = _cancer()
    pooled = LoMETabClassifier(**KW, n_networks=2, random_state=1).fit(Xt, yt)
    back = LoMETabClassifier.load(pooled.save(tmp_path / "pooled"))
    assert back.n_networks_ == 2 and back.best_epochs_ == pooled.best_epochs_
    np.testing.assert_array_equal(back.predict_proba(Xv), pooled.predict_proba(Xv))

    # a file written before the knob existed: no n_networks anywhere -> one network
    one = LoMETabClassifier(**KW, n_networks=1, random_state=1).fit(Xt, yt)
    tensors, meta = load_checkpoint(one.save(tmp_path / "one"))
    old = {k: v for k, v in meta.items() if k not in {*HASH_KEYS, "n_networks", "best_epochs", "best_scores"}}
    old["params"] = {k: v for k, v in old["params"].items() if k != "n_networks"}
    save_checkpoint(tmp_path / "old", tensors, old)
    back = LoMETabClassifier.load(tmp_path / "old")
    assert back.n_networks == 1 and back.n_networks_ == 1 and back.best_epochs_ == [one.best_epoch_]
    np.testing.assert_array_equal(back.predict_proba(Xv), one.predict_proba(Xv))


def test_callbacks_number_epochs_on_and_a_stop_skips_later_networks():
    Xt, yt, Xv, yv = _cancer()
    seen = []

    def watch(epoch, record, model):
        seen.append((epoch, record["network"]))

    est = LoMETabClassifier(**{**KW, "patience": 10}, n_networks=2, random_state=0)
    est.fit(Xt, yt, eval_set=(Xv, yv), callbacks=[watch])
    assert seen == [(e, 0) for e in range(1, 5)] + [(e, 1) for e in range(5, 9)]

    def stop_at_two(epoch, record, model):
        return epoch == 2

    after = []
    est = LoMETabClassifier(**KW, n_networks=3, random_state=0).fit(
        Xt, yt, callbacks=[stop_at_two, lambda e, r, m: after.append(e)]
    )
    assert est.n_networks_ == 1 and not isinstance(est.model_, PooledNetworks)
    assert after == [1, 2]  # a callback after the stopping one still sees the last epoch
    assert est.predict_members(Xv).shape == (len(Xv), 2, 2)


def test_defaults_and_bad_values():
    assert LoMETabClassifier().n_networks == 3 and LoMETabRegressor().n_networks == 5
    assert TabMClassifier().n_networks == 1  # official TabM stays at its own defaults
    Xt, yt, _, _ = _cancer()
    for bad in (0, 1.5, "2"):
        with pytest.raises((ValueError, TypeError), match="n_networks"):
            LoMETabClassifier(**KW, n_networks=bad).fit(Xt, yt)


def test_official_tabm_pools_too_and_round_trips(tmp_path):
    """The knob lives in the shared estimator: official TabM with ``n_networks=2`` pools two TabMs."""
    pytest.importorskip("tabm")
    Xt, yt, Xv, yv = _cancer()
    kw = dict(members=2, d_block=16, d_embedding=4, n_bins=8, max_epochs=3, patience=2, random_state=3)
    one = TabMClassifier(**kw).fit(Xt, yt, eval_set=(Xv, yv))
    two = TabMClassifier(**kw, n_networks=2).fit(Xt, yt, eval_set=(Xv, yv))
    members = two.predict_members(Xv)
    assert members.shape == (len(Xv), 4, 2)
    np.testing.assert_array_equal(members[:, :2], one.predict_members(Xv))
    back = TabMClassifier.load(two.save(tmp_path / "tabm2"))
    np.testing.assert_array_equal(back.predict_proba(Xv), two.predict_proba(Xv))
