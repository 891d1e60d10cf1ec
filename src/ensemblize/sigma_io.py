"""Save and restore a σN ensemble: :func:`save_ensemble` / :func:`load_ensemble`.

>>> ez.save_ensemble(ens, "runs/bert_sigma")            # runs/bert_sigma.safetensors + .json
>>> ens2 = ez.load_ensemble("runs/bert_sigma", base_model)   # base_model: a fresh, unconverted model

Files (written atomically by :func:`ensemblize.checkpoint.save_checkpoint`, no pickle):

* ``PATH.safetensors`` — the ensemble's full ``state_dict`` (shared weights, σNorm weights, per-member
  biases and gate logits, running statistics), exact values;
* ``PATH.json`` — ``format``, ``settings`` (the ensemble's :attr:`~ensemblize.SigmaEnsemble.settings`:
  the ``sigma_ensemble`` keywords ``members``, ``noise``, ``seed``, ``gate_init`` and ``layers``, the
  layer selection as the list of converted names or ``null`` for all), ``converted`` (the names of
  the σNorm layers, in order), the backbone's class, every state entry's name, shape and dtype in
  order, ``frozen`` (the parameters with ``requires_grad=False``, re-frozen on load), ``check_rows``
  (the ensemble's row check, restored on load) and the checkpoint hashes (tensor file and metadata).

Buffers registered with ``persistent=False`` are not part of a ``state_dict``: the reloaded ensemble
takes them from ``base_model`` (build it as the saved one was built).

Loading converts ``base_model`` again with the saved settings (``noise=0``: the gates come from the
file, and no random numbers are drawn; ``noise`` and ``seed`` are kept as a record of how the
ensemble was made: the loaded ensemble's ``settings`` are the saved ones), checks that the same layers were converted and that every
state entry matches in name, shape and dtype — the FIRST mismatch is named in a ValueError — then
loads the tensors strictly. The reloaded ensemble predicts bitwise identically to the saved one (same
device and dtype) and is returned in eval mode.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .checkpoint import CheckpointError, load_checkpoint, load_checkpoint_meta, save_checkpoint
from .sigma.convert import SigmaEnsemble, sigma_ensemble

__all__ = ["save_ensemble", "load_ensemble", "FORMAT", "REQUIRED"]

FORMAT = "ensemblize.sigma_ensemble/1"


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


#: Keys of the JSON side that :func:`load_ensemble` needs, with their types.
REQUIRED = {"format": str, "settings": dict, "converted": list, "entries": list}

#: ``sigma_ensemble`` keywords that rebuild the structure (``noise`` / ``seed`` only drew the initial
#: gates, which the tensor file overrides).
_STRUCTURE = ("members", "gate_init", "layers")


def _entries(state: dict[str, Tensor]) -> list[list[Any]]:
    return [[name, list(t.shape), str(t.dtype)] for name, t in state.items()]


def save_ensemble(model: SigmaEnsemble, path: str | os.PathLike) -> Path:
    """Write ``path.safetensors`` + ``path.json`` for a :class:`~ensemblize.SigmaEnsemble`; returns the stem.

    See the module docstring for the contents. Raises TypeError for anything but a SigmaEnsemble.
    """
    if not isinstance(model, SigmaEnsemble):
        raise TypeError(
            f"save_ensemble expects a SigmaEnsemble (from ez.sigma_ensemble), got {type(model).__name__}"
        )
    state = model.state_dict()
    meta = {
        "format": FORMAT,
        "settings": dict(model.settings),
        "converted": list(model.converted),
        "backbone_class": _qualname(model.backbone),
        "entries": _entries(state),
        "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
        "check_rows": bool(model.check_rows),
    }
    return save_checkpoint(path, state, meta)


def _structure(settings: dict[str, Any], *, source: str) -> dict[str, Any]:
    """The keywords that rebuild the structure; unknown keys are a CheckpointError naming ``source``."""
    accepted = inspect.signature(sigma_ensemble).parameters
    unknown = sorted(k for k in settings if k not in accepted or k == "model")
    if unknown:
        raise CheckpointError(f"{source}: key 'settings' holds unknown sigma_ensemble keyword(s) {unknown}")
    return {k: settings[k] for k in _STRUCTURE if settings.get(k) is not None}


def _first_mismatch(saved: list[list[Any]], now: list[list[Any]]) -> str | None:
    for i in range(max(len(saved), len(now))):
        a = saved[i] if i < len(saved) else None
        b = now[i] if i < len(now) else None
        if a != b:
            if a is None:
                return f"the base model has an extra entry {b[0]!r} {tuple(b[1])} {b[2]}"
            if b is None:
                return f"the saved ensemble has an extra entry {a[0]!r} {tuple(a[1])} {a[2]}"
            return (
                f"entry {i}: saved {a[0]!r} {tuple(a[1])} {a[2]} vs base model {b[0]!r} {tuple(b[1])} {b[2]}"
            )
    return None


def _what_file(meta: dict[str, Any]) -> str:
    """A hint naming what a foreign ensemblize file is and how it loads."""
    if "kind" in meta and "preprocessor" in meta:
        return f"; it is a saved tabular estimator ({meta['kind']}): load it with {meta['kind']}.load(path)"
    fmt = meta.get("format")
    if fmt == "ensemblize.method/1":
        return "; it is a model saved by an ensemblize run: `ensemblize evaluate RUN_DIR` rebuilds it"
    if isinstance(fmt, str) and fmt.startswith("ensemblize.training/"):
        return "; it is a training checkpoint: pass it to fit(..., resume=...)"
    return ""


def load_ensemble(
    path: str | os.PathLike, base_model: nn.Module, *, device: str = "cpu", check_class: bool = True
) -> SigmaEnsemble:
    """Rebuild the ensemble saved at ``path`` from ``base_model`` (unconverted, untouched) and load its state.

    ``base_model`` must be of the class the ensemble was saved from (compared by the class's own
    name; the module may differ, e.g. ``__main__`` vs an import path): parameters alone cannot tell two
    classes with the same layout but different ``forward`` apart. ``check_class=False`` skips that
    check (a renamed class).

    Raises ValueError naming the first mismatch when ``base_model`` has another class or architecture
    (other converted layers, or a state entry of another name, shape or dtype), and the errors of
    :func:`ensemblize.checkpoint.load_checkpoint` for a damaged or foreign file.
    """
    meta = load_checkpoint_meta(path)
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a saved σN ensemble (format {meta.get('format')!r}, expected {FORMAT!r})"
            + _what_file(meta)
        )
    tensors, meta = load_checkpoint(path, device=device, required=REQUIRED)
    saved_class = meta.get("backbone_class")  # absent in files written before it was recorded
    if check_class and isinstance(saved_class, str):
        now_class = _qualname(base_model)
        if saved_class.rsplit(".", 1)[-1] != now_class.rsplit(".", 1)[-1]:
            raise ValueError(
                f"{path} was saved from a {saved_class}, but base_model is a {now_class}: a model of another "
                "class may compute something else with the same parameters. Pass a fresh instance of the "
                "saved class (check_class=False if it was only renamed)"
            )
    kwargs = _structure(meta["settings"], source=f"{path}.json")
    try:
        ens = sigma_ensemble(base_model, noise=0.0, **kwargs)
    except ValueError as exc:
        raise ValueError(
            f"base model {type(base_model).__name__} cannot be converted as saved: {exc}"
        ) from exc
    what = f"base model {type(base_model).__name__} does not match the ensemble saved from {meta.get('backbone_class')}"
    if ens.converted != meta["converted"]:
        pairs = zip(meta["converted"] + [None], ens.converted + [None], strict=False)
        saved, now = next((a, b) for a, b in pairs if a != b)
        if saved is None:
            detail = f"the base model has an extra norm layer {now!r}"
        elif now is None:
            detail = f"the base model lacks the norm layer {saved!r}"
        else:
            detail = f"saved {saved!r} vs {now!r}"
        raise ValueError(f"{what}: first mismatch in the converted norm layers: {detail}")
    mismatch = _first_mismatch(meta["entries"], _entries(ens.state_dict()))
    if mismatch is not None:
        raise ValueError(f"{what}: first mismatch at {mismatch}")
    ens.load_state_dict(tensors, strict=True)
    frozen = meta.get("frozen") or []  # absent in files written before it was recorded
    params = dict(ens.named_parameters())
    unknown = [n for n in frozen if not isinstance(n, str) or n not in params]
    if unknown:
        raise CheckpointError(f"{path}.json: key 'frozen' names parameters the ensemble lacks: {unknown[:3]}")
    for name in frozen:
        params[name].requires_grad_(False)
    # the conversion's record as saved (its noise and seed; the rebuild itself used noise 0 and
    # then loaded the trained gates), so saving the loaded ensemble writes the same record again
    ens.settings = {**ens.settings, **{k: v for k, v in meta["settings"].items() if k in ens.settings}}
    check_rows = meta.get("check_rows", True)  # absent in files written before it was recorded
    if not isinstance(check_rows, bool):
        raise CheckpointError(f"{path}.json: key 'check_rows' must be true or false, got {check_rows!r}")
    ens.check_rows = check_rows
    ens.to(device)
    return ens.eval()
