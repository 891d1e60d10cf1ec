"""How-to: train on several processes or GPUs with ``torchrun`` — the same script, unchanged.

Run it:
    python docs/howto/torchrun_fit.py --small                               # one process
    torchrun --standalone --nproc_per_node=2 docs/howto/torchrun_fit.py --small   # two CPU processes
    torchrun --standalone --nproc_per_node=4 docs/howto/torchrun_fit.py --device cuda   # 4 GPUs
    # several machines: torchrun --nnodes=2 --node_rank=R --master_addr=HOST --master_port=29500 ...

What happens under torchrun (``ensemblize.training.distributed``):

* ``fit`` finds torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), initialises the
  process group (gloo on CPU, nccl on CUDA; each process takes GPU ``LOCAL_RANK``) and wraps the
  model in DistributedDataParallel. Nothing in your code changes.
* ``batch_size`` is per process: with N processes an optimisation step sees N × batch_size samples.
  Each epoch is one permutation shared by every rank, sharded rank by rank.
* Validation and ``predict`` are sharded without padding and gathered, so every sample is scored
  exactly once; every rank gets the full result.
* Only rank 0 prints progress and writes checkpoints. Write your own files on rank 0 only, too.
* Ending: with torch 2.13 on CPU, gloo's teardown at interpreter exit intermittently aborts a
  worker after all its work is done. End with a barrier, destroy the group, flush, ``os._exit(0)``
  (the last lines of ``main`` below).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import ensemblize as ez
from ensemblize.data.images import load_digits

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = ("ensemblize.sigma_ensemble", "ensemblize.training.fit", "ensemblize.training.predict")


def main(small: bool, device: str, out: str | None) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    data = load_digits(seed=0)
    width = 16 if small else 32
    backbone = nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
    )  # fmt: skip
    model = ez.sigma_ensemble(backbone, members=4, seed=0)
    ez.training.fit(
        model, (data.x_train, data.y_train), (data.x_val, data.y_val),
        epochs=2 if small else 15, batch_size=64, optimizer="adamw", lr=1e-2, seed=0, device=device,
    )  # fmt: skip
    probs = ez.training.predict(model, data.x_test, device=device)  # every rank: all N test samples
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    if rank == 0:
        acc = ez.metrics.accuracy(probs, data.y_test)
        print(f"{world} process(es): test accuracy {acc:.3f} on {probs.shape[0]} samples")
        if out:
            with open(out, "w") as fh:
                json.dump({"world_size": world, "accuracy": acc, "test_samples": int(probs.shape[0])}, fh)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of a minute")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    args = parser.parse_args()
    main(args.small, args.device, args.out)
