"""Training loop for :class:`~ensemblize.tabular.model.LoMETabModel` (TabM protocol).

* objective: the mean over members of the per-member task loss — cross-entropy on logits, or
  MSE on the standardised target; ``(B, K, C)`` / ``(B, K)`` outputs against ``(B,)`` or
  ``(B, K)`` targets;
* AdamW, gradient-norm clipping, early stopping on the validation score of the *ensemble*
  prediction (accuracy of ``p̄ = mean_k softmax(z_k)``, or RMSE of ``mean_k ŷ_k``) with the
  ensemble loss as tie-breaker, and the best epoch's weights restored at the end;
* batches: one shared permutation per epoch (every member sees the same rows, as TabM does) or,
  with ``per_member_batches=True``, an independent permutation per member, gathered as one
  ``(B, K)`` index matrix (no loop over members);
* per-epoch history with validation diversity: pairwise KL and argmax disagreement between
  members (classification) or ambiguity (regression), from :mod:`ensemblize.metrics`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

__all__ = ["auto_batch_size", "batch_order", "member_loss", "predict_members", "TrainResult", "train_model"]


def auto_batch_size(n_train: int) -> int:
    """TabM-style batch size by training-set size: 256 up to 10k rows, 512 up to 50k, else 1024."""
    if n_train <= 10_000:
        return 256
    if n_train <= 50_000:
        return 512
    return 1024


def member_loss(out: Tensor, y: Tensor, *, regression: bool) -> Tensor:
    """Mean over members (and rows) of the task loss.

    ``out``: ``(B, K, C)`` logits or ``(B, K)`` predictions; ``y``: ``(B,)`` (shared rows) or
    ``(B, K)`` (per-member rows), int64 classes or float targets. Returns
    ``(1/K) Σ_k (1/B) Σ_b ℓ(out[b, k], y[b(, k)])`` with ℓ = cross-entropy or squared error.
    """
    b, k = out.shape[0], out.shape[1]
    if y.dim() == 1:
        y = y.unsqueeze(1).expand(b, k)
    if regression:
        return F.mse_loss(out, y.to(out.dtype))
    return F.cross_entropy(out.reshape(b * k, -1), y.reshape(b * k))


def batch_order(n: int, *, members: int, per_member: bool, generator: torch.Generator) -> Tensor:
    """One epoch's row order: ``(N,)`` shared permutation, or ``(N, K)`` with column k a permutation.

    Slicing ``order[i : i + B]`` gives a ``(B,)`` or ``(B, K)`` index; ``X[idx]`` then gathers a
    ``(B, F)`` shared batch or a ``(B, K, F)`` per-member batch in one op.
    """
    if per_member:
        return torch.argsort(torch.rand(members, n, generator=generator), dim=1).T.contiguous()
    return torch.randperm(n, generator=generator)


@torch.no_grad()
def predict_members(model: nn.Module, x: Tensor, *, batch_size: int = 4096) -> Tensor:
    """Evaluate ``model`` in eval mode on ``x`` ``(N, F)`` in chunks -> ``(N, K, C)`` / ``(N, K)`` raw outputs."""
    was_training = model.training
    model.eval()
    try:
        outs = [model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outs, dim=0)


@dataclass
class TrainResult:
    """What :func:`train_model` returns (the model itself is trained in place, best weights restored)."""

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = -1
    best_score: float = math.nan
    train_seconds: float = 0.0
    stopped_early: bool = False


def _evaluate(model: nn.Module, x: Tensor, y: Tensor, *, regression: bool) -> dict[str, float]:
    """Ensemble score, ensemble loss and member diversity on one split."""
    from ensemblize import metrics

    out = predict_members(model, x).double()
    if regression:
        pred = out.mean(dim=1)
        yd = y.double()
        mse = float(((pred - yd) ** 2).mean())
        return {
            "val_rmse": math.sqrt(mse),
            "val_loss": mse,
            "val_ambiguity": float(metrics.ambiguity(out.cpu().numpy())),
            "_score": -math.sqrt(mse),
            "_tiebreak": -mse,
        }
    probs = torch.softmax(out, dim=-1)  # (N, K, C)
    p_bar = probs.mean(dim=1)
    acc = float((p_bar.argmax(dim=-1) == y).double().mean())
    nll = float(-torch.log(p_bar.gather(1, y[:, None]).clamp_min(1e-12)).mean())
    mp = probs.cpu().numpy()
    return {
        "val_accuracy": acc,
        "val_loss": nll,
        "val_pairwise_kl": float(metrics.pairwise_kl(mp)),
        "val_disagreement": float(metrics.disagreement(mp)),
        "_score": acc,
        "_tiebreak": -nll,
    }


def train_model(
    model: nn.Module,
    x_train: Tensor,
    y_train: Tensor,
    x_val: Tensor,
    y_val: Tensor,
    *,
    regression: bool,
    members: int,
    lr: float = 2e-3,
    weight_decay: float = 3e-4,
    batch_size: int | None = None,
    max_epochs: int = 200,
    patience: int = 16,
    grad_clip: float = 1.0,
    per_member_batches: bool = False,
    seed: int = 0,
    verbose: bool = False,
    regularizer: Callable[[nn.Module], Tensor] | None = None,
) -> TrainResult:
    """Train ``model`` in place and restore the weights of its best validation epoch.

    Args:
        model: maps ``(B, F)`` — and ``(B, K, F)`` when ``per_member_batches`` — to ``(B, K, C)``
            logits or ``(B, K)`` predictions.
        x_train, x_val: float tensors ``(N, F)`` on the model's device.
        y_train, y_val: int64 class indices ``(N,)`` or float standardised targets ``(N,)``.
        regression: task type (MSE and RMSE instead of cross-entropy and accuracy).
        members: K (used to draw per-member permutations).
        lr, weight_decay: AdamW hyper-parameters.
        batch_size: rows per step; ``None`` -> :func:`auto_batch_size`.
        max_epochs, patience: an epoch is a pass over the training rows; training stops after
            ``patience`` epochs without a better validation score (ties broken by the loss).
        grad_clip: maximum global gradient norm (``None`` or ``0`` disables clipping).
        per_member_batches: each member gets its own row order.
        seed: seeds the batch order; parameter init and dropout follow the global torch RNG,
            which the caller seeds (the estimators do, inside :func:`torch.random.fork_rng`).
        verbose: show a tqdm bar (only when stderr is a terminal).
        regularizer: optional ``regularizer(model) -> scalar tensor`` added to every step's loss
            (e.g. the σN-Ens diversity term); the history then also has ``train_regularizer``
            (its mean per step), while ``train_loss`` stays the task loss alone.

    Returns a :class:`TrainResult` whose ``history`` has one dict per epoch: ``epoch``,
    ``train_loss``, ``val_loss``, ``val_accuracy`` / ``val_rmse``, ``val_pairwise_kl`` and
    ``val_disagreement`` (classification) or ``val_ambiguity`` (regression), ``seconds``.
    """
    n = len(x_train)
    if n == 0 or len(x_val) == 0:
        raise ValueError(f"need non-empty train and validation splits, got {n} and {len(x_val)} rows")
    bs = auto_batch_size(n) if batch_size is None else int(batch_size)
    if bs < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    bs = min(bs, n)
    device = x_train.device
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    result = TrainResult()
    best_key: tuple[float, float] | None = None
    best_state: dict[str, Any] | None = None
    bad_epochs = 0
    t0 = time.perf_counter()
    bar = tqdm(range(max_epochs), disable=None if verbose else True, desc="epochs", leave=False)
    for epoch in bar:
        model.train()
        order = batch_order(n, members=members, per_member=per_member_batches, generator=gen).to(device)
        total, seen, reg_total, steps = 0.0, 0, 0.0, 0
        for start in range(0, n, bs):
            idx = order[start : start + bs]  # (B,) or (B, K)
            xb, yb = x_train[idx], y_train[idx]  # (B, F) / (B, K, F); (B,) / (B, K)
            loss = member_loss(model(xb), yb, regression=regression)
            objective = loss
            if regularizer is not None:
                reg = regularizer(model)
                objective = loss + reg
                reg_total += float(reg.detach())
                steps += 1
            opt.zero_grad(set_to_none=True)
            objective.backward()
            if grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            opt.step()
            total += float(loss.detach()) * len(idx)
            seen += len(idx)
        ev = _evaluate(model, x_val, y_val, regression=regression)
        key = (ev.pop("_score"), ev.pop("_tiebreak"))
        row = {"epoch": epoch, "train_loss": total / seen, **ev, "seconds": time.perf_counter() - t0}
        if regularizer is not None:
            row["train_regularizer"] = reg_total / steps
        result.history.append(row)
        if not all(np.isfinite(v) for v in (row["train_loss"], row["val_loss"])):
            raise FloatingPointError(f"training diverged at epoch {epoch}: non-finite loss {row}")
        if best_key is None or key > best_key:
            best_key, bad_epochs = key, 0
            best_state = copy.deepcopy(model.state_dict())
            result.best_epoch = epoch
            result.best_score = row["val_rmse"] if regression else row["val_accuracy"]
        else:
            bad_epochs += 1
        bar.set_postfix(loss=f"{row['train_loss']:.4f}", best=f"{result.best_score:.4f}")
        if bad_epochs >= patience:
            result.stopped_early = True
            break
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    result.train_seconds = time.perf_counter() - t0
    return result
