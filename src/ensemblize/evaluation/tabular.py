"""Test metrics of the tabular protocol: RMSE for regression; accuracy, log-loss (and binary ROC-AUC).

:func:`evaluate_predictions` is the one place the tabular experiments and baselines score predictions.
"""

from __future__ import annotations

import numpy as np

from ensemblize._checks import check_choice

__all__ = ["TABULAR_TASKS", "evaluate_predictions"]

TABULAR_TASKS = ("regression", "binclass", "multiclass")
_EPS = 1e-15  # probabilities are clipped to [eps, 1] inside the log, as scikit-learn's log_loss did


def evaluate_predictions(task: str, y_true: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """The protocol's test metrics.

    * regression: ``{"rmse": sqrt(mean((prediction − y_true)²))}`` on whatever scale both are given
      (the protocol reports the standardised scale, i.e. RMSE / train std); ``prediction`` (N,);
    * classification, from probabilities ``p`` (N, C) and integer labels ``y`` (N,):
      ``accuracy = mean(argmax_c p[i, c] == y[i])`` and
      ``log_loss = −mean_i log max(p[i, y_i], 1e-15)``; binclass adds ``roc_auc`` (AUC of column 1,
      NaN when the labels hold one class).

    Raises ValueError for ``y_true`` that is not 1-D (an ``(N, 1)`` column is refused, not
    broadcast), empty inputs, mismatched lengths, NaN/inf, or classification predictions that are
    not probabilities (negative entries or rows not summing to 1: logits).
    """
    check_choice(task, tuple(TABULAR_TASKS), name="task")
    from ensemblize.metrics import _validate as V

    y = np.asarray(y_true)
    if y.ndim != 1:  # an (N, 1) column would broadcast against (N,) or (N, C) into wrong numbers
        raise ValueError(f"y_true must be 1-D of shape (N,), got shape {y.shape}; pass y.ravel()")
    if len(y) == 0:
        raise ValueError("y_true is empty: there is nothing to score")
    if task == "regression":
        p = V.scores(prediction, name="prediction")
        if len(p) != len(y):
            raise ValueError(f"prediction has {len(p)} rows but y_true has {len(y)}")
        target = V.scores(y, name="y_true")
        return {"rmse": float(np.sqrt(np.mean((p - target) ** 2)))}
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y_true must hold integer class indices, got dtype {y.dtype}")
    p = np.asarray(prediction)
    if p.ndim != 2:
        raise ValueError(f"classification prediction must be probabilities (N, C), got shape {p.shape}")
    if len(p) != len(y):
        raise ValueError(f"prediction has {len(p)} rows but y_true has {len(y)}")
    # finite, non-negative rows summing to 1: logits would be clipped to probability 1 (log-loss 0)
    p = V.probabilities(prediction, name="prediction", allow_members=False)
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"y_true has class indices outside [0, {p.shape[1]})")
    picked = p[np.arange(len(y)), y]
    out = {
        "accuracy": float(np.mean(p.argmax(axis=1) == y)),
        "log_loss": float(-np.mean(np.log(np.clip(picked, _EPS, 1.0)))),
    }
    if task == "binclass":
        from sklearn.metrics import roc_auc_score

        if p.shape[1] != 2:
            raise ValueError(f"binclass probabilities must have 2 columns, got {p.shape[1]}")
        out["roc_auc"] = float(roc_auc_score(y, p[:, 1])) if len(np.unique(y)) == 2 else float("nan")
    return out
