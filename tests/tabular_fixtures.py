"""Shared by the raw-table edge tests: a tiny estimator budget and a small mixed-type table."""

from __future__ import annotations

import numpy as np
import pandas as pd

#: the smallest LoMETab estimator shape that still trains (one network of two members)
TINY = {"members": 2, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2, "n_networks": 1}


def mixed_frame(n: int = 120, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Two numeric columns and a three-level string column; a binary label depending on both kinds."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "s": rng.choice(["u", "v", "w"], n)})
    y = (X["a"] + 0.5 * (X["s"] == "u") > 0).astype(int).to_numpy()
    return X, y
