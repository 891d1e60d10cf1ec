"""Suite-wide settings: one torch thread per test process.

The suite runs under pytest-xdist with one worker per core; letting each worker also spawn
intra-op threads oversubscribes the 2-core machine (measured here: a tiny step 6 ms with one
thread, ~390 ms with two under load).
"""

import os

import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
