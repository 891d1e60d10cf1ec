"""`ensemblize experiment selective`: end to end, validation-only thresholds, the two scorings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from ensemblize import metrics, sigma_ensemble
from ensemblize.evaluation.selective import Scores, score_model
from ensemblize.experiments import selective as exp
from ensemblize.experiments.jobs import Execution
from ensemblize.selective import SelectiveNet


def _threshold_reference(val, c):
    """k-th largest validation confidence, k = ceil(c·n) (written out with a sort)."""
    s = sorted(val, reverse=True)
    k = max(1, math.ceil(c * len(s) - 1e-9))
    return s[k - 1]


# ------------------------------------------------------------------------------------- scorings


def _small_selective_net(members=None):
    torch.manual_seed(0)
    feats = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU())
    if members:
        feats = sigma_ensemble(feats, members=members, seed=0)
    return SelectiveNet(feats, 8, 5, hidden=4)


def test_w_sr_is_max_softmax_of_f_and_wo_sr_is_g():
    net = _small_selective_net()
    x = torch.randn(37, 1, 4, 4)
    net.train()
    s = score_model(net, x, kind="selective", batch_size=10)
    assert net.training  # the mode is restored
    net.eval()
    with torch.no_grad():
        out = net(x)
    p = torch.softmax(out.logits, dim=-1)
    np.testing.assert_allclose(s.sr, p.max(dim=-1).values.numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.own, out.selection.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(s.pred, p.argmax(-1).numpy())


def test_w_sr_on_sigma_ensemble_is_max_of_mean_member_probability():
    net = _small_selective_net(members=3)
    x = torch.randn(11, 1, 4, 4)
    s = score_model(net, x, kind="selective")
    net.eval()
    with torch.no_grad():
        out = net(x)
    assert out.logits.shape == (11, 3, 5)
    pbar = torch.stack([torch.softmax(out.logits[:, m], -1) for m in range(3)]).mean(0)
    np.testing.assert_allclose(s.sr, pbar.max(-1).values.numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.own, out.selection.mean(1).numpy(), rtol=1e-6)


def test_gamblers_scores_use_abstain_and_first_k_logits():
    torch.manual_seed(1)
    model = nn.Linear(6, 4)  # K = 3 classes + abstain
    x = torch.randn(20, 6)
    s = score_model(model, x, kind="gamblers")
    with torch.no_grad():
        z = model(x)
    full = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)
    cls = torch.exp(z[:, :3]) / torch.exp(z[:, :3]).sum(-1, keepdim=True)
    np.testing.assert_allclose(s.own, (1 - full[:, 3]).numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.sr, cls.max(-1).values.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(s.pred, cls.argmax(-1).numpy())
    plain = score_model(model, x, kind="plain")
    assert plain.own is None
    np.testing.assert_allclose(plain.sr, full.max(-1).values.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="'nope'"):
        score_model(model, x, kind="nope")


# --------------------------------------------------------------------------- records / thresholds


def test_method_records_fit_thresholds_on_validation_only(monkeypatch):
    import ensemblize.selective.thresholds as ev

    rng = np.random.default_rng(0)
    n_val, n_test = 53, 71
    val = Scores(pred=rng.integers(0, 3, n_val), own=rng.random(n_val), sr=rng.random(n_val))
    test = Scores(pred=rng.integers(0, 3, n_test), own=rng.random(n_test), sr=rng.random(n_test))
    y = rng.integers(0, 3, n_test)
    seen = []
    real = ev.threshold_for_coverage

    def spy(conf, c):
        seen.append(np.asarray(conf, dtype=np.float64).copy())
        return real(conf, c)

    monkeypatch.setattr(ev, "threshold_for_coverage", spy)
    recs, curves = exp.method_records(
        method="m",
        dataset="d",
        seed=0,
        members=1,
        params=1,
        train_seconds=0.0,
        target=0.7,
        test=test,
        val=val,
        y_test=y,
    )
    assert seen and all(s.shape == (n_val,) for s in seen)
    assert all(np.array_equal(s, val.own) or np.array_equal(s, val.sr) for s in seen)
    errors = (test.pred != y).astype(float)
    by = {r.extra["scoring"]: r for r in recs}
    assert set(by) == {"w/o SR", "w/ SR"} and set(curves) == set(by)
    for scoring, t_conf, v_conf in (("w/o SR", test.own, val.own), ("w/ SR", test.sr, val.sr)):
        m = by[scoring].metrics
        t = _threshold_reference(list(v_conf), 0.7)
        accepted = [i for i in range(n_test) if t_conf[i] >= t]
        assert m["target_coverage"] == 0.7
        assert m["achieved_coverage"] == pytest.approx(len(accepted) / n_test)
        assert m["risk_at_target"] == pytest.approx(sum(errors[i] for i in accepted) / len(accepted))
        assert m["aurc"] == pytest.approx(metrics.aurc(t_conf, errors))
        assert m["accuracy"] == pytest.approx(1 - errors.mean())
        for c in exp.TABLE_COVERAGES:
            assert m[f"risk@{c:g}"] == pytest.approx(metrics.risk_at_coverage(t_conf, errors, c))
    # A plain classifier has only the SR scoring.
    recs, _ = exp.method_records(
        method="SR",
        dataset="d",
        seed=0,
        members=1,
        params=1,
        train_seconds=0.0,
        target=None,
        test=Scores(test.pred, None, test.sr),
        val=Scores(val.pred, None, val.sr),
        y_test=y,
    )
    assert [r.extra["scoring"] for r in recs] == ["w/ SR"] and "achieved_coverage" not in recs[0].metrics


# ------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_cli_end_to_end_quick(tmp_path, monkeypatch):
    import ensemblize.selective.thresholds as ev
    from ensemblize.cli import app
    from ensemblize.data.images import load_digits

    splits = load_digits(seed=0)
    n_val, n_test = len(splits.y_val), len(splits.y_test)
    assert n_val != n_test
    lengths = []
    real = ev.threshold_for_coverage
    monkeypatch.setattr(
        ev, "threshold_for_coverage", lambda conf, c: (lengths.append(len(conf)), real(conf, c))[1]
    )
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        [
            "experiment",
            "selective",
            "--quick",
            "--max-train",
            "96",
            "--seeds",
            "0",
            "--targets",
            "0.7",
            "--gammas",
            "1,2",
            "--rewards",
            "2.2,3",
            "--members",
            "2",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert set(lengths) == {n_val}  # every threshold was fitted on validation confidences
    rows = json.loads((out / "results.json").read_text())
    got = {(r["method"], r["target"], r["scoring"]) for r in rows}
    trained = ["SelectiveNet", "SYNC-SMP(γ=1)", "SYNC-SMP(γ=2)", "SYNC-entropy", "σN-SYNC-SMP(γ=2)"]
    want = {("SR", None, "w/ SR"), ("DeepGamblers", None, "w/o SR"), ("DeepGamblers", None, "w/ SR")}
    want |= {(m, 0.7, s) for m in trained for s in ("w/o SR", "w/ SR")}
    assert got == want and len(rows) == len(want)
    for r in rows:
        assert r["seed"] == 0 and r["dataset"] == "digits"
        assert {f"risk@{c:g}" for c in exp.TABLE_COVERAGES} <= set(r["metrics"])
        assert {"aurc", "eaurc", "augrc"} <= set(r["metrics"])
        if r["target"] is not None:
            assert r["metrics"]["target_coverage"] == 0.7 and 0 <= r["metrics"]["achieved_coverage"] <= 1
    assert {r["members"] for r in rows if r["method"].startswith("σN")} == {2}
    assert next(r for r in rows if r["method"] == "DeepGamblers")["reward"] in (2.2, 3.0)
    md = (out / "results.md").read_text()
    assert "| SYNC-SMP(γ=2) | 0.7 | w/o SR |" in md and "c = 0.7" in md
    assert (out / "risk_coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_inputs_name_the_problem(tmp_path):
    quiet = Execution(quiet=True)
    with pytest.raises(ValueError, match="--data-root"):
        exp.selective(out=tmp_path / "a", dataset="cifar100", seeds=[0], execution=quiet)
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        exp.selective(out=tmp_path / "b", dataset="cifar100", data_root=tmp_path, seeds=[0], execution=quiet)
    with pytest.raises(ValueError, match="'mnist'"):
        exp.selective(out=tmp_path / "c", dataset="mnist", seeds=[0], execution=quiet)
    with pytest.raises(ValueError, match="rewards.*11"):
        exp.selective(out=tmp_path / "d", rewards=[11.0], seeds=[0], epochs=1, max_train=8, execution=quiet)
    with pytest.raises(ValueError, match="targets.*1.5"):
        exp.selective(out=tmp_path / "e", targets=[1.5], seeds=[0], execution=quiet)
    assert not any((tmp_path / n).exists() for n in "acde")  # refused before any work: no folder


def test_train_size_is_a_stratified_subset_and_excludes_max_train(tmp_path):
    import numpy as np

    from ensemblize.experiments import selective as sel

    full = sel._load("digits", None, 0)
    sub = sel._load("digits", None, 0, 50)
    counts = np.bincount(sub.y_train.numpy(), minlength=10)
    assert len(sub.y_train) == 50 and counts.max() - counts.min() <= 1  # stratified
    assert torch.equal(sub.x_test, full.x_test) and torch.equal(sub.y_val, full.y_val)  # val/test unchanged
    out = sel.selective_job(kind="SR", target=None, gamma=None, seed=0, dataset="digits", data_root=None,
                            max_train=None, train_size=50, model="resnet_small", epochs=1, lr=0.05,
                            batch_size=32, mu=1.0, members=2, rewards=[2.2])  # fmt: skip
    assert {r.to_dict()["training_samples"] for r in out["records"]} == {50}
    with pytest.raises(ValueError, match="--train-size"):
        exp.selective(
            out=tmp_path / "x", train_size=50, max_train=60, seeds=[0], execution=Execution(quiet=True)
        )
    assert not (tmp_path / "x").exists()


def test_quick_refuses_an_explicit_epoch_count(tmp_path):
    from ensemblize.cli import app

    res = CliRunner().invoke(
        app, ["experiment", "selective", "--quick", "--epochs", "3", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "'--quick'" in res.output and not (tmp_path / "o").exists()


def test_selective_jobs_read_an_absolute_data_root_while_the_settings_keep_its_spelling(
    tmp_path, monkeypatch
):
    """A relative --data-root was resolved in whatever directory a job ran in (a resumed run, a Dask
    worker); the run's settings keep the user's spelling so an earlier run folder still resumes."""
    import inspect

    from ensemblize.experiments import selective as S

    monkeypatch.chdir(tmp_path)
    args = {k: p.default for k, p in inspect.signature(S.selective).parameters.items()}
    args.update(dataset="cifar100", data_root="cifar", seeds=[0], targets=[0.7], gammas=[2.0], rewards=[5.0])
    settings = S._check(args)
    assert settings["data_root"] == "cifar"
    jobs = S._jobs(settings)
    assert {j.params["data_root"] for j in jobs} == {str(tmp_path.resolve() / "cifar")}


def test_a_target_off_the_coverage_grid_shows_its_numbers_not_a_dash():
    """A model trained for c = 0.75 records its result at 0.75 (off the table grid) as achieved_coverage /
    risk_at_target; the deployment table used to look only for thr_coverage@0.75 and print "—"."""
    import math

    from ensemblize.experiments.selective import _at_target

    own = {"metrics": {"target_coverage": 0.75, "achieved_coverage": 0.755, "risk_at_target": 0.258,
                       "thr_coverage@0.5": 0.51}}  # fmt: skip
    assert _at_target(own, 0.75, "thr_coverage", "achieved_coverage") == 0.755
    assert _at_target(own, 0.75, "thr_risk", "risk_at_target") == 0.258
    assert _at_target(own, 0.5, "thr_coverage", "achieved_coverage") == 0.51  # the grid's own entry
    plain = {"metrics": {"thr_coverage@0.5": 0.5}}  # softmax response: trained for no target
    assert math.isnan(_at_target(plain, 0.75, "thr_coverage", "achieved_coverage"))
