"""Reading model outputs: where the logits are, the member axis, and the member losses.

A model may return:

* a tensor: classification logits ``(B, C)`` (one member) or ``(B, M, C)``;
* anything with a ``logits`` attribute (a HuggingFace ``ModelOutput``, a dataclass such as
  :class:`ensemblize.selective.SelectiveOutput`) or a ``"logits"`` key (a dict);
* a tuple or list whose first element is the logits tensor.

:func:`logits_of` finds the tensor; :func:`class_members` reads it as ``(B, M, C)`` and
:func:`regression_members` as ``(B, M)`` / ``(B, M, D)``. Regression layouts: ``(B,)`` is one
member; ``(B, M)`` are ``M`` members of a scalar target; ``(B, M, D)`` are ``M`` members of a
``D``-dimensional target. A single model with ``D`` outputs therefore returns ``(B, 1, D)``.

Member losses (:func:`member_cross_entropy`, :func:`member_mse`) reduce over members with
``reduction="mean"`` (``(1/M) Σ_m L_m``, the convention of implicit ensembles: BatchEnsemble,
Packed-Ensembles, σN-Ens, TabM) or ``"sum"`` (``Σ_m L_m``: each member's gradient is exactly that of a
single model trained alone — what :class:`ensemblize.models.DeepEnsemble` declares through its
``member_loss_reduction`` attribute, which :func:`ensemblize.training.fit` honours).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_choice, looks_like_probabilities

__all__ = [
    "REDUCTIONS",
    "warn_if_probabilities",
    "logits_of",
    "class_members",
    "regression_members",
    "member_cross_entropy",
    "member_mse",
    "member_loss_reduction",
]

REDUCTIONS = ("mean", "sum")

_EXPECTED = (
    "expected a tensor (B, C) or (B, M, C), an object with a `logits` attribute or key "
    "(HuggingFace ModelOutput, dict), or a tuple whose first element is the logits"
)


def _describe(obj: object) -> str:
    if isinstance(obj, Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    if isinstance(obj, Mapping):
        return f"a {type(obj).__name__} with keys {sorted(map(str, obj))}"
    return f"a {type(obj).__name__}"


def logits_of(output: object) -> Tensor:
    """The logits tensor inside a model output (see the module docstring); ValueError if there is none."""
    if isinstance(output, Tensor):
        return output
    found = getattr(output, "logits", None)
    if found is None and isinstance(output, Mapping):
        found = output.get("logits")
    if found is None and isinstance(output, (tuple, list)) and output:
        found = output[0]
    if not isinstance(found, Tensor):
        raise ValueError(f"model output is {_describe(output)}, with no logits to find: {_EXPECTED}")
    return found


def class_members(output: object) -> Tensor:
    """Classification logits as ``(B, M, C)``: ``(B, C)`` becomes ``(B, 1, C)``."""
    z = logits_of(output)
    if z.dim() not in (2, 3):
        raise ValueError(f"model logits have shape {tuple(z.shape)}: {_EXPECTED}")
    return z.unsqueeze(1) if z.dim() == 2 else z


def regression_members(output: object) -> Tensor:
    """Regression predictions as ``(B, M)`` or ``(B, M, D)``: ``(B,)`` becomes ``(B, 1)``."""
    z = logits_of(output)
    if z.dim() not in (1, 2, 3):
        raise ValueError(
            f"regression output has shape {tuple(z.shape)}; expected (B,), (B, M) or (B, M, D) "
            "(a single model with D outputs returns (B, 1, D))"
        )
    return z.unsqueeze(1) if z.dim() == 1 else z


def _check_reduction(reduction: str) -> None:
    check_choice(reduction, REDUCTIONS, name="reduction")


def _member_targets(targets: Tensor, b: int, m: int, *, extra: tuple[int, ...] = ()) -> Tensor:
    """``(B, *extra)`` shared or ``(B, M, *extra)`` per-member targets as ``(B, M, *extra)``."""
    if extra == (1,) and tuple(targets.shape) == (b,):  # (B,) targets of one-output members (B, M, 1)
        targets = targets.unsqueeze(1)
    if tuple(targets.shape) == (b, *extra):
        return targets.unsqueeze(1).expand(b, m, *extra)
    if tuple(targets.shape) == (b, m, *extra):
        return targets
    raise ValueError(
        f"targets have shape {tuple(targets.shape)}; expected {(b, *extra)} (shared by the members) "
        f"or {(b, m, *extra)} (per-member rows)"
    )


def member_cross_entropy(outputs: object, targets: Tensor, *, reduction: str = "mean") -> Tensor:
    """Cross-entropy of every member, reduced over members: ``(1/M) Σ_m mean_b CE(z_bm, y_b(m))``.

    ``outputs``: logits (B, M, C) or (B, C) (anything :func:`logits_of` reads); ``targets``: (B,)
    integer class indices shared by the members, or (B, M) per-member rows. ``reduction="sum"`` drops
    the ``1/M``. Returns a scalar. Bool targets are refused, as everywhere in the library (``fit``, the
    metrics): pass ``targets.long()`` if True/False mean classes 1/0.
    """
    _check_reduction(reduction)
    z = class_members(outputs)
    b, m, c = z.shape
    if isinstance(targets, Tensor) and targets.dtype == torch.bool:
        raise ValueError(
            "targets must be integer class indices, got dtype torch.bool; pass targets.long() if "
            "True/False mean classes 1/0"
        )
    t = _member_targets(targets, b, m).reshape(b * m)
    if not t.is_floating_point() and t.dtype != torch.long:
        t = t.long()  # int8/16/32 or uint8 class indices: cross-entropy takes int64 only
    loss = F.cross_entropy(z.reshape(b * m, c), t)
    return loss * m if reduction == "sum" else loss


def member_mse(outputs: object, targets: Tensor, *, reduction: str = "mean") -> Tensor:
    """Squared error of every member, reduced over members: ``(1/M) Σ_m mean_{b,d} (f_bm − t_b)²``.

    ``outputs``: (B,), (B, M) or (B, M, D) (see :func:`regression_members`); ``targets``: (B,) or
    (B, D) shared (with D = 1, (B,) too), or (B, M) / (B, M, D) per-member rows. ``reduction="sum"`` drops the ``1/M``.
    """
    _check_reduction(reduction)
    f = regression_members(outputs)
    b, m = f.shape[:2]
    t = _member_targets(targets, b, m, extra=tuple(f.shape[2:])).to(f.dtype)
    loss = F.mse_loss(f, t)
    return loss * m if reduction == "sum" else loss


def member_loss_reduction(model: nn.Module) -> str:
    """The member reduction a model declares (``model.member_loss_reduction``), ``"mean"`` if none."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    reduction = getattr(inner, "member_loss_reduction", "mean")
    return check_choice(reduction, REDUCTIONS, name=f"{type(inner).__name__}.member_loss_reduction")


def warn_if_probabilities(logits: Tensor, *, where: str) -> None:
    """Warn when a classifier's outputs look like probabilities (a final ``nn.Softmax``): ``where``
    (fit / predict) treats them as logits, so a second softmax would flatten every prediction."""
    if looks_like_probabilities(logits):
        warnings.warn(
            f"{where}: the model's outputs look like probabilities (entries in [0, 1], rows summing to 1), "
            "but they are read as logits and softmax is applied again, which flattens every prediction "
            "(NLL and calibration become meaningless). Remove the model's final Softmax and return logits",
            UserWarning,
            stacklevel=3,
        )
