"""Image experiments (σN-Ens paper): helpers against hand-computed values, every command end to end."""

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ensemblize.default_job import DEFAULT_TAU
from ensemblize.diversity import sharing
from ensemblize.experiments import discover
from ensemblize.experiments.image import (
    EXPERIMENTS,
    REDUCED_CORRUPTIONS,
    eval_spec,
    frontier_points,
    group_stats,
    layer_sharing,
    markdown_table,
    owners_matrix,
    pareto_front,
)
from ensemblize.experiments.options import OptionError, floats, ints, split_list

# --- helpers ---------------------------------------------------------------------------------------


def _rec(method, seed, spec=None, **metrics):
    return {
        "method": method,
        "dataset": "digits",
        "seed": seed,
        "members": 4,
        "params": 100,
        "train_seconds": 1.0 + seed,
        "metrics": metrics,
        "spec": spec or {},
    }


def test_experiments_are_discovered_as_plain_functions():
    import inspect

    found = discover()
    for name in ("compare", "tau-sweep", "members", "finetune", "lambda"):
        assert found[name] is EXPERIMENTS[name]
        for p in inspect.signature(found[name]).parameters.values():
            assert p.kind is p.KEYWORD_ONLY and "typer" not in type(p.default).__module__


def test_parse_lists_and_bad_values():
    assert floats(split_list("0.05, 0.1,5", option="--taus", cast=float), option="--taus") == [0.05, 0.1, 5.0]
    assert ints(split_list("0,1,2", option="--seeds", cast=int), option="--seeds") == [0, 1, 2]
    for bad in ([], [0.0, 1.0], [-1.0], [math.nan], ["x"], [True]):
        with pytest.raises(OptionError, match="--taus"):
            floats(bad, option="--taus")
    with pytest.raises(OptionError, match="--taus: must be comma-separated numbers"):
        split_list("1,x", option="--taus", cast=float)
    with pytest.raises(OptionError, match="--sizes.*≥ 2"):
        ints([1, 2], option="--sizes", minimum=2)
    with pytest.raises(OptionError, match="--seeds: has repeated"):
        ints([0, 0], option="--seeds")
    with pytest.raises(OptionError, match="--seeds: must be a list"):
        ints("0,1", option="--seeds")
    for typo in ("0,,1", "0,1,", ",0"):  # never silently read as a shorter list
        with pytest.raises(OptionError, match="without empty items"):
            split_list(typo, option="--seeds", cast=int)
    assert split_list("", option="--ood") == []


def test_compare_checks_data_train_size_and_device_before_any_work(tmp_path):
    from ensemblize.cli import app

    def run(*extra):
        out = tmp_path / "never"
        res = CliRunner().invoke(app, ["experiment", "compare", "--seeds", "0", "--epochs", "1", "--methods",
                                       "single", "--eval", "tiny", "--out", str(out), *extra])  # fmt: skip
        assert not out.exists()  # refused before the run folder is made
        return res.exit_code, " ".join(res.output.replace("│", " ").split())

    code, text = run("--train-size", "5")
    assert code == 2 and "'--train-size': must lie in [10, " in text
    code, text = run("--dataset", "cifar10")
    assert code == 2 and "'--data-root'" in text
    code, text = run("--dataset", "cifar10", "--data-root", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a folder" in text
    code, text = run("--data-root", str(tmp_path))  # digits never reads it
    assert code == 2 and "read only for cifar10 / cifar100" in text
    if not torch.cuda.is_available():
        code, text = run("--device", "cuda")
        assert code == 2 and "'--device': 'cuda' is not available" in text


def test_eval_presets():
    full, reduced = eval_spec("full"), eval_spec("reduced")
    assert (
        full.corruption_samples is None and len(full.corruptions) == 15 and full.severities == (1, 2, 3, 4, 5)
    )
    assert reduced.corruptions == REDUCED_CORRUPTIONS and reduced.corruption_samples == 200
    assert reduced.severities == (1, 2, 3, 4, 5) and reduced.ood == full.ood
    with pytest.raises(OptionError, match="--eval: must be one of full, reduced, tiny; got 'bogus'"):
        eval_spec("bogus")


def test_group_stats_matches_a_loop():
    rng = np.random.default_rng(0)
    records = [_rec(f"m{i % 3}", i, ece=float(rng.random())) for i in range(9)]
    records.append(_rec("m0", 99, ece=math.nan))  # skipped, not counted
    got = group_stats(records, lambda r: r["method"], "ece")
    for name in ("m0", "m1", "m2"):
        vals = [
            r["metrics"]["ece"] for r in records if r["method"] == name and math.isfinite(r["metrics"]["ece"])
        ]
        assert got[name] == pytest.approx((np.mean(vals), np.std(vals, ddof=1), len(vals)))
    # record-level fields (train_seconds) are found too; a single value has std 0
    one = group_stats([_rec("a", 3)], lambda r: r["method"], "train_seconds")
    assert one == {"a": (4.0, 0.0, 1)}
    assert group_stats([_rec("a", 0)], lambda r: r["method"], "missing")["a"][2] == 0


def test_frontier_points_average_over_seeds_and_sort_by_parameter():
    records = [
        _rec("s", 0, {"tau": 5.0}, ece=0.1, accuracy=0.9),
        _rec("s", 1, {"tau": 5.0}, ece=0.3, accuracy=0.8),
        _rec("s", 0, {"tau": 0.1}, ece=0.02, accuracy=0.7),
    ]
    pts = frontier_points(records, param="tau", x="ece", y="accuracy")
    assert [p[0] for p in pts] == [0.1, 5.0]
    assert pts[0] == pytest.approx((0.1, 0.02, 0.0, 0.7, 0.0))
    assert pts[1] == pytest.approx((5.0, 0.2, np.std([0.1, 0.3], ddof=1), 0.85, np.std([0.9, 0.8], ddof=1)))


def test_pareto_front_by_hand():
    # (ece, accuracy): minimise ece, maximise accuracy
    pts = [(0.10, 0.90), (0.05, 0.85), (0.12, 0.88), (0.05, 0.80), (0.20, 0.95), (0.10, 0.90)]
    # 2 dominated by 0; 3 dominated by 1; duplicates 0 and 5 do not dominate each other
    assert pareto_front(pts, minimize=(True, False)) == [0, 1, 4, 5]
    # (ece, nll): minimise both
    assert pareto_front([(1, 1), (0, 2), (2, 0), (2, 2)], minimize=(True, True)) == [0, 1, 2]


def _sigma(seed):
    from ensemblize.data.images import load_digits
    from ensemblize.runner import MethodSpec, build_method

    torch.manual_seed(seed)
    splits = load_digits(seed=0)
    model = build_method(MethodSpec("sigma", members=4, noise=3.0, model_kwargs={"width": 4}), splits)
    return model


def test_owners_matrix_equals_diversity_sharing():
    models = {(1.0, 0): _sigma(0), (1.0, 1): _sigma(1), (5.0, 0): _sigma(2)}
    records = [
        _rec("s", seed, {"tau": tau}) | {"sharing": layer_sharing(m)} for (tau, seed), m in models.items()
    ]
    layers, values, mat = owners_matrix(records, param="tau")
    stats = {k: sharing(m) for k, m in models.items()}
    assert layers == [s.name for s in stats[(1.0, 0)]]
    assert values == [1.0, 5.0]
    assert mat.shape == (len(layers), 2)
    expect_1 = [
        (a.mean_owners + b.mean_owners) / 2 for a, b in zip(stats[(1.0, 0)], stats[(1.0, 1)], strict=True)
    ]
    np.testing.assert_allclose(mat[:, 0], expect_1)
    np.testing.assert_allclose(mat[:, 1], [s.mean_owners for s in stats[(5.0, 0)]])
    # with noise 3 the gates differ, so the owner counts are not all equal
    assert len({round(v, 6) for v in mat.ravel()}) > 1
    bad = [records[0], {**records[1], "sharing": records[1]["sharing"][:-1]}]
    with pytest.raises(ValueError, match="different"):
        owners_matrix(bad)


def test_markdown_table_values():
    records = [_rec("a", 0, acc=0.5), _rec("a", 1, acc=0.7), _rec("b", 0, acc=0.1)]
    lines = markdown_table(records, metrics=["acc"], digits=2).splitlines()
    assert lines[0] == "| method | n | acc | params | train_s |"
    assert lines[2] == f"| a | 2 | 0.60 ± {np.std([0.5, 0.7], ddof=1):.2f} | 100 | 1.5 ± 0.7 |"
    assert lines[3] == "| b | 1 | 0.10 ± 0.00 | 100 | 1.0 ± 0.0 |"


# --- commands end to end (tiny budget) -----------------------------------------------------------------

TINY = ["--epochs", "1", "--width", "4", "--seeds", "0", "--eval", "tiny"]


def app_():
    from ensemblize.cli import app

    return app


def _invoke(command, tmp_path, *args):
    from ensemblize.cli import app

    out = tmp_path / command
    result = CliRunner().invoke(app, ["experiment", command, *TINY, "--out", str(out), *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    rows = json.loads((out / "results.json").read_text())
    assert (out / "table.md").is_file() and (out / "run.json").is_file()
    for r in rows:
        for key in ("accuracy", "nll", "ece", "val_nll", "corr_ece_s5", "ood_gaussian_maxprob_auroc"):
            assert math.isfinite(r["metrics"][key]), (r["method"], key)
    return out, rows


@pytest.mark.slow
def test_compare_end_to_end(tmp_path):
    out, rows = _invoke("compare", tmp_path, "--methods", "single,temp_scaled,packed,sigma", "--members", "2")
    assert [r["method"] for r in rows] == ["single", "temp_scaled", "packed", "sigma_ens"]
    assert [r["members"] for r in rows] == [1, 1, 2, 2]
    assert "temperature" in rows[1] and rows[1]["temperature"] > 0
    # temperature scaling changes confidences, never the argmax (same seed → same trained network)
    assert rows[1]["metrics"]["accuracy"] == rows[0]["metrics"]["accuracy"]
    sigma = rows[3]
    sh = sigma["sharing"]
    weighted = sum(d["mean_owners"] * d["features"] for d in sh) / sum(d["features"] for d in sh)
    assert sigma["metrics"]["owners_per_feature"] == pytest.approx(weighted)
    for fig in (
        "reliability.png",
        "risk_coverage.png",
        "shift.png",
        "ood_histograms.png",
        "severity_ece.png",
    ):
        assert (out / fig).stat().st_size > 0
    assert "corr_ece_s5" in (out / "table_severity.md").read_text()
    # the same command again: refused without --resume; with it, every job is read back, none retrained
    again = [
        "experiment",
        "compare",
        *TINY,
        "--out",
        str(out),
        "--methods",
        "single,temp_scaled,packed,sigma",
    ]
    res = CliRunner().invoke(app_(), [*again, "--members", "2"])
    assert res.exit_code == 2 and "--resume" in res.output
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir()}
    before = (out / "results.json").read_text()
    res = CliRunner().invoke(app_(), [*again, "--members", "2", "--resume"])
    assert res.exit_code == 0, res.output
    assert (out / "results.json").read_text() == before
    assert {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir()} == stamps
    res = CliRunner().invoke(app_(), [*again, "--members", "3", "--resume"])
    assert res.exit_code == 2 and "members: stored 2, now 3" in res.output


@pytest.mark.slow
def test_tau_sweep_end_to_end_and_heatmap_matches_saved_models(tmp_path):
    from ensemblize.data.images import load_digits
    from ensemblize.runner import load_method

    out, rows = _invoke("tau-sweep", tmp_path, "--taus", "0.1,0.5,5", "--members", "2", "--lam", "0.5")
    assert [(r["spec"]["tau"], r["spec"]["lam"]) for r in rows] == [(0.1, 0.5), (0.5, 0.5), (5.0, 0.5)]
    assert [r["method"] for r in rows] == ["sigma_tau=0p1", "sigma_tau=0p5", "sigma_tau=5"]
    # one checkpoint per setting (a "." in the name would make them overwrite each other)
    assert len(list((out / "models").glob("*.safetensors"))) == 3
    for fig in ("frontier.png", "diversity.png", "owners_heatmap.png"):
        assert (out / fig).stat().st_size > 0
    layers, values, mat = owners_matrix(rows)
    splits = load_digits(seed=0)
    for j, r in enumerate(rows):
        module, _, _ = load_method(out / "models" / f"{r['method']}_seed0", splits)
        np.testing.assert_allclose(mat[:, j], [s.mean_owners for s in sharing(module)])


@pytest.mark.slow
def test_lambda_members_finetune_end_to_end(tmp_path):
    out, rows = _invoke("lambda", tmp_path, "--lams", "0,2", "--members", "2")  # λ = 0: no regulariser
    assert [r["spec"]["lam"] for r in rows] == [0.0, 2.0] and all(
        r["spec"]["tau"] == DEFAULT_TAU for r in rows
    )
    assert (out / "metrics_vs_lambda.png").stat().st_size > 0

    out, rows = _invoke("members", tmp_path, "--sizes", "2,4")
    assert [(r["spec"]["method"], r["members"]) for r in rows] == [
        ("packed", 2),
        ("packed", 4),
        ("sigma", 2),
        ("sigma", 4),
    ]
    assert (out / "metrics_vs_members.png").stat().st_size > 0

    out, rows = _invoke("finetune", tmp_path, "--members", "2", "--finetune-epochs", "1", "--heldout")
    by = {r["method"]: r for r in rows}
    assert set(by) == {"single", "sigma_finetuned", "sigma_scratch", "deep_ensemble"}
    ft = by["sigma_finetuned"]
    assert ft["train_seconds"] == pytest.approx(ft["pretrain_seconds"] + ft["finetune_seconds"])
    assert ft["pretrain_seconds"] == by["single"]["train_seconds"]
    assert ft["params"] > by["single"]["params"] and ft["members"] == 2
    assert math.isfinite(ft["metrics"]["ood_heldout_maxprob_auroc"])
    assert (out / "finetune.png").stat().st_size > 0
