"""Issue 12 item 5: under ``torchrun`` every CLI command prints and writes on rank 0 only.

``run`` and the experiments are covered elsewhere (``test_cli_torchrun.py``: a real two-process
torchrun; ``test_experiments_jobs.py``: ranks other than 0 write nothing). Here the commands that
work on a finished run folder, ``evaluate`` and ``report``, are run as rank 1 of 2 (the environment
torchrun sets): they must print nothing and leave the folder byte for byte as it was, while rank 0
still evaluates and rewrites the manifest. ``tabular-bench`` (through ``experiment_folder`` like the
other experiments) is checked the same way, since it writes its own files after the jobs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner


def _finished_run(out: Path) -> None:
    """A complete run folder with one (untrained) checkpoint and its record: enough for evaluate."""
    import torch

    from ensemblize.data.images import load_digits
    from ensemblize.report.results import Record, write_results
    from ensemblize.run_folder import RunFolder
    from ensemblize.runner import MethodSpec, build_method, save_method

    torch.manual_seed(0)
    splits = load_digits(seed=0)
    spec = MethodSpec("single", model="resnet_small")
    module = build_method(spec, splits)
    with RunFolder(out, config={"experiment": "run", "seed": 0}, mode="new") as folder:
        save_method(module, spec, splits, seed=0, path=out / "models" / "single_seed0")
        record = Record(method="single", dataset="digits", seed=0, members=1, params=1, train_seconds=0.0,
                        metrics={"accuracy": 0.1})  # fmt: skip
        write_results(out, [record.to_dict()])
        folder.complete()


def _snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    for key, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": 2}.items():
        monkeypatch.setenv(key, str(value))


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    _finished_run(out)
    return out


@pytest.mark.parametrize("command", [["evaluate", "--ood", "uniform", "--threads", "1"], ["report"]])
def test_rank_1_prints_and_writes_nothing(finished_run: Path, monkeypatch, command):
    from ensemblize.cli import app

    before = _snapshot(finished_run)
    _as_rank(monkeypatch, 1)
    res = CliRunner().invoke(app, [command[0], str(finished_run), *command[1:]])
    assert res.exit_code == 0, res.output
    assert res.output == ""
    assert _snapshot(finished_run) == before


def test_rank_0_evaluates_and_keeps_the_manifest_valid(finished_run: Path, monkeypatch):
    from ensemblize.cli import app
    from ensemblize.run_folder import read_manifest

    _as_rank(monkeypatch, 0)
    res = CliRunner().invoke(app, ["evaluate", str(finished_run), "--ood", "uniform", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "single" in res.output and f"{finished_run / 'evaluation.json'}" in res.output
    assert "evaluation.json" in read_manifest(finished_run)["files"]


def test_tabular_bench_on_rank_1_prints_and_writes_nothing(tmp_path: Path, monkeypatch, capsys):
    from ensemblize.experiments.jobs import Execution
    from ensemblize.experiments.tabular import tabular_bench

    _as_rank(monkeypatch, 1)
    out = tmp_path / "bench"
    records = tabular_bench(datasets=["concrete"], methods=["mlp"], seeds=[0], budget="tiny", max_rows=150,
                            out=out, execution=Execution())  # fmt: skip
    assert [r["method"] for r in records] == ["mlp"]  # rank 1 runs the jobs (DDP needs every rank) ...
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # ... quietly
    assert not out.exists()  # and writes nothing


def test_evaluate_with_an_empty_ood_list_evaluates_no_ood_set(finished_run: Path):
    """`evaluate --ood ''` printed a traceback ("no OOD set named") where `run --ood ''` means none."""
    import json

    from ensemblize.cli import app

    res = CliRunner().invoke(app, ["evaluate", str(finished_run), "--ood", "", "--threads", "1"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((finished_run / "evaluation.json").read_text())[0]["metrics"]
    assert not any(k.startswith("ood_") for k in metrics) and "accuracy" in metrics


def test_a_damaged_run_folder_is_a_one_line_error_naming_run_dir(finished_run: Path, tmp_path: Path):
    """evaluate on a damaged checkpoint (listed in the manifest) and report on an unfinished run with
    malformed results.json ended in tracebacks; the messages were already clear."""
    import json

    from ensemblize.cli import app

    meta = finished_run / "models" / "single_seed0.json"
    edited = json.loads(meta.read_text())
    edited["seed"] = 1  # valid JSON, no longer its hash
    meta.write_text(json.dumps(edited))
    manifest = json.loads((finished_run / "manifest.json").read_text())
    manifest["files"]["models/single_seed0.json"] = {
        "bytes": meta.stat().st_size,
        "sha256": hashlib.sha256(meta.read_bytes()).hexdigest(),
    }
    (finished_run / "manifest.json").write_text(json.dumps(manifest))
    res = CliRunner().invoke(app, ["evaluate", str(finished_run), "--ood", "uniform", "--threads", "1"])
    assert res.exit_code == 2 and res.exception is not None and "Traceback" not in res.output
    assert "RUN_DIR" in res.output and "does not match its hash" in res.output

    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"config": {"experiment": "run"}}))
    (unfinished / "results.json").write_text('[{"method": "single", "se')
    res = CliRunner().invoke(app, ["report", str(unfinished)])
    assert res.exit_code == 2 and "RUN_DIR" in res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "is not valid JSON (Unterminated string starting at: line 1, column 23)" in flat


def test_evaluate_repeats_the_runs_own_evaluation_preset(tmp_path: Path):
    """evaluate matched the run's OOD sets but always ran the full corruption suite: a `--eval reduced`
    run's corr_accuracy 0.1500 came back as 0.1093 under the same name."""
    import json

    import torch

    from ensemblize.cli import app
    from ensemblize.data.images import load_digits
    from ensemblize.evaluation import evaluate_classifier
    from ensemblize.experiments.image import eval_spec
    from ensemblize.report.results import Record, write_results
    from ensemblize.run_folder import RunFolder
    from ensemblize.runner import MethodSpec, build_method, save_method

    torch.manual_seed(0)
    splits = load_digits(seed=0)
    spec = MethodSpec("single", model="resnet_small")
    module = build_method(spec, splits).eval()
    ev = evaluate_classifier(module, splits, spec=eval_spec("tiny", "digits"), seed=0)
    out = tmp_path / "run"
    with RunFolder(out, config={"experiment": "members", "evaluation": "tiny", "seed": 0}) as folder:
        save_method(module, spec, splits, seed=0, path=out / "models" / "single_seed0")
        record = Record(method="single", dataset="digits", seed=0, members=1, params=1, train_seconds=0.0,
                        metrics=ev.metrics)  # fmt: skip
        write_results(out, [record.to_dict()])
        folder.complete()
    res = CliRunner().invoke(app, ["evaluate", str(out), "-q", "--threads", "1"])
    assert res.exit_code == 0, res.output
    again = json.loads((out / "evaluation.json").read_text())[0]["metrics"]
    for name in ("corr_accuracy", "corr_ece", "ood_maxprob_auroc", "accuracy"):
        assert again[name] == ev.metrics[name], name
