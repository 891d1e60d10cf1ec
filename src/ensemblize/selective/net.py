"""SelectiveNet: a prediction head, a selection head and an auxiliary head on shared features."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from ensemblize._checks import check_int, check_module

__all__ = ["SelectiveNet", "SelectiveOutput", "SELECTION_DIVISOR", "as_selective_output"]

#: The reference selection head divides the normalised hidden layer by 10 before the last dense
#: layer (Geifman & El-Yaniv's Keras code: ``Lambda(lambda x: x / 10)``), which keeps the initial
#: selection logits small, so ``g`` starts near ½ for every sample.
SELECTION_DIVISOR = 10.0


class _Divide(nn.Module):
    """``x -> x / divisor`` (no parameters)."""

    def __init__(self, divisor: float) -> None:
        super().__init__()
        self.divisor = float(divisor)

    def forward(self, x: Tensor) -> Tensor:
        """Any shape -> same shape."""
        return x / self.divisor

    def extra_repr(self) -> str:
        return f"divisor={self.divisor}"


class SelectiveOutput(NamedTuple):
    """What :class:`SelectiveNet` returns (a NamedTuple, so it also unpacks as a tuple).

    Attributes:
        logits: prediction head ``f``, ``(B, C)`` — or ``(B, M, C)`` for member features.
        selection: selection head ``g ∈ (0, 1)``, ``(B,)`` — or ``(B, M)``.
        aux_logits: auxiliary head ``h``, ``(B, C)`` — or ``(B, M, C)``.
    """

    logits: Tensor
    selection: Tensor
    aux_logits: Tensor


def as_selective_output(output: object, *, what: str = "output") -> SelectiveOutput:
    """``output`` as a :class:`SelectiveOutput`: one already, any object with ``logits``, ``selection``
    and ``aux_logits`` attributes, or a ``(logits, selection, aux_logits)`` tuple / list of tensors;
    TypeError naming ``what`` otherwise (or the field that is not a tensor)."""
    fields = SelectiveOutput._fields
    if isinstance(output, SelectiveOutput):
        parts = tuple(output)
    elif all(hasattr(output, a) for a in fields):
        parts = tuple(getattr(output, a) for a in fields)
    elif isinstance(output, (tuple, list)) and len(output) == 3:
        parts = tuple(output)
    else:
        raise TypeError(
            f"{what} must be a SelectiveOutput, an object with logits, selection and aux_logits, or a "
            f"(logits, selection, aux_logits) tuple; got {type(output).__name__}"
            + (f" of length {len(output)}" if isinstance(output, (tuple, list)) else "")
        )
    for name, t in zip(fields, parts, strict=True):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}.{name} must be a torch.Tensor, got {type(t).__name__}")
    return SelectiveOutput(*parts)


class SelectiveNet(nn.Module):
    """SelectiveNet (Geifman & El-Yaniv, 2019) on top of any feature extractor.

    ``z = features(x)`` and three heads read ``z``:

    * prediction ``f(z) = W_f z + b_f`` — class logits;
    * selection ``g(z) = σ(w_2ᵀ BN(ReLU(W_1 z + b_1)) / 10 + b_2) ∈ (0, 1)`` with ``hidden`` units:
      Linear → ReLU → BatchNorm1d → ÷10 → Linear → sigmoid, as in the reference Keras
      implementation (``Dense → ReLU → BatchNormalization → Lambda(x / 10) → Dense(1) → sigmoid``;
      see :data:`SELECTION_DIVISOR`). Module ``selector`` = ``Sequential(Linear, ReLU, BatchNorm1d,
      _Divide(10), Linear)``;
    * auxiliary ``h(z) = W_h z + b_h`` — class logits trained with plain cross-entropy.

    Shapes: ``features`` maps ``(B, ...) -> (B, D)`` with ``D = feature_dim`` (e.g. a backbone
    whose classifier was replaced by ``nn.Identity``); the output is
    ``logits (B, C)``, ``selection (B,)``, ``aux_logits (B, C)``.

    Member features: when ``features`` returns ``(B, M, D)`` (e.g. a σN ensemble of a headless
    backbone), the *same* three heads are applied to every member's features and every output
    gains an ``M`` axis: ``logits (B, M, C)``, ``selection (B, M)``, ``aux_logits (B, M, C)``. The
    selection head's BatchNorm then pools its batch statistics over all ``B·M`` rows. The losses in
    :mod:`ensemblize.selective.losses` treat each member as its own SelectiveNet and average.

    Width check: ``feature_dim`` is checked against the features' last axis on every forward (a
    shape comparison, no dry run at construction, so ``features`` may take any input shape); a
    mismatch raises ``ValueError`` naming both widths.

    Args:
        features: module ``(B, ...) -> (B, D)`` or ``(B, M, D)``.
        feature_dim: ``D``.
        num_classes: ``C >= 2``.
        hidden: width of the selection head's hidden layer (512 in the paper).
    """

    def __init__(self, features: nn.Module, feature_dim: int, num_classes: int, *, hidden: int = 512) -> None:
        super().__init__()
        check_module(features, name="features")
        self.feature_dim = check_int(feature_dim, name="feature_dim", minimum=1)
        self.num_classes = check_int(num_classes, name="num_classes", minimum=2)
        self.hidden = check_int(hidden, name="hidden", minimum=1)
        self.features = features
        self.predictor = nn.Linear(feature_dim, num_classes)
        self.selector = nn.Sequential(
            nn.Linear(feature_dim, hidden),
            nn.ReLU(),
            nn.BatchNorm1d(hidden),
            _Divide(SELECTION_DIVISOR),
            nn.Linear(hidden, 1),
        )
        self.auxiliary = nn.Linear(feature_dim, num_classes)

    def heads(self, z: Tensor) -> SelectiveOutput:
        """Apply the three heads to features ``z`` of shape ``(B, D)`` or ``(B, M, D)``."""
        if not isinstance(z, Tensor):
            raise TypeError(f"features must return a torch.Tensor, got {type(z).__name__}")
        if z.dim() not in (2, 3):
            raise ValueError(f"features must return (B, D) or (B, M, D), got shape {tuple(z.shape)}")
        if not z.is_floating_point():
            raise TypeError(f"features must return a floating-point tensor, got dtype {z.dtype}")
        if z.shape[-1] != self.feature_dim:
            raise ValueError(
                f"features output width {z.shape[-1]} does not match feature_dim={self.feature_dim}"
            )
        lead = z.shape[:-1]
        flat = z.reshape(-1, self.feature_dim)  # (B·M, D) in member-minor order
        logits = self.predictor(flat)
        selection = torch.sigmoid(self.selector(flat)).squeeze(-1)
        aux = self.auxiliary(flat)
        return SelectiveOutput(
            logits=logits.reshape(*lead, self.num_classes),
            selection=selection.reshape(lead),
            aux_logits=aux.reshape(*lead, self.num_classes),
        )

    def forward(self, x: Tensor) -> SelectiveOutput:
        """``x (B, ...) -> SelectiveOutput`` (see the class docstring for shapes)."""
        return self.heads(self.features(x))
