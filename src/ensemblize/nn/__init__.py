"""Member-aware layers.

Every layer carries the member axis explicitly:

* linear ensemble layers map ``(B, K, in) -> (B, K, out)``;
* convolutional ones map ``(B·K, C, H, W) -> (B·K, C', H', W')`` in ``repeat_interleave`` order
  (sample 0 member 0, sample 0 member 1, ...), see :mod:`ensemblize.members`;
* σNorm layers follow the layout of the norm they replace.

Layers are imported lazily from the module that implements them.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_LAYERS = {
    "SigmaBatchNorm1d": "ensemblize.nn.sigma_norm",
    "SigmaBatchNorm2d": "ensemblize.nn.sigma_norm",
    "SigmaBatchNorm3d": "ensemblize.nn.sigma_norm",
    "SigmaLayerNorm": "ensemblize.nn.sigma_norm",
    "SigmaGroupNorm": "ensemblize.nn.sigma_norm",
    "SigmaNorm": "ensemblize.nn.sigma_norm",
    "LoMELinear": "ensemblize.nn.lome",
    "AdditiveLowRankLinear": "ensemblize.nn.lome",
    "BatchEnsembleLinear": "ensemblize.nn.batch_ensemble",
    "BatchEnsembleConv2d": "ensemblize.nn.batch_ensemble",
    "PackedLinear": "ensemblize.nn.packed",
    "PackedConv2d": "ensemblize.nn.packed",
    "EnsembleLinear": "ensemblize.nn.lome",
    "packed_widths": "ensemblize.nn.packed",
}

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _LAYERS)
