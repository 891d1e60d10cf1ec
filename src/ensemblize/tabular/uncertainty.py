"""Per-row member disagreement of a fitted tabular ensemble (what ``predict_uncertainty`` returns).

Classification, from member probabilities ``p_k`` ``(N, K, C)`` and ``p̄ = (1/K) Σ_k p_k``
(natural logarithms, ``0 · log 0 = 0``):

* total (predictive) entropy  ``H[p̄] = −Σ_c p̄_c log p̄_c``;
* expected entropy (aleatoric) ``E_k H[p_k] = (1/K) Σ_k (−Σ_c p_k,c log p_k,c)``;
* mutual information (epistemic, member disagreement) ``MI = H[p̄] − E_k H[p_k]`` ≥ 0 by Jensen's
  inequality (round-off below 0 is clipped to 0).

Regression, from member predictions ``ŷ_k`` ``(N, K)`` in target units:

* member standard deviation ``std = sqrt((1/K) Σ_k (ŷ_k − ȳ)²)`` with ``ȳ = (1/K) Σ_k ŷ_k``
  (population std, ``ddof = 0``; 0 for one member).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["classification_uncertainty", "regression_uncertainty"]


def _entropy(p: np.ndarray) -> np.ndarray:
    """``−Σ_c p_c log p_c`` over the last axis, with ``0 · log 0 = 0``."""
    logs = np.log(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=-1)


def classification_uncertainty(member_probs: np.ndarray, *, index: pd.Index | None = None) -> pd.DataFrame:
    """``(N, K, C)`` member probabilities -> DataFrame with ``total_entropy``, ``expected_entropy``,
    ``mutual_information`` per row (see the module docstring)."""
    p = np.asarray(member_probs, dtype=np.float64)
    if p.ndim != 3:
        raise ValueError(f"member_probs must have shape (N, K, C), got {p.shape}")
    total = _entropy(p.mean(axis=1))
    expected = _entropy(p).mean(axis=1)
    mi = np.maximum(total - expected, 0.0)
    return pd.DataFrame(
        {"total_entropy": total, "expected_entropy": expected, "mutual_information": mi}, index=index
    )


def regression_uncertainty(member_preds: np.ndarray, *, index: pd.Index | None = None) -> pd.DataFrame:
    """``(N, K)`` member predictions -> DataFrame with ``mean`` and ``std`` (member std) per row."""
    f = np.asarray(member_preds, dtype=np.float64)
    if f.ndim != 2:
        raise ValueError(f"member_preds must have shape (N, K), got {f.shape}")
    return pd.DataFrame({"mean": f.mean(axis=1), "std": f.std(axis=1)}, index=index)
