"""Data-parallel support for :func:`ensemblize.training.fit` (torchrun / DistributedDataParallel).

The same ``fit`` call runs unchanged under ``torchrun --nproc_per_node=N``:

* :func:`setup` finds an initialised process group, or initialises one from the torchrun
  environment variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) with the gloo
  backend on CPU (nccl on CUDA);
* training batches are sharded like ``DistributedSampler``: one permutation per epoch (the same on
  every rank, seeded by ``(seed, epoch)``), padded by wrapping around to a multiple of the world
  size, rank ``r`` taking positions ``r::world``;
* evaluation is sharded WITHOUT padding (rank ``r`` takes sample indices ``r::world``) and the
  per-sample results are gathered with their indices, so every sample is evaluated exactly once
  (:func:`ensemblize.training.predict.sharded_predict` returns the raw gathered indices so that this
  can be checked);
* only rank 0 writes checkpoints, files or progress output.

Ending a script: with torch 2.13 on CPU, the gloo teardown at interpreter exit intermittently
aborts a worker after all its work is done ("terminate called without an active exception", about
one run in ten here). End worker scripts with ``dist.barrier(); dist.destroy_process_group()`` and,
after flushing your outputs, ``os._exit(0)`` (see ``tests/training_scripts/ddp_fit.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = [
    "DistContext",
    "current",
    "setup",
    "train_shard",
    "eval_shard",
    "gather",
    "all_reduce_sum",
    "broadcast_buffers",
    "check_coverage",
    "wrap",
]

_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: ``rank`` in ``[0, world_size)``; ``enabled`` iff ``world_size > 1``."""

    rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that writes files or shows progress."""
        return self.rank == 0


def current() -> DistContext:
    """The context of an already-initialised process group (never initialises one)."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size())
    return DistContext()


def setup(device: str | torch.device = "cpu") -> DistContext:
    """Return the distributed context, initialising the process group from torchrun's variables if needed.

    Backend: ``nccl`` for a CUDA ``device`` (when available), otherwise ``gloo``. A group that this
    function initialises is left initialised (the caller may ``destroy_process_group`` at the end).
    """
    if not dist.is_available():
        return DistContext()
    if dist.is_initialized():
        return current()
    if all(k in os.environ for k in _TORCHRUN_ENV) and int(os.environ["WORLD_SIZE"]) > 1:
        cuda = torch.device(device).type == "cuda"
        backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
        dist.init_process_group(backend=backend)
        return current()
    return DistContext()


def train_shard(perm: Tensor, ctx: DistContext) -> Tensor:
    """This rank's share of an epoch order (rows of a ``(N,)`` or ``(N, M)`` order), padded by
    wrap-around so all ranks get equally many rows."""
    if not ctx.enabled:
        return perm
    n = perm.shape[0]
    total = -(-n // ctx.world_size) * ctx.world_size
    if total > n:
        reps = -(-total // n)
        perm = perm.repeat(reps, *([1] * (perm.dim() - 1)))[:total]
    return perm[ctx.rank :: ctx.world_size]


def wrap(module: torch.nn.Module, device: torch.device, ctx: DistContext) -> torch.nn.Module:
    """``module`` in DistributedDataParallel when distributed (parameters broadcast from rank 0), else itself."""
    if not ctx.enabled:
        return module
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)


def eval_shard(n: int, ctx: DistContext) -> Tensor:
    """Sample indices ``rank::world`` of ``range(n)``: no padding, every index on exactly one rank."""
    return torch.arange(ctx.rank, n, ctx.world_size)


def gather(obj: Any, ctx: DistContext) -> list[Any]:
    """``[obj_rank0, obj_rank1, ...]`` on every rank (``[obj]`` when not distributed)."""
    if not ctx.enabled:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(values: Tensor, ctx: DistContext) -> Tensor:
    """Sum a CPU tensor over ranks (returns a new tensor; identity when not distributed)."""
    values = values.detach().clone()
    if ctx.enabled:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def broadcast_buffers(module: torch.nn.Module, ctx: DistContext) -> None:
    """Copy rank 0's buffers (e.g. BatchNorm running statistics) to every rank, in place."""
    if not ctx.enabled:
        return
    for buf in module.buffers():
        dist.broadcast(buf.data, src=0)


def check_coverage(indices: Tensor, n: int) -> None:
    """Raise RuntimeError unless ``indices`` holds every integer in ``[0, n)`` exactly once."""
    counts = torch.bincount(indices, minlength=n) if indices.numel() else torch.zeros(n, dtype=torch.long)
    if indices.numel() != n or counts.numel() != n or bool((counts != 1).any()):
        raise RuntimeError(
            f"gathered evaluation does not cover each of the {n} samples exactly once "
            f"(got {indices.numel()} results)"
        )
