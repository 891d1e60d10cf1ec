"""Checkpoints of :func:`ensemblize.training.fit`: save an epoch, resume only the very same run.

A checkpoint (``epoch_NNNN.safetensors`` + ``.json``, see :mod:`ensemblize.training.state`) holds the
model, the best weights so far, the weight average (``ema_decay``), the optimiser state, the torch RNG state, the history, the
early-stopping state and the run's configuration. The configuration includes every training
option (the loss, regulariser and decay filter by what they compute:
:func:`ensemblize.training.identity.callable_identity`), the ``seed``, a fingerprint of the training and validation data
(:meth:`ensemblize.training.data.Source.fingerprint`) and a fingerprint of the model's initial
weights (:func:`weights_fingerprint`). Resuming requires all of them to match: a different seed, data
set, initialisation or option is a ValueError naming every differing field, e.g.
``seed: checkpoint 0 vs now 1; train_data: checkpoint 3f… vs now 9a…``. A model of another
architecture is reported first, naming the differing tensors. A resume is announced on stderr
(rank 0): ``fit: resuming from epoch N in DIR``.
"""

from __future__ import annotations

import copy
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..checkpoint import load_state_strict
from . import state as S

__all__ = ["LoopState", "weights_fingerprint", "restore", "save"]

FORMAT = "ensemblize.training/3"  # 3: the loss, regulariser and decay filter by what they compute


@dataclass
class LoopState:
    """Everything that changes from epoch to epoch and must survive a kill."""

    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_key: list[float] | None = None
    best_epoch: int | None = None
    since_best: int = 0
    plateau_cuts: int = 0
    best_state: dict[str, Tensor] | None = None
    stopped: bool = False
    stopped_early: bool = False
    resumed_from: int | None = None


def weights_fingerprint(module: nn.Module) -> str:
    """SHA-256 (16 hex digits) of every state entry's name, shape, dtype and up to 4,096 sampled values."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        flat = t.detach().reshape(-1).cpu()
        if flat.numel() > 4096:
            flat = flat[torch.linspace(0, flat.numel() - 1, 4096).long()]
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        if not flat.is_complex():
            h.update(flat.to(torch.float64).numpy().tobytes())
    return h.hexdigest()[:16]


def _check_config(module: nn.Module, state: dict[str, Tensor], meta: dict, config: dict, what: str) -> None:
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{what} is not a training checkpoint of this version (format {meta.get('format')!r})"
        )
    saved = meta.get("config", {})
    keys = list(dict.fromkeys([*config, *saved]))
    diff = [
        f"{k}: checkpoint {saved.get(k)!r} vs now {config.get(k)!r}"
        for k in keys
        if saved.get(k) != config.get(k)
    ]
    if diff:
        load_state_strict(copy.deepcopy(module), state, what=what)  # a different model is reported first
        raise ValueError(
            f"{what} was written with a different configuration ({'; '.join(diff)}); "
            "pass resume=False or another checkpoint_dir"
        )


def restore(
    folder: Path,
    module: nn.Module,
    opt: torch.optim.Optimizer,
    config: dict,
    *,
    device: torch.device,
    announce: bool,
    ema: Any = None,
) -> LoopState:
    """The loop state of the newest checkpoint in ``folder`` loaded into ``module``/``opt`` (fresh if none)."""
    loaded = S.latest_checkpoint(folder)
    if loaded is None:
        return LoopState()
    tensors, meta = loaded
    what = f"checkpoint in {folder}"
    model_state = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    _check_config(module, model_state, meta, config, what)
    load_state_strict(module, model_state, what=what)
    opt.load_state_dict(S.decode(meta["optimizer"], tensors))
    torch.set_rng_state(tensors["rng.torch"])
    best = {k[5:]: v.to(device) for k, v in tensors.items() if k.startswith("best.")}
    if ema is not None:  # the config matched, so the checkpoint has the average (ema_decay is in it)
        ema.load_state_dict({k[4:]: v.to(device) for k, v in tensors.items() if k.startswith("ema.")})
    epoch = int(meta["epoch"])
    if announce:
        print(f"fit: resuming from epoch {epoch} in {folder}", file=sys.stderr, flush=True)
    return LoopState(
        epoch=epoch,
        history=meta["history"],
        best_key=meta["best_key"],
        best_epoch=meta["best_epoch"],
        since_best=meta["since_best"],
        plateau_cuts=int(meta.get("plateau_cuts", 0)),
        best_state=best or None,
        stopped=meta["stopped"],
        stopped_early=meta["stopped_early"],
        resumed_from=epoch,
    )


def save(folder: Path, module: nn.Module, opt: torch.optim.Optimizer, config: dict, st: LoopState, *,
         ema: Any = None) -> None:  # fmt: skip
    """Write the checkpoint of epoch ``st.epoch`` (then older ones are removed); ``ema``: the run's
    :class:`~ensemblize.training.averaging.WeightAverage`, stored as ``ema.*`` tensors."""
    tensors: dict[str, Tensor] = {f"model.{k}": v for k, v in module.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v for k, v in ema.state_dict().items()})
    if st.best_state is not None:
        tensors.update({f"best.{k}": v for k, v in st.best_state.items()})
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {
        "format": FORMAT,
        "epoch": st.epoch,
        "history": st.history,
        "config": config,
        "best_key": st.best_key,
        "best_epoch": st.best_epoch,
        "since_best": st.since_best,
        "plateau_cuts": st.plateau_cuts,
        "stopped": st.stopped,
        "stopped_early": st.stopped_early,
        "optimizer": S.encode(opt.state_dict(), "optim.", tensors),
    }
    S.write_epoch(folder, st.epoch, tensors, meta)
