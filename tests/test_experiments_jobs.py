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
    Execution,
    Job,
    OptionError,
    execute,
    experiment_folder,
    merged_records,
    run_jobs,
)
from ensemblize.run_folder import RunFolderError, read_manifest


def toy_job(
    *, name: str, seed: int, delay: float = 0.0, marker: str | None = None, out: str | None = None
) -> list[dict]:
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


def failing_job(*, n: int, delay: float = 0.0) -> list[dict]:
    time.sleep(delay)
    raise ArithmeticError(f"no {n}")


def dying_job(*, n: int) -> list[dict]:
    import os

    os._exit(3)  # the worker process dies without a Python exception


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
    with pytest.raises(ArithmeticError, match="no 7") as err:
        with ThreadPoolExecutor(1) as pool:
            run_jobs(jobs, out=tmp_path, executor=pool, quiet=True)
    assert "in job 'broken n=7'" in err.value.__notes__[0]
    assert (tmp_path / "jobs" / f"{jobs[0].key}.json").is_file()


def _experiment(out: Path, execution: Execution, settings=None):
    with experiment_folder(
        out, experiment="toy", settings=settings or {"epochs": 1}, execution=execution
    ) as f:
        return f.run(_jobs((0, 0)))


def test_experiment_folder_rules(tmp_path: Path):
    out = tmp_path / "run"
    results = _experiment(out, Execution(quiet=True))
    assert json.loads((out / "results.json").read_text())[1]["seed"] == merged_records(results)[1]["seed"]
    manifest = read_manifest(out)
    assert manifest["config"] == {"experiment": "toy", "epochs": 1}
    assert {"results.json", f"jobs/{results[0].job.key}.json"} <= set(manifest["files"])
    with pytest.raises(RunFolderError, match="--resume"):
        _experiment(out, Execution(quiet=True))
    with pytest.raises(RunFolderError, match=r"epochs: stored 1, now 2"):
        _experiment(out, Execution(quiet=True, resume=True), settings={"epochs": 2})
    again = _experiment(out, Execution(quiet=True, resume=True))
    assert all(r.resumed for r in again)
    with pytest.raises(OptionError, match="not both"):
        _experiment(out, Execution(quiet=True, resume=True, overwrite=True))
    fresh = _experiment(out, Execution(quiet=True, overwrite=True))
    assert not any(r.resumed for r in fresh)


def test_an_interrupted_experiment_has_no_manifest_and_resumes(tmp_path: Path):
    out = tmp_path / "run"
    with pytest.raises(ArithmeticError, match="no 1"):
        with experiment_folder(out, experiment="toy", settings={}, execution=Execution(quiet=True)) as f:
            f.run([*_jobs((0,)), Job.make("toy", failing_job, "broken n=1", n=1)])
    with pytest.raises(RunFolderError, match="did not finish"):
        read_manifest(out)
    with experiment_folder(
        out, experiment="toy", settings={}, execution=Execution(quiet=True, resume=True)
    ) as f:
        results = f.run(_jobs((0,)))
    assert results[0].resumed and read_manifest(out)["complete"] is True


def test_progress_lines_without_a_terminal_and_quiet(capsys):
    run_jobs(_jobs((0, 0)), quiet=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0].startswith("toy [1/2 jobs] m0 seed=0: accuracy 0.5000, nll nan, train 0.0 s (")
    assert "elapsed, ETA" in err[1] and err[1].startswith("toy [2/2 jobs]") and err[1].endswith("ETA 0:00")
    run_jobs(_jobs((0, 0)), quiet=True)
    assert capsys.readouterr().err == ""


def test_resumed_jobs_are_shown_but_give_no_eta(tmp_path: Path, capsys):
    out = tmp_path / "run"
    run_jobs(_jobs((0,)), out=out, quiet=True)
    run_jobs(_jobs((0, 0)), out=out, quiet=False)
    err = capsys.readouterr().err.strip().splitlines()
    # the resumed job took no time here: no rate to extrapolate from yet, so the ETA is unknown
    assert (
        err[0].startswith("toy [1/2 jobs] m0 seed=0: ") and "(resumed)" in err[0] and err[0].endswith("ETA ?")
    )
    assert err[1].startswith("toy [2/2 jobs] m1 seed=1: ") and err[1].endswith("ETA 0:00")


@pytest.mark.parametrize("workers", [-1, 1.5, True, "2"])
def test_bad_workers_is_an_option_error_naming_the_value(workers):
    with pytest.raises(OptionError, match=rf"--workers: workers must be .*{workers!r}"):
        run_jobs(_jobs((0,)), workers=workers, quiet=True)


def test_scheduler_without_distributed_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"ensemblize\[dask\]"):
        run_jobs(_jobs((0,)), scheduler="tcp://127.0.0.1:1", quiet=True)
    with pytest.raises(OptionError, match="not both"):
        run_jobs(_jobs((0,)), scheduler="tcp://x:1", workers=2, quiet=True)


def test_ranks_other_than_0_run_the_jobs_quietly_and_write_nothing(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "run"
    with experiment_folder(out, experiment="toy", settings={}, execution=Execution()) as f:
        results = f.run(_jobs((0, 0)))
    assert not f.is_main and f.execution.quiet
    assert [r["seed"] for r in merged_records(results)] == [0, 1]
    assert not out.exists() and capsys.readouterr().err == ""
    with pytest.raises(OptionError, match="not available under torchrun"):
        with experiment_folder(out, experiment="toy", settings={}, execution=Execution(workers=2)):
            pass


def test_an_unreachable_scheduler_is_named_before_the_run_folder_is_made(tmp_path):
    import socket

    from typer.testing import CliRunner

    from ensemblize.cli import app

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "never"
    res = CliRunner().invoke(app, ["experiment", "compare", "--seeds", "0", "--epochs", "1", "--methods", "single",
                                   "--eval", "tiny", "--out", str(out), "--scheduler", f"tcp://127.0.0.1:{port}"])  # fmt: skip
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "cannot reach a Dask scheduler" in flat and not out.exists()


def test_a_service_that_is_not_a_dask_scheduler_is_named_before_the_run_folder_is_made(tmp_path):
    """Another service on the port (the dashboard's 8787, a web server) hung the run without a word,
    after its run folder was made."""
    import socket
    import threading
    import time

    from ensemblize.experiments.jobs import OptionError, check_scheduler

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer_like_a_web_server():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer_like_a_web_server, daemon=True).start()
    try:
        start = time.perf_counter()
        with pytest.raises(OptionError, match=r"accepts connections but is not a Dask scheduler"):
            check_scheduler(f"tcp://127.0.0.1:{port}", timeout=2.0)
        assert time.perf_counter() - start < 20
    finally:
        server.close()


def threads_job(*, n: int) -> list[dict]:
    import torch

    return [{"method": "t", "dataset": "toy", "seed": n, "members": 1, "params": 0, "train_seconds": 0.0,
             "metrics": {"threads": float(torch.get_num_threads())}}]  # fmt: skip


def test_pool_jobs_run_with_the_threads_asked_for():
    """``--threads`` used to be ignored with ``--workers`` (every pool job ran on one thread)."""
    jobs = [Job.make("toy", threads_job, f"n={n}", n=n) for n in range(2)]
    for threads in (1, 2):
        recs = merged_records(run_jobs(jobs, workers=2, quiet=True, threads=threads))
        assert [r["metrics"]["threads"] for r in recs] == [float(threads)] * 2


def test_a_torchrun_run_cannot_be_resumed_in_one_process(tmp_path: Path, monkeypatch):
    """Resuming a 2-process run in one process mixed world sizes in one results table, silently."""
    out = tmp_path / "run"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ArithmeticError):
        with experiment_folder(out, experiment="toy", settings={}, execution=Execution(quiet=True)) as f:
            f.run([*_jobs((0,)), Job.make("toy", failing_job, "broken n=1", n=1)])
    assert json.loads((out / "run.json").read_text())["config"]["world_size"] == 2
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(RunFolderError, match="world_size"):
        with experiment_folder(
            out, experiment="toy", settings={}, execution=Execution(quiet=True, resume=True)
        ):
            pass


def test_the_job_key_does_not_depend_on_how_the_output_folder_is_spelled(tmp_path: Path, monkeypatch):
    """--resume with ./run vs /abs/run retrained every job (the key hashed the out string)."""
    monkeypatch.chdir(tmp_path)
    a = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=0, out="run")
    b = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=0, out=str(tmp_path / "run"))
    c = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=1, out="run")
    assert a.key == b.key != c.key
    marker = tmp_path / "calls.txt"
    first = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=0, marker=str(marker), out="run")
    again = Job.make(
        "toy", toy_job, "m0 seed=0", name="m0", seed=0, marker=str(marker), out=str(tmp_path / "run")
    )
    run_jobs([first], out=tmp_path / "run", quiet=True)
    assert run_jobs([again], out=tmp_path / "run", quiet=True)[0].resumed  # found, not run again
    assert marker.read_text() == "m00\n"


def test_the_job_key_ignores_where_the_data_is_read_from(tmp_path: Path):
    """``data_root`` (top level, or inside the ``data`` dict of image jobs) is a location, like ``out``."""
    a = Job.make("toy", toy_job, "m0", name="m0", seed=0, data_root="cifar", data={"data_root": "c", "n": 1})
    b = Job.make(
        "toy", toy_job, "m0", name="m0", seed=0, data_root="/x/cifar", data={"data_root": "/c", "n": 1}
    )
    c = Job.make("toy", toy_job, "m0", name="m0", seed=0, data_root="cifar", data={"data_root": "c", "n": 2})
    assert a.key == b.key != c.key


def test_a_run_folder_written_before_the_key_change_still_resumes(tmp_path: Path):
    """Keys used to hash ``out`` too: an older folder's job files sit under other names."""
    out, marker = tmp_path / "run", tmp_path / "calls.txt"
    job = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=0, marker=str(marker), out="old/spelling")
    run_jobs([job], out=out, quiet=True)
    (stored,) = (out / "jobs").glob("*.json")
    stored.rename(stored.with_name(stored.name.rsplit("-", 1)[0] + "-0123456789ab.json"))  # an older key
    now = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=0, marker=str(marker), out=str(out))
    assert run_jobs([now], out=out, quiet=True)[0].resumed and marker.read_text() == "m00\n"
    other = Job.make("toy", toy_job, "m0 seed=0", name="m0", seed=5, marker=str(marker), out=str(out))
    assert not run_jobs([other], out=out, quiet=True)[0].resumed  # same label, other spec: runs


def test_a_failure_keeps_the_running_jobs_results(tmp_path: Path):
    """The running jobs' results were thrown away when another job failed, so --resume redid them."""
    out, marker = tmp_path / "run", tmp_path / "calls.txt"
    slow = Job.make("toy", toy_job, "slow", name="slow", seed=0, delay=1.0, marker=str(marker))
    later = Job.make("toy", toy_job, "later", name="later", seed=1, marker=str(marker))
    with ThreadPoolExecutor(2) as pool, pytest.raises(ArithmeticError, match="no 1") as info:
        run_jobs(
            [slow, Job.make("toy", failing_job, "broken", n=1), later], out=out, executor=pool, quiet=True
        )
    assert "in job 'broken'" in info.value.__notes__[0]
    assert "slow0\n" in marker.read_text()  # the running job finished (later may have started meanwhile)
    assert "slow" in [p.name.split("-")[0] for p in (out / "jobs").glob("*.json")]  # and its result is kept


def test_a_dead_worker_process_lists_the_unfinished_jobs_instead_of_blaming_one():
    from concurrent.futures.process import BrokenProcessPool

    jobs = [Job.make("toy", dying_job, "dies", n=0), *_jobs((0.0,))]
    with pytest.raises(BrokenProcessPool) as info:
        run_jobs(jobs, workers=1, quiet=True)
    assert (
        "died (killed, or out of memory?)" in info.value.__notes__[0] and "'dies'" in info.value.__notes__[0]
    )


def test_a_failure_is_announced_at_once_and_a_second_one_is_not_lost(tmp_path: Path, capsys):
    jobs = [
        Job.make("toy", toy_job, "slow", name="slow", seed=0, delay=1.0),
        Job.make("toy", failing_job, "first", n=1, delay=0.2),
        Job.make("toy", failing_job, "second", n=2, delay=0.5),
    ]  # fmt: skip  (all three start at once)
    with ThreadPoolExecutor(3) as pool, pytest.raises(ArithmeticError, match="no 1") as info:
        run_jobs(jobs, executor=pool, quiet=False)
    assert "job 'first' failed (ArithmeticError: no 1); waiting for" in capsys.readouterr().err
    assert "in job 'first'" in info.value.__notes__[0]
    assert any("job 'second' failed too: ArithmeticError: no 2" in n for n in info.value.__notes__)


def pid_job(*, path: str, delay: float) -> list[dict]:
    """Writes the worker's process id to ``path``, then works for ``delay`` seconds."""
    import os

    Path(path).write_text(str(os.getpid()))
    time.sleep(delay)
    return toy_job(name="pid", seed=0)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has finished)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_killed_run_takes_its_worker_processes_with_it(tmp_path: Path):
    """A run killed by SIGTERM/SIGKILL cannot shut its pool down: its workers went on with their jobs
    (minutes of CPU) for nobody. Each worker now ends within about a second of its parent."""
    import os
    import signal
    import subprocess

    pidfile = tmp_path / "worker.pid"
    script = (
        "from ensemblize.experiments.jobs import Job, run_jobs\n"
        f"run_jobs([Job.make('toy', 'test_experiments_jobs:pid_job', 'sleeps', path={str(pidfile)!r},"
        " delay=120.0)], workers=1, quiet=True)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 90
    while not (pidfile.exists() and pidfile.read_text()):
        assert run.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    worker = int(pidfile.read_text())
    assert _running(worker)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=30)
    deadline = time.monotonic() + 20
    while _running(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(worker)


def test_repeated_float_options_are_refused_before_a_run_folder_is_written():
    """``--targets 0.5,0.5`` used to pass the option check and fail inside the runner (a traceback,
    after run.json was written); ``ints`` refused repeats already."""
    from ensemblize.experiments.options import OptionError, floats

    with pytest.raises(OptionError, match=r"repeated values: \[0.5, 0.5\]"):
        floats([0.5, 0.5], option="--targets", high=1.0)
    assert floats([0.5, 0.7], option="--targets", high=1.0) == [0.5, 0.7]


def test_an_occupied_folder_under_torchrun_says_what_can_be_done(tmp_path, monkeypatch):
    """The run folder said "pass --resume", which torchrun then refused: an interrupted torchrun run
    had no way forward the message named."""
    from ensemblize.experiments.jobs import experiment_folder
    from ensemblize.run_folder import RunFolderError

    out = tmp_path / "run"
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    with experiment_folder(out, experiment="x", settings={"a": 1}):
        pass  # an earlier run (here: finished) in --out
    with pytest.raises(
        RunFolderError, match=r"cannot be resumed \(--resume needs one process\); pass --overwrite"
    ):
        with experiment_folder(out, experiment="x", settings={"a": 1}):
            pass
