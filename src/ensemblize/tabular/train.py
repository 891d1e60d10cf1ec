"""The TabM training protocol for tabular ensembles, as a thin call into :func:`ensemblize.training.fit`.

:func:`train_model` keeps the signature and :class:`TrainResult` the estimators and experiments use;
everything it does is a ``fit`` option:

* objective: the mean over members of the per-member task loss — cross-entropy on logits, or MSE
  on the standardised target (``task="regression"``); ``(B, K, C)`` / ``(B, K)`` outputs against
  ``(B,)`` or, with per-member batches, ``(B, K)`` targets;
* AdamW at a constant learning rate (or, with ``lr_schedule="plateau"``, cut by :data:`PLATEAU_GAMMA`
  after every ``max(1, patience // 3)`` epochs without a better validation score), gradient-norm
  clipping, the standard weight-decay groups (no decay on
  biases, norm affine parameters, embeddings and σN gates — as the official TabM recipe);
* early stopping on the validation score of the *ensemble* (``monitor="val_accuracy"`` of
  ``p̄ = mean_k softmax(z_k)`` with the NLL as tie-breaker, ``"val_nll"`` of ``p̄`` alone with
  ``monitor="log_loss"``, or ``"val_rmse"`` of ``mean_k ŷ_k``), the best epoch's weights restored
  at the end;
* batches: one shared permutation per epoch (every member sees the same rows, as TabM does) or,
  with ``per_member_batches=True``, an independent permutation per member, gathered as one
  ``(B, K)`` index matrix (no loop over members);
* per-epoch validation diversity through ``fit``'s ``val_metrics``: pairwise KL and argmax
  disagreement between members (classification) or ambiguity (regression).

:func:`predict_members` is :func:`ensemblize.training.predict_outputs` returning the raw member
outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ensemblize._checks import check_choice, check_int
from ensemblize.members import check_members
from ensemblize.training import fit, predict_outputs
from ensemblize.training.data import row_order
from ensemblize.training.outputs import logits_of, member_cross_entropy, member_mse

__all__ = [
    "LR_SCHEDULES",
    "MONITORS",
    "PLATEAU_GAMMA",
    "auto_batch_size",
    "batch_order",
    "member_loss",
    "predict_members",
    "TrainResult",
    "train_model",
]


MONITORS = ("accuracy", "log_loss")
"""Early-stopping scores a classifier can monitor (:func:`train_model`'s ``monitor``)."""
_FIT_MONITOR = {"accuracy": "val_accuracy", "log_loss": "val_nll"}

LR_SCHEDULES = ("constant", "plateau")
"""Learning-rate schedules of :func:`train_model` (``lr_schedule``)."""
PLATEAU_GAMMA = 0.3
"""The factor ``lr_schedule="plateau"`` multiplies the learning rate by at each cut."""


def plateau_step(patience: int) -> int:
    """Epochs without a better validation score before each plateau cut: ``max(1, patience // 3)``,
    so a plateau that ends in early stopping has trained at two cut rates (patience 12: cuts after
    4 and 8 stalled epochs, stop after 12)."""
    return max(1, check_int(patience, name="patience") // 3)


def auto_batch_size(n_train: int, *, small: int = 256) -> int:
    """TabM-style batch size by training-set size: ``small`` up to 10k rows, 512 up to 50k, else 1024.

    ``small`` is TabM's 256 by default; ``LoMETabRegressor`` uses 128 (chosen on validation across
    six regression tables of 659–6,408 training rows and three splits; docs/results/tabular_bench.md).
    """
    check_int(small, name="small", minimum=1)
    if n_train <= 10_000:
        return int(small)
    if n_train <= 50_000:
        return 512
    return 1024


def member_loss(out: Tensor, y: Tensor, *, regression: bool) -> Tensor:
    """Mean over members (and rows) of the task loss.

    ``out``: ``(B, K, C)`` logits or ``(B, K)`` predictions; ``y``: ``(B,)`` (shared rows) or
    ``(B, K)`` (per-member rows), int64 classes or float targets. Returns
    ``(1/K) Σ_k (1/B) Σ_b ℓ(out[b, k], y[b(, k)])`` with ℓ = cross-entropy or squared error.
    """
    return (member_mse if regression else member_cross_entropy)(out, y)


def batch_order(n: int, *, members: int, per_member: bool, generator: torch.Generator) -> Tensor:
    """One epoch's row order: ``(N,)`` shared permutation, or ``(N, K)`` with column k a permutation.

    Slicing ``order[i : i + B]`` gives a ``(B,)`` or ``(B, K)`` index; ``X[idx]`` then gathers a
    ``(B, F)`` shared batch or a ``(B, K, F)`` per-member batch in one op.
    """
    return row_order(n, members=members if per_member else None, generator=generator)


def predict_members(model: nn.Module, x: Tensor, *, batch_size: int = 4096) -> Tensor:
    """``model`` in eval mode on ``x`` ``(N, F)`` in chunks -> raw member outputs ``(N, K, C)`` / ``(N, K)`` on CPU."""
    return predict_outputs(model, x, transform=logits_of, batch_size=batch_size)


@dataclass
class TrainResult:
    """What :func:`train_model` returns (the model itself is trained in place, best weights restored)."""

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = -1
    best_score: float = math.nan
    train_seconds: float = 0.0
    stopped_early: bool = False


def _diversity(regression: bool) -> dict[str, Callable[[Tensor, Tensor], float]]:
    from ensemblize import metrics

    if regression:
        return {"val_ambiguity": lambda f, _: metrics.ambiguity(f.numpy())}
    return {
        "val_pairwise_kl": lambda p, _: metrics.pairwise_kl(p.numpy()),
        "val_disagreement": lambda p, _: metrics.disagreement(p.numpy()),
    }


def _rows(history: list[dict], *, regression: bool, with_regularizer: bool) -> list[dict[str, float]]:
    """fit's records in this module's format: 0-based ``epoch``, ensemble ``val_loss``, cumulative ``seconds``."""
    rows, elapsed = [], 0.0
    score = "val_rmse" if regression else "val_accuracy"
    extra = ("val_ambiguity",) if regression else ("val_pairwise_kl", "val_disagreement")
    for h in history:
        elapsed += h["seconds"]
        row = {"epoch": h["epoch"] - 1, "train_loss": h["train_loss"], "lr": h["lr"]}
        if score in h:  # validated
            row["val_loss"] = h["val_rmse"] ** 2 if regression else h["val_nll"]
            row[score] = h[score]
            row.update({k: h[k] for k in extra})
        row["seconds"] = elapsed
        if with_regularizer:
            row["train_regularizer"] = h["regularizer"]
        rows.append(row)
    return rows


def train_model(
    model: nn.Module,
    x_train: Tensor,
    y_train: Tensor,
    x_val: Tensor | None,
    y_val: Tensor | None,
    *,
    regression: bool,
    members: int,
    lr: float = 2e-3,
    weight_decay: float = 3e-4,
    batch_size: int | None = None,
    max_epochs: int = 200,
    patience: int = 16,
    lr_schedule: str = "constant",
    lr_factors: Sequence[float] | None = None,
    ema_decay: float | None = None,
    grad_clip: float = 1.0,
    per_member_batches: bool = False,
    seed: int = 0,
    verbose: bool = False,
    regularizer: Callable[[nn.Module], Tensor] | None = None,
    desc: str = "train_model",
    callbacks: Sequence[Callable[[int, dict, nn.Module], bool | None]] = (),
    monitor: str = "accuracy",
) -> TrainResult:
    """Train ``model`` in place with :func:`ensemblize.training.fit` and restore its best validation epoch.

    Args:
        model: maps ``(B, F)`` — and ``(B, K, F)`` when ``per_member_batches`` — to ``(B, K, C)``
            logits or ``(B, K)`` predictions.
        x_train, x_val: float tensors ``(N, F)``; training runs on their device.
        y_train, y_val: int64 class indices ``(N,)`` or float standardised targets ``(N,)``.
            ``x_val = y_val = None``: no validation — exactly ``max_epochs`` epochs, the last
            epoch's weights kept (the averaged ones with ``ema_decay``), ``patience`` and
            ``monitor`` unused, the history without validation keys and ``best_score`` NaN (the
            estimators' ``refit_full`` retraining).
        regression: task type (MSE and RMSE instead of cross-entropy and accuracy).
        members: K, the model's member count (the per-member orders read it from the output).
        lr, weight_decay: AdamW hyper-parameters (standard no-decay groups).
        batch_size: rows per step; ``None`` -> :func:`auto_batch_size`.
        max_epochs, patience: an epoch is a pass over the training rows; training stops after
            ``patience`` epochs without a better validation score (ties broken by the NLL).
        lr_schedule: ``"constant"`` (TabM's) or ``"plateau"``: ``lr · γ^c`` after ``c`` cuts, one
            cut (γ = :data:`PLATEAU_GAMMA`) each time :func:`plateau_step` further epochs pass
            without a better validation score; the rate stays cut when the score improves again
            (:func:`ensemblize.training.fit`'s ``schedule="plateau"``).
        lr_factors: ``None``, or one learning-rate multiplier per epoch (``max_epochs`` of them):
            epoch ``e`` trains at ``lr · lr_factors[e]``, a schedule replayed (the estimators'
            ``refit_full`` of a plateau run: the rates its validation fit recorded). Needs
            ``lr_schedule="constant"``.
        ema_decay: ``None`` (TabM's recipe) or a decay in ``(0, 1)``: validation, early stopping and
            the restored best epoch use an exponential moving average of the weights
            (:func:`ensemblize.training.fit`'s ``ema_decay``, :mod:`ensemblize.training.averaging`).
        grad_clip: maximum global gradient norm (``None`` or ``0`` disables clipping).
        per_member_batches: each member gets its own row order.
        seed: seeds the batch order and the per-epoch RNG (dropout); parameter init follows the
            global torch RNG, which the caller seeds (the estimators do, inside ``fork_rng``).
        verbose: progress (a bar on a terminal, one line per epoch elsewhere).
        regularizer: optional ``regularizer(model) -> scalar tensor`` added to every step's loss
            (e.g. the σN-Ens diversity term); the history then also has ``train_regularizer``
            (its per-row mean), while ``train_loss`` stays the task loss alone.
        desc: the progress label (e.g. ``"lometab/adult/s0"``).
        callbacks: passed to :func:`ensemblize.training.fit`: each is called after every epoch as
            ``cb(epoch, record, model)`` (``epoch`` 1-based; ``record`` fit's record with
            ``val_nll``, ``val_accuracy`` / ``val_rmse``); returning ``True`` stops training (the
            best epoch so far is restored), e.g. a tuning trial pruned by its pruner.
        monitor: the early-stopping score of a classifier: ``"accuracy"`` (TabM's rule: the
            ensemble's validation accuracy, ties broken by its NLL) or ``"log_loss"`` (the
            ensemble's validation NLL alone). Regression always monitors the validation RMSE.

    Returns a :class:`TrainResult` whose ``history`` has one dict per epoch: ``epoch`` (0-based),
    ``train_loss``, ``lr`` (the epoch's learning rate), ``val_loss`` (NLL of ``p̄``, or MSE of the member mean), ``val_accuracy`` /
    ``val_rmse``, ``val_pairwise_kl`` and ``val_disagreement`` (classification) or
    ``val_ambiguity`` (regression), ``seconds`` (cumulative).
    """
    check_members(members)
    check_choice(monitor, MONITORS, name="monitor")
    check_choice(lr_schedule, LR_SCHEDULES, name="lr_schedule")
    if lr_factors is not None and lr_schedule != "constant":
        raise ValueError(
            f"lr_factors replaces the schedule: it needs lr_schedule='constant', got {lr_schedule!r}"
        )
    n = len(x_train)
    validate = x_val is not None or y_val is not None
    if validate and (x_val is None or y_val is None):
        raise ValueError("x_val and y_val must both be tensors or both be None")
    if n == 0 or (validate and len(x_val) == 0):
        raise ValueError(
            f"need non-empty train and validation splits, got {n} and {len(x_val) if validate else 0} rows"
        )
    schedule = "plateau" if lr_schedule == "plateau" else "none"
    if lr_factors is not None:
        schedule = list(lr_factors)  # fit checks one positive multiplier per epoch
    bs = auto_batch_size(n) if batch_size is None else int(batch_size)
    if bs < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    res = fit(
        model,
        (x_train, y_train),
        (x_val, y_val) if validate else None,
        epochs=int(max_epochs),
        batch_size=min(bs, n),
        optimizer="adamw",
        lr=float(lr),
        weight_decay=float(weight_decay),
        schedule=schedule,
        step_size=plateau_step(patience),
        gamma=PLATEAU_GAMMA,
        grad_clip=float(grad_clip) if grad_clip else None,
        ema_decay=ema_decay,
        task="regression" if regression else "classification",
        regularizer=regularizer,
        monitor=("val_rmse" if regression else _FIT_MONITOR[monitor]) if validate else None,
        early_stopping_patience=int(patience) if validate else None,
        val_metrics=_diversity(regression) if validate else None,
        per_member_batches=bool(per_member_batches),
        seed=int(seed),
        progress=bool(verbose),
        desc=desc,
        device=x_train.device,
        callbacks=tuple(callbacks),
    )
    rows = _rows(res.history, regression=regression, with_regularizer=regularizer is not None)
    model.eval()
    if not validate:
        return TrainResult(history=rows, best_epoch=len(rows) - 1, best_score=math.nan,
                           train_seconds=res.train_seconds, stopped_early=res.stopped_early)  # fmt: skip
    best = res.best_epoch - 1
    return TrainResult(
        history=rows,
        best_epoch=best,
        best_score=rows[best]["val_rmse" if regression else "val_accuracy"],
        train_seconds=res.train_seconds,
        stopped_early=res.stopped_early,
    )
