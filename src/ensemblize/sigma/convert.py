"""Turn any ``nn.Module`` into a σN ensemble: every norm layer becomes its per-member σNorm twin.

>>> ens = sigma_ensemble(model, members=4)       # a NEW module; ``model`` is untouched
>>> ens(x).shape                                   # x: (B, ...) -> (B, M, num_classes)

(Public as ``ensemblize.sigma_ensemble``; ``ensemblize.convert`` re-exports this module.)

The wrapper repeats each input ``M`` times in ``repeat_interleave`` order (``(B, ...) ->
(B·M, ...)``), runs the shared backbone once on that batch, and unfolds every output whose
leading size is ``B·M`` back to ``(B, M, ...)``. Only the norm layers are per member; every other
weight is shared. With ``noise=0.0`` each member reproduces the original model exactly (see
:mod:`ensemblize.nn.sigma_norm` for the gate parameterisation that makes this true).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_finite_real, check_int, check_module, check_positive
from ..members import check_members, interleave, unfold
from ..nn.sigma_norm import (
    SigmaBatchNorm1d,
    SigmaBatchNorm2d,
    SigmaBatchNorm3d,
    SigmaGroupNorm,
    SigmaLayerNorm,
    SigmaNorm,
)
from .layers import sigma_layers

__all__ = [
    "sigma_ensemble",
    "SigmaEnsemble",
    "convert_norms",
    "NormSelection",
    "DEFAULT_NOISE",
    "GATE_INIT_BOUND",
]

#: Which norm layers of the *unconverted* model to convert: qualified names as in
#: ``model.named_modules()``, or a predicate ``(name, norm_layer) -> bool``; ``None`` converts all.
NormSelection = Iterable[str] | Callable[[str, nn.Module], bool] | None

#: The plain norm layers that have a σNorm twin.
_CONVERTIBLE = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm, nn.LayerNorm, nn.GroupNorm)

#: Default std of the N(0, 1) noise added to the members' gate logits: it breaks the symmetry the
#: diversity regulariser needs (gates start spread over roughly σ(±0.65) ≈ 0.34–0.66). Chosen with
#: τ, λ, the gate lr and the converted layers on MNIST-1D validation
#: (``ensemblize.default_job.DEFAULT_TAU``, docs/results/sigma_search_mnist1d.md); it was 0.5.
DEFAULT_NOISE = 0.65

#: ``gate_init`` must lie in ``[-GATE_INIT_BOUND, GATE_INIT_BOUND]``: beyond ±10 the initial gate
#: ``σ(γ₀)`` is within 5e-5 of 0 or 1, its gradient vanishes, and the compensating amplitude
#: ``1/σ(γ₀)`` (> 2·10⁴) amplifies round-off; at −200 it is 1/0.
GATE_INIT_BOUND = 10.0


def _check_conversion(members: object, noise: object, gate_init: object) -> tuple[int, float, float]:
    members = check_members(members)
    noise = check_positive(noise, name="noise", allow_zero=True)
    gate_init = check_finite_real(gate_init, name="gate_init", bound=GATE_INIT_BOUND)
    return members, noise, gate_init


def _twin(norm: nn.Module, members: int, gate_init: float) -> SigmaNorm | None:
    twins = {
        nn.BatchNorm1d: SigmaBatchNorm1d,
        nn.BatchNorm2d: SigmaBatchNorm2d,
        nn.BatchNorm3d: SigmaBatchNorm3d,
    }
    for plain, sigma in twins.items():
        if isinstance(norm, plain):
            return sigma(
                norm.num_features,
                members,
                norm.eps,
                norm.momentum,
                track_running_stats=norm.track_running_stats,
                gate_init=gate_init,
            )
    if isinstance(norm, nn.SyncBatchNorm):
        raise TypeError(
            "SyncBatchNorm cannot be converted (its input rank is unknown); convert the model "
            "before nn.SyncBatchNorm.convert_sync_batchnorm, or use plain BatchNorm"
        )
    if isinstance(norm, nn.LayerNorm):
        return SigmaLayerNorm(norm.normalized_shape, members, norm.eps, gate_init=gate_init)
    if isinstance(norm, nn.GroupNorm):
        return SigmaGroupNorm(norm.num_groups, norm.num_channels, members, norm.eps, gate_init=gate_init)
    return None


def _norm_filter(module: nn.Module, layers: NormSelection) -> Callable[[str, nn.Module], bool]:
    """``(name, layer) -> convert it?`` for a :data:`NormSelection`; unknown names are a ValueError."""
    if layers is None:
        return lambda _name, _layer: True
    if callable(layers):
        return lambda name, layer: bool(layers(name, layer))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"layers must be a list of norm-layer names or a predicate, got {layers!r}")
    wanted = list(layers)
    bad = [n for n in wanted if not isinstance(n, str)]
    if bad:
        raise TypeError(f"layers must hold layer names (str), got {bad[0]!r} ({type(bad[0]).__name__})")
    available = [n for n, m in module.named_modules() if isinstance(m, _CONVERTIBLE)]
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise ValueError(f"layers: unknown norm layer name(s) {unknown}; available: {available}")
    chosen = set(wanted)
    return lambda name, _layer: name in chosen


def convert_norms(
    module: nn.Module,
    *,
    members: int,
    noise: float = DEFAULT_NOISE,
    gate_init: float = 0.0,
    generator: torch.Generator | None = None,
    layers: NormSelection = None,
) -> list[str]:
    """Replace, **in place**, every BatchNorm / LayerNorm / GroupNorm inside ``module`` by its σNorm twin.

    Pretrained affine parameters and running statistics are copied into every member. Returns the
    qualified names of the replaced layers (empty when there was nothing to convert). ``layers``
    restricts the conversion to some norm layers (:data:`NormSelection`). Use
    :func:`sigma_ensemble` unless you manage the member layout yourself. Arguments are checked as
    in :func:`sigma_ensemble`.
    """
    check_module(module, name="module")
    members, noise, gate_init = _check_conversion(members, noise, gate_init)
    selected = _norm_filter(module, layers)
    replaced: list[str] = []
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, SigmaNorm) or not isinstance(child, _CONVERTIBLE):
                continue
            if not selected(name, child):
                continue
            twin = _twin(child, members, gate_init)
            if twin is None:
                continue
            twin.load_from_norm_module(child, noise=noise, generator=generator)
            ref = next(child.parameters(), None)
            if ref is None:
                ref = next(child.buffers(), None)
            if ref is not None:
                twin.to(device=ref.device, dtype=ref.dtype)
            twin.train(child.training)
            setattr(parent, child_name, twin)
            replaced.append(name)
    return replaced


def _map_outputs(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        mapped = {k: _map_outputs(v, fn) for k, v in obj.items()}
        try:
            return type(obj)(**mapped)
        except TypeError:
            return type(obj)(mapped)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_outputs(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_outputs(v, fn) for v in obj)
    return obj


class SigmaEnsemble(nn.Module):
    """A shared backbone whose norm layers are per-member σNorm layers: ``(B, ...) -> (B, M, ...)``.

    ``forward(*args, **kwargs)``: the batch size ``B`` is the leading size of the first tensor
    argument; every tensor argument with that leading size is repeated for the ``M`` members
    (interleaved), others pass through unchanged. Every output tensor whose leading size is ``B·M``
    is returned as ``(B, M, ...)``; other outputs (e.g. a scalar loss) pass through.

    Attributes: ``backbone`` (the converted module), ``members``, ``converted`` (names of the
    σNorm layers), ``settings`` (the :func:`sigma_ensemble` keywords that made it — ``members``,
    ``noise``, ``seed``, ``gate_init``, ``layers`` — a JSON-ready dict that
    :func:`ensemblize.save_ensemble` writes; built directly, ``noise``/``seed``/``gate_init`` are
    ``None`` (unknown) and ``layers`` is ``converted``).
    """

    def __init__(
        self,
        backbone: nn.Module,
        members: int,
        converted: list[str],
        *,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.members = check_members(members)
        self.converted = list(converted)
        defaults = {"members": self.members, "noise": None, "seed": None, "gate_init": None}
        self.settings: dict[str, Any] = {**defaults, "layers": list(self.converted), **(settings or {})}

    def extra_repr(self) -> str:
        return f"members={self.members}, sigma_norm_layers={len(self.converted)}"

    def sigma_layers(self) -> list[tuple[str, SigmaNorm]]:
        """``(name, layer)`` for every σNorm layer, in module order (:func:`ensemblize.sigma.sigma_layers`)."""
        return sigma_layers(self)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        first = next((a for a in [*args, *kwargs.values()] if isinstance(a, Tensor)), None)
        if first is None or first.dim() == 0:
            raise TypeError("SigmaEnsemble.forward needs a batched tensor argument (B, ...)")
        batch = first.shape[0]
        m = self.members

        def rep(a: Any) -> Any:
            return interleave(a, m) if isinstance(a, Tensor) and a.dim() > 0 and a.shape[0] == batch else a

        out = self.backbone(*(rep(a) for a in args), **{k: rep(v) for k, v in kwargs.items()})
        return _map_outputs(out, lambda t: unfold(t, m) if t.dim() > 0 and t.shape[0] == batch * m else t)


def sigma_ensemble(
    model: nn.Module,
    members: int = 4,
    noise: float = DEFAULT_NOISE,
    *,
    gate_init: float = 0.0,
    seed: int | None = None,
    layers: NormSelection = None,
) -> SigmaEnsemble:
    """Return a NEW σN ensemble of ``model`` with ``members`` members; ``model`` itself is untouched.

    Every ``nn.BatchNorm1d/2d/3d``, ``nn.LayerNorm`` and ``nn.GroupNorm`` —
    anywhere in nested containers, residual blocks, ``nn.Sequential`` or third-party models such as
    HuggingFace transformers — is replaced by its σNorm twin with the pretrained affine parameters
    and running statistics copied into every member. All other weights stay shared.

    Args:
        model: any ``nn.Module`` with at least one of those norm layers.
        members: ensemble size ``M`` (≥ 1).
        noise: std of the Gaussian noise added to every member's gate logits (≥ 0). ``0.0`` gives
            identical, function-preserving members; the default makes them differ.
        gate_init: initial gate logit ``γ₀`` (``σ(γ₀)`` is the initial gate; 0 → ½), finite and
            within ``±GATE_INIT_BOUND`` (10).
        seed: seed for the gate noise, an int ≥ 0 (``None``: torch's global generator).
        layers: convert only some norm layers (:data:`NormSelection`): qualified names as in
            ``model.named_modules()`` or a predicate ``(name, layer) -> bool``; ``None`` (default)
            converts every one. The others stay plain, shared layers.

    Requirements on ``model``: it is batch-first (the leading axis of its first tensor argument is
    the batch), and every norm layer sees that batch as *its* leading axis — true for CNNs, ViTs and
    HuggingFace encoders, whose norms see ``(B, C, ...)`` or ``(B, T, D)``. A model that folds
    another axis into the rows before a norm (e.g. ``bn(x.reshape(-1, C))`` on ``(B, T, C)`` tokens)
    would interleave members wrongly; transpose such a norm's input instead.

    Returns:
        a :class:`SigmaEnsemble` mapping ``(B, ...)`` to ``(B, M, ...)``. Its ``settings`` record
        these keywords (``layers`` as the resolved list of converted names, also for a predicate),
        so :func:`ensemblize.save_ensemble` / :func:`ensemblize.load_ensemble` rebuild it.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``; ``members``/``seed`` not integers; ``noise``/
            ``gate_init`` not real numbers.
        ValueError: ``members < 1``, ``noise`` negative or not finite, ``gate_init`` NaN, infinite or
            outside ``±GATE_INIT_BOUND``, ``seed < 0``, ``layers`` names a layer that is not a norm
            layer of ``model``, or nothing is left to convert.
    """
    check_module(model, name="model")
    members, noise, gate_init = _check_conversion(members, noise, gate_init)
    if seed is not None:
        seed = check_int(seed, name="seed", minimum=0)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    backbone = copy.deepcopy(model)
    converted = convert_norms(
        backbone, members=members, noise=noise, gate_init=gate_init, generator=generator, layers=layers
    )
    if not converted:
        if layers is not None:
            raise ValueError(
                f"layers: the selection {layers!r} matched no norm layer of {type(model).__name__}"
            )
        raise ValueError(
            f"{type(model).__name__} has no BatchNorm/LayerNorm/GroupNorm layer to convert; "
            "σN-Ens replicates only norm layers, so the model needs at least one"
        )
    settings = {
        "members": members,
        "noise": noise,
        "seed": seed,
        "gate_init": gate_init,
        "layers": None if layers is None else list(converted),
    }
    return SigmaEnsemble(backbone, members, converted, settings=settings)
