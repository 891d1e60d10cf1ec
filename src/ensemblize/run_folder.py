"""A run's output folder: one writer at a time, runs that cannot mix, a manifest written last.

Every command that writes a run folder (``ensemblize run``, ``ensemblize experiment …``) opens it
through :class:`RunFolder`::

    with RunFolder(out, config=config, mode="new") as folder:   # or "resume" / "overwrite"
        ...                                                      # write results, models, figures
        folder.complete()                                        # manifest.json, written last

Rules:

* **One writer.** ``.lock`` in the folder is held with an exclusive ``fcntl.flock`` for the whole
  run; a second process gets :class:`RunFolderBusy` naming the holder's pid. The operating system
  drops the lock when the holder dies (``kill -9`` included), so a crash never leaves a stale lock.
* **Runs cannot mix.** A folder that already holds files is refused in ``mode="new"``;
  ``mode="resume"`` continues it only when the stored configuration (``run.json``) equals the new one
  (the differences are named otherwise); ``mode="overwrite"`` empties it first. A path that is an
  existing file, or a non-empty folder without ``run.json`` (not a run folder: a user's own files,
  a repository), is refused in every mode, so ``--overwrite`` can only ever delete a run.
* **Nothing half-done survives.** On entry, temporary files of interrupted atomic writes
  (``.NAME.*.tmp``), checkpoint saves killed midway (``NAME.json.pending``: published when its tensors
  are in place, else removed) and orphan checkpoint halves (``X.safetensors`` without ``X.json`` or the reverse)
  are removed, anywhere below the folder. On resume, a model checkpoint in ``models/`` that fails its
  integrity check is removed with the result of the job that wrote it, so that job runs again
  (:func:`drop_damaged_models`). The manifest is removed on entry and rewritten by
  :meth:`RunFolder.complete` with the configuration, every file's size and SHA-256 and
  ``complete: true``; :func:`read_manifest` refuses a folder without a complete manifest or whose
  files no longer match it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .checkpoint import atomic_write_json

__all__ = [
    "RunFolder",
    "RunFolderBusy",
    "RunFolderError",
    "read_manifest",
    "drop_damaged_models",
    "model_stem",
    "config_differences",
    "MANIFEST",
    "CONFIG",
    "MODES",
]

MANIFEST = "manifest.json"
CONFIG = "run.json"
LOCK = ".lock"
MODES = ("new", "resume", "overwrite")
_TMP = re.compile(r"^\..+\.tmp$")


def uncreatable(path: str | os.PathLike) -> str | None:
    """Why ``path`` (not there yet) could not be created — its nearest existing ancestor is a file or
    not writable — or None (also when ``path`` exists). For refusing an output before any work."""
    path = Path(path)
    if path.exists():
        return None
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable"
    return None


class RunFolderError(ValueError):
    """A run folder cannot be used as asked (exists, other configuration, incomplete)."""


class RunFolderBusy(RuntimeError):
    """Another live process holds the run folder's lock."""


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"key: stored X, now Y"`` for every key whose value differs (missing keys count as ``None``)."""
    keys = sorted(set(old) | set(new))
    return [f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _payload_files(root: Path) -> list[Path]:
    """Every regular file below ``root`` except the lock and the manifest, sorted."""
    skip = {root / LOCK, root / MANIFEST}
    return sorted(p for p in root.rglob("*") if p.is_file() and p not in skip)


def clean_interrupted(root: Path) -> list[Path]:
    """Remove temporaries of interrupted atomic writes and orphan checkpoint halves; return them."""
    from .checkpoint import settle_interrupted_save

    removed: list[Path] = []
    for path in _payload_files(root):
        if _TMP.match(path.name):
            path.unlink(missing_ok=True)
            removed.append(path)
    for path in _payload_files(root):
        if path.name.endswith(".json.pending"):  # a checkpoint save killed midway: finish or undo it
            settle_interrupted_save(path.with_name(path.name[: -len(".json.pending")]))
            if not path.exists():
                removed.append(path)
    for path in _payload_files(root):
        if path.suffix == ".safetensors" and not path.with_suffix(".json").exists():
            path.unlink(missing_ok=True)  # tensors whose JSON half was never written or was removed
            removed.append(path)
        elif (
            path.suffix == ".json"
            and path.name.startswith("epoch_")
            and not path.with_suffix(".safetensors").exists()
        ):
            path.unlink(missing_ok=True)  # a training checkpoint's JSON without its tensors
            removed.append(path)
    return removed


_MODEL_STEM = re.compile(r"^(?P<method>.+)_seed(?P<seed>\d+)$")


def model_stem(method: str, seed: int) -> str:
    """The file stem of a run's model checkpoint in ``models/`` (:data:`_MODEL_STEM` reads it back)."""
    return f"{method}_seed{seed}"


def drop_damaged_models(root: Path) -> list[str]:
    """Before a resume: remove every ``models/`` checkpoint that fails its own integrity check, and the
    saved result of the job that wrote it, so that job runs again; return the removed models' stems.

    A finished job's result (``jobs/*.json``) was trusted on its own, so a checkpoint damaged after it
    (a truncated file, an interrupted copy) was kept and the run marked complete, to fail only at
    ``ensemblize evaluate``. A model ``NAME_seedS`` belongs to the job whose records hold method
    ``NAME`` and seed ``S`` (what :func:`ensemblize.runner.run_method` writes). A damaged model that no
    job result names is a :class:`RunFolderError` (nothing is removed): resuming could not rebuild it.
    """
    from .checkpoint import CheckpointError, verify_checkpoint

    damaged: dict[str, list[Path]] = {}  # stem -> the job files that wrote it
    for meta in sorted((root / "models").glob("*.json")):
        try:
            verify_checkpoint(meta.with_suffix(""))
        except (CheckpointError, FileNotFoundError):
            damaged[meta.stem] = _jobs_of(root, meta.stem)
    orphans = [stem for stem, jobs in damaged.items() if not jobs]
    if orphans:
        raise RunFolderError(
            f"cannot resume {root}: checkpoint(s) {orphans} in models/ fail their integrity check and no "
            "finished job names them, so resuming would not rebuild them; pass --overwrite to start again"
        )
    for stem, jobs in damaged.items():
        (root / "models" / f"{stem}.json").unlink(missing_ok=True)
        (root / "models" / f"{stem}.safetensors").unlink(missing_ok=True)
        for job_file in jobs:
            job_file.unlink(missing_ok=True)
    return list(damaged)


def _jobs_of(root: Path, stem: str) -> list[Path]:
    """The ``jobs/*.json`` files whose records hold the method and seed of model ``stem`` (``NAME_seedS``)."""
    from .experiments.jobs import JOBS_DIR

    m = _MODEL_STEM.match(stem)
    found = []
    for job_file in sorted((root / JOBS_DIR).glob("*.json")) if m else ():
        try:
            records = json.loads(job_file.read_text()).get("records", [])
        except (OSError, ValueError, AttributeError, RecursionError):
            continue  # a damaged job file runs again anyway
        if any(
            isinstance(r, dict) and r.get("method") == m["method"] and str(r.get("seed")) == m["seed"]
            for r in records
        ):
            found.append(job_file)
    return found


def _read_json(path: Path, *, missing: str) -> Any:
    """``path``'s JSON; RunFolderError with ``missing`` if absent, or naming the file if malformed."""
    if not path.is_file():
        raise RunFolderError(missing)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFolderError(
            f"{path} is not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError as exc:
        raise RunFolderError(f"{path} nests too deeply to be a run file") from exc


def read_manifest(root: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of a finished run; RunFolderError if it is missing, incomplete or does not match.

    ``verify`` re-hashes every listed file and refuses files added or removed since it was written.
    """
    root = Path(root)
    path = root / MANIFEST
    manifest = _read_json(
        path, missing=f"{root} has no {MANIFEST}: the run did not finish (rerun it with --resume)"
    )
    if not isinstance(manifest, dict) or manifest.get("complete") is not True:
        raise RunFolderError(f"{path} does not mark a complete run (key 'complete' is not true)")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise RunFolderError(f"{path}: key 'files' must map relative paths to hashes")
    if verify:
        present = {p.relative_to(root).as_posix() for p in _payload_files(root)}
        missing = sorted(set(files) - present)
        extra = sorted(present - set(files))
        if missing or extra:
            raise RunFolderError(
                f"{root} does not match its manifest: missing {missing or 'none'}, not listed {extra or 'none'}"
            )
        for rel, entry in files.items():
            if _sha256(root / rel) != entry.get("sha256"):
                raise RunFolderError(f"{root / rel} was changed after the run finished (SHA-256 differs)")
    return manifest


def make_folder(path: Path) -> None:
    """``mkdir -p path``; RunFolderError naming ``--out`` and the reason when it cannot be created."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"--out {path} cannot be created: {exc.strerror or exc}") from None


def acquire_lock(folder: Path) -> int:
    """Hold ``folder/.lock`` (an exclusive ``flock``, the holder's pid written in it); return its descriptor.

    RunFolderError when ``.lock`` is a symbolic link or not a regular file (a folder someone handed
    over: the link's target must not be truncated) or cannot be opened; RunFolderBusy when another
    live process holds it. The kernel drops the lock when the holder dies.
    """
    lock = folder / LOCK
    try:
        # O_NOFOLLOW: a .lock planted as a symlink must not make this process truncate and write the
        # file it points at
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK, 0o666)
    except OSError as exc:  # an existing folder on a read-only file system, or without write permission
        if lock.is_symlink():
            raise RunFolderError(
                f"{lock} is a symbolic link, not a lock file; remove it (the run folder may have been tampered with)"
            ) from None
        raise RunFolderError(f"--out {folder} is not writable: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted as .lock
            raise RunFolderError(f"{lock} is not a regular file; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            raise RunFolderBusy(
                f"another process (pid {holder}) is writing to {folder}; wait for it or choose another --out"
            ) from None
        # a writer that gave up removes its .lock before releasing it: a lock taken on that unlinked file
        # between the two is not the folder's lock
        if os.fstat(fd).st_ino != os.stat(lock, follow_symlinks=False).st_ino:
            raise RunFolderBusy(f"another process was removing {folder} while this one locked it; run again")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError) and not isinstance(
            exc, BlockingIOError
        ):  # ENOLCK, ENOSPC, a vanished .lock
            raise RunFolderError(f"--out {folder} cannot be locked: {exc.strerror or exc}") from None
        raise
    return fd


def release_lock(fd: int) -> None:
    """Release and close a descriptor from :func:`acquire_lock` (the ``.lock`` file stays)."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextlib.contextmanager
def writer_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Create ``folder`` if needed and hold its ``.lock`` for the ``with`` block (one writer at a time).

    For an output folder that is not a run folder (``ensemblize tune``'s): the same lock as
    :class:`RunFolder`. A folder this call created is removed again when the block raises and
    nothing but the lock was written in it.
    """
    path = Path(folder)
    created = not path.exists()
    make_folder(path)
    fd = acquire_lock(path)
    try:
        yield path
    except BaseException:
        with contextlib.suppress(OSError):  # while still holding the lock (see acquire_lock)
            if created and [p.name for p in path.iterdir()] == [LOCK]:
                (path / LOCK).unlink()
                path.rmdir()
        release_lock(fd)
        raise
    release_lock(fd)


class RunFolder:
    """Exclusive, configuration-checked access to a run folder (see the module docstring).

    Args:
        path: the folder (created if missing; its parents too).
        config: the run's configuration, JSON-serialisable; stored as ``run.json`` on entry.
        mode: ``"new"`` (refuse a non-empty folder), ``"resume"`` (continue the same configuration)
            or ``"overwrite"`` (empty the folder first).
        cannot_resume: why a run here could not be resumed (e.g. under torchrun), said instead of
            advising ``--resume`` when ``mode="new"`` finds a run; ``None``: it can be.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        config: Mapping[str, Any],
        mode: str = "new",
        cannot_resume: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a mapping, got {type(config).__name__}")
        self.path = Path(path)
        self.config = dict(config)
        self.mode = mode
        self.cannot_resume = cannot_resume
        self.resumed = False
        self.damaged: list[str] = []
        self._lock_fd: int | None = None

    # -------------------------------------------------------------------------------- checks
    def check(self) -> None:
        """Everything that can be refused without touching the disk (used before any work starts)."""
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderError(f"--out {self.path} is an existing file, not a folder")
        why = uncreatable(self.path)
        if why:
            raise RunFolderError(f"--out {self.path} cannot be created: {why}")
        if self._occupied() and not (self.path / CONFIG).is_file():
            raise RunFolderError(
                f"--out {self.path} is not empty and is not an ensemblize run folder (it has no {CONFIG}); "
                "nothing in it was changed — choose a new or empty folder"
            )
        if self.mode == "new" and self._occupied():
            raise RunFolderError(
                f"--out {self.path} already holds a run; pass --resume to continue it or --overwrite to replace it"
                if self.cannot_resume is None
                else f"--out {self.path} already holds a run, and {self.cannot_resume}; pass --overwrite to "
                "replace it or choose another --out"
            )
        if self.mode == "resume" and self._occupied():
            self._check_same_config()

    def _occupied(self) -> bool:
        return self.path.is_dir() and any(p.name != LOCK for p in self.path.iterdir())

    def _check_same_config(self) -> None:
        stored_path = self.path / CONFIG
        stored = _read_json(
            stored_path, missing=f"cannot resume {self.path}: it has no {CONFIG} (not a run folder)"
        )
        if not isinstance(stored, dict) or not isinstance(stored.get("config", {}), dict):
            raise RunFolderError(f"cannot resume: {stored_path} does not hold a 'config' mapping")
        diff = config_differences(stored.get("config", {}), json.loads(json.dumps(self.config)))
        if diff:
            raise RunFolderError(
                f"cannot resume {self.path}: it was run with another configuration ({'; '.join(diff)}); "
                "pass --overwrite to replace it or choose another --out"
            )

    # --------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> RunFolder:
        self.check()
        make_folder(self.path)
        self._lock_fd = acquire_lock(self.path)
        try:
            self.check()  # re-check under the lock: another writer may have finished meanwhile
            self._prepare()
        except BaseException:
            self._release()
            raise
        return self

    def _prepare(self) -> None:
        if self.mode == "overwrite":
            for child in self.path.iterdir():
                if child.name == LOCK:
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        self.resumed = self.mode == "resume" and (self.path / CONFIG).is_file()
        clean_interrupted(self.path)
        # before the manifest goes: drop_damaged_models may refuse the resume
        self.damaged = drop_damaged_models(self.path) if self.resumed else []
        (self.path / MANIFEST).unlink(missing_ok=True)
        if self.damaged:
            warnings.warn(
                f"resuming {self.path}: checkpoint(s) {self.damaged} failed their integrity check and were "
                "removed; the jobs that wrote them run again",
                UserWarning,
                stacklevel=2,
            )
        atomic_write_json(self.path / CONFIG, {"config": self.config})

    def complete(self, **extra: Any) -> Path:
        """Write ``manifest.json`` (configuration, every file's size and SHA-256, ``complete: true``)."""
        if self._lock_fd is None:
            raise RuntimeError("RunFolder.complete() called outside the `with` block")
        files = {
            p.relative_to(self.path).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
            for p in _payload_files(self.path)
            if not _TMP.match(p.name)
        }
        manifest = {"config": self.config, "files": files, "complete": True, **extra}
        return atomic_write_json(self.path / MANIFEST, manifest)

    def _release(self) -> None:
        if self._lock_fd is not None:
            release_lock(self._lock_fd)
            self._lock_fd = None

    def __exit__(self, *exc_info: object) -> None:
        self._release()
