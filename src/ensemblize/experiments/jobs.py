"""Experiments as lists of independent jobs, run on any ``concurrent.futures.Executor``.

An experiment is a plain Python function with plain defaults. It expands its settings into a list
of :class:`Job` specs (method × dataset × seed × setting), hands them to :func:`run_jobs`, and
builds its tables and figures from the merged records. A job is a pure function of its spec: it
names a module-level function (``"package.module:function"``) and the JSON-able keyword arguments
it is called with, and it returns its records.

API
---

``Job.make(experiment, fn, label, **params) -> Job``
    A frozen spec. ``fn`` is a module-level function (or its ``"module:name"``); ``params`` must
    be JSON-able (lists, dicts, str, int, float, bool, None; tuples are stored as lists).
    ``job.key`` is stable across processes and machines: a readable slug of ``label`` plus 12 hex
    digits of the SHA-256 of the canonical JSON of ``(experiment, fn, params)``.

Job function contract
    ``fn(**params)`` returns a list of record dicts (the :mod:`ensemblize.report.results`
    contract), or ``{"records": [...], "extras": {...}}`` where ``extras`` is JSON-able data the
    experiment's figures need (e.g. reliability bins). Records and extras are round-tripped through
    JSON, so a record read back from a resumed run equals a freshly computed one.

``execute(job, *, threads=None, progress=False) -> JobResult``
    Run one job in this process (what every executor runs). ``threads`` sets torch's intra-op
    threads first; ``progress`` is what ``training_progress()`` returns inside the job (True only
    for in-process runs that are not quiet: job functions pass it to ``fit(progress=...)``).

``run_jobs(jobs, *, out=None, workers=None, scheduler=None, executor=None, quiet=False, describe=None) -> list[JobResult]``
    * default: every job in this process, in order;
    * ``workers=N``: a ``ProcessPoolExecutor`` of N spawned processes, ``threads`` torch threads each
      (1 by default);
    * ``scheduler=ADDRESS``: ``distributed.Client(ADDRESS).get_executor()`` (the optional ``dask``
      extra; a clear ImportError when ``distributed`` is missing), ``threads`` torch threads per job;
    * ``executor=E``: any ``concurrent.futures.Executor`` you manage yourself.

    Results come back in the order of ``jobs`` whatever the completion order. A job's exception
    propagates unchanged (with a note naming the job); jobs already finished keep their files.
    With ``out``, each finished job's records are written atomically to ``out/jobs/<key>.json`` (by this process, so
    workers need no shared file system for records; checkpoints a job writes itself do need it),
    and a job whose file is already there is not run again: an interrupted sweep resumes.
    Progress: a ``tqdm.auto`` bar over jobs labelled with the experiment; when stderr is not a
    terminal, one line per finished job with its summary, wall time and an ETA; ``quiet`` silences
    both. ``describe(records) -> str`` gives the per-job summary (default: the first record's main
    metric and ``train_seconds``, formatted as the tables format them).

``experiment_folder(out, *, experiment, settings, execution=None)`` (a context manager)
    Opens ``out`` through :class:`ensemblize.run_folder.RunFolder`: one writer at a time; an existing
    non-empty folder is refused unless ``execution.resume`` (the same experiment and settings — a
    difference is refused, naming it) or ``execution.overwrite``. ``folder.run(jobs, describe=...)``
    runs the jobs into it and writes the merged ``results.json``; the experiment then writes its
    tables and figures, and the manifest is written when the block ends without an error.
    :class:`Execution` bundles how to run (``workers``, ``scheduler``, ``executor``, ``resume``,
    ``overwrite``, ``quiet``, ``threads``, ``wide``); every experiment function takes one::

        with experiment_folder(out, experiment="compare", settings=settings, execution=ex) as folder:
            results = folder.run(jobs, describe=summary)
            records = merged_records(results)
            if folder.is_main:
                ...  # tables, figures into out

    Under ``torchrun`` (``WORLD_SIZE > 1``) the ranks other than 0 get a folder with
    ``is_main = False``: ``run`` executes the same jobs in order, quietly, and writes nothing
    (DistributedDataParallel needs every rank in every ``fit``); ``resume``, ``workers`` and
    ``scheduler`` are refused there.

    The block also writes ``report.html`` (:func:`ensemblize.report.html.write_report`) just
    before the manifest.

``amend_run(run_dir)`` (a context manager)
    Write more files into a finished run (``evaluate``, ``report``): re-opened under its lock with
    its stored configuration, the manifest rewritten at the end so it stays verifiable.

``merged_records(results) -> list[dict]``
    The records of every result, in job order.

:class:`OptionError` is the ``ValueError`` an experiment raises for a bad argument, before any work;
its ``option`` names the command-line option (the CLI turns it into ``typer.BadParameter``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._checks import check_instance, check_int
from ..report.environment import record_environment

if TYPE_CHECKING:
    from ..training.progress import Progress

__all__ = [
    "Execution",
    "Job",
    "JobResult",
    "OptionError",
    "execute",
    "run_jobs",
    "experiment_folder",
    "ExperimentFolder",
    "merged_records",
    "make_executor",
    "training_progress",
    "torchrun_rank",
    "amend_run",
]

JOBS_DIR = "jobs"


@dataclass(frozen=True)
class Execution:
    """How an experiment's jobs run; nothing here changes a record (apart from timing fields).

    ``workers``: local processes (None/0: in this process); ``scheduler``: a Dask scheduler address;
    ``executor``: any ``concurrent.futures.Executor`` you manage; ``resume`` / ``overwrite``: what to
    do with an existing run folder (:func:`experiment_folder`); ``quiet``: no progress and no table;
    ``threads``: torch intra-op threads of each job (in this process, or per pool / Dask job);
    ``wide``: print every metric in one console table instead of tables ≤ 100 characters wide.
    """

    workers: int | None = None
    scheduler: str | None = None
    executor: Executor | None = None
    resume: bool = False
    overwrite: bool = False
    quiet: bool = False
    threads: int = 1
    wide: bool = False


class OptionError(ValueError):
    """A bad experiment argument, found before any work. ``option`` is its command-line name."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


def _canonical(value: Any, *, where: str) -> Any:
    """``value`` as plain JSON types (tuples -> lists); TypeError naming ``where`` otherwise."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_canonical(v, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"job parameter {where} has a non-string key {k!r}")
            out[k] = _canonical(v, where=f"{where}.{k}")
        return out
    raise TypeError(f"job parameter {where} must be JSON-able, got {type(value).__name__}: {value!r}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _slug(text: str) -> str:
    keep = "".join(c if c.isascii() and (c.isalnum() or c in "-_.=") else "_" for c in text)
    return keep.strip("_")[:60] or "job"


#: Job parameters that say where a job reads or writes, not what it computes: left out of its key.
LOCATION_KEYS = ("out", "data_root")


def _without_locations(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without :data:`LOCATION_KEYS`, at the top level and inside dict values (``data``)."""
    return {
        k: ({kk: vv for kk, vv in v.items() if kk not in LOCATION_KEYS} if isinstance(v, dict) else v)
        for k, v in params.items()
        if k not in LOCATION_KEYS
    }


@dataclass(frozen=True, eq=False)
class Job:
    """One independent unit of an experiment: ``fn(**params)`` returns its records (see module doc).

    Build it with :meth:`make`. ``params`` is stored as canonical JSON text so the spec is frozen,
    hashable and identical in every process.
    """

    experiment: str
    fn: str
    params_json: str
    label: str

    @classmethod
    def make(cls, experiment: str, fn: Callable[..., Any] | str, label: str, **params: Any) -> Job:
        """A job running ``fn(**params)``; ``fn`` must be importable by name (module level)."""
        if callable(fn):
            module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
            if not module or "." in name or "<" in name:
                raise TypeError(f"job function must be a module-level function, got {fn!r}")
            fn = f"{module}:{name}"
        if not isinstance(fn, str) or fn.count(":") != 1:
            raise TypeError(f"job function must be 'module:function', got {fn!r}")
        canon = {k: _canonical(v, where=k) for k, v in params.items()}
        return cls(experiment=experiment, fn=fn, params_json=_dumps(canon), label=label)

    @property
    def params(self) -> dict[str, Any]:
        """The keyword arguments of the job function (a fresh dict)."""
        return json.loads(self.params_json)

    @property
    def key(self) -> str:
        """Stable identifier: ``<label slug>-<12 hex digits of the spec's SHA-256>``.

        Where a job reads and writes (:data:`LOCATION_KEYS`: ``out``, ``data_root``) is not part of the
        spec: the same job with a folder spelled another way (relative / absolute) is the same job.
        """
        params = _without_locations(self.params)
        digest = hashlib.sha256(_dumps([self.experiment, self.fn, _dumps(params)]).encode()).hexdigest()
        return f"{_slug(self.label)}-{digest[:12]}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form: experiment, fn, label, key, params."""
        return {
            "experiment": self.experiment,
            "fn": self.fn,
            "label": self.label,
            "key": self.key,
            "params": self.params,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and self.key == other.key and self.params_json == other.params_json

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class JobResult:
    """What one job returned: ``records`` (JSON round-tripped), ``extras``, its wall ``seconds`` and
    whether it was read back from an earlier run (``resumed``)."""

    job: Job
    records: list[dict[str, Any]]
    extras: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    resumed: bool = False


def _resolve(fn: str) -> Callable[..., Any]:
    module, name = fn.split(":")
    return getattr(importlib.import_module(module), name)


def _roundtrip(obj: Any) -> Any:
    from ..checkpoint import _json_default

    return json.loads(json.dumps(obj, default=_json_default))


_SHOW_TRAINING = [False]


def training_progress() -> bool:
    """Whether the running job may show its training progress: only in a run in this process that
    is not quiet (on workers, per-epoch lines of several jobs would interleave)."""
    return _SHOW_TRAINING[0]


def execute(job: Job, *, threads: int | None = None, progress: bool = False) -> JobResult:
    """Run ``job`` in this process and return its :class:`JobResult` (what every executor runs).

    ``threads``: set torch's intra-op threads first; ``progress``: what :func:`training_progress`
    tells the job function."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    start = time.perf_counter()
    _SHOW_TRAINING[0] = progress
    try:
        out = _resolve(job.fn)(**job.params)
    finally:
        _SHOW_TRAINING[0] = False
    if isinstance(out, Mapping):
        records, extras = out.get("records"), out.get("extras", {})
    else:
        records, extras = out, {}
    check_instance(records, list, name=f"what job {job.label!r} ({job.fn}) returns", what="a list of records")
    records = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
    return JobResult(
        job=job,
        records=_roundtrip(records),
        extras=_roundtrip(dict(extras)),
        seconds=time.perf_counter() - start,
    )


# --- executors -------------------------------------------------------------------------------------


def _init_worker(parent: int | None = None) -> None:
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int, every: float = 1.0) -> None:
    """End this worker once the process that started it is gone (killed by SIGTERM or SIGKILL, it
    cannot shut its pool down): an orphaned worker would otherwise finish its job — minutes of CPU —
    for nobody."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


@contextlib.contextmanager
def make_executor(*, workers: int | None = None, scheduler: str | None = None) -> Iterator[Executor | None]:
    """``None`` (run in process), a spawned ``ProcessPoolExecutor`` (``workers``) or a Dask
    ``ClientExecutor`` (``scheduler`` address); shut down on exit."""
    if workers is not None and scheduler is not None:
        raise OptionError("--workers", "give either --workers or --scheduler, not both")
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ImportError(
                "--scheduler needs Dask distributed, an optional extra: pip install 'ensemblize[dask]'"
            ) from exc
        client = Client(scheduler, timeout=30)  # checked by check_scheduler; a bound if it went away since
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
        return
    if workers is None or workers == 0:
        yield None
        return
    try:
        workers = check_int(workers, name="workers", minimum=0)
    except (TypeError, ValueError) as exc:
        raise OptionError("--workers", str(exc)) from exc
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --- run folder --------------------------------------------------------------------------------------


def _job_file(out: Path, job: Job) -> Path:
    return out / JOBS_DIR / f"{job.key}.json"


def _same_job(stored: object, job: Job) -> bool:
    """Whether a job file's ``job`` entry is ``job``: the same experiment, function and parameters,
    ``out`` aside (where the files go is not what the job computes)."""
    if not isinstance(stored, dict) or not isinstance(stored.get("params"), dict):
        return False
    mine = _without_locations(job.params)
    theirs = _without_locations(stored["params"])
    return stored.get("experiment", job.experiment) == job.experiment and stored.get("fn", job.fn) == job.fn \
        and theirs == mine  # fmt: skip


def _load_done(out: Path, job: Job) -> JobResult | None:
    """The saved result of ``job`` in ``out/jobs``, or None. Found under its key, or — for a run folder
    written by an earlier version, whose keys also hashed ``out`` — under any key of the same label."""
    path = _job_file(out, job)
    candidates = [path] if path.is_file() else sorted(path.parent.glob(f"{_slug(job.label)}-*.json"))
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue  # a damaged file: the job runs again
        if isinstance(data, dict) and _same_job(data.get("job"), job):
            return JobResult(
                job=job,
                records=data["records"],
                extras=data.get("extras", {}),
                seconds=float(data.get("seconds", 0.0)),
                resumed=True,
            )
    return None


def _save_done(out: Path, result: JobResult) -> None:
    from ..checkpoint import atomic_write_json

    atomic_write_json(
        _job_file(out, result.job),
        {
            "job": result.job.to_dict(),
            "seconds": result.seconds,
            "records": result.records,
            "extras": result.extras,
        },
    )


# --- progress ----------------------------------------------------------------------------------------


def _default_describe(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return "no records"
    r = records[0]
    m = r.get("metrics", {})
    parts = [f"{k} {m[k]:.4f}" for k in ("accuracy", "rmse", "nll", "ece", "aurc") if k in m][:3]
    if "train_seconds" in r:
        parts.append(f"train {float(r['train_seconds']):.1f} s")
    return ", ".join(parts)


def _show(progress: Progress, result: JobResult, describe: Callable) -> None:
    """One job done: its label, what ``describe`` says of its records, and its time (or that it resumed)."""
    what = "resumed" if result.resumed else f"{result.seconds:.1f} s"
    progress.step(f"{result.job.label}: {describe(result.records)} ({what})", skipped=result.resumed)


# --- running -----------------------------------------------------------------------------------------


def run_jobs(
    jobs: Sequence[Job],
    *,
    out: str | Path | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    executor: Executor | None = None,
    quiet: bool = False,
    describe: Callable[[Sequence[Mapping[str, Any]]], str] | None = None,
    threads: int = 1,
) -> list[JobResult]:
    """Run ``jobs`` (see module doc) and return their results in the order of ``jobs``; jobs on a
    pool of ``workers`` or a Dask ``scheduler`` run with ``threads`` torch threads each."""
    jobs = list(jobs)
    keys = [j.key for j in jobs]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"jobs must be distinct; repeated: {dup}")
    out = None if out is None else Path(out)
    results: list[JobResult | None] = [None] * len(jobs)
    if out is not None:
        for i, job in enumerate(jobs):
            results[i] = _load_done(out, job)
    experiment = jobs[0].experiment if jobs else "jobs"
    from ..training.progress import Progress

    describe = describe or _default_describe
    progress = Progress(len(jobs), desc=experiment, unit="job", enabled=not quiet)
    try:
        for r in results:
            if r is not None:
                _show(progress, r, describe)
        todo = [i for i, r in enumerate(results) if r is None]

        def finished(i: int, result: JobResult) -> None:
            results[i] = result
            if out is not None:
                _save_done(out, result)
            _show(progress, result, describe)

        if executor is not None:
            _run_on(executor, jobs, todo, finished, threads=None, quiet=quiet)
        elif workers or scheduler is not None:
            with make_executor(workers=workers, scheduler=scheduler) as pool:
                _run_on(pool, jobs, todo, finished, threads=threads, quiet=quiet)
        else:
            for i in todo:
                with _naming(jobs[i]):
                    result = execute(jobs[i], progress=not quiet)
                finished(i, result)
    finally:
        progress.close()
    return [r for r in results if r is not None]


@contextlib.contextmanager
def _naming(job: Job) -> Iterator[None]:
    """Let an exception out unchanged, with a note naming the job it came from."""
    try:
        yield
    except Exception as exc:
        exc.add_note(f"in job {job.label!r} ({job.key}) of experiment {job.experiment!r}")
        raise


def _run_on(
    pool: Executor,
    jobs: Sequence[Job],
    todo: Sequence[int],
    finished: Callable,
    *,
    threads: int | None,
    quiet: bool = False,
) -> None:
    """Run ``todo`` on ``pool``, handing each result to ``finished`` as it comes.

    On the first failure the jobs not yet started are cancelled, the running ones are waited for and
    their results kept (so ``--resume`` does not redo them), then the failure is raised with a note
    naming its job (and one per later failure). Unless ``quiet``, the failure is announced on stderr
    when it happens, since the running jobs may take long. A worker process that died (``BrokenProcessPool``) cannot say which job it was
    running, so the note lists every job that was still running.
    """
    from concurrent.futures.process import BrokenProcessPool

    futures: dict[Future, int] = {pool.submit(execute, jobs[i], threads=threads): i for i in todo}
    failed: tuple[int, BaseException] | None = None
    later: list[str] = []
    try:
        for fut in as_completed(futures):
            i = futures[fut]
            if fut.cancelled():
                continue
            exc = fut.exception()
            if exc is None:
                finished(i, fut.result())
            elif failed is None:
                failed = (i, exc)
                for other in futures:
                    other.cancel()  # only jobs that have not started can be cancelled
                running = sum(1 for f in futures if not f.done())
                if not quiet:
                    print(f"job {jobs[i].label!r} failed ({type(exc).__name__}: {exc}); waiting for {running} "
                          "running job(s) to finish and keeping their results", file=sys.stderr, flush=True)  # fmt: skip
            else:
                later.append(f"job {jobs[i].label!r} failed too: {type(exc).__name__}: {exc}")
    finally:
        for fut in futures:
            fut.cancel()
    if failed is None:
        return
    i, exc = failed
    if isinstance(exc, BrokenProcessPool):
        lost = [jobs[futures[f]].label for f in futures
                if f.done() and not f.cancelled() and isinstance(f.exception(), BrokenProcessPool)]  # fmt: skip
        exc.add_note(
            f"a worker process of experiment {jobs[i].experiment!r} died (killed, or out of memory?); it was "
            f"running one of the unfinished jobs {lost}"
        )
        raise exc
    try:
        with _naming(jobs[i]):
            raise exc
    finally:
        for note in later:  # after the note naming the first failure's job
            exc.add_note(note)


def merged_records(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    """Every result's records, in job order."""
    return [r for res in results for r in res.records]


class ExperimentFolder:
    """An experiment's run folder, opened by :func:`experiment_folder`: :meth:`run` runs jobs into it.

    ``is_main`` is False on the ranks other than 0 under ``torchrun``: there the same jobs run in
    order (DistributedDataParallel needs every rank), quietly, and nothing is written — an
    experiment writes its tables and figures only when ``is_main``.
    """

    def __init__(self, folder: Any, execution: Execution, *, path: Path, is_main: bool = True) -> None:
        self.folder = folder
        self.path = path
        self.execution = execution
        self.is_main = is_main

    def run(
        self, jobs: Sequence[Job], *, describe: Callable[[Sequence[Mapping[str, Any]]], str] | None = None
    ) -> list[JobResult]:
        """Run ``jobs`` as the execution says (skipping finished ones), write ``results.json``."""
        from ..report.results import write_results

        if not self.is_main:
            return [execute(job) for job in jobs]
        ex = self.execution
        results = run_jobs(
            jobs,
            out=self.path,
            workers=ex.workers,
            scheduler=ex.scheduler,
            executor=ex.executor,
            quiet=ex.quiet,
            describe=describe,
            threads=ex.threads,
        )
        write_results(self.path, merged_records(results))
        return results


def _write_report(path: Path) -> Path | None:
    """``report.html`` for a finished run (before the manifest, which lists it); a failure to render
    it does not undo the run: it is said on stderr."""
    from ..report.html import write_report

    try:
        return write_report(path, finishing=True)
    except Exception as exc:  # the run's results are complete without it; say why it is missing
        print(f"report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


@contextlib.contextmanager
def amend_run(run_dir: str | Path) -> Iterator[Path]:
    """Write more files into a finished run folder: the folder is re-opened under its lock with its
    stored configuration and its manifest rewritten when the block ends (a folder without a complete
    manifest is simply written into)."""
    from ..run_folder import MANIFEST, RunFolder, read_manifest

    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        yield run_dir
        return
    manifest = read_manifest(run_dir)
    with RunFolder(run_dir, config=manifest["config"], mode="resume") as folder:
        yield run_dir
        folder.complete(**{k: v for k, v in manifest.items() if k not in ("config", "files", "complete")})


def torchrun_rank() -> tuple[int, int]:
    """``(rank, world size)`` from the torchrun environment (``(0, 1)`` outside torchrun)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def check_scheduler(address: str, *, timeout: float = 5.0) -> None:
    """OptionError unless a TCP connection to the Dask scheduler at ``address`` opens within ``timeout`` s.

    ``tcp://host:port`` / ``host:port`` addresses are probed (other protocols are left to Dask), so a
    typo or a stopped scheduler is named at once instead of after Dask's own 30 s connect timeout; an
    address that accepts the connection must then complete Dask's handshake within ``timeout`` s
    (another service on that port is refused, not waited on).
    """
    import socket
    from urllib.parse import urlsplit

    text = str(address)
    parts = urlsplit(text if "://" in text else f"tcp://{text}")
    if parts.scheme not in ("tcp", "") or parts.hostname is None:
        return
    try:
        port = parts.port or 8786
    except ValueError:
        raise OptionError("--scheduler", f"has no valid port: {text!r}") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise OptionError(
            "--scheduler",
            f"cannot reach a Dask scheduler at {text!r} ({exc.strerror or exc}); is it running?",
        ) from None
    # something answers: make sure it speaks Dask (the dashboard's port 8787, or any other service,
    # hung the run without a word, or failed with a multi-exabyte allocation reading its reply)
    try:
        from distributed import Client
    except ImportError as exc:
        raise ImportError(
            "--scheduler needs Dask distributed, an optional extra: pip install 'ensemblize[dask]'"
        ) from exc
    try:
        Client(text, timeout=timeout).close()
    except Exception as exc:  # noqa: BLE001 - any failure to talk to it means it is not a usable scheduler
        raise OptionError(
            "--scheduler",
            f"{text!r} accepts connections but is not a Dask scheduler, or did not answer within {timeout:g} s "
            f"({type(exc).__name__}); give the scheduler's address (port 8786 by default, not the dashboard's "
            "8787)",
        ) from None


@contextlib.contextmanager
def experiment_folder(
    out: str | Path, *, experiment: str, settings: Mapping[str, Any], execution: Execution | None = None
) -> Iterator[ExperimentFolder]:
    """Open ``out`` as a :class:`ensemblize.run_folder.RunFolder` (lock; ``execution.resume`` /
    ``overwrite`` decide about an existing run; configuration ``{"experiment": ..., **settings}``),
    set this process's torch threads for in-process jobs, and write the manifest when the block ends
    without an error (an interrupted run stays incomplete and resumable)."""
    from ..run_folder import RunFolder

    ex = execution or Execution()
    if ex.resume and ex.overwrite:
        raise OptionError("--resume", "give either --resume or --overwrite, not both")
    rank, world = torchrun_rank()
    if world > 1 and (ex.resume or ex.workers or ex.scheduler or ex.executor):
        raise OptionError("--resume", "--resume, --workers and --scheduler are not available under torchrun")
    if rank != 0:  # under torchrun only rank 0 prints and writes
        yield ExperimentFolder(None, replace(ex, quiet=True), path=Path(out), is_main=False)
        return
    if ex.scheduler is not None:
        check_scheduler(ex.scheduler)  # before the run folder is made
    mode = "resume" if ex.resume else "overwrite" if ex.overwrite else "new"
    config = {"experiment": experiment, **_canonical(dict(settings), where="settings")}
    if world > 1:  # data-parallel training is another configuration: a resume must not mix world sizes
        config["world_size"] = world
    cannot_resume = (
        "a run under torchrun cannot be resumed (--resume needs one process)" if world > 1 else None
    )
    with RunFolder(out, config=config, mode=mode, cannot_resume=cannot_resume) as folder:
        record_environment(folder.path)
        if ex.executor is None and not ex.workers and ex.scheduler is None:
            import torch

            torch.set_num_threads(ex.threads)
        start = time.perf_counter()
        yield ExperimentFolder(folder, ex, path=folder.path)
        _write_report(folder.path)
        folder.complete(wall_seconds=time.perf_counter() - start)
