"""Find the σNorm layers of a model: the one definition of :func:`sigma_layers`.

The regulariser (:mod:`ensemblize.sigma.regularizer`), the sharing statistics
(:mod:`ensemblize.sigma.gate_sharing`) and :meth:`ensemblize.SigmaEnsemble.sigma_layers` all select
layers through this function, so "which σNorm layers" means the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import nn

from .._checks import check_module
from ..nn.sigma_norm import SigmaNorm

__all__ = ["sigma_layers", "LayerSelection"]

#: A subset of σNorm layers: qualified names as in ``model.named_modules()``, or a predicate
#: ``(name, layer) -> bool``; ``None`` selects every σNorm layer.
LayerSelection = Iterable[str] | Callable[[str, SigmaNorm], bool] | None


def sigma_layers(model: nn.Module, layers: LayerSelection = None) -> list[tuple[str, SigmaNorm]]:
    """The σNorm layers of ``model`` as ``(name, layer)`` pairs, in module order.

    Args:
        model: any module containing σNorm layers (e.g. from :func:`ensemblize.sigma_ensemble`).
        layers: optional subset, by qualified name or by predicate ``(name, layer) -> bool``.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, or ``layers`` is a string (pass a list of names).
        ValueError: ``model`` has no σNorm layer, a requested name does not exist, or the
            selection matches no layer.
    """
    check_module(model, name="model")
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, SigmaNorm)]
    if not found:
        raise ValueError(
            f"{type(model).__name__} has no σNorm layer; convert it with ensemblize.sigma_ensemble first"
        )
    if layers is None:
        return found
    if callable(layers):
        chosen = [(n, m) for n, m in found if layers(n, m)]
    else:
        if isinstance(layers, (str, bytes)):
            raise TypeError(f"layers must be a list of layer names or a predicate, got the string {layers!r}")
        wanted = set(layers)
        names = {n for n, _ in found}
        unknown = sorted(wanted - names)
        if unknown:
            # names relative to the original model (SigmaEnsemble.converted) lack the wrapper's prefix
            matches = sorted((n, n[: -len(u)]) for u in unknown for n in names if n.endswith("." + u))
            hint = (
                f"; names are as model.named_modules() gives them (e.g. {matches[0][0]!r}): "
                f"SigmaEnsemble.converted names layers relative to the original model, without {matches[0][1]!r}"
                if matches
                else ""
            )
            raise ValueError(f"unknown σNorm layer name(s) {unknown}; available: {sorted(names)}{hint}")
        chosen = [(n, m) for n, m in found if n in wanted]
    if not chosen:
        raise ValueError("the layer selection matched no σNorm layer")
    return chosen
