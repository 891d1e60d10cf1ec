"""``python -m ensemblize``: the command line, also under ``torchrun``.

``torchrun --nproc-per-node 2 -m ensemblize run --epochs 1`` trains every model of the default job
with DistributedDataParallel (gloo on CPU, nccl on CUDA); only rank 0 prints and writes files.

Ending under torchrun: with torch 2.13 on CPU the gloo teardown at interpreter exit intermittently
aborts a worker after all its work is done (see :mod:`ensemblize.training.distributed`). So when a
process group is up at the end, every rank meets at a barrier, the group is destroyed, the output
streams are flushed and the process leaves with ``os._exit`` and the command's exit code.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run the command line; return its exit code (see the module docstring for torchrun)."""
    from .cli import app

    try:
        app(prog_name="ensemblize")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code


def _leave(code: int) -> None:
    """Exit, ending a live process group first (barrier, destroy, flush, ``os._exit``)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        sys.exit(code)
    try:
        dist.barrier()
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _leave(main())
