"""Selective-prediction evaluation: risk at fixed coverages, area metrics, validation thresholds,
and the confidence scores of a plain, selective or Deep Gamblers model.

The risk–coverage metrics come from :mod:`ensemblize.metrics` (ties are handled there: the value
is the expectation over random orderings within tie groups). This module adds the deployment
view: a threshold fitted on validation confidences and applied to test data, reported with the
coverage it actually achieves there. Every prediction goes through
:func:`ensemblize.training.predict` / :func:`~ensemblize.training.predict_outputs` (one batched,
no-grad loop). :mod:`ensemblize.selective` re-exports the public names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_choice, check_finite, check_fraction, check_int, check_labels, to_numpy

__all__ = [
    "DEFAULT_COVERAGES",
    "SCORE_KINDS",
    "Scores",
    "score_model",
    "SelectiveReport",
    "SelectivePredictions",
    "selective_report",
    "predict_selective",
    "selective_net_report",
]

DEFAULT_COVERAGES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class SelectiveReport:
    """Result of :func:`selective_report`.

    Attributes:
        coverages: the target coverages.
        risk: selective risk on test at each coverage, ranking by test confidence
            (``metrics.risk_at_coverage``).
        aurc, eaurc, augrc: area under the risk–coverage curve, its excess over the oracle
            ordering, area under the generalised risk–coverage curve.
        thresholds: per coverage, the threshold fitted on validation (``None`` without validation).
        threshold_risk: per coverage, mean test loss over samples with ``confidence >= threshold``
            (NaN when none is accepted).
        threshold_coverage: per coverage, the share of test samples actually accepted.
    """

    coverages: tuple[float, ...]
    risk: tuple[float, ...]
    aurc: float
    eaurc: float
    augrc: float
    thresholds: tuple[float, ...] | None = None
    threshold_risk: tuple[float, ...] | None = None
    threshold_coverage: tuple[float, ...] | None = None

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        """A flat ``{name: float}`` mapping for ``report.results.Record.metrics``.

        Keys: ``aurc``, ``eaurc``, ``augrc``, ``risk@c`` and, with validation thresholds,
        ``thr_risk@c`` and ``thr_coverage@c`` (``c`` formatted with ``%g``), each prefixed.
        """
        out = {f"{prefix}aurc": self.aurc, f"{prefix}eaurc": self.eaurc, f"{prefix}augrc": self.augrc}
        for i, c in enumerate(self.coverages):
            out[f"{prefix}risk@{c:g}"] = self.risk[i]
            if self.threshold_risk is not None and self.threshold_coverage is not None:
                out[f"{prefix}thr_risk@{c:g}"] = self.threshold_risk[i]
                out[f"{prefix}thr_coverage@{c:g}"] = self.threshold_coverage[i]
        return out


def _vector(x: object, *, name: str) -> np.ndarray:
    arr = to_numpy(x, name=name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    check_finite(arr, name=name)
    return arr


def selective_report(
    confidence: object,
    losses: object,
    *,
    coverages: Sequence[float] = DEFAULT_COVERAGES,
    val_confidence: object | None = None,
) -> SelectiveReport:
    """Selective risk at each coverage, AURC, E-AURC, AUGRC, and optionally validation-threshold risk.

    Args:
        confidence: ``(N,)`` test confidences, higher = accepted first.
        losses: ``(N,)`` per-sample test losses (1 = error, 0 = correct, or any loss).
        coverages: target coverages, each in ``(0, 1]``.
        val_confidence: ``(N_val,)`` confidences of the *same* scorer on a held-out validation
            split. When given, for every coverage ``c`` a threshold ``t_c`` is fitted with
            :func:`threshold_for_coverage` and the test risk among ``confidence >= t_c`` is
            reported beside the test coverage actually achieved.
    """
    from .. import metrics
    from ..selective.thresholds import threshold_for_coverage

    conf = _vector(confidence, name="confidence")
    loss = _vector(losses, name="losses")
    if conf.shape != loss.shape:
        raise ValueError(f"confidence has shape {conf.shape} but losses has shape {loss.shape}")
    if isinstance(coverages, (str, bytes)) or not isinstance(coverages, Iterable):
        raise TypeError(f"coverages must be a sequence of target coverages such as (0.8,), got {coverages!r}")
    covs = tuple(check_fraction(c, name="coverage") for c in coverages)
    if not covs:
        raise ValueError("coverages is empty")
    risk = tuple(float(metrics.risk_at_coverage(conf, loss, c)) for c in covs)
    thresholds = thr_risk = thr_cov = None
    if val_confidence is not None:
        val = _vector(val_confidence, name="val_confidence")
        thresholds = tuple(threshold_for_coverage(val, c) for c in covs)
        risks, achieved = [], []
        for t in thresholds:
            accepted = conf >= t
            n_acc = int(accepted.sum())
            achieved.append(n_acc / conf.size)
            risks.append(float(loss[accepted].mean()) if n_acc else math.nan)
        thr_risk, thr_cov = tuple(risks), tuple(achieved)
    return SelectiveReport(
        coverages=covs,
        risk=risk,
        aurc=float(metrics.aurc(conf, loss)),
        eaurc=float(metrics.eaurc(conf, loss)),
        augrc=float(metrics.augrc(conf, loss)),
        thresholds=thresholds,
        threshold_risk=thr_risk,
        threshold_coverage=thr_cov,
    )


class SelectivePredictions(NamedTuple):
    """Outputs of :func:`predict_selective` (CPU tensors).

    Attributes:
        probs: ``(N, C)`` softmax of head ``f`` (mean over members for member outputs).
        selection: ``(N,)`` selection score ``g`` (mean over members for member outputs).
        aux_probs: ``(N, C)`` softmax of head ``h`` (mean over members).
    """

    probs: Tensor
    selection: Tensor
    aux_probs: Tensor


def _selective_heads(out: object) -> tuple[Tensor, Tensor, Tensor]:
    """``(p̄, ḡ, q̄)`` of one batch of SelectiveNet output (member axes averaged on probabilities), float64."""
    from ..selective.net import as_selective_output

    out = as_selective_output(out, what="the model's output")
    # softmax in float64: in float32 max p is exactly 1.0 once the logit margin passes ~17, and such rows
    # tie, so a threshold for 10 % coverage could accept them all
    p, g, q = out.logits.double().softmax(-1), out.selection.double(), out.aux_logits.double().softmax(-1)
    if p.dim() == 3:
        p, g, q = p.mean(1), g.mean(1), q.mean(1)
    return p, g, q


def predict_selective(model: nn.Module, x: Tensor, *, batch_size: int = 512) -> SelectivePredictions:
    """Run a :class:`SelectiveNet` in eval mode over ``x`` ``(N, ...)`` in batches
    (:func:`ensemblize.training.predict_outputs`).

    Member outputs ``(B, M, C)`` / ``(B, M)`` are aggregated on probabilities (``p̄ = mean_m
    softmax(f_m)``) and by averaging ``g`` over members. The model's train/eval mode is restored.
    """
    from ..training import predict_outputs

    batch_size = check_int(batch_size, name="batch_size", minimum=1)
    if not isinstance(x, Tensor) or x.dim() < 1 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty tensor (N, ...)")
    probs, sel, aux = predict_outputs(model, x, transform=_selective_heads, batch_size=batch_size)
    return SelectivePredictions(probs, sel, aux)


#: What :func:`score_model` reads from a model's output.
SCORE_KINDS = ("plain", "selective", "gamblers")


@dataclass(frozen=True)
class Scores:
    """One model's predictions on one split.

    Attributes:
        pred: ``(N,)`` predicted labels (argmax of the prediction head; for Deep Gamblers over the
            first ``K`` logits).
        own: ``(N,)`` the model's own selection score ("w/o SR"): ``g`` for SelectiveNet/SYNC,
            ``1 − p_abstain`` for Deep Gamblers, ``None`` for a plain classifier.
        sr: ``(N,)`` softmax response ``max_c p_c`` of the prediction head ("w/ SR"); for member
            outputs of the mean probability ``p̄``; for Deep Gamblers of the softmax over the first
            ``K`` logits.
    """

    pred: np.ndarray
    own: np.ndarray | None
    sr: np.ndarray


def score_model(model: nn.Module, x: Tensor, *, kind: str, batch_size: int = 512) -> Scores:
    """Predict ``x (N, ...)`` with ``model`` in eval mode and return its :class:`Scores`.

    ``kind``: ``"plain"`` (logits ``(B, C)`` or member logits ``(B, M, C)``, scored on ``p̄``),
    ``"selective"`` (a :class:`~ensemblize.selective.SelectiveNet`, see :func:`predict_selective`)
    or ``"gamblers"`` (logits ``(B, K+1)``, last = abstain, or member logits ``(B, M, K+1)``: the
    class probabilities over the first ``K`` outputs and ``1 − p_abstain`` averaged over members).
    """
    from ..metrics.confidence import deep_gamblers_confidence
    from ..training import logits_of, predict, predict_outputs

    check_choice(kind, tuple(SCORE_KINDS), name="kind")
    if kind == "selective":
        p = predict_selective(model, x, batch_size=batch_size)
        return Scores(
            p.probs.argmax(-1).numpy(), p.selection.double().numpy(), p.probs.amax(-1).double().numpy()
        )
    if kind == "plain":
        # float64 probabilities: in float32 the most confident rows all score exactly 1.0 and tie
        pbar = predict(model, x, batch_size=batch_size, dtype=torch.float64).mean(1)
        return Scores(pred=pbar.argmax(-1).numpy(), own=None, sr=pbar.amax(-1).numpy())
    # float64 from the logits on: 1 − p_abstain and max p of confident rows would tie at 1.0 in float32
    logits = predict_outputs(model, x, transform=lambda out: logits_of(out).double(), batch_size=batch_size)
    if logits.dim() not in (2, 3):
        raise ValueError(
            f"kind='gamblers' needs logits (N, K+1) or member logits (N, M, K+1), got {tuple(logits.shape)}"
        )
    # the class softmax over the first K outputs (never the abstain one), members averaged on
    # probabilities; the own score 1 − p_abstain likewise averaged over members
    cls = logits[..., :-1].softmax(-1)
    own = deep_gamblers_confidence(logits)
    if logits.dim() == 3:
        cls, own = cls.mean(1), own.mean(1)
    return Scores(pred=cls.argmax(-1).numpy(), own=own.numpy(), sr=cls.amax(-1).numpy())


def selective_net_report(
    model: nn.Module,
    x: Tensor,
    labels: Tensor,
    *,
    coverages: Sequence[float] = DEFAULT_COVERAGES,
    x_val: Tensor | None = None,
    batch_size: int = 512,
) -> dict[str, SelectiveReport]:
    """Score a SelectiveNet twice on ``(x, labels)``: ``{"w/o SR": ..., "w/ SR": ...}``.

    Both use the 0/1 error of ``argmax`` of head ``f`` as the loss. ``"w/o SR"`` ranks samples by
    the selection head ``g``; ``"w/ SR"`` by the softmax response ``max_c p_c`` of head ``f``.
    With ``x_val`` each scorer also gets validation thresholds (see :func:`selective_report`).
    """
    pred = predict_selective(model, x, batch_size=batch_size)
    if not isinstance(labels, Tensor):
        raise TypeError(f"labels must be a torch.Tensor of class indices, got {type(labels).__name__}")
    labels = labels.detach().cpu()
    if labels.shape != (pred.probs.shape[0],):
        raise ValueError(f"labels must have shape ({pred.probs.shape[0]},), got {tuple(labels.shape)}")
    check_labels(labels, pred.probs.shape[-1], name="labels")
    errors = (pred.probs.argmax(-1) != labels).double()
    val = predict_selective(model, x_val, batch_size=batch_size) if x_val is not None else None
    return {
        "w/o SR": selective_report(
            pred.selection,
            errors,
            coverages=coverages,
            val_confidence=None if val is None else val.selection,
        ),
        "w/ SR": selective_report(
            pred.probs.amax(-1),
            errors,
            coverages=coverages,
            val_confidence=None if val is None else val.probs.amax(-1),
        ),
    }
