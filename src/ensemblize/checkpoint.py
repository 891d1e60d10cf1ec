"""Safe persistence: tensors in safetensors, everything else in JSON, every file written atomically.

Nothing here unpickles. A checkpoint ``NAME`` is two files, ``NAME.safetensors`` and ``NAME.json``;
each is written to a temporary file in the same folder, flushed, fsynced and renamed over the
target, so a kill at any moment leaves either the old file or the new one, never half of one.
The JSON side is written last and carries the SHA-256 of the tensor file's bytes, so a pair whose
halves come from different writes (a kill between the two renames) is detected at load; it also
carries a fingerprint of the tensors' names and shapes so that loading a checkpoint into a
different model fails with a message naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "save_tensors",
    "load_tensors",
    "save_checkpoint",
    "load_checkpoint",
    "state_fingerprint",
    "load_state_strict",
]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a same-folder temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, Tensor]) -> Path:
    """Atomically write a flat ``{name: tensor}`` mapping as safetensors (tensors made contiguous, on CPU)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(clean, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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


def save_checkpoint(stem: str | os.PathLike, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> Path:
    """Write ``stem.safetensors`` then ``stem.json`` (the JSON last: it marks the pair complete).

    ``meta`` must be JSON-serialisable; the tensors' fingerprint is added under ``"fingerprint"``
    and the tensor file's SHA-256 under ``"sha256"``.
    """
    tensor_path, meta_path = checkpoint_paths(stem)
    save_tensors(tensor_path, tensors)
    atomic_write_json(
        meta_path,
        {**meta, "fingerprint": state_fingerprint(tensors), "sha256": _file_sha256(tensor_path)},
    )
    return Path(stem)


def load_checkpoint(
    stem: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[dict[str, Tensor], dict]:
    """Read a pair written by :func:`save_checkpoint`; raises ValueError if the pair does not match."""
    tensor_path, meta_path = checkpoint_paths(stem)
    if not meta_path.is_file():
        raise FileNotFoundError(f"no checkpoint metadata at {meta_path}")
    meta = json.loads(meta_path.read_text())
    if not tensor_path.is_file():
        raise FileNotFoundError(f"no tensor file at {tensor_path}")
    if "sha256" in meta and meta["sha256"] != _file_sha256(tensor_path):
        raise ValueError(
            f"checkpoint {stem}: tensor file does not match its metadata (content hash differs); "
            "it was modified or a write was interrupted"
        )
    tensors = load_tensors(tensor_path, device=device)
    if meta.get("fingerprint") not in (None, state_fingerprint(tensors)):
        raise ValueError(f"checkpoint {stem}: tensor file does not match its metadata (fingerprint differs)")
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
