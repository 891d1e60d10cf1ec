"""Training state without pickle: nested state dicts split into safetensors tensors and JSON.

:func:`encode` walks a nested structure (an optimizer ``state_dict``, say), moves every tensor into
a flat ``{name: tensor}`` mapping and returns a JSON-serialisable skeleton that refers to them by
name; :func:`decode` reverses it exactly. Dicts are always tagged (``{"__map__": ...}`` when every
key is a string, ``{"__pairs__": [[k, v], ...]}`` otherwise, so integer keys stay integers) and
tuples are tagged too, so ``decode(encode(x)) == x`` including key and container types.

Training checkpoints live in one folder as ``epoch_NNNN.safetensors`` + ``epoch_NNNN.json`` pairs
written with :func:`ensemblize.checkpoint.save_checkpoint` (JSON last, so a pair whose JSON exists
is complete). A new epoch never overwrites an older pair; older pairs are removed only after the
new one is complete, so a kill at any moment leaves at least one complete checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from ..checkpoint import load_checkpoint, save_checkpoint

__all__ = [
    "encode",
    "decode",
    "checkpoint_stem",
    "latest_checkpoint",
    "write_epoch",
    "clear_checkpoints",
    "remove_temporaries",
]

_STEM = re.compile(r"^epoch_(\d{4,})$")


def encode(obj: Any, prefix: str, tensors: dict[str, Tensor]) -> Any:
    """Return a JSON-able skeleton of ``obj``; its tensors are added to ``tensors`` as ``prefix<k>``."""
    if isinstance(obj, Tensor):
        name = f"{prefix}{len(tensors)}"
        tensors[name] = obj
        return {"__tensor__": name}
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj):
            return {"__map__": {k: encode(v, prefix, tensors) for k, v in obj.items()}}
        return {
            "__pairs__": [[encode(k, prefix, tensors), encode(v, prefix, tensors)] for k, v in obj.items()]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, prefix, tensors) for v in obj]}
    if isinstance(obj, list):
        return [encode(v, prefix, tensors) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store an object of type {type(obj).__name__} in a training checkpoint")


def decode(obj: Any, tensors: Mapping[str, Tensor]) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        if set(obj) == {"__map__"}:
            return {k: decode(v, tensors) for k, v in obj["__map__"].items()}
        if set(obj) == {"__pairs__"}:
            return {decode(k, tensors): decode(v, tensors) for k, v in obj["__pairs__"]}
        if set(obj) == {"__tuple__"}:
            return tuple(decode(v, tensors) for v in obj["__tuple__"])
        raise ValueError(f"unrecognised entry in training checkpoint: keys {sorted(obj)}")
    return obj


def checkpoint_stem(folder: str | Path, epoch: int) -> Path:
    """``folder/epoch_NNNN`` (no suffix)."""
    return Path(folder) / f"epoch_{epoch:04d}"


def _complete_epochs(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    epochs = []
    for meta in folder.glob("epoch_*.json"):
        m = _STEM.match(meta.stem)
        if m and meta.with_suffix(".safetensors").is_file():
            epochs.append(int(m.group(1)))
    return sorted(epochs)


def latest_checkpoint(folder: str | Path) -> tuple[dict[str, Tensor], dict] | None:
    """Load the newest complete checkpoint in ``folder`` (``None`` if there is none)."""
    epochs = _complete_epochs(Path(folder))
    if not epochs:
        return None
    return load_checkpoint(checkpoint_stem(folder, epochs[-1]))


def write_epoch(
    folder: str | Path, epoch: int, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]
) -> Path:
    """Write the pair for ``epoch``, then delete the pairs of earlier epochs (JSON first)."""
    folder = Path(folder)
    stem = save_checkpoint(checkpoint_stem(folder, epoch), tensors, meta)
    for old in _complete_epochs(folder):
        if old < epoch:
            checkpoint_stem(folder, old).with_suffix(".json").unlink(missing_ok=True)
            checkpoint_stem(folder, old).with_suffix(".safetensors").unlink(missing_ok=True)
    return stem


def remove_temporaries(folder: str | Path) -> None:
    """Remove temporary files left by a checkpoint write that was killed half-way."""
    folder = Path(folder)
    if folder.is_dir():
        for path in folder.glob(".epoch_*.tmp"):
            path.unlink(missing_ok=True)


def clear_checkpoints(folder: str | Path) -> None:
    """Remove every ``epoch_NNNN`` pair and stale temporary file written by a training run in ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        stem = path.name.split(".")[0]
        if _STEM.match(stem) and path.suffix in (".json", ".safetensors"):
            path.unlink(missing_ok=True)
    remove_temporaries(folder)
