"""Jobs and executors: stable keys, fixed merge order, resume, run-folder rules, progress."""

from __future__ import annotations

import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ensemblize.experiments.jobs import (
    Job,
    OptionError,
    execute,
    merged_records,
    prepare_run_folder,
    run_experiment,
    run_jobs,
    run_lock,
)


def toy_job(*, name: str, seed: int, delay: float = 0.0, marker: str | None = None) -> list[dict]:
    """Records depend only on the spec; ``delay`` scrambles completion order; ``marker`` counts calls."""
    time.sleep(delay)
    if marker is not None:
        with open(marker, "a") as fh:
            fh.write(f"{name}{seed}\n")
    return [
        {
            "method": name,
            "dataset": "toy",
            "seed": seed,
            "members": 1,
            "params": 10 * seed,
            "train_seconds": delay,
            "metrics": {"accuracy": 1.0 / (seed + 2), "nll": math.nan},
        }
    ]


def toy_extras_job(*, n: int) -> dict:
    return {"records": toy_job(name="x", seed=n), "extras": {"curve": list(range(n))}}


def failing_job(*, n: int) -> list[dict]:
    raise ArithmeticError(f"no {n}")


def _jobs(delays=(0.3, 0.0, 0.15, 0.0), marker=None) -> list[Job]:
    return [
        Job.make("toy", toy_job, f"m{i} seed={i}", name=f"m{i}", seed=i, delay=d, marker=marker)
        for i, d in enumerate(delays)
    ]


def test_job_key_is_stable_and_depends_on_the_spec_only():
    a = Job.make("toy", toy_job, "a", name="m", seed=1, delay=(0.1,))
    b = Job.make("toy", f"{__name__}:toy_job", "a", seed=1, delay=[0.1], name="m")
    assert a == b and a.key == b.key and hash(a) == hash(b)
    assert a.key.startswith("a-") and len(a.key) == 2 + 12
    assert Job.make("toy", toy_job, "a", name="m", seed=2).key != a.key
    assert a.params == {"name": "m", "seed": 1, "delay": [0.1]}
    assert json.loads(json.dumps(a.to_dict()))["fn"] == f"{__name__}:toy_job"


def test_job_rejects_unpicklable_specs():
    with pytest.raises(TypeError, match="seed"):
        Job.make("toy", toy_job, "a", seed=object())
    with pytest.raises(TypeError, match="module-level"):
        Job.make("toy", lambda: [], "a")


def test_serial_run_returns_records_in_job_order_as_json():
    results = run_jobs(_jobs((0, 0, 0)), quiet=True)
    recs = merged_records(results)
    assert [r["seed"] for r in recs] == [0, 1, 2]
    assert math.isnan(recs[0]["metrics"]["nll"])
    res = execute(Job.make("toy", toy_extras_job, "e", n=3))
    assert res.extras == {"curve": [0, 1, 2]} and res.records[0]["seed"] == 3


def _strip_timing(records) -> str:
    """Records without timing, as JSON text (NaN compares equal to itself there)."""
    return json.dumps([{k: v for k, v in r.items() if k != "train_seconds"} for r in records])


def test_process_pool_and_any_executor_merge_in_job_order():
    jobs = _jobs()
    serial = merged_records(run_jobs(jobs, quiet=True))
    pooled = merged_records(run_jobs(jobs, workers=2, quiet=True))
    with ThreadPoolExecutor(4) as pool:
        threaded = merged_records(run_jobs(jobs, executor=pool, quiet=True))
    assert _strip_timing(pooled) == _strip_timing(serial) == _strip_timing(threaded)
    assert [r["seed"] for r in threaded] == [0, 1, 2, 3]


def test_rerun_into_the_same_folder_skips_finished_jobs(tmp_path: Path):
    marker = tmp_path / "calls.txt"
    out = tmp_path / "run"
    first = run_jobs(_jobs((0, 0), marker=str(marker)), out=out, quiet=True)
    assert marker.read_text().split() == ["m00", "m11"]
    (out / "jobs" / f"{first[1].job.key}.json").unlink()  # as if killed before job 1 finished
    again = run_jobs(_jobs((0, 0), marker=str(marker)), out=out, quiet=True)
    assert marker.read_text().split() == ["m00", "m11", "m11"]
    assert [r.resumed for r in again] == [True, False]
    assert json.dumps(merged_records(again)) == json.dumps(merged_records(first))
    assert not list((out / "jobs").glob(".*.tmp"))


def test_a_failing_job_names_itself_and_keeps_finished_ones(tmp_path: Path):
    jobs = [*_jobs((0,)), Job.make("toy", failing_job, "broken n=7", n=7)]
    with pytest.raises(RuntimeError, match="broken n=7") as err:
        with ThreadPoolExecutor(1) as pool:
            run_jobs(jobs, out=tmp_path, executor=pool, quiet=True)
    assert isinstance(err.value.__cause__, ArithmeticError)
    assert (tmp_path / "jobs" / f"{jobs[0].key}.json").is_file()


def test_run_folder_rules(tmp_path: Path):
    out = tmp_path / "run"
    results = run_experiment("toy", _jobs((0, 0)), out=out, settings={"epochs": 1}, quiet=True)
    assert json.loads((out / "results.json").read_text())[1]["seed"] == merged_records(results)[1]["seed"]
    with pytest.raises(OptionError, match="--resume to continue") as err:
        prepare_run_folder(out, experiment="toy", settings={"epochs": 1})
    assert err.value.option == "--out"
    with pytest.raises(OptionError, match=r"epochs: 1 -> 2"):
        prepare_run_folder(out, experiment="toy", settings={"epochs": 2}, resume=True)
    with pytest.raises(OptionError, match="'toy' run, not 'other'"):
        prepare_run_folder(out, experiment="other", settings={"epochs": 1}, resume=True)
    again = run_experiment("toy", _jobs((0, 0)), out=out, settings={"epochs": 1}, resume=True, quiet=True)
    assert all(r.resumed for r in again)
    prepare_run_folder(out, experiment="toy", settings={"epochs": 2}, overwrite=True)
    assert not (out / "jobs").exists() and not (out / "results.json").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(OptionError, match="not a folder"):
        prepare_run_folder(tmp_path / "file", experiment="toy", settings={})


def test_lock_refuses_a_second_writer(tmp_path: Path):
    with run_lock(tmp_path):
        with pytest.raises(OptionError, match="another process"):
            with run_lock(tmp_path):
                pass
    (tmp_path / ".lock").write_text("nohost 1")  # another host's lock is respected
    with pytest.raises(OptionError, match="another process"):
        with run_lock(tmp_path):
            pass


def test_progress_lines_without_a_terminal_and_quiet(capsys):
    run_jobs(_jobs((0, 0)), quiet=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0].startswith("toy [1/2] m0 seed=0: accuracy 0.5000, nll nan, train 0.0 s (")
    assert "ETA" in err[1] and err[1].startswith("toy [2/2]")
    run_jobs(_jobs((0, 0)), quiet=True)
    assert capsys.readouterr().err == ""


def test_scheduler_without_distributed_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"ensemblize\[dask\]"):
        run_jobs(_jobs((0,)), scheduler="tcp://127.0.0.1:1", quiet=True)
    with pytest.raises(OptionError, match="not both"):
        run_jobs(_jobs((0,)), scheduler="tcp://x:1", workers=2, quiet=True)
