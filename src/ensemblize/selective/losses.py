"""Training losses for selective classification: SelectiveNet, SYNC and Deep Gamblers.

Every loss is an ``nn.Module`` called as ``loss(output, labels) -> scalar tensor`` and keeps the
components of its last call, detached, in ``loss.last`` (a dict of 0-d tensors) for logging.
``output`` of SelectiveNet and SYNC losses: a :class:`~ensemblize.selective.SelectiveOutput` (what
:class:`~ensemblize.selective.SelectiveNet` returns), any object with ``logits``, ``selection`` and
``aux_logits`` tensors, or the plain tuple ``(logits, selection, aux_logits)``.

Member outputs: a :class:`~ensemblize.selective.SelectiveOutput` whose ``logits`` are
``(B, M, C)`` (``selection`` ``(B, M)``) is treated as M SelectiveNets sharing the labels: every
term — including the coverage ``φ̂`` and the normalised risk ``r̂`` — is computed per member over
the batch and the loss is the mean over members. ``M = 1`` reproduces the plain ``(B, C)`` case.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import (
    check_bool,
    check_choice,
    check_finite_real,
    check_fraction,
    check_int,
    check_labels,
    check_positive,
)
from ..metrics._validate import probabilities as check_probabilities
from ..metrics.confidence import _negative_entropy, _softmax_power, _softmax_response
from ..training.outputs import warn_if_probabilities
from .net import SelectiveOutput, as_selective_output

__all__ = ["SelectiveNetLoss", "SyncLoss", "DeepGamblersLoss"]

_SCORES = ("sr", "smp", "entropy")
_SOURCES = ("f", "h")


def _check_outputs(f: Tensor, g: Tensor, h: Tensor) -> None:
    """Finite logits and selection values in [0, 1]; one host sync, a diagnosis only when it fails."""
    if not (f.is_floating_point() and g.is_floating_point() and h.is_floating_point()):
        raise TypeError(
            f"output tensors must be floating point, got logits {f.dtype}, selection {g.dtype}, aux_logits {h.dtype}"
        )
    with torch.no_grad():
        bad = (~torch.isfinite(f)).any() | (~torch.isfinite(h)).any() | ~((g >= 0) & (g <= 1)).all()
    if not bool(bad):
        return
    for name, t in (("output.logits", f), ("output.aux_logits", h)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(
                f"{name} contains {int((~torch.isfinite(t)).sum())} non-finite value(s) (NaN or inf)"
            )
    outside = ~((g >= 0) & (g <= 1))
    raise ValueError(
        f"output.selection must lie in [0, 1] (a sigmoid output); {int(outside.sum())} value(s) do not, "
        f"e.g. {float(g.detach()[outside].flatten()[0])!r}"
    )


class _ChecksOnce:
    """Mixin: :meth:`_first_call` is True on an instance's first call only (a per-step host sync and
    float64 copy only to diagnose a model ending in Softmax would be wasted on every later step)."""

    def _first_call(self) -> bool:
        first = not getattr(self, "_probabilities_checked", False)
        self._probabilities_checked = True
        return first


def _check_labels_for(labels: object, batch: int, num_classes: int) -> Tensor:
    if not isinstance(labels, Tensor):
        raise TypeError(f"labels must be a torch.Tensor of class indices, got {type(labels).__name__}")
    if labels.dim() != 1 or labels.shape[0] != batch:
        raise ValueError(f"labels must have shape ({batch},), got {tuple(labels.shape)}")
    if batch == 0:
        raise ValueError("empty batch: logits and labels have 0 samples")
    check_labels(labels, num_classes, name="labels")
    return labels.long()  # any integer or bool dtype: gather needs int64 indices


def _member_ce(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-sample, per-member cross-entropy: logits ``(B, M, C)``, labels ``(B,)`` -> ``(B, M)``."""
    logp = torch.log_softmax(logits, dim=-1)
    idx = labels.view(-1, 1, 1).expand(logits.shape[0], logits.shape[1], 1)
    return -logp.gather(-1, idx).squeeze(-1)


def _unpack(
    output: object, labels: object, *, loss: str, check_probs: bool = True
) -> tuple[Tensor, Tensor, Tensor, Tensor, bool]:
    """Validate a SelectiveOutput + labels; return ``(f (B,M,C), g (B,M), h (B,M,C), y (B,), had_members)``.

    ``output``: a :class:`SelectiveOutput`, any object with ``logits``, ``selection`` and
    ``aux_logits`` attributes, or a ``(logits, selection, aux_logits)`` tuple / list of tensors.
    """
    f, g, h = as_selective_output(output)
    if f.dim() not in (2, 3):
        raise ValueError(f"output.logits must be (B, C) or (B, M, C), got shape {tuple(f.shape)}")
    if tuple(g.shape) != tuple(f.shape[:-1]):
        raise ValueError(
            f"output.selection has shape {tuple(g.shape)}; expected {tuple(f.shape[:-1])} to match "
            f"logits {tuple(f.shape)}"
        )
    if tuple(h.shape) != tuple(f.shape):
        raise ValueError(f"output.aux_logits has shape {tuple(h.shape)}; expected {tuple(f.shape)}")
    if f.shape[-1] < 2:
        raise ValueError(f"output.logits need at least 2 classes, got shape {tuple(f.shape)}")
    labels = _check_labels_for(labels, f.shape[0], f.shape[-1])
    _check_outputs(f, g, h)
    if check_probs:
        warn_if_probabilities(f, where=f"{loss} (output.logits)")
        warn_if_probabilities(h, where=f"{loss} (output.aux_logits)")
    members = f.dim() == 3
    if not members:
        f, g, h = f.unsqueeze(1), g.unsqueeze(1), h.unsqueeze(1)
    return f, g, h, labels, members


class SelectiveNetLoss(_ChecksOnce, nn.Module):
    """The SelectiveNet objective (Geifman & El-Yaniv, 2019).

    ``L = α · (r̂(f, g) + λ · max(0, c − φ̂(g))²) + (1 − α) · CE(h)``, with ``ℓ_f`` the per-sample
    cross-entropy of head ``f``, ``φ̂ = mean_i g_i`` the empirical coverage and

    * ``normalize_by_coverage=True`` (the paper): ``r̂ = Σ_i g_i ℓ_f,i / Σ_i g_i``;
    * ``normalize_by_coverage=False``: ``r̂ = mean_i g_i ℓ_f,i`` (the unnormalised form used by
      several public implementations).

    Input: a :class:`SelectiveOutput` with ``logits``/``aux_logits`` ``(B, C)`` and ``selection``
    ``(B,)`` (or with a member axis, see the module docstring) and labels ``(B,)``; output: a scalar.
    Checked on every call: a non-empty batch, finite logits, selection values in ``[0, 1]``, and —
    with ``normalize_by_coverage=True`` — a selection that is not 0 for every sample of a member
    (``r̂`` would be ``0/0``); each raises a ValueError naming the problem.
    ``last`` holds ``loss``, ``selective_risk`` (``r̂``), ``coverage`` (``φ̂``), ``coverage_penalty``
    (``λ·max(0, c − φ̂)²``), ``selective_loss`` (``r̂`` + penalty) and ``aux_loss`` (``CE(h)``).

    Args:
        coverage: target coverage ``c`` in ``(0, 1]``.
        lam: ``λ >= 0``, weight of the coverage penalty (32 in the paper).
        alpha: ``α`` in ``[0, 1]``, weight of the selective part vs. the auxiliary head.
        normalize_by_coverage: see above.
    """

    def __init__(
        self, coverage: float, lam: float = 32.0, alpha: float = 0.5, normalize_by_coverage: bool = True
    ) -> None:
        super().__init__()
        self.coverage = check_fraction(coverage, name="coverage")
        self.lam = check_positive(lam, name="lam", allow_zero=True)
        self.alpha = check_fraction(alpha, name="alpha", low_open=False)
        self.normalize_by_coverage = check_bool(normalize_by_coverage, name="normalize_by_coverage")
        self.last: dict[str, Tensor] = {}

    def extra_repr(self) -> str:
        return (
            f"coverage={self.coverage}, lam={self.lam}, alpha={self.alpha}, "
            f"normalize_by_coverage={self.normalize_by_coverage}"
        )

    def _selectivenet_terms(self, f: Tensor, g: Tensor, h: Tensor, y: Tensor) -> dict[str, Tensor]:
        """Per-member terms, each of shape ``(M,)``."""
        loss_f = _member_ce(f, y)  # (B, M)
        phi = g.mean(dim=0)  # (M,)
        if self.normalize_by_coverage:
            mass = g.sum(dim=0)  # (M,)
            if not bool((mass > 0).all()):
                dead = [int(i) for i in torch.nonzero(mass <= 0).flatten()]
                raise ValueError(
                    f"output.selection is 0 for every sample of member(s) {dead}: the normalised selective "
                    "risk Σ g·ℓ / Σ g is 0/0 (the selection head collapsed); lower lam, raise coverage, or "
                    "use normalize_by_coverage=False"
                )
            risk = (g * loss_f).sum(dim=0) / mass
        else:
            risk = (g * loss_f).mean(dim=0)
        penalty = self.lam * torch.clamp(self.coverage - phi, min=0.0).pow(2)
        aux = _member_ce(h, y).mean(dim=0)
        selective = risk + penalty
        total = self.alpha * selective + (1.0 - self.alpha) * aux
        return {
            "loss": total,
            "selective_risk": risk,
            "coverage": phi,
            "coverage_penalty": penalty,
            "selective_loss": selective,
            "aux_loss": aux,
        }

    def _finish(self, terms: dict[str, Tensor]) -> Tensor:
        self.last = {k: v.detach().mean() for k, v in terms.items()}
        return terms["loss"].mean()

    def forward(self, output: SelectiveOutput, labels: Tensor) -> Tensor:
        """``(SelectiveOutput, labels (B,)) -> scalar``; members are averaged."""
        f, g, h, y, _ = _unpack(output, labels, loss=type(self).__name__, check_probs=self._first_call())
        return self._finish(self._selectivenet_terms(f, g, h, y))


class SyncLoss(SelectiveNetLoss):
    """SYNC: the SelectiveNet objective plus a term that synchronises ``g`` with a softmax score.

    ``L = L_SelectiveNet + μ · mean_i (g_i − s(p_i))²`` where ``s`` is

    * ``"sr"``: ``max_c p_c`` (softmax response);
    * ``"smp"``: ``(max_c p_c)^γ`` (softmax power, the paper's choice);
    * ``"entropy"``: ``1 − H(p)/log C`` (normalised negative entropy, in ``[0, 1]`` like ``g``).

    ``p = softmax(f)`` (``source="f"``) or ``softmax(h)`` (``source="h"``). With ``detach=True``
    (default) the target ``s(p)`` is a constant: the sync term moves only ``g`` (and the shared
    features through ``g``), never the head that produced ``p``; ``detach=False`` lets gradients
    flow into ``p`` as well.

    External prior: ``loss(output, labels, prior=P)`` takes the probabilities from ``P`` instead
    of a head — e.g. a σN ensemble's mean probability ``p̄``. ``P`` is ``(B, C)`` (broadcast over
    members when the output has a member axis) or ``(B, M, C)`` (one per member); it must be a
    probability vector per row. ``detach`` applies to it too.

    ``last`` holds the SelectiveNet components plus ``sync_loss`` (the mean squared error) and
    ``sync_target`` (mean of ``s(p)``).

    Args:
        coverage: target coverage ``c`` in ``(0, 1]``.
        mu: ``μ >= 0``, weight of the sync term.
        score: ``"sr"``, ``"smp"`` or ``"entropy"``.
        gamma: ``γ > 0``, the SMP exponent (ignored by the other scores but still validated).
        source: ``"f"`` or ``"h"``.
        detach: stop gradients through the target.
        lam, alpha, normalize_by_coverage: as in :class:`SelectiveNetLoss`.
    """

    def __init__(
        self,
        coverage: float,
        mu: float,
        score: str = "smp",
        gamma: float = 2.0,
        source: str = "f",
        detach: bool = True,
        lam: float = 32.0,
        alpha: float = 0.5,
        normalize_by_coverage: bool = True,
    ) -> None:
        super().__init__(coverage, lam=lam, alpha=alpha, normalize_by_coverage=normalize_by_coverage)
        self.mu = check_positive(mu, name="mu", allow_zero=True)
        self.score = check_choice(score, _SCORES, name="score")
        self.gamma = check_positive(gamma, name="gamma")
        self.source = check_choice(source, _SOURCES, name="source")
        self.detach = check_bool(detach, name="detach")

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, mu={self.mu}, score={self.score!r}, gamma={self.gamma}, "
            f"source={self.source!r}, detach={self.detach}"
        )

    def score_fn(self, probs: Tensor) -> Tensor:
        """The configured score ``s``: ``(..., C) -> (...)`` (no validation, differentiable)."""
        if self.score == "sr":
            return _softmax_response(probs)
        if self.score == "smp":
            return _softmax_power(probs, self.gamma)
        return _negative_entropy(probs, True)

    def _prior_probs(self, prior: Tensor, f: Tensor, had_members: bool) -> Tensor:
        if not isinstance(prior, Tensor):
            raise TypeError(f"prior must be a torch.Tensor of probabilities, got {type(prior).__name__}")
        B, M, C = f.shape
        if prior.dim() == 2 and tuple(prior.shape) == (B, C):
            p = prior.unsqueeze(1)  # broadcast over members
        elif prior.dim() == 3 and had_members and tuple(prior.shape) == (B, M, C):
            p = prior
        else:
            want = f"({B}, {C})" + (f" or ({B}, {M}, {C})" if had_members else "")
            raise ValueError(f"prior must have shape {want}, got {tuple(prior.shape)}")
        check_probabilities(prior.detach(), name="prior")  # the caller's own shape in any error
        return p

    def forward(self, output: SelectiveOutput, labels: Tensor, *, prior: Tensor | None = None) -> Tensor:
        """``(SelectiveOutput, labels (B,)[, prior]) -> scalar``; members are averaged."""
        f, g, h, y, had_members = _unpack(
            output, labels, loss=type(self).__name__, check_probs=self._first_call()
        )
        terms = self._selectivenet_terms(f, g, h, y)
        if prior is not None:
            target = self.score_fn(self._prior_probs(prior, f, had_members))  # (B, M) or (B, 1)
        elif self.score == "entropy":  # from log-probabilities: finite gradients where p underflows
            logp = torch.log_softmax(f if self.source == "f" else h, dim=-1)
            target = 1.0 + (logp.exp() * logp).sum(dim=-1) / math.log(f.shape[-1])
        else:
            target = self.score_fn(torch.softmax(f if self.source == "f" else h, dim=-1))
        if self.detach:
            target = target.detach()
        sync = (g - target).pow(2).mean(dim=0)  # (M,)
        terms["loss"] = terms["loss"] + self.mu * sync
        terms["sync_loss"] = sync
        terms["sync_target"] = target.expand_as(g).mean(dim=0)
        return self._finish(terms)


class DeepGamblersLoss(_ChecksOnce, nn.Module):
    """Deep Gamblers (Liu et al., 2019): a ``K + 1``-way classifier whose last output abstains.

    With ``p = softmax(z)`` over ``K + 1`` logits and reward ``o`` (``1 < o <= K``)::

        L = mean_i −log(p_{i, y_i} + p_{i, K+1} / o)

    computed stably as ``−logaddexp(log p_y, log p_{K+1} − log o)``. During warm-up
    (``epoch < warmup_epochs``) the loss is plain cross-entropy on the first ``K`` logits.
    The abstention score is ``p_{K+1}``; rank by
    :func:`~ensemblize.selective.deep_gamblers_confidence` (``1 − p_{K+1}``) and predict with
    ``argmax`` over the first ``K`` logits.

    Epochs: the loss holds ``epoch`` (starts at 0). Call ``set_epoch(e)`` at the start of every
    epoch, or pass ``epoch=e`` to a call to override it for that call only. With the default
    ``warmup_epochs=0`` neither is needed. With :func:`ensemblize.training.fit`, whose callbacks
    receive the number of the epoch just finished (1-based), pass
    ``callbacks=[lambda epoch, record, model: loss.set_epoch(epoch)]``: that number is the 0-based
    index of the next epoch. The epoch is not checkpointed; after a resumed run call ``set_epoch``.

    Shapes: logits ``(B, K+1)`` or ``(B, M, K+1)`` (members averaged), labels ``(B,)`` in
    ``[0, K)`` with ``B ≥ 1`` (an empty batch raises ValueError, as in :class:`SelectiveNetLoss`);
    returns a scalar. ``last`` holds ``loss``, ``abstain`` (mean ``p_{K+1}``) and
    ``warmup`` (1.0 during warm-up, else 0.0).

    Args:
        reward: ``o`` in ``(1, K]``; ``K`` is checked at construction when ``num_classes`` is given,
            otherwise at the first call.
        warmup_epochs: number of initial epochs of plain cross-entropy (``>= 0``).
        num_classes: ``K`` (optional); enables the early check of ``reward`` and of the logits' width.
    """

    def __init__(self, reward: float, *, warmup_epochs: int = 0, num_classes: int | None = None) -> None:
        super().__init__()
        reward = check_finite_real(reward, name="reward")
        if reward <= 1:
            raise ValueError(f"reward must lie in (1, K] (K = number of classes), got {reward!r}")
        if num_classes is not None:
            num_classes = check_int(num_classes, name="num_classes", minimum=2)
            if reward > num_classes:
                raise ValueError(
                    f"reward must lie in (1, {num_classes}] for K = {num_classes}, got {reward!r}"
                )
        warmup_epochs = check_int(warmup_epochs, name="warmup_epochs", minimum=0)
        self.reward = reward
        self.num_classes = num_classes
        self.warmup_epochs = warmup_epochs
        self.epoch = 0
        self.last: dict[str, Tensor] = {}

    def extra_repr(self) -> str:
        return f"reward={self.reward}, warmup_epochs={self.warmup_epochs}, num_classes={self.num_classes}"

    @staticmethod
    def _check_epoch(epoch: object) -> int:
        return check_int(epoch, name="epoch", minimum=0)

    def set_epoch(self, epoch: int) -> None:
        """Set the current epoch (0-based); warm-up is active while ``epoch < warmup_epochs``."""
        self.epoch = self._check_epoch(epoch)

    def forward(self, logits: Tensor, labels: Tensor, *, epoch: int | None = None) -> Tensor:
        """``(logits (B, K+1) | (B, M, K+1), labels (B,)) -> scalar``."""
        if not isinstance(logits, Tensor):
            raise TypeError(f"logits must be a torch.Tensor with K + 1 outputs, got {type(logits).__name__}")
        if logits.dim() not in (2, 3):
            raise ValueError(f"logits must be (B, K+1) or (B, M, K+1), got shape {tuple(logits.shape)}")
        k = logits.shape[-1] - 1
        if k < 2:
            raise ValueError(f"logits need K + 1 >= 3 outputs (K >= 2 classes + abstain), got {k + 1}")
        if self.num_classes is not None and k != self.num_classes:
            raise ValueError(
                f"logits have {k + 1} outputs; expected num_classes + 1 = {self.num_classes + 1}"
            )
        if self.reward > k:
            raise ValueError(f"reward must lie in (1, {k}] for K = {k} classes, got {self.reward!r}")
        labels = _check_labels_for(labels, logits.shape[0], k)
        if not logits.is_floating_point():
            raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
        if not bool(torch.isfinite(logits).all()):
            raise ValueError(
                f"logits contain {int((~torch.isfinite(logits)).sum())} non-finite value(s) (NaN or inf)"
            )
        if self._first_call():
            warn_if_probabilities(logits, where=f"{type(self).__name__} (logits)")
        e = self.epoch if epoch is None else self._check_epoch(epoch)
        z = logits if logits.dim() == 3 else logits.unsqueeze(1)  # (B, M, K+1)
        warm = e < self.warmup_epochs
        logp = torch.log_softmax(z, dim=-1)
        if warm:
            loss = _member_ce(z[..., :k], labels).mean()
        else:
            idx = labels.view(-1, 1, 1).expand(z.shape[0], z.shape[1], 1)
            logp_y = logp.gather(-1, idx).squeeze(-1)
            loss = -torch.logaddexp(logp_y, logp[..., k] - math.log(self.reward)).mean()
        self.last = {
            "loss": loss.detach(),
            "abstain": logp[..., k].detach().exp().mean(),
            "warmup": torch.tensor(1.0 if warm else 0.0),
        }
        return loss
