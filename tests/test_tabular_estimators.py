"""LoMETabClassifier / LoMETabRegressor: scikit-learn conventions, real tables, mixed frames, persistence."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.utils import estimator_checks as E

from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor

SMALL = dict(
    members=4, n_blocks=2, d_block=32, d_embedding=4, n_bins=8, max_epochs=25, patience=6, n_networks=1,
    random_state=0,
)  # fmt: skip
TINY = dict(
    members=2, n_blocks=1, d_block=8, d_embedding=4, n_bins=8, max_epochs=3, patience=2, n_networks=1,
    random_state=0,
)  # fmt: skip  # one network: pooling is tested in test_tabular_pooled.py


# ------------------------------------------------------------------------------------------------
# scikit-learn conventions
# ------------------------------------------------------------------------------------------------
def test_defaults_clone_and_params_round_trip():
    est = LoMETabClassifier()
    p = est.get_params()
    assert p["members"] == 16 and p["rank"] == 2 and p["init_scale"] == 4.0 and p["layer"] == "lome"
    assert p["n_blocks"] == 2 and p["d_block"] == 128 and p["max_epochs"] == 200 and p["patience"] == 24
    assert p["lr"] == 2e-3 and p["weight_decay"] == 3e-4
    assert p["monitor"] == "accuracy" and p["n_networks"] == 3
    # dropout per task, chosen on 3-seed validation: TabM's 0.1 for classification, 0 for regression
    assert p["dropout"] == 0.1 and LoMETabRegressor().get_params()["dropout"] == 0.0
    # the regressor's budget: 200 epochs (sixth round), patience 24 (ninth round), constant lr
    r = LoMETabRegressor().get_params()
    assert (r["max_epochs"], r["patience"], r["lr_schedule"]) == (200, 24, "constant")
    # both epoch caps are official TabM's 200 (80 stopped improving fits: concrete, then hpc)
    assert (
        LoMETabRegressor().get_params()["max_epochs"] == LoMETabClassifier().get_params()["max_epochs"] == 200
    )
    est.set_params(rank=4, layer="batchensemble", init_scale=0.3)
    c = clone(est)
    assert c is not est and c.get_params() == est.get_params()
    assert c.get_params()["rank"] == 4
    with pytest.raises(TypeError):
        LoMETabClassifier(4)  # keyword-only
    # __init__ only stores: an invalid value is accepted until fit, which names it
    bad = LoMETabRegressor(layer="bogus")
    with pytest.raises(ValueError, match="'bogus'"):
        bad.fit(np.random.default_rng(0).normal(size=(20, 2)), np.arange(20.0))


CHECK = dict(
    members=2, n_blocks=1, d_block=16, d_embedding=4, n_bins=8, max_epochs=4, patience=4, batch_size=32,
    lr=2e-2, n_networks=2, random_state=0,
)  # fmt: skip  # small enough for the full suite, trained enough for check_*_train; two pooled networks


@pytest.mark.parametrize(
    ("cls", "extra"),
    [(LoMETabClassifier, {}), (LoMETabRegressor, {}), (LoMETabClassifier, {"calibration": "temperature"})],
    ids=["clf", "reg", "clf-temperature"],
)
def test_sklearn_check_estimator_passes_in_full(cls, extra):
    """scikit-learn's whole check_estimator; only its array-API check is skipped (an env variable).

    With the default ``impute=True`` the estimator declares ``allow_nan``; with ``impute=False`` the
    one check that differs, ``check_estimators_nan_inf``, runs too (it passed the full suite as well).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = E.check_estimator(cls(**CHECK, **extra), on_fail=None, on_skip=None)
        E.check_estimators_nan_inf(cls.__name__, cls(**CHECK, **extra, impute=False))
    bad = [(r["check_name"], repr(r["exception"])) for r in results if r["status"] == "failed"]
    assert not bad
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert skipped <= {"check_array_api_input"}


# ------------------------------------------------------------------------------------------------
# real tables
# ------------------------------------------------------------------------------------------------
def _split(X, y, seed=0):
    from sklearn.model_selection import train_test_split

    return train_test_split(X, y, test_size=0.25, random_state=seed)


@pytest.mark.slow
def test_classifier_on_breast_cancer_beats_majority_and_reports_diversity():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    Xtr, Xte, ytr, yte = _split(X, y)
    # three seeds: one fit's best epoch is picked on 85 validation rows, so a single seed's accuracy is
    # noisy (seed 0: 0.916 with the averaged weights, 0.937 without; seeds 1-3 equal or better)
    fits = [LoMETabClassifier(**{**SMALL, "random_state": rs}).fit(Xtr, ytr) for rs in (0, 1, 2)]
    accs = [f.score(Xte, yte) for f in fits]
    assert np.mean(accs) > 0.93 and min(accs) > max(yte.mean(), 1 - yte.mean()) + 0.25
    est = fits[0]
    pm = est.predict_members(Xte)
    assert pm.shape == (len(Xte), 4, 2)
    np.testing.assert_allclose(pm.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba(Xte), pm.mean(1), rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(est.predict(Xte), est.classes_[pm.mean(1).argmax(1)])
    assert list(est.feature_names_in_) == list(X.columns) and est.n_features_in_ == 30
    h = est.history_
    assert len(h) >= 1 and h[est.best_epoch_]["val_accuracy"] == est.best_score_
    assert all("val_pairwise_kl" in r and "val_disagreement" in r for r in h)


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["lome", "batchensemble", "plain"])
def test_regressor_on_diabetes_beats_the_mean(layer):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = _split(X, y)
    kw = {**SMALL, "layer": layer, "members": 1 if layer == "plain" else 4}
    est = LoMETabRegressor(**kw).fit(Xtr, ytr)
    rmse = np.sqrt(np.mean((est.predict(Xte) - yte) ** 2))
    const = np.sqrt(np.mean((ytr.mean() - yte) ** 2))
    assert rmse < 0.85 * const
    members = est.predict_members(Xte)
    assert members.shape == (len(Xte), kw["members"])
    np.testing.assert_array_equal(est.predict(Xte), members.mean(1))
    assert all(r["val_ambiguity"] >= 0 for r in est.history_)


def test_eval_set_and_per_member_batches_are_deterministic():
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "max_epochs": 4, "per_member_batches": True}
    a = LoMETabClassifier(**kw).fit(Xtr, ytr, eval_set=(Xva, yva))
    b = LoMETabClassifier(**kw).fit(Xtr, ytr, eval_set=(Xva, yva))
    assert [r["train_loss"] for r in a.history_] == [r["train_loss"] for r in b.history_]
    np.testing.assert_array_equal(a.predict_members(Xva), b.predict_members(Xva))
    # the validation metric really is the eval_set's
    last = a.history_[a.best_epoch_]["val_accuracy"]
    assert last == pytest.approx(np.mean(a.predict(Xva) == yva))


def test_plateau_lr_schedule_cuts_by_its_rule_and_keeps_the_best_epoch():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "max_epochs": 40, "patience": 9, "lr": 0.02, "n_networks": 1}
    est = LoMETabRegressor(**kw, lr_schedule="plateau", refit_full=False).fit(Xtr, ytr, eval_set=(Xva, yva))
    # replay the rule from the recorded validation RMSEs: lr x 0.3 after every 9 // 3 = 3 stalled epochs
    lr, best, since, want = 0.02, np.inf, 0, []
    for row in est.history_:
        want.append(lr)
        if row["val_rmse"] < best:
            best, since = row["val_rmse"], 0
        else:
            since += 1
            if since < 9 and since % 3 == 0:
                lr *= 0.3
    got = [row["lr"] for row in est.history_]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert min(got) < 0.02  # this fit did reach a plateau
    assert est.best_epoch_ == int(np.argmin([row["val_rmse"] for row in est.history_]))
    const = LoMETabRegressor(**kw).fit(Xtr, ytr, eval_set=(Xva, yva))
    assert {row["lr"] for row in const.history_} == {0.02}
    with pytest.raises(ValueError, match="lr_schedule.*'cosine'"):
        LoMETabRegressor(**{**TINY, "lr_schedule": "cosine"}).fit(Xtr, ytr)


def test_ema_decay_scores_and_keeps_the_averaged_weights_and_survives_save(tmp_path):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "max_epochs": 12, "patience": 12, "lr": 0.02, "n_networks": 1, "refit_full": False}
    raw = LoMETabRegressor(**kw).fit(Xtr, ytr, eval_set=(Xva, yva))
    ema = LoMETabRegressor(**kw, ema_decay=0.9).fit(Xtr, ytr, eval_set=(Xva, yva))
    # the raw steps are the same run; what is scored (and kept) is the average
    assert [r["train_loss"] for r in ema.history_] == [r["train_loss"] for r in raw.history_]
    assert [r["val_rmse"] for r in ema.history_] != [r["val_rmse"] for r in raw.history_]
    # the fitted network is the best epoch's average: its validation RMSE is the recorded one
    y_std = float(np.std(ytr))
    rmse = float(np.sqrt(np.mean((ema.predict(Xva) - yva) ** 2))) / y_std
    assert rmse == pytest.approx(ema.best_score_, rel=1e-3)
    ema.save(tmp_path / "m")
    again = LoMETabRegressor.load(tmp_path / "m")
    assert again.get_params()["ema_decay"] == 0.9
    np.testing.assert_array_equal(again.predict(Xva), ema.predict(Xva))
    with pytest.raises(ValueError, match="ema_decay.*1.5"):
        LoMETabRegressor(**{**TINY, "ema_decay": 1.5}).fit(Xtr, ytr)
    # the thirteenth round: the classifier averages its weights, the regressor does not
    assert LoMETabClassifier().get_params()["ema_decay"] == 0.999
    assert LoMETabRegressor().get_params()["ema_decay"] is None


def test_refit_full_is_a_same_seed_network_trained_on_all_rows_for_the_chosen_epochs(tmp_path):
    import torch
    from sklearn.datasets import load_diabetes

    from ensemblize.tabular.pooled import network_seed
    from ensemblize.tabular.train import train_model

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "max_epochs": 10, "patience": 3, "lr": 0.02, "n_networks": 2}
    plain = LoMETabRegressor(**kw, refit_full=False).fit(Xtr, ytr, eval_set=(Xva, yva))
    est = LoMETabRegressor(**kw, refit_full=True).fit(Xtr, ytr, eval_set=(Xva, yva))
    # the validation fit is the plain one; each network is then retrained for its chosen epoch count
    assert est.history_ == [
        {**r, "seconds": e["seconds"]} for r, e in zip(plain.history_, est.history_, strict=True)
    ]
    assert est.best_epochs_ == plain.best_epochs_ and plain.refit_epochs_ is None
    assert est.refit_epochs_ == [b + 1 for b in plain.best_epochs_]
    for s, epochs in enumerate(est.refit_epochs_):
        assert [r["epoch"] for r in est.refit_history_ if r["network"] == s] == list(range(epochs))
        assert all("val_rmse" not in r for r in est.refit_history_)
    # by hand: the same seed's network, the training then validation rows (the training rows'
    # preprocessing and target scale), the chosen epochs, no validation
    rows = [est._transform_for_predict(part, fitted="model_") for part in (Xtr, Xva)]
    x_all = torch.from_numpy(np.concatenate(rows))
    t_all = torch.from_numpy(np.concatenate([est._encode_y(ytr, name="y"), est._encode_y(yva, name="y")]))
    for s, epochs in enumerate(est.refit_epochs_):
        seed_s = network_seed(est.seed_, s)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_s)
            net = est._network(est._fitted_model_config_, est.bins_)
            train_model(net, x_all, t_all, None, None, regression=True, members=kw["members"], lr=0.02,
                        weight_decay=3e-4, batch_size=est.batch_size_, max_epochs=epochs, seed=seed_s)  # fmt: skip
        for k, v in net.state_dict().items():
            torch.testing.assert_close(est.model_.networks[s].state_dict()[k], v, rtol=0, atol=0)
    assert not np.allclose(est.predict(Xva), plain.predict(Xva))
    est.save(tmp_path / "m")
    again = LoMETabRegressor.load(tmp_path / "m")
    assert again.refit_epochs_ == est.refit_epochs_ and again.get_params()["refit_full"] is True
    np.testing.assert_array_equal(again.predict(Xva), est.predict(Xva))


def test_refit_full_replays_a_plateau_runs_recorded_learning_rates():
    import torch
    from sklearn.datasets import load_diabetes

    from ensemblize.tabular.pooled import network_seed
    from ensemblize.tabular.train import PLATEAU_GAMMA, train_model

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    # lr 0.05 and patience 9 (a cut after every 3 stalled epochs): the validation fit cuts its rate
    kw = {**TINY, "max_epochs": 30, "patience": 9, "lr": 0.05, "n_networks": 1, "lr_schedule": "plateau"}
    est = LoMETabRegressor(**kw, refit_full=True).fit(Xtr, ytr, eval_set=(Xva, yva))
    (epochs,) = est.refit_epochs_
    recorded = [r["lr"] for r in est.history_][:epochs]
    assert min(recorded) < 0.05, "the validation fit made no plateau cut; the test needs one"
    assert all(np.isclose(rate / 0.05, PLATEAU_GAMMA ** round(np.log(rate / 0.05) / np.log(PLATEAU_GAMMA)))
               for rate in recorded)  # fmt: skip
    # the refit trains each epoch at the validation fit's rate for that epoch
    np.testing.assert_allclose([r["lr"] for r in est.refit_history_], recorded, rtol=1e-12)
    # ... and is bitwise the same-seed network trained by hand with those per-epoch rates
    rows = [est._transform_for_predict(part, fitted="model_") for part in (Xtr, Xva)]
    x_all = torch.from_numpy(np.concatenate(rows))
    t_all = torch.from_numpy(np.concatenate([est._encode_y(ytr, name="y"), est._encode_y(yva, name="y")]))
    seed_s = network_seed(est.seed_, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_s)
        net = est._network(est._fitted_model_config_, est.bins_)
        train_model(net, x_all, t_all, None, None, regression=True, members=kw["members"], lr=0.05,
                    weight_decay=3e-4, batch_size=est.batch_size_, max_epochs=epochs, seed=seed_s,
                    lr_factors=[rate / 0.05 for rate in recorded])  # fmt: skip
    for k, v in net.state_dict().items():
        torch.testing.assert_close(est.model_.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(ValueError, match="lr_factors.*lr_schedule='constant'.*'plateau'"):
        train_model(net, x_all, t_all, None, None, regression=True, members=kw["members"],
                    lr_schedule="plateau", lr_factors=[1.0])  # fmt: skip
    # the fifteenth round: the regressor refits by default, the classifier does not
    assert LoMETabRegressor().get_params()["refit_full"] is True
    assert LoMETabClassifier().get_params()["refit_full"] is False
    with pytest.raises(TypeError, match="refit_full"):
        LoMETabRegressor(**{**TINY, "refit_full": "yes"}).fit(Xtr, ytr)


def test_train_model_without_validation_runs_every_epoch_and_keeps_the_last():
    import torch

    from ensemblize.tabular.train import train_model

    torch.manual_seed(0)
    x, t = torch.randn(40, 3), torch.randn(40)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2))  # (B, K=2) predictions
    res = train_model(net, x, t, None, None, regression=True, members=2, max_epochs=5, patience=1, lr=0.05)
    assert [r["epoch"] for r in res.history] == [0, 1, 2, 3, 4] and res.best_epoch == 4
    assert np.isnan(res.best_score) and set(res.history[0]) == {"epoch", "train_loss", "lr", "seconds"}
    with pytest.raises(ValueError, match="both"):
        train_model(net, x, t, x, None, regression=True, members=2, max_epochs=1)


def test_monitor_picks_the_epoch_of_best_validation_accuracy_or_nll():
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "max_epochs": 8, "patience": 8}
    nll = LoMETabClassifier(**kw, monitor="log_loss").fit(Xtr, ytr, eval_set=(Xva, yva))
    losses = [r["val_loss"] for r in nll.history_]
    assert len(losses) == 8 and nll.best_epoch_ == int(np.argmin(losses))
    acc = LoMETabClassifier(**kw, monitor="accuracy").fit(Xtr, ytr, eval_set=(Xva, yva))
    # TabM's rule: best accuracy, ties broken by the lower NLL
    key = [(-r["val_accuracy"], r["val_loss"]) for r in acc.history_]
    assert acc.best_epoch_ == min(range(len(key)), key=key.__getitem__)
    # the same training run either way: only the restored epoch differs
    assert [r["train_loss"] for r in acc.history_] == [r["train_loss"] for r in nll.history_]
    with pytest.raises(ValueError, match="'bogus'"):
        LoMETabClassifier(**TINY, monitor="bogus").fit(Xtr, ytr)


def test_the_regressor_has_no_monitor_and_loads_files_that_saved_one(tmp_path):
    # the regressor always early-stops on RMSE: a monitor it would ignore is refused, not stored
    assert "monitor" not in LoMETabRegressor().get_params()
    with pytest.raises(TypeError, match="monitor"):
        LoMETabRegressor(monitor="log_loss")
    X = np.random.default_rng(0).normal(size=(120, 3))
    y = X[:, 0] - X[:, 1]
    est = LoMETabRegressor(**{**TINY, "max_epochs": 2}).fit(X, y)
    est._fitted_params_["monitor"] = "accuracy"  # as a file written by an earlier version holds it
    back = LoMETabRegressor.load(est.save(tmp_path / "old"))
    assert "monitor" not in back.get_params()
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


# ------------------------------------------------------------------------------------------------
# mixed data frames
# ------------------------------------------------------------------------------------------------
def _frame(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "age": rng.normal(40, 10, n),
            "income": rng.lognormal(3, 1, n),
            "city": rng.choice(["paris", "rome", "oslo"], n),
            "member": rng.choice([True, False], n),
            "const": np.full(n, 7.0),
            "const_cat": ["same"] * n,
        }
    )
    X["city"] = X["city"].astype("category")
    score = (X["age"] - 40) / 10 + (X["city"] == "rome") * 1.5
    y = np.where(score > 0.5, "yes", "no")
    return X, pd.Series(y, name="label")


def test_dataframe_with_categoricals_constants_string_labels_unseen_category():
    X, y = _frame()
    X_before, y_before = X.copy(deep=True), y.copy(deep=True)
    est = LoMETabClassifier(**{**TINY, "max_epochs": 5}).fit(X, y)
    pd.testing.assert_frame_equal(X, X_before)  # the caller's data is never modified
    pd.testing.assert_series_equal(y, y_before)
    assert list(est.classes_) == ["no", "yes"]
    assert set(est.predict(X)) <= {"no", "yes"}
    assert set(est.preprocessor_.dropped_) == {"const", "const_cat"}
    assert est.preprocessor_.categorical_ == ["city", "member"]
    # unseen category at predict time: an all-zero one-hot block, still a valid prediction
    X_new = X.head(5).copy()
    X_new["city"] = ["tokyo", "paris", "tokyo", "oslo", "lima"]
    p = est.predict_proba(X_new)
    assert p.shape == (5, 2) and np.isfinite(p).all()
    enc = est.preprocessor_.transform(X_new)
    n_num = est.preprocessor_.n_numeric_
    assert enc[0, n_num : n_num + 3].sum() == 0 and enc[1, n_num : n_num + 3].sum() == 1


def test_missing_values_are_imputed_by_default_or_raise_saying_nan():
    X, y = _frame()
    X = X.copy()
    X.loc[:9, "income"] = np.nan  # ten rows: some land in the training split
    X["city"] = X["city"].astype(object)
    X.loc[10:19, "city"] = None
    est = LoMETabClassifier(**TINY).fit(X, y)  # impute=True is the default
    prep = est.preprocessor_
    assert prep.indicators_ == ["income"] and prep.categories_["city"][-1] == "<missing>"
    assert np.isfinite(est.predict_proba(X)).all()
    # the counts are the caller's: all 10 + 10 rows, not those that landed in the training split
    with pytest.raises(
        ValueError, match=r"NaN.*\['income', 'city'\] of X \(counts \{'income': 10, 'city': 10\}"
    ):
        LoMETabClassifier(**TINY, impute=False).fit(X, y)
    clean = X.fillna({"income": 1.0, "city": "rome"})
    with pytest.raises(ValueError, match=r"NaN.*\['city'\] of eval_set X \(counts \{'city': 10\}"):
        LoMETabClassifier(**TINY, impute=False).fit(clean, y, eval_set=(X.fillna({"income": 1.0}), y))
    strict = LoMETabClassifier(**TINY, impute=False).fit(X.fillna({"income": 1.0, "city": "rome"}), y)
    with pytest.raises(ValueError, match="NaN.*income"):
        strict.predict(X)


def test_one_column_one_meaning_at_predict_time():
    """Fit-time bool given as 0/1 or "True"/"False", integer category given as float: Δp == 0."""
    rng = np.random.default_rng(0)
    n = 160
    X = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "flag": rng.random(n) < 0.5,
            "code": pd.Categorical(rng.integers(1, 4, size=n)),
        }
    )
    y = np.where(X["x"] + X["flag"] + (X["code"].astype(int) == 2) > 0.8, "a", "b")
    est = LoMETabClassifier(**TINY).fit(X, y)
    p = est.predict_proba(X)
    for frame in (
        X.assign(flag=X["flag"].astype(int)),
        X.assign(flag=X["flag"].map({True: "True", False: "False"})),
        X.assign(code=X["code"].astype(float)),
        X.assign(code=X["code"].astype(int)),
    ):
        np.testing.assert_array_equal(est.predict_proba(frame), p)


def test_datetime_columns_are_numeric_and_ids_warn_by_name():
    rng = np.random.default_rng(0)
    n = 120
    X = pd.DataFrame(
        {
            "when": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 10**7, n), unit="s"),
            "x": rng.normal(size=n),
            "order_id": [f"o{i}" for i in range(n)],
        }
    )
    with pytest.warns(UserWarning, match="'order_id'"):
        est = LoMETabRegressor(**TINY).fit(X, rng.normal(size=n))
    assert est.preprocessor_.numeric_kinds_["when"] == "datetime" and "when" in est.preprocessor_.numeric_
    assert est.predict(X.assign(when=X["when"].astype(str))).shape == (n,)


def test_probabilities_float64_rows_sum_to_one_and_uncertainty_equals_numpy():
    X, y = _frame()
    clf = LoMETabClassifier(**{**TINY, "members": 3}).fit(X, y)
    p = clf.predict_proba(X)
    assert p.dtype == np.float64 and np.abs(p.sum(axis=1) - 1).max() <= 1e-12
    u = clf.predict_uncertainty(X)
    pm = clf.predict_members(X)
    pbar = pm.mean(axis=1)
    total = -(pbar * np.log(pbar)).sum(axis=1)
    expected = -(pm * np.log(pm)).sum(axis=2).mean(axis=1)
    np.testing.assert_allclose(u["total_entropy"], total, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(u["expected_entropy"], expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        u["mutual_information"], np.maximum(total - expected, 0), rtol=1e-9, atol=1e-15
    )
    assert (u["mutual_information"] >= 0).all() and list(u.index) == list(X.index)
    reg = LoMETabRegressor(**{**TINY, "members": 3}).fit(X, X["age"] * 2.0)
    r = reg.predict_uncertainty(X)
    members = reg.predict_members(X)
    np.testing.assert_allclose(r["std"], np.sqrt(((members - members.mean(1, keepdims=True)) ** 2).mean(1)))
    np.testing.assert_array_equal(r["mean"], reg.predict(X))


def test_bad_frames_and_targets_are_named():
    X, y = _frame()
    multi = X.copy()
    multi.columns = pd.MultiIndex.from_tuples([("a", c) for c in X.columns])
    with pytest.raises(ValueError, match="MultiIndex"):
        LoMETabClassifier(**TINY).fit(multi, y)
    import scipy.sparse

    with pytest.raises(TypeError, match="sparse"):
        LoMETabRegressor(**TINY).fit(scipy.sparse.csr_matrix(np.eye(5)), np.arange(5.0))
    est = LoMETabClassifier(**TINY).fit(X, y)
    with pytest.raises(ValueError, match="0 rows"):
        est.predict(X.head(0))
    from sklearn.exceptions import DataConversionWarning

    with pytest.warns(DataConversionWarning):
        flat = LoMETabRegressor(**TINY).fit(X, X["age"].to_numpy()[:, None])
    np.testing.assert_array_equal(flat.predict(X), LoMETabRegressor(**TINY).fit(X, X["age"]).predict(X))
    with pytest.raises(ValueError, match="target y cannot be standardised"):
        LoMETabRegressor(**TINY).fit(X, np.r_[np.full(119, 1.7e308), 0.0])


def test_bad_input_errors_name_the_value():
    X, y = _frame()
    with pytest.raises(ValueError, match="members must be >= 1, got 0"):
        LoMETabClassifier(**{**TINY, "members": 0}).fit(X, y)
    with pytest.raises(ValueError, match="'cosine'"):
        LoMETabClassifier(**{**TINY, "embedding": "cosine"}).fit(X, y)
    with pytest.raises(TypeError, match="batch_size"):
        LoMETabClassifier(**{**TINY, "batch_size": 1.5}).fit(X, y)
    with pytest.raises(ValueError, match="dropout"):
        LoMETabClassifier(**{**TINY, "dropout": 1.0}).fit(X, y)
    with pytest.raises(ValueError, match="150 entries but X has 120 rows"):
        LoMETabClassifier(**TINY).fit(X, np.zeros(150))
    with pytest.raises(ValueError, match="eval_set y has 2 entries but eval_set X has 3 rows"):
        LoMETabClassifier(**TINY).fit(X, y, eval_set=(X.head(3), y[:2]))
    with pytest.raises(ValueError, match="label 'maybe'"):
        LoMETabClassifier(**TINY).fit(X, y, eval_set=(X.head(3), ["yes", "no", "maybe"]))
    with pytest.raises(ValueError, match="Unknown label type"):
        LoMETabClassifier(**TINY).fit(X, np.linspace(0, 1, 120))
    # a duration's number depends on its unit: the same target in s / us / ns predicted 1000x apart
    durations = pd.Series(pd.to_timedelta(np.arange(120), unit="min"))
    for unit in ("s", "ns"):
        with pytest.raises(
            TypeError, match=r"holds durations \(timedelta64\[" + unit + r"\]\).*total_seconds"
        ):
            LoMETabRegressor(**TINY).fit(X, durations.astype(f"m8[{unit}]"))
    with pytest.raises(TypeError, match="pd.to_numeric"):
        LoMETabRegressor(**TINY).fit(X, np.arange(120).astype(str))
    est = LoMETabRegressor(**TINY).fit(X, np.arange(120.0))
    with pytest.raises(ValueError, match="6 features"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn: "X does not have valid feature names"
        est.predict(X.iloc[:, :5].to_numpy())
    with pytest.raises(ValueError, match="Reshape your data"):
        est.predict(np.zeros(6))


# ------------------------------------------------------------------------------------------------
# persistence
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [LoMETabClassifier, LoMETabRegressor], ids=["clf", "reg"])
def test_save_load_predicts_bitwise_identically(cls, tmp_path):
    X, y = _frame()
    target = y if cls is LoMETabClassifier else X["age"] * 2.0 + (X["city"] == "oslo")
    est = cls(**{**TINY, "layer": "lome", "max_epochs": 4}).fit(X, target)
    stem = est.save(tmp_path / "model")
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "model.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    loaded = cls.load(stem)
    assert loaded.get_params() == est.get_params()
    X_new = X.copy()
    X_new["city"] = X_new["city"].astype(object)
    X_new.loc[0, "city"] = "unseen"
    np.testing.assert_array_equal(loaded.predict_members(X_new), est.predict_members(X_new))
    np.testing.assert_array_equal(loaded.predict(X_new), est.predict(X_new))
    assert loaded.history_ == est.history_ and loaded.n_features_in_ == est.n_features_in_
    if cls is LoMETabClassifier:
        assert loaded.classes_.tolist() == est.classes_.tolist() == ["no", "yes"]
        with pytest.raises(ValueError, match="not a LoMETabRegressor"):
            LoMETabRegressor.load(stem)


def _rewrite(stem, edit):
    """Re-save a checkpoint with its metadata edited (as another machine or an attacker would write it)."""
    from ensemblize.checkpoint import HASH_KEYS, load_checkpoint, save_checkpoint

    tensors, meta = load_checkpoint(stem)
    meta = {k: v for k, v in meta.items() if k not in HASH_KEYS}
    edit(meta)
    save_checkpoint(stem, tensors, meta)


def test_gpu_saved_estimator_loads_on_cpu_and_sizes_are_bounded(tmp_path):
    import torch

    X, y = _frame()
    est = LoMETabClassifier(**TINY).fit(X, y)
    stem = est.save(tmp_path / "m")
    _rewrite(stem, lambda m: m["params"].update(device="cuda:0"))  # as written on a GPU machine
    on_cpu = LoMETabClassifier.load(stem, device="cpu")
    assert on_cpu.device == "cpu" and next(on_cpu.model_.parameters()).device.type == "cpu"
    np.testing.assert_array_equal(on_cpu.predict_proba(X), est.predict_proba(X))
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="not available here"):
            assert LoMETabClassifier.load(stem).device == "cpu"
    _rewrite(stem, lambda m: m["model"].update(d_block=10**9))
    with pytest.raises(ValueError, match="d_block"):
        LoMETabClassifier.load(stem, device="cpu")
    _rewrite(stem, lambda m: m["model"].update(d_block=1024, members=4000, n_blocks=60))
    with pytest.raises(ValueError, match="parameters"):
        LoMETabClassifier.load(stem, device="cpu")


def test_load_rejects_a_tampered_tensor_file(tmp_path):
    X, y = _frame()
    est = LoMETabClassifier(**TINY).fit(X, y)
    stem = est.save(tmp_path / "m")
    from ensemblize.checkpoint import load_tensors, save_tensors

    t = load_tensors(tmp_path / "m.safetensors")
    t.pop(next(k for k in t if k.startswith("model.")))
    save_tensors(tmp_path / "m.safetensors", t)
    with pytest.raises(ValueError, match="content hash|fingerprint|different model"):
        LoMETabClassifier.load(stem)


def test_temperature_calibration_minimises_validation_nll_of_the_member_mean(tmp_path):
    """``calibration="temperature"``: T = argmin_T NLL(mean_k softmax(z_k / T)) on the validation split,
    checked against a brute-force grid; the same training run as ``"none"``; saved and reloaded."""
    import torch
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    Xtr, Xva, ytr, yva = _split(X, y)
    kw = {**TINY, "members": 3, "max_epochs": 6, "patience": 6}
    plain = LoMETabClassifier(**kw, calibration="none").fit(Xtr, ytr, eval_set=(Xva, yva))
    cal = LoMETabClassifier(**kw, calibration="temperature").fit(Xtr, ytr, eval_set=(Xva, yva))
    assert LoMETabClassifier().calibration == "none" and plain.temperature_ == 1.0
    assert [r["train_loss"] for r in cal.history_] == [r["train_loss"] for r in plain.history_]
    logp = np.log(plain.predict_members(Xva))  # log-probabilities: logits up to a per-row shift
    yi = np.searchsorted(plain.classes_, yva)

    def nll(t):
        p = torch.softmax(torch.from_numpy(logp) / t, dim=-1).mean(1).numpy()
        return -np.log(p[np.arange(len(yi)), yi]).mean()

    grid = np.exp(np.linspace(np.log(0.05), np.log(20), 4001))
    best = grid[np.argmin([nll(t) for t in grid])]
    assert cal.temperature_ == pytest.approx(best, rel=2e-3)
    assert nll(cal.temperature_) <= nll(1.0) + 1e-12
    # predictions: every member probability is softmax(z_k / T)
    expected = torch.softmax(torch.from_numpy(np.log(plain.predict_members(X))) / cal.temperature_, dim=-1)
    np.testing.assert_allclose(cal.predict_members(X), expected.numpy(), rtol=1e-9, atol=1e-12)
    p = cal.predict_proba(X)
    assert p.dtype == np.float64 and np.abs(p.sum(axis=1) - 1).max() <= 1e-12
    again = LoMETabClassifier.load(cal.save(tmp_path / "m"))
    assert again.temperature_ == cal.temperature_
    np.testing.assert_array_equal(again.predict_proba(X), p)
    # a saved temperature that is not a finite positive number is refused, naming it
    _rewrite(tmp_path / "m", lambda m: m.update(temperature=-1.0))
    with pytest.raises(ValueError, match="temperature"):
        LoMETabClassifier.load(tmp_path / "m")
    with pytest.raises(ValueError, match="'platt'"):
        LoMETabClassifier(**TINY, calibration="platt").fit(Xtr, ytr)
    assert "calibration" not in LoMETabRegressor().get_params()


@pytest.mark.parametrize("fitted, says", [(0.02, "sharpens every probability"), (9.0, "flattens every")])
def test_an_extreme_fitted_temperature_is_warned_about(monkeypatch, fitted, says):
    """A near-separable validation split drove T to 0.02 (45 % of probabilities exactly 0 or 1), silently."""
    import ensemblize.tabular.estimator_base as base

    monkeypatch.setattr(base, "fit_temperature", lambda z, y: fitted)
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    with pytest.warns(UserWarning, match=rf"fitted T = {fitted:g} on \d+ validation rows.*{says}"):
        est = LoMETabClassifier(**TINY, calibration="temperature").fit(X, y)
    assert est.temperature_ == fitted  # warned, not changed
