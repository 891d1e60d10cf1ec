"""Streaming metrics for training and evaluation loops (torchmetrics-style ``update`` / ``compute``).

Each class is the stateful twin of a pure function in this package and calls it:

* per-sample means (accuracy, NLL, Brier, disagreement, pairwise KL, mutual information,
  ambiguity) keep a running ``Σ (batch value × batch size)`` and a sample count — O(1) memory;
* rank- or bin-based metrics (ECE, reliability, OOD and selective metrics) keep the validated
  per-sample inputs (the mean probabilities, not the member ones) and call the function on all of
  them in ``compute``.

Either way ``compute()`` equals the function on the concatenated batches (up to float round-off
for the running means). ``reset()`` starts over; ``compute()`` before any ``update`` raises.

Example::

    ece = ez.metrics.ECE(n_bins=15)
    for x, y in loader:
        ece.update(model_probs(x), y)
    print(ece.compute())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .._checks import check_bool
from . import _validate as V
from .calibration import (
    BINNINGS,
    _ece_checked,
    _nll_eps,
    _reliability_checked,
    accuracy,
    brier,
    ece,
    nll,
    reliability,
)
from .diversity import _kl_eps, ambiguity, disagreement, mutual_information, pairwise_kl
from .ood import fpr_at_tpr, ood_aupr, ood_auroc
from .selective import augrc, aurc, coverage_at_risk, eaurc, risk_at_coverage, risk_coverage


class Metric:
    """Base class: ``update(...)`` accumulates a batch, ``compute()`` returns the value, ``reset()`` clears."""

    def __init__(self, **kwargs: Any) -> None:
        # subclasses with options validate them and pass them here; a class without an ``__init__``
        # of its own takes none (an unknown keyword would otherwise surface at ``update``, and a
        # functional-form option such as ``reduction="none"`` would be streamed as a mean)
        if kwargs and type(self).__init__ is Metric.__init__:
            got = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            raise TypeError(
                f"{type(self).__name__}() takes no options, got {got}; it streams the functional form's "
                "default (a mean over samples) — call the function per batch for anything else"
            )
        self._kwargs = kwargs
        self.reset()

    def __init_subclass__(
        cls, *, fn: Callable[..., Any] | None = None, takes: str = "", **kwargs: Any
    ) -> None:
        """``class X(Base, fn=f, takes="probs, labels")`` declares the streaming twin of ``f``.

        ``f`` becomes ``X.fn`` (a static method); a class without a docstring of its own gets one that
        links ``f`` and, when given, says what ``update`` takes.
        """
        super().__init_subclass__(**kwargs)
        if fn is not None:
            cls.fn = staticmethod(fn)
            if cls.__doc__ is None:
                update = f"; ``update({takes})``" if takes else ""
                cls.__doc__ = f"Streaming :func:`~ensemblize.metrics.{fn.__name__}`{update}."

    def reset(self) -> None:
        """Forget every batch seen so far."""
        raise NotImplementedError

    def update(self, *args: Any) -> None:
        """Accumulate one batch."""
        raise NotImplementedError

    def compute(self) -> Any:
        """The metric over every batch since the last ``reset``."""
        raise NotImplementedError

    def merge(self, other: Metric) -> Metric:
        """Fold ``other``'s accumulated batches into this metric (e.g. a shard from another process).

        The state of every streaming metric is running sums or lists of stored batches, so merging is
        exact: ``a.merge(b).compute()`` equals one metric fed ``a``'s and ``b``'s batches. Returns self.
        """
        if type(other) is not type(self) or other._kwargs != self._kwargs:
            raise ValueError(f"cannot merge {other!r} into {self!r}: different metric or options")
        for name, value in vars(other).items():
            if name == "_kwargs":
                continue
            mine = getattr(self, name)
            if name == "_trailing":  # the batches' shape past the sample axis: must agree
                if value is not None and mine is not None and value != mine:
                    raise ValueError(
                        f"cannot merge {type(self).__name__} states of batches shaped (N, {value}) and (N, {mine})"
                    )
                self._trailing = mine if mine is not None else value
                continue
            if isinstance(value, list):
                mine.extend(value)
            elif isinstance(value, (int, float)):
                setattr(self, name, mine + value)
            else:  # pragma: no cover - a new metric with another kind of state must extend merge
                raise TypeError(
                    f"{type(self).__name__}.{name}: cannot merge state of type {type(value).__name__}"
                )
        return self

    def _empty(self) -> ValueError:
        return ValueError(f"{type(self).__name__}.compute() called before any update()")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{type(self).__name__}({args})"


def _num_samples(x: Any) -> int:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    if len(shape) == 0:
        raise ValueError("expected an array with a leading sample axis, got a scalar")
    return int(shape[0])


class _SampleMean(Metric):
    """Metrics that are a mean over samples: running sum of ``fn(batch) × len(batch)``."""

    fn: ClassVar[Callable[..., float]]

    def reset(self) -> None:
        self._total = 0.0
        self._count = 0
        self._trailing: tuple[int, ...] | None = None

    def update(self, *args: Any) -> None:
        """Accumulate one batch (the same positional arguments as the functional form).

        Every batch must have the first batch's shape past the sample axis (members, classes): a
        mean over batches with 2 and 4 members, or 10 and 9 classes, would mean nothing.
        """
        n = _num_samples(args[0])
        value = type(self).fn(*args, **self._kwargs)
        trailing = tuple(np.shape(args[0])[1:])
        if self._trailing is None:
            self._trailing = trailing
        elif trailing != self._trailing:
            raise ValueError(
                f"{type(self).__name__}: this batch has shape (N, {', '.join(map(str, trailing))}) past the "
                f"sample axis, earlier batches (N, {', '.join(map(str, self._trailing))})"
            )
        self._total += value * n
        self._count += n

    def compute(self) -> float:
        """Sample-weighted mean of the batch values."""
        if self._count == 0:
            raise self._empty()
        return self._total / self._count


class Accuracy(_SampleMean, fn=accuracy, takes="probs, labels"): ...


class NLL(_SampleMean, fn=nll):
    """Streaming :func:`~ensemblize.metrics.nll`; ``update(probs_or_member_logits, labels)``."""

    def __init__(self, *, from_logits: bool = False, eps: float = 1e-12) -> None:
        check_bool(from_logits, name="from_logits")
        _nll_eps(eps)
        super().__init__(from_logits=from_logits, eps=eps)


class Brier(_SampleMean, fn=brier, takes="probs, labels"): ...


class Disagreement(_SampleMean, fn=disagreement, takes="member_probs"): ...


class PairwiseKL(_SampleMean, fn=pairwise_kl, takes="member_probs"):
    def __init__(self, *, eps: float = 1e-12) -> None:
        _kl_eps(eps)
        super().__init__(eps=eps)


class MutualInformation(_SampleMean, fn=mutual_information):
    """Streaming :func:`~ensemblize.metrics.mutual_information` (mean over samples); ``update(member_probs)``."""


class Ambiguity(_SampleMean, fn=ambiguity, takes="member_preds"): ...


class _Stored(Metric):
    """Keeps two lists of validated per-sample arrays, one entry per batch; ``compute`` calls the
    functional form on both, each concatenated."""

    fn: ClassVar[Callable[..., Any]]

    def reset(self) -> None:
        self._first: list[np.ndarray] = []
        self._second: list[np.ndarray] = []

    def _missing(self) -> ValueError:
        return self._empty()

    def compute(self) -> Any:
        """The functional form on every batch since the last ``reset``."""
        if not self._first or not self._second:
            raise self._missing()
        return type(self).fn(np.concatenate(self._first), np.concatenate(self._second), **self._kwargs)


class _Calibration(_Stored):
    """Keeps ``p̄`` (N, C) and labels; ``compute`` calls the functional form on all of them.

    Each batch is validated once, at its own precision's row-sum tolerance (half precision: 1e-2),
    and stored as float64; ``compute`` therefore runs the functional form's computation without
    validating again (which would hold half-precision rows to the float64 tolerance).
    """

    checked: ClassVar[Callable[..., Any]]

    def compute(self) -> Any:
        """The functional form on every batch since the last ``reset``."""
        if not self._first or not self._second:
            raise self._missing()
        return type(self).checked(np.concatenate(self._first), np.concatenate(self._second), **self._kwargs)

    def update(self, probs: Any, labels: Any) -> None:
        """Accumulate ``probs`` ``(B, C)`` or ``(B, M, C)`` (stored as ``p̄``) and ``labels`` ``(B,)``."""
        p = V.mean_probs(V.probabilities(probs))
        y = V.labels(labels, p.shape[0], p.shape[1])
        if self._first and p.shape[1] != self._first[0].shape[1]:
            raise ValueError(
                f"probs has {p.shape[1]} classes but earlier batches had {self._first[0].shape[1]}"
            )
        self._first.append(p)
        self._second.append(y)

    def merge(self, other: Metric) -> Metric:
        """As :meth:`Metric.merge`; both states must hold batches of the same number of classes."""
        if type(other) is type(self) and self._first and other._first:
            mine, theirs = self._first[0].shape[1], other._first[0].shape[1]
            if mine != theirs:
                raise ValueError(f"cannot merge {type(self).__name__} states of {theirs} and {mine} classes")
        return super().merge(other)


class ECE(_Calibration, fn=ece, takes="probs, labels"):
    checked = staticmethod(_ece_checked)

    def __init__(self, n_bins: int = 15, *, binning: str = "equal_width", classwise: bool = False) -> None:
        V.n_bins(n_bins)
        V.choice(binning, BINNINGS, name="binning")
        check_bool(classwise, name="classwise")
        super().__init__(n_bins=n_bins, binning=binning, classwise=classwise)


class Reliability(_Calibration, fn=reliability, takes="probs, labels"):
    checked = staticmethod(_reliability_checked)

    def __init__(self, n_bins: int = 15, *, binning: str = "equal_width") -> None:
        V.n_bins(n_bins)
        V.choice(binning, BINNINGS, name="binning")
        super().__init__(n_bins=n_bins, binning=binning)


class _OOD(_Stored):
    """Keeps ID and OOD confidences; ``update(id_confidence=..., ood_confidence=...)``."""

    def update(self, id_confidence: Any = None, ood_confidence: Any = None) -> None:
        """Accumulate a batch of ID confidences, OOD confidences, or both (``(B,)`` each)."""
        if id_confidence is None and ood_confidence is None:
            raise ValueError("update() needs id_confidence, ood_confidence or both")
        if id_confidence is not None:
            self._first.append(V.scores(id_confidence, name="id_confidence"))
        if ood_confidence is not None:
            self._second.append(V.scores(ood_confidence, name="ood_confidence"))

    def _missing(self) -> ValueError:
        missing = "id_confidence" if not self._first else "ood_confidence"
        return ValueError(f"{type(self).__name__}.compute(): no {missing} seen yet")


class OODAUROC(_OOD, fn=ood_auroc): ...


class OODAUPR(_OOD, fn=ood_aupr):
    def __init__(self, *, positive: str = "ood") -> None:
        V.choice(positive, ("ood", "id"), name="positive")
        super().__init__(positive=positive)


class FPRAtTPR(_OOD, fn=fpr_at_tpr):
    def __init__(self, tpr: float = 0.95) -> None:
        V.coverage(tpr, name="tpr")
        super().__init__(tpr=tpr)


class _Selective(_Stored):
    """Keeps confidences and losses; ``update(confidence, losses)``."""

    def update(self, confidence: Any, losses: Any) -> None:
        """Accumulate ``confidence`` ``(B,)`` and per-sample ``losses`` ``(B,)``."""
        c, loss = V.confidence_and_losses(confidence, losses)
        self._first.append(c)
        self._second.append(loss)


class RiskCoverage(_Selective, fn=risk_coverage):
    """Streaming :func:`~ensemblize.metrics.risk_coverage` (returns the curve)."""


class AURC(_Selective, fn=aurc): ...


class EAURC(_Selective, fn=eaurc): ...


class AUGRC(_Selective, fn=augrc): ...


class RiskAtCoverage(_Selective, fn=risk_at_coverage):
    def __init__(self, coverage: float) -> None:
        V.coverage(coverage)
        super().__init__(coverage=coverage)


class CoverageAtRisk(_Selective, fn=coverage_at_risk):
    def __init__(self, risk: float) -> None:
        V.nonnegative_real(risk, name="risk")
        super().__init__(risk=risk)
