"""Backbones for small images, 1-D signals and tables; every one is convertible by :func:`ensemblize.sigma_ensemble`.

``build_model(name, *, in_channels, num_classes, image_size, **kw)`` builds one by name;
``build_ensemble(method, name, *, members, ...)`` builds single / deep / BatchEnsemble / Packed /
σN-Ens versions with the member-output contract ``(B, ...) -> (B, M, classes)``.
``TemperatureScaled`` / ``fit_temperature`` are the temperature-scaling baseline.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "ResNet": "ensemblize.models.resnet",
    "resnet18": "ensemblize.models.resnet",
    "resnet_small": "ensemblize.models.resnet",
    "WideResNet": "ensemblize.models.wide_resnet",
    "wide_resnet28": "ensemblize.models.wide_resnet",
    "ViT": "ensemblize.models.vit",
    "vit_small": "ensemblize.models.vit",
    "ResNet1d": "ensemblize.models.resnet1d",
    "resnet1d": "ensemblize.models.resnet1d",
    "Transformer1d": "ensemblize.models.transformer1d",
    "transformer1d": "ensemblize.models.transformer1d",
    "IMAGE_MODELS": "ensemblize.models.registry",
    "SIGNAL_MODELS": "ensemblize.models.registry",
    "build_model": "ensemblize.models.registry",
    "MODEL_NAMES": "ensemblize.models.registry",
    "build_ensemble": "ensemblize.models.registry",
    "ENSEMBLE_METHODS": "ensemblize.models.registry",
    "LAYERED_MODELS": "ensemblize.models.registry",
    "DeepEnsemble": "ensemblize.models.ensembles",
    "SingleMember": "ensemblize.models.ensembles",
    "PackedLayers": "ensemblize.models.ensembles",
    "BatchEnsembleLayers": "ensemblize.models.ensembles",
    "count_parameters": "ensemblize.models.ensembles",
    "Layers": "ensemblize.models.resnet",
    "default_patch_size": "ensemblize.models.vit",
    "TemperatureScaled": "ensemblize.models.temperature_scaling",
    "fit_temperature": "ensemblize.models.temperature_scaling",
}

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES)
