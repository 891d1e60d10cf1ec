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

``execute(job, *, threads=None) -> JobResult``
    Run one job in this process (what every executor runs). ``threads`` sets torch's intra-op
    threads first.

``run_jobs(jobs, *, out=None, workers=None, scheduler=None, executor=None, quiet=False, describe=None) -> list[JobResult]``
    * default: every job in this process, in order;
    * ``workers=N``: a ``ProcessPoolExecutor`` of N spawned processes, one torch thread each;
    * ``scheduler=ADDRESS``: ``distributed.Client(ADDRESS).get_executor()`` (the optional ``dask``
      extra; a clear ImportError when ``distributed`` is missing), one torch thread per job;
    * ``executor=E``: any ``concurrent.futures.Executor`` you manage yourself.

    Results come back in the order of ``jobs`` whatever the completion order. With ``out``, each
    finished job's records are written atomically to ``out/jobs/<key>.json`` (by this process, so
    workers need no shared file system for records; checkpoints a job writes itself do need it),
    and a job whose file is already there is not run again: an interrupted sweep resumes.
    Progress: a ``tqdm.auto`` bar over jobs labelled with the experiment; when stderr is not a
    terminal, one line per finished job with its summary, wall time and an ETA; ``quiet`` silences
    both. ``describe(records) -> str`` gives the per-job summary (default: the first record's main
    metric and ``train_seconds``, formatted as the tables format them).

``prepare_run_folder(out, *, experiment, settings, resume=False, overwrite=False) -> Path``
    Refuse an existing non-empty ``out`` unless ``resume`` (the same experiment with the same
    settings; a difference is an :class:`OptionError` naming the differing fields) or ``overwrite``
    (this module's files there — ``jobs/``, ``results.json``, ``plan.json`` — are removed first).
    Writes ``out/plan.json`` (experiment and settings).

``run_experiment(experiment, jobs, *, out, settings, workers=None, scheduler=None, executor=None, resume=False, overwrite=False, quiet=False, describe=None) -> list[JobResult]``
    The usual sequence: take the folder lock (``out/.lock``; a second process writing the same
    folder is refused), :func:`prepare_run_folder`, :func:`run_jobs`, then write the merged records
    to ``out/results.json``.

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
import math
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Job",
    "JobResult",
    "OptionError",
    "execute",
    "run_jobs",
    "run_experiment",
    "prepare_run_folder",
    "merged_records",
    "make_executor",
    "run_lock",
]

JOBS_DIR = "jobs"
PLAN_FILE = "plan.json"
LOCK_FILE = ".lock"
_OWN_FILES = (JOBS_DIR, PLAN_FILE, "results.json")


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
        """Stable identifier: ``<label slug>-<12 hex digits of the spec's SHA-256>``."""
        digest = hashlib.sha256(_dumps([self.experiment, self.fn, self.params_json]).encode()).hexdigest()
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


def execute(job: Job, *, threads: int | None = None) -> JobResult:
    """Run ``job`` in this process and return its :class:`JobResult` (what every executor runs)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    start = time.perf_counter()
    out = _resolve(job.fn)(**job.params)
    if isinstance(out, Mapping):
        records, extras = out.get("records"), out.get("extras", {})
    else:
        records, extras = out, {}
    if not isinstance(records, list):
        raise TypeError(
            f"job {job.label!r} ({job.fn}) must return a list of records, got {type(records).__name__}"
        )
    records = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
    return JobResult(
        job=job,
        records=_roundtrip(records),
        extras=_roundtrip(dict(extras)),
        seconds=time.perf_counter() - start,
    )


# --- executors -------------------------------------------------------------------------------------


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


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
        client = Client(scheduler)
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
        return
    if workers is None or workers == 0:
        yield None
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise OptionError("--workers", f"must be an integer ≥ 0, got {workers!r}")
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --- run folder --------------------------------------------------------------------------------------


def _job_file(out: Path, job: Job) -> Path:
    return out / JOBS_DIR / f"{job.key}.json"


def _load_done(out: Path, job: Job) -> JobResult | None:
    path = _job_file(out, job)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # a damaged file: the job runs again
    if not isinstance(data, dict) or data.get("job", {}).get("params") != job.params:
        return None
    return JobResult(
        job=job,
        records=data["records"],
        extras=data.get("extras", {}),
        seconds=float(data.get("seconds", 0.0)),
        resumed=True,
    )


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


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [
        f"{k}: {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r}"
        for k in keys
        if old.get(k) != new.get(k)
    ]


def prepare_run_folder(
    out: str | Path,
    *,
    experiment: str,
    settings: Mapping[str, Any],
    resume: bool = False,
    overwrite: bool = False,
) -> Path:
    """Check ``out`` for an earlier run and write ``out/plan.json`` (see module doc)."""
    from ..checkpoint import atomic_write_json

    out = Path(out)
    if resume and overwrite:
        raise OptionError("--resume", "give either --resume or --overwrite, not both")
    if out.exists() and not out.is_dir():
        raise OptionError("--out", f"{out} exists and is not a folder")
    plan = {"experiment": experiment, "settings": _canonical(dict(settings), where="settings")}
    present = [p for p in out.iterdir() if p.name != LOCK_FILE] if out.is_dir() else []
    if present and overwrite:
        for name in _OWN_FILES:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    elif present and resume:
        old_path = out / PLAN_FILE
        if not old_path.is_file():
            raise OptionError("--resume", f"{out} holds no {PLAN_FILE}: it is not an experiment run folder")
        old = json.loads(old_path.read_text())
        if old.get("experiment") != experiment:
            raise OptionError("--resume", f"{out} holds a {old.get('experiment')!r} run, not {experiment!r}")
        diff = _differences(old.get("settings", {}), plan["settings"])
        if diff:
            raise OptionError("--resume", f"{out} was run with other settings: " + "; ".join(diff))
    elif present:
        raise OptionError(
            "--out",
            f"{out} is not empty; pass --resume to continue that run or --overwrite to replace it",
        )
    atomic_write_json(out / PLAN_FILE, plan)
    return out


@contextlib.contextmanager
def run_lock(out: str | Path) -> Iterator[Path]:
    """Hold ``out/.lock`` while writing ``out``: a second process is refused (a stale lock of a dead
    process on this host is taken over)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = path.read_text().split() if path.is_file() else []
            if len(holder) == 2 and holder[0] == socket.gethostname() and not _alive(int(holder[1])):
                path.unlink(missing_ok=True)
                continue
            raise OptionError(
                "--out", f"{out} is being written by another process ({' pid '.join(holder)})"
            ) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(me)
        break
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class _Progress:
    """A tqdm.auto bar on a terminal or notebook; one line per job otherwise; nothing when quiet."""

    def __init__(self, experiment: str, total: int, *, quiet: bool, describe: Callable) -> None:
        self.experiment, self.total, self.quiet, self.describe = experiment, total, quiet, describe
        self.done = 0
        self.start = time.perf_counter()
        self.bar = None
        if not quiet and _interactive():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=experiment, unit="job", leave=True)

    def update(self, result: JobResult) -> None:
        self.done += 1
        if self.quiet:
            return
        what = "resumed" if result.resumed else f"{result.seconds:.1f} s"
        text = f"{result.job.label}: {self.describe(result.records)} ({what})"
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
            return
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        print(
            f"{self.experiment} [{self.done}/{self.total}] {text}; elapsed {_duration(elapsed)}, ETA {_duration(eta)}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _interactive() -> bool:
    if sys.stderr is not None and sys.stderr.isatty():
        return True
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return type(shell).__name__ == "ZMQInteractiveShell"


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
) -> list[JobResult]:
    """Run ``jobs`` (see module doc) and return their results in the order of ``jobs``."""
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
    progress = _Progress(experiment, len(jobs), quiet=quiet, describe=describe or _default_describe)
    try:
        for r in results:
            if r is not None:
                progress.update(r)
        todo = [i for i, r in enumerate(results) if r is None]

        def finished(i: int, result: JobResult) -> None:
            results[i] = result
            if out is not None:
                _save_done(out, result)
            progress.update(result)

        if executor is not None:
            _run_on(executor, jobs, todo, finished, threads=None)
        elif workers or scheduler is not None:
            with make_executor(workers=workers, scheduler=scheduler) as pool:
                _run_on(pool, jobs, todo, finished, threads=1)
        else:
            for i in todo:
                finished(i, execute(jobs[i]))
    finally:
        progress.close()
    return [r for r in results if r is not None]


def _run_on(
    pool: Executor, jobs: Sequence[Job], todo: Sequence[int], finished: Callable, *, threads: int | None
) -> None:
    futures: dict[Future, int] = {pool.submit(execute, jobs[i], threads=threads): i for i in todo}
    try:
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                result = fut.result()
            except Exception as exc:
                raise RuntimeError(f"job {jobs[i].label!r} ({jobs[i].key}) failed: {exc}") from exc
            finished(i, result)
    finally:
        for fut in futures:
            fut.cancel()


def merged_records(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    """Every result's records, in job order."""
    return [r for res in results for r in res.records]


def run_experiment(
    experiment: str,
    jobs: Sequence[Job],
    *,
    out: str | Path,
    settings: Mapping[str, Any],
    workers: int | None = None,
    scheduler: str | None = None,
    executor: Executor | None = None,
    resume: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
    describe: Callable[[Sequence[Mapping[str, Any]]], str] | None = None,
) -> list[JobResult]:
    """Lock ``out``, check it (:func:`prepare_run_folder`), run the jobs, write ``out/results.json``."""
    from ..report.results import write_results

    out = Path(out)
    with run_lock(out):
        prepare_run_folder(out, experiment=experiment, settings=settings, resume=resume, overwrite=overwrite)
        results = run_jobs(
            jobs,
            out=out,
            workers=workers,
            scheduler=scheduler,
            executor=executor,
            quiet=quiet,
            describe=describe,
        )
        write_results(out, merged_records(results))
    return results
