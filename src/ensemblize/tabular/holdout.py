"""Seeded hold-out split of row indices, shared by the estimators' validation split and tuning.

For classification a class seen on one row only always stays in the first (training) part: a
class the model never trains on can never be predicted, and its one row in a validation part
would only make that class unknown to the model being early-stopped on it. The other rows are
split by :func:`sklearn.model_selection.train_test_split`, stratified on the label when every
remaining class fits in both parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["holdout_indices"]


def holdout_indices(y: Any, *, n_holdout: int, seed: int, classify: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(first, held_out)``: sorted int64 row indices of ``y`` (length N), ``held_out`` of size ``n_holdout``.

    ``classify``: rows of a class seen once go to ``first`` and stratification is used where
    possible; otherwise a plain seeded shuffle split. When no class is seen once the result is that
    of ``train_test_split(np.arange(N), test_size=n_holdout, random_state=seed, stratify=...)``.

    Raises ValueError when ``n_holdout`` is below 1, or leaves no row to split off (for
    classification: no row of a class seen twice or more), naming the counts.
    """
    from sklearn.model_selection import train_test_split

    yarr = np.asarray(y)
    n = len(yarr)
    pool, kept = np.arange(n), np.arange(0)
    strat = None
    if classify:
        _, inverse, counts = np.unique(yarr, return_inverse=True, return_counts=True)
        single = counts[inverse.reshape(-1)] < 2
        pool, kept = np.flatnonzero(~single), np.flatnonzero(single)
        repeated = counts[counts >= 2]
        if len(repeated) and min(n_holdout, len(pool) - n_holdout) >= len(repeated):
            strat = yarr[pool]
    if n_holdout < 1 or n_holdout >= len(pool):
        once = f"; {len(kept)} row(s) of classes seen once stay in the first part" if len(kept) else ""
        raise ValueError(
            f"cannot hold out {n_holdout} of {n} rows: need 1 to {max(len(pool) - 1, 0)} "
            f"(at least one row must stay on each side{once})"
        )
    first, held = train_test_split(pool, test_size=n_holdout, random_state=seed, stratify=strat)
    return np.sort(np.concatenate([first, kept])).astype(np.int64), np.sort(held).astype(np.int64)
