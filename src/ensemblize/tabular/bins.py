"""Bin edges for piecewise-linear numeric embeddings (rtdl), robust to constant training columns."""

from __future__ import annotations

import warnings

import torch

__all__ = ["BIN_METHODS", "TREE_KWARGS", "safe_bins"]

BIN_METHODS = ("quantile", "tree")
TREE_KWARGS = {"min_samples_leaf": 64, "min_impurity_decrease": 1e-4}  # TabM / rtdl defaults


def safe_bins(x_num: torch.Tensor, y: torch.Tensor, *, n_bins: int, method: str, regression: bool):
    """Bin edges for every numeric column of ``x_num`` ``(N, n_num)``, a list of 1-D tensors.

    ``method="quantile"`` or ``"tree"`` (:func:`rtdl_num_embeddings.compute_bins`, tree bins use
    ``y`` and :data:`TREE_KWARGS`); a column constant on the training rows gets the one bin
    ``[v, v + 1]``.
    """
    import rtdl_num_embeddings as rtdl

    if method not in BIN_METHODS:
        raise ValueError(f"bin_method must be one of {BIN_METHODS}, got {method!r}")
    constant = (x_num == x_num[0]).all(dim=0)
    varying = torch.nonzero(~constant).flatten()
    bins: list[torch.Tensor | None] = [None] * x_num.shape[1]
    if len(varying):
        kw = (
            {}
            if method == "quantile"
            else {"tree_kwargs": dict(TREE_KWARGS), "y": y, "regression": regression}
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*just two bin edges.*")
            computed = rtdl.compute_bins(x_num[:, varying], n_bins, **kw)
        for j, b in zip(varying.tolist(), computed, strict=True):
            bins[j] = b
    for j in torch.nonzero(constant).flatten().tolist():
        v = float(x_num[0, j])
        bins[j] = torch.tensor([v, v + 1.0], dtype=x_num.dtype)
    return bins
