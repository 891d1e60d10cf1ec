"""Build backbones and ensembles by name.

``build_model(name, *, in_channels, num_classes, image_size, **kw)`` returns a plain backbone
``(B, C, H, W) -> (B, num_classes)`` for an image model (:data:`IMAGE_MODELS`) or
``(B, C, L) -> (B, num_classes)`` for a signal model (:data:`SIGNAL_MODELS`, where ``image_size``
is the signal length ``L``); ``build_ensemble(method, name, *, members, ...)`` returns an ensemble
``(B, ...) -> (B, M, num_classes)`` of either.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ensemblize.members import check_members
from ensemblize.models.resnet import Layers, check_channels

__all__ = [
    "ENSEMBLE_METHODS",
    "IMAGE_MODELS",
    "LAYERED_MODELS",
    "MODEL_NAMES",
    "SIGNAL_MODELS",
    "build_ensemble",
    "build_model",
]

IMAGE_MODELS: tuple[str, ...] = ("resnet_small", "resnet18", "wrn28", "vit_small")
"""Backbones for images ``(B, C, H, W)``."""

SIGNAL_MODELS: tuple[str, ...] = ("resnet1d", "transformer1d")
"""Backbones for 1-D signals ``(B, C, L)`` (MNIST-1D)."""

MODEL_NAMES: tuple[str, ...] = IMAGE_MODELS + SIGNAL_MODELS
"""Names accepted by :func:`build_model`."""

ENSEMBLE_METHODS: tuple[str, ...] = ("single", "deep", "batchensemble", "packed", "sigma")
"""Methods accepted by :func:`build_ensemble`."""

LAYERED_MODELS: tuple[str, ...] = ("resnet_small", "resnet18", "wrn28", "resnet1d")
"""Backbones built through a layer factory, hence available as "packed" and "batchensemble"."""


def _check_image_size(image_size: object) -> None:
    if isinstance(image_size, (tuple, list)) and len(image_size) == 2:
        check_channels(list(image_size), name="image_size")
    else:
        check_channels([image_size], name="image_size")


def _build(
    name: str, *, in_channels: int, num_classes: int, image_size: Any, layers: Layers | None, **kw: Any
) -> nn.Module:
    if not isinstance(name, str) or name not in MODEL_NAMES:
        raise ValueError(f"unknown model name {name!r}; choose one of {list(MODEL_NAMES)}")
    _check_image_size(image_size)
    common = {"in_channels": in_channels, "num_classes": num_classes}
    if name in ("vit_small", "transformer1d") and layers is not None:
        raise ValueError(f"{name!r} has no layer factory; layered models are {list(LAYERED_MODELS)}")
    if name == "transformer1d":
        from ensemblize.models.transformer1d import transformer1d

        return transformer1d(length=image_size, **common, **kw)
    if name == "resnet1d":
        from ensemblize.models.resnet1d import resnet1d

        return resnet1d(**common, layers=layers, **kw)
    if name == "vit_small":
        from ensemblize.models.vit import vit_small

        return vit_small(image_size=image_size, **common, **kw)
    if name == "wrn28":
        from ensemblize.models.wide_resnet import wide_resnet28

        return wide_resnet28(**common, layers=layers, **kw)
    from ensemblize.models import resnet

    return getattr(resnet, name)(**common, layers=layers, **kw)


def build_model(name: str, *, in_channels: int, num_classes: int, image_size: Any, **kw: Any) -> nn.Module:
    """A plain backbone ``(B, in_channels, H, W) -> (B, num_classes)`` (``(B, in_channels, L)`` for
    signal models) by name.

    Names (:data:`MODEL_NAMES`): ``"resnet_small"`` (ResNet-8, widths 16/32/64; ``width``),
    ``"resnet18"`` (CIFAR ResNet-18; ``width``), ``"wrn28"`` (WRN-28-k; ``widen_factor``, ``dropout``),
    ``"vit_small"`` (``patch_size``, ``dim``, ``depth``, ``heads``, ``mlp_ratio``, ``dropout``, ``pool``);
    for signals ``"resnet1d"`` (Conv1d + BatchNorm1d ResNet, widths 32/64/128; ``width``, ``blocks``,
    ``stem_kernel``) and ``"transformer1d"`` (patch embedding + LayerNorm blocks; ``patch_size``,
    ``dim``, ``depth``, ``heads``, ``mlp_ratio``, ``dropout``, ``pool``).
    ``image_size`` (int or ``(H, W)``; the signal length for signal models) sizes the ViT's and the
    1-D transformer's position embeddings and is validated for all.
    Extra keywords go to the constructor; an unknown one raises ``TypeError``.
    """
    return _build(
        name, in_channels=in_channels, num_classes=num_classes, image_size=image_size, layers=None, **kw
    )


def build_ensemble(
    method: str,
    name: str,
    *,
    members: int,
    in_channels: int,
    num_classes: int,
    image_size: Any,
    **kw: Any,
) -> nn.Module:
    """An ensemble ``(B, in_channels, H, W) -> (B, M, num_classes)`` of backbone ``name``.

    Methods (:data:`ENSEMBLE_METHODS`):

    * ``"single"`` — one backbone, output ``(B, 1, C)``; ``members`` must be 1.
    * ``"deep"`` — :class:`~ensemblize.models.ensembles.DeepEnsemble` of ``members`` independently
      initialised backbones.
    * ``"batchensemble"`` — the backbone built from BatchEnsemble layers (``name`` in
      :data:`LAYERED_MODELS`).
    * ``"packed"`` — Packed-Ensembles ``PE(alpha, M, gamma)`` of the backbone (``name`` in
      :data:`LAYERED_MODELS`); keywords ``alpha`` (default 2) and ``gamma`` (default 1). A width
      that cannot be grouped raises ``ValueError`` naming the workable ``gamma``/``alpha``.
    * ``"sigma"`` — ``ensemblize.sigma_ensemble(build_model(...), members=members, noise=...)``;
      keyword ``noise`` is passed on when given.

    Remaining keywords go to the backbone constructor (e.g. ``width``, ``widen_factor``).
    """
    check_members(members)
    if not isinstance(method, str) or method not in ENSEMBLE_METHODS:
        raise ValueError(f"unknown ensemble method {method!r}; choose one of {list(ENSEMBLE_METHODS)}")
    from ensemblize.models.ensembles import (
        BatchEnsembleLayers,
        DeepEnsemble,
        PackedLayers,
        SingleMember,
    )

    spec = {"in_channels": in_channels, "num_classes": num_classes, "image_size": image_size}
    if method == "single":
        if members != 1:
            raise ValueError(
                f"method 'single' has exactly one member; got members={members} (pass members=1)"
            )
        return SingleMember(build_model(name, **spec, **kw))
    if method == "deep":
        return DeepEnsemble([build_model(name, **spec, **kw) for _ in range(members)])
    if method == "sigma":
        from ensemblize import sigma_ensemble

        sigma_kw = {"noise": kw.pop("noise")} if "noise" in kw else {}
        return sigma_ensemble(build_model(name, **spec, **kw), members=members, **sigma_kw)
    if name not in LAYERED_MODELS:
        raise ValueError(f"method {method!r} supports the models {list(LAYERED_MODELS)}, got {name!r}")
    if method == "packed":
        layers: Layers = PackedLayers(members=members, alpha=kw.pop("alpha", 2.0), gamma=kw.pop("gamma", 1))
    else:
        layers = BatchEnsembleLayers(members=members)
    return _build(name, **spec, layers=layers, **kw)
