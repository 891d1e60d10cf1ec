"""Explicit ensembles and the layer factories that turn the ResNet family into ensembles.

Every module here maps a plain batch ``(B, C, H, W)`` to member outputs ``(B, M, num_classes)``
(the member-axis contract of :mod:`ensemblize.members`).

* :class:`DeepEnsemble` — ``M`` independent models, outputs stacked on axis 1.
* :class:`SingleMember` — one model seen as an ensemble of one: ``(B, C) -> (B, 1, C)``.
* :class:`PackedLayers` — Packed-Ensembles (Laurent et al., 2023) factory for
  :class:`~ensemblize.models.resnet.ResNet` / :class:`~ensemblize.models.wide_resnet.WideResNet`:
  convolutions become :class:`~ensemblize.nn.PackedConv2d`, batch norms cover the packed channel
  count, the head is a ``last`` :class:`~ensemblize.nn.PackedLinear`; members ride along channels.
* :class:`BatchEnsembleLayers` — BatchEnsemble (Wen et al., 2020) factory: the input is interleaved
  to ``(B·M, C, H, W)``, convolutions are ``BatchEnsembleConv2d``, the head is ``BatchEnsembleLinear``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ensemblize._checks import check_int, check_module, check_positive
from ensemblize.members import check_members, interleave, unfold
from ensemblize.models.resnet import Layers

__all__ = [
    "BatchEnsembleLayers",
    "DeepEnsemble",
    "PackedLayers",
    "SingleMember",
    "count_parameters",
]


def count_parameters(module: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of scalar parameters of ``module`` (shared tensors counted once).

    With ``trainable_only=True`` only parameters with ``requires_grad`` are counted.
    """
    check_module(module, name="module")
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


class DeepEnsemble(nn.Module):
    """Deep ensemble of ``M`` independently parameterised models: ``(B, ...) -> (B, M, ...)``.

    ``forward(x) = stack([model_1(x), ..., model_M(x)], dim=1)``; every member sees every sample.
    Running the members one after the other is inherent to an explicit ensemble (distinct weights,
    distinct graphs).

    Training convention: ``member_loss_reduction = "sum"``. :func:`ensemblize.training.fit`'s
    default loss is then ``Σ_m L_m`` instead of the mean ``(1/M) Σ_m L_m``, so the gradient reaching
    member ``m`` is exactly ``∇L_m`` — the gradient of that model trained alone. With SGD (any
    momentum, coupled weight decay) or AdamW every member therefore follows the single model's
    recipe step for step; under the mean each member would train at ``lr/M`` with ``M×`` the
    relative weight decay. (Global gradient-norm clipping, ``grad_clip``, still couples the members:
    it clips their joint norm.) The logged ``train_loss`` is that sum.

    Args:
        models: the ``M >= 1`` members, distinct module objects (a module passed twice would share
            its weights between "members", so it is rejected).
    """

    member_loss_reduction = "sum"

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        models = list(models)
        if not models:
            raise ValueError("DeepEnsemble needs at least one model, got an empty sequence")
        for i, m in enumerate(models):
            check_module(m, name=f"models[{i}]")
        ids = [id(m) for m in models]
        if len(set(ids)) != len(ids):
            dup = next(i for i, k in enumerate(ids) if ids.index(k) != i)
            raise ValueError(
                f"models[{dup}] is the same object as an earlier member; members must be distinct"
            )
        self.models = nn.ModuleList(models)
        self.members = len(models)

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """``(B, ...) -> (B, M, ...)``: member ``m``'s output at ``[:, m]``.

        Every argument is passed to every member as given (``ensemble(x)``, or keyword inputs such as
        ``ensemble(input_ids=..., attention_mask=...)`` for members that take them).
        """
        return torch.stack([model(*args, **kwargs) for model in self.models], dim=1)


class SingleMember(nn.Module):
    """A single model as an ensemble of one: ``(B, ...) -> (B, 1, ...)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        check_module(model, name="model")
        self.model = model
        self.members = 1

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """``(B, ...) -> (B, 1, ...)`` (arguments passed to the model as given)."""
        return self.model(*args, **kwargs).unsqueeze(1)


class SplitMembers(nn.Module):
    """``(B, M·C) -> (B, M, C)``: member ``m``'s outputs are channels ``[m·C, (m+1)·C)`` (a view)."""

    def __init__(self, members: int) -> None:
        super().__init__()
        self.members = check_members(members)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(1, (self.members, x.shape[1] // self.members))


class Interleave(nn.Module):
    """``(B, ...) -> (B·M, ...)`` in ``repeat_interleave`` order (see :func:`ensemblize.members.interleave`)."""

    def __init__(self, members: int) -> None:
        super().__init__()
        self.members = check_members(members)

    def forward(self, x: Tensor) -> Tensor:
        return interleave(x, self.members)


class MemberHead(nn.Module):
    """Applies a ``(B, M, in) -> (B, M, out)`` ensemble linear layer to interleaved ``(B·M, in)`` features."""

    def __init__(self, linear: nn.Module, members: int) -> None:
        super().__init__()
        self.linear = linear
        self.members = check_members(members)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(unfold(x, self.members))


class PackedLayers(Layers):
    """Packed-Ensembles factory ``PE(alpha, M, gamma)`` for the ResNet family.

    * stem: ``PackedConv2d(first=True)`` — dense on the raw input, ``round(alpha·C)`` outputs;
    * every other convolution (3×3 and 1×1 shortcuts): ``PackedConv2d`` with ``M·gamma`` groups;
    * batch norms: ``nn.BatchNorm2d(round(alpha·C))`` (per channel, hence per member);
    * head: ``PackedLinear(last=True, gamma=1)`` — each member's classifier reads all of that member's
      pooled features (``M`` groups) and writes ``num_classes`` logits;
    * exit: ``(B, M·num_classes) -> (B, M, num_classes)``.

    The channel arithmetic and its errors are those of :func:`ensemblize.nn.packed.packed_widths`.

    Per-member gradient convention: the mean. TorchUncertainty's Packed-Ensembles routine trains
    on the cross-entropy averaged over all ``B·M`` (sample, member) rows, i.e. ``(1/M) Σ_m L_m``,
    so each member's gradient is ``∇L_m / M``; :func:`ensemblize.training.fit`'s default
    ``member_loss_reduction="mean"`` is the same, and these models keep it.
    """

    def __init__(self, *, members: int, alpha: float = 2.0, gamma: int = 1) -> None:
        self.members = check_members(members)
        self.alpha = check_positive(alpha, name="alpha")
        self.gamma = check_int(gamma, name="gamma")

    def conv(self, in_channels, out_channels, kernel_size, *, stride=1, padding=0, first=False, bias=False):
        from ensemblize.nn.packed import PackedConv2d

        return PackedConv2d(
            in_channels,
            out_channels,
            kernel_size,
            self.members,
            self.alpha,
            self.gamma,
            stride=stride,
            padding=padding,
            first=first,
            bias=bias,
        )

    def norm(self, channels: int) -> nn.Module:
        return nn.BatchNorm2d(round(self.alpha * channels))

    def head(self, in_features: int, num_classes: int) -> nn.Module:
        from ensemblize.nn.packed import PackedLinear

        return PackedLinear(in_features, num_classes, self.members, self.alpha, 1, last=True)

    def exit(self) -> nn.Module:
        return SplitMembers(self.members)


class BatchEnsembleLayers(Layers):
    """BatchEnsemble factory for the ResNet family.

    * enter: the input is interleaved to ``(B·M, C, H, W)`` (every member sees every sample);
    * convolutions: ``ensemblize.nn.BatchEnsembleConv2d`` (shared weight, per-member ``r``/``s``);
    * batch norms: plain ``nn.BatchNorm2d(C)`` over the ``B·M`` rows (statistics shared by the
      members, as in the BatchEnsemble reference ResNets);
    * head: ``ensemblize.nn.BatchEnsembleLinear`` on ``(B, M, features)`` → ``(B, M, num_classes)``;
    * ``r``/``s`` of every layer start as random ±1 signs (BatchEnsemble's init).

    Per-member gradient convention: the mean. Wen et al.'s reference implementation tiles the batch
    ``M`` times and minimises the mean cross-entropy over the tiled ``B·M`` rows, ``(1/M) Σ_m L_m``
    (each member's fast weights get ``∇L_m / M``; the shared weights get the member average);
    :func:`ensemblize.training.fit`'s default ``member_loss_reduction="mean"`` is the same.
    """

    def __init__(self, *, members: int) -> None:
        self.members = check_members(members)

    @staticmethod
    def _layers():
        from ensemblize.nn.batch_ensemble import BatchEnsembleConv2d, BatchEnsembleLinear

        return BatchEnsembleConv2d, BatchEnsembleLinear

    def conv(self, in_channels, out_channels, kernel_size, *, stride=1, padding=0, first=False, bias=False):
        conv2d, _ = self._layers()
        return conv2d(
            in_channels, out_channels, kernel_size, self.members, stride=stride, padding=padding, bias=bias
        )

    def head(self, in_features: int, num_classes: int) -> nn.Module:
        _, linear = self._layers()
        return MemberHead(linear(in_features, num_classes, self.members, init="random-signs"), self.members)

    def enter(self) -> nn.Module:
        return Interleave(self.members)
