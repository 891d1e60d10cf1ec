"""Member-aware layers.

Every layer carries the member axis explicitly:

* linear ensemble layers map ``(B, K, in) -> (B, K, out)``;
* convolutional ones map ``(B·K, C, H, W) -> (B·K, C', H', W')`` in ``repeat_interleave`` order
  (sample 0 member 0, sample 0 member 1, ...), see :mod:`ensemblize.members`;
* σNorm layers follow the layout of the norm they replace.

Layers are imported lazily from the module that implements them.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAYERS = {
    "SigmaBatchNorm1d": "ensemblize.nn.sigma_norm",
    "SigmaBatchNorm2d": "ensemblize.nn.sigma_norm",
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

__all__ = sorted(_LAYERS)


def __getattr__(name: str) -> Any:
    if name in _LAYERS:
        return getattr(importlib.import_module(_LAYERS[name]), name)
    raise AttributeError(f"module 'ensemblize.nn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
