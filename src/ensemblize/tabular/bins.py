"""Bin edges for piecewise-linear numeric embeddings (rtdl), robust to constant training columns."""

from __future__ import annotations

import warnings

import torch

__all__ = ["BIN_METHODS", "TREE_KWARGS", "safe_bins", "piecewise_embeddings"]

_TWO_EDGES = ".*just two bin edges.*"
"""rtdl's warning for a feature with one bin (a 0/1 column): expected, not a problem, and it names the
feature by its position among the numeric columns, which means nothing to the user."""

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
            warnings.filterwarnings("ignore", message=_TWO_EDGES)
            computed = rtdl.compute_bins(x_num[:, varying], n_bins, **kw)
        for j, b in zip(varying.tolist(), computed, strict=True):
            bins[j] = b
    for j in torch.nonzero(constant).flatten().tolist():
        v = float(x_num[0, j])
        bins[j] = torch.tensor([v, v + 1.0], dtype=x_num.dtype)
    return bins


def piecewise_embeddings(bins: list[torch.Tensor], d_embedding: int) -> torch.nn.Module:
    """``rtdl_num_embeddings.PiecewiseLinearEmbeddings(bins, d_embedding, activation=False, version="B")``
    — the embedding of LoMETab and of the official TabM baseline: ``(N, n_num) -> (N, n_num, d_embedding)`` —
    without rtdl's warning about one-bin features (built at every fit and every load)."""
    import rtdl_num_embeddings as rtdl

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TWO_EDGES)
        return rtdl.PiecewiseLinearEmbeddings(list(bins), d_embedding, activation=False, version="B")
