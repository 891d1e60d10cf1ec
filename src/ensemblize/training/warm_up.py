"""One untimed training run per process, so that timed ones measure training and nothing else.

The first ``fit`` in a process pays one-time costs that are no part of training: the first optimiser
imports ``torch._dynamo`` (about 3 s here), and the loop's own first calls are slower. Experiments
that report ``train_seconds`` call :func:`warm_up` before starting their clock, so the first job of
a process (serial, ``--workers`` or a Dask worker) is not charged for them.
"""

from __future__ import annotations

import functools
import os
import random

import numpy as np
import torch
from torch import nn

__all__ = ["warm_up"]


@functools.cache
def warm_up() -> None:
    """Train a 2 × 2 linear model for one epoch on 8 rows with SGD and AdamW, once per process.

    Skipped under torchrun (``WORLD_SIZE`` > 1), where it would join the process group's collectives.
    """
    from .fit import fit

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return

    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002 - the legacy global state
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=cuda):  # every random state is left as it was
            x = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
            y = (x[:, 0] > 0).long()
            for optimizer in ("sgd", "adamw"):
                fit(
                    nn.Linear(2, 2),
                    (x, y),
                    (x, y),
                    epochs=1,
                    batch_size=4,
                    optimizer=optimizer,
                    progress=False,
                )
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002
