"""Safe persistence: tensors in safetensors, everything else in JSON, every file written atomically.

Nothing here unpickles. A checkpoint ``NAME`` is two files, ``NAME.safetensors`` and ``NAME.json``;
each is written to a temporary file in the same folder, flushed, fsynced and renamed over the
target, so a kill at any moment leaves either the old file or the new one, never half of one. The
pair is atomic too: the JSON is staged as ``NAME.json.pending`` before the tensors are renamed into
place and renamed over ``NAME.json`` after, and :func:`load_checkpoint` reads whichever JSON matches
the tensor file, so a save killed at any moment leaves the old checkpoint or the new one loadable.
Written files get the usual ``0666 & ~umask`` permissions (0644 under umask 022), not the
temporary file's 0600.

Integrity. The JSON side is written last and carries three hashes:

* ``sha256`` — SHA-256 of the tensor file's bytes, so a pair whose halves come from different
  writes (a kill between the two renames) or an edited/truncated tensor file is detected;
* ``fingerprint`` — the tensors' names, shapes and dtypes, so loading into a different model fails
  with a message naming what differs;
* ``meta_sha256`` — SHA-256 of the canonical JSON of every other key (classes, column mapping,
  preprocessing, ``stopped``, ``epoch`` … and the two hashes above), so editing the metadata —
  e.g. swapping ``classes`` — is detected too.

:func:`load_checkpoint` verifies all three before returning anything; a missing hash is an error,
not a skipped check, and malformed JSON raises a ValueError naming the file (and the key, for a
missing or mistyped entry).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ._checks import check_instance

__all__ = [
    "CheckpointError",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "save_tensors",
    "load_tensors",
    "save_checkpoint",
    "load_checkpoint",
    "load_checkpoint_meta",
    "verify_checkpoint",
    "checkpoint_paths",
    "settle_interrupted_save",
    "state_fingerprint",
    "load_state_strict",
]


#: Keys that :func:`save_checkpoint` adds to the metadata; a caller's ``meta`` may not use them.
HASH_KEYS = ("fingerprint", "sha256", "meta_sha256")


class CheckpointError(ValueError):
    """A checkpoint pair that cannot be trusted: malformed, incomplete, edited or mismatched."""


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (no race with other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:  # pragma: no cover - not Linux
        pass
    mask = os.umask(0o022)  # pragma: no cover
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def _publish(tmp: str | Path, path: Path) -> None:
    """Give ``tmp`` regular-file permissions (``0666 & ~umask``) and rename it over ``path``."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def _staged(path: Path, write: Callable[[str], None]) -> str:
    """Run ``write(tmp)`` on a same-folder temporary file for ``path`` and fsync it; return ``tmp``
    (removed again if ``write`` fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Run ``write(tmp)`` on a same-folder temporary file, fsync it, then rename it over ``path``."""
    path = Path(path)
    tmp = _staged(path, write)
    try:
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a same-folder temporary file and ``os.replace``.

    The file ends with ``0666 & ~umask`` permissions, like a plain ``open(path, "wb")``.
    """
    return _atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Atomically write UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON (NaN is written as ``NaN``; Python's json reads it back)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return obj.tolist()
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _cpu_contiguous(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, Tensor]) -> Path:
    """Atomically write a flat ``{name: tensor}`` mapping as safetensors (tensors made contiguous, on CPU)."""
    clean = _cpu_contiguous(tensors)
    return _atomic_write(path, lambda tmp: save_file(clean, tmp))


def load_tensors(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Read a safetensors file (no pickle involved)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tensor file at {path}")
    return load_file(str(path), device=str(device))


def state_fingerprint(tensors: Mapping[str, Tensor]) -> str:
    """A short hash of the names, shapes and dtypes of ``tensors`` (not their values)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
    return h.hexdigest()[:16]


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_paths(stem: str | os.PathLike) -> tuple[Path, Path]:
    """``(stem.safetensors, stem.json)``; the suffixes are appended, so dots in the name are kept.

    A ``stem`` already ending in ``.safetensors`` or ``.json`` names the pair it belongs to.
    """
    stem = Path(stem)
    name = stem.name
    for suffix in (".safetensors", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if not name:
        raise ValueError(f"checkpoint name is empty: {stem}")
    return stem.with_name(name + ".safetensors"), stem.with_name(name + ".json")


def _pending(meta_path: Path) -> Path:
    """Where :func:`save_checkpoint` stages the JSON half of a pair it has not finished publishing."""
    return meta_path.with_name(meta_path.name + ".pending")


def _settled_meta_path(tensor_path: Path, meta_path: Path) -> Path:
    """The JSON half that describes the tensor file on disk: ``stem.json`` — or, after a save that was
    killed between publishing the tensors and publishing their JSON, the pending JSON it staged."""
    pending = _pending(meta_path)
    if not pending.is_file() or not tensor_path.is_file():
        return meta_path
    try:
        staged = _read_meta(pending)
    except (CheckpointError, OSError):
        return meta_path  # a damaged staging file: never trusted
    return pending if staged["sha256"] == _file_sha256(tensor_path) else meta_path


def settle_interrupted_save(stem: str | os.PathLike) -> bool:
    """Finish or undo a :func:`save_checkpoint` of ``stem`` that was killed midway; True if one was found.

    A pending JSON whose tensor file is already in place is published (the save completes); one whose
    tensors never arrived is removed (the previous pair, if any, stays). Loading needs no such step —
    :func:`load_checkpoint` reads whichever JSON matches the tensors — but a run folder settles its
    checkpoints on entry so that no staging file outlives the run.
    """
    tensor_path, meta_path = checkpoint_paths(stem)
    pending = _pending(meta_path)
    if not pending.is_file():
        return False
    if _settled_meta_path(tensor_path, meta_path) == pending:
        os.replace(pending, meta_path)
    else:
        pending.unlink(missing_ok=True)
    return True


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _meta_hash(meta: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``meta`` without its ``meta_sha256`` entry."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(_canonical_json(body).encode("utf-8")).hexdigest()


def save_checkpoint(stem: str | os.PathLike, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> Path:
    """Write ``stem.safetensors`` then ``stem.json`` (the JSON last: it marks the pair complete).

    Overwriting an existing pair is atomic as a whole: killed at any moment, the save leaves the old
    checkpoint or the new one loadable by :func:`load_checkpoint` (see the module doc).

    ``meta`` must be a JSON-serialisable mapping with string keys, not using :data:`HASH_KEYS`; the
    tensors' fingerprint is added under ``"fingerprint"``, the tensor file's SHA-256 under
    ``"sha256"`` and the SHA-256 of the canonical JSON of everything else under ``"meta_sha256"``.
    Returns the pair's stem (``model`` for ``model``, ``model.json`` or ``model.safetensors``).
    """
    check_instance(meta, Mapping, name="meta", what="a mapping")
    check_instance(tensors, Mapping, name="tensors", what="a mapping of names to tensors")
    bad = [k for k, v in tensors.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        k = bad[0]
        raise TypeError(
            f"tensors must map str names to torch tensors; entry {k!r} is a {type(tensors[k]).__name__}"
        )
    odd_keys = [k for k in meta if not isinstance(k, str)]
    if odd_keys:
        raise TypeError(f"meta keys must be strings (JSON object keys), got {odd_keys[0]!r}")
    reserved = sorted(k for k in meta if k in HASH_KEYS)
    if reserved:
        raise ValueError(f"meta may not set {reserved}: save_checkpoint writes those keys itself")
    if Path(stem).is_dir():
        raise ValueError(
            f"{str(stem)!r} is a folder; pass a file stem inside it, e.g. {str(Path(stem) / 'model')!r} "
            "(writes model.safetensors + model.json)"
        )
    try:  # before any file is written: a meta that JSON cannot hold leaves nothing behind
        json.dumps(meta, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint metadata is not JSON-serialisable: {exc}") from None
    tensor_path, meta_path = checkpoint_paths(stem)
    pending = _pending(meta_path)
    clean = _cpu_contiguous(tensors)
    staged = _staged(tensor_path, lambda tmp: save_file(clean, tmp))
    try:
        # the JSON round trip makes the hashed object exactly what load_checkpoint will read back
        body = json.loads(
            json.dumps(
                {**meta, "fingerprint": state_fingerprint(tensors), "sha256": _file_sha256(Path(staged))},
                default=_json_default,
            )
        )
        # the pair is published in three renames, each atomic: the JSON staged beside the old pair, the
        # tensors, then the JSON. A kill before the second leaves the old pair; between the second and
        # the third, the staged JSON matches the new tensors and load_checkpoint reads it
        atomic_write_json(pending, {**body, "meta_sha256": _meta_hash(body)})
        _publish(staged, tensor_path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        pending.unlink(missing_ok=True)
        raise
    os.replace(pending, meta_path)
    return tensor_path.with_name(tensor_path.name[: -len(".safetensors")])  # the stem, suffix-free


def _read_meta(meta_path: Path) -> dict:
    if not meta_path.is_file():
        raise FileNotFoundError(f"no checkpoint metadata at {meta_path}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{meta_path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{meta_path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError as exc:  # thousands of nested brackets: no checkpoint's metadata looks like that
        raise CheckpointError(f"{meta_path}: the JSON nests too deeply to be checkpoint metadata") from exc
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path}: the metadata must be a JSON object, got {type(meta).__name__}")
    for key in HASH_KEYS:
        if key not in meta:
            raise CheckpointError(
                f"{meta_path}: key {key!r} is missing, so the checkpoint's integrity cannot be verified "
                "(written by an older version, or edited); re-save it"
            )
        if not isinstance(meta[key], str):
            raise CheckpointError(
                f"{meta_path}: key {key!r} must be a string, got {type(meta[key]).__name__}"
            )
    if meta["meta_sha256"] != _meta_hash(meta):
        raise CheckpointError(
            f"{meta_path}: the metadata does not match its hash (key 'meta_sha256'); the JSON was edited "
            "or corrupted after it was written"
        )
    return meta


def check_meta_keys(
    meta: Mapping[str, Any], required: Mapping[str, type | tuple[type, ...]], *, source: object
) -> None:
    """Raise :class:`CheckpointError` naming ``source`` and the key unless every ``required`` key is present
    with a value of the given type(s). (``bool`` is not accepted where ``int`` is asked for.)"""
    for key, kind in required.items():
        if key not in meta:
            raise CheckpointError(f"{source}: required key {key!r} is missing")
        value = meta[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise CheckpointError(
                f"{source}: key {key!r} must be {names}, got {type(value).__name__} {value!r}"
            )


def load_checkpoint_meta(
    stem: str | os.PathLike, *, required: Mapping[str, type | tuple[type, ...]] | None = None
) -> dict:
    """The verified metadata of a pair written by :func:`save_checkpoint`, without reading the tensors.

    Checks that the JSON parses, that ``meta_sha256`` matches it, and (with ``required``) that each
    named key is present with the given type. The tensor file is *not* hashed here; use
    :func:`load_checkpoint` before trusting any tensor.
    """
    tensor_path, meta_path = checkpoint_paths(stem)
    meta = _read_meta(_settled_meta_path(tensor_path, meta_path))
    if required:
        check_meta_keys(meta, required, source=meta_path)
    return meta


def verify_checkpoint(stem: str | os.PathLike) -> dict:
    """Check a pair written by :func:`save_checkpoint` without loading its tensors: the JSON parses and
    matches ``meta_sha256``, and the tensor file exists and matches ``sha256``. Returns the metadata.

    Raises FileNotFoundError or :class:`CheckpointError` as :func:`load_checkpoint` does.
    """
    tensor_path, _ = checkpoint_paths(stem)
    meta = load_checkpoint_meta(stem)
    if not tensor_path.is_file():
        raise FileNotFoundError(f"no tensor file at {tensor_path}")
    if meta["sha256"] != _file_sha256(tensor_path):
        raise CheckpointError(
            f"checkpoint {stem}: tensor file {tensor_path.name} does not match its metadata (content hash, "
            "key 'sha256', differs); it was modified or a write was interrupted"
        )
    return meta


def load_checkpoint(
    stem: str | os.PathLike,
    device: str | torch.device = "cpu",
    *,
    required: Mapping[str, type | tuple[type, ...]] | None = None,
) -> tuple[dict[str, Tensor], dict]:
    """Read a pair written by :func:`save_checkpoint` after verifying it.

    Raises:
        FileNotFoundError: either file is missing.
        CheckpointError (a ValueError): malformed JSON; a hash key missing; the JSON edited
            (``meta_sha256``); the tensor file modified or from another write (``sha256``,
            ``fingerprint``); a ``required`` key missing or of the wrong type — each naming the file
            and the key.
    """
    tensor_path, meta_path = checkpoint_paths(stem)
    meta = verify_checkpoint(stem)
    if required:
        check_meta_keys(meta, required, source=meta_path)
    tensors = load_tensors(tensor_path, device=device)
    if meta["fingerprint"] != state_fingerprint(tensors):
        raise CheckpointError(
            f"checkpoint {stem}: tensor file does not match its metadata (key 'fingerprint' differs)"
        )
    return tensors, meta


def load_state_strict(module: nn.Module, state: Mapping[str, Tensor], *, what: str = "checkpoint") -> None:
    """Load ``state`` into ``module``; raise ValueError naming missing, unexpected or mis-shaped entries."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{k}: model {tuple(own[k].shape)} vs {what} {tuple(state[k].shape)}"
        for k in sorted(set(own) & set(state))
        if tuple(own[k].shape) != tuple(state[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{' …' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}")
        if shapes:
            parts.append(f"shape mismatch {shapes[:5]}")
        raise ValueError(f"{what} is from a different model: " + "; ".join(parts))
    module.load_state_dict(dict(state), strict=True)
