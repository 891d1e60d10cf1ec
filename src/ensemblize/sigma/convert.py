"""Turn any ``nn.Module`` into a σN ensemble: every norm layer becomes its per-member σNorm twin.

>>> ens = sigma_ensemble(model, members=4)       # a NEW module; ``model`` is untouched
>>> ens(x).shape                                   # x: (B, ...) -> (B, M, num_classes)

(Public as ``ensemblize.sigma_ensemble``; ``ensemblize.convert`` re-exports this module.)

The wrapper repeats each input ``M`` times in ``repeat_interleave`` order (``(B, ...) ->
(B·M, ...)``), runs the shared backbone once on that batch, and unfolds every output whose
leading size is ``B·M`` back to ``(B, M, ...)``. Only the norm layers are per member; every other
weight is shared. With ``noise=0.0`` each member reproduces the original model exactly (see
:mod:`ensemblize.nn.sigma_norm` for the gate parameterisation that makes this true): bit for bit
through BatchNorm and LayerNorm in float32 / float64 at the default ``gate_init=0`` (any other
``gate_init``: one rounding step, as ``w = σ(γ₀) · (w / σ(γ₀))`` is exact only for σ(γ₀) = ½), to one rounding step through GroupNorm (its
member affine follows torch's normalisation instead of being fused into it: ≤ ~2e-7 relative in
float32) and through a LayerNorm whose parameters are float16 / bfloat16 (the normalised value is
rounded to that format before the member affine).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from .._checks import check_finite_real, check_int, check_module, check_positive
from ..members import check_members, interleave, unfold
from ..nn.sigma_norm import (
    SigmaBatchNorm1d,
    SigmaBatchNorm2d,
    SigmaBatchNorm3d,
    SigmaGroupNorm,
    SigmaLayerNorm,
    SigmaNorm,
    expected_rows,
    expecting_rows,
)
from .layers import sigma_layers

__all__ = [
    "sigma_ensemble",
    "norm_layer_names",
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
            _check_statistics_flag(norm)
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
            "SyncBatchNorm cannot be converted (its input rank is unknown): convert the model with plain "
            "BatchNorm instead. Note that σBatchNorm is not synchronised across ranks (each rank normalises "
            "with its own batch statistics, like BatchNorm without SyncBatchNorm)"
        )
    if isinstance(norm, nn.LayerNorm):
        return SigmaLayerNorm(norm.normalized_shape, members, norm.eps, gate_init=gate_init)
    if isinstance(norm, nn.GroupNorm):
        return SigmaGroupNorm(norm.num_groups, norm.num_channels, members, norm.eps, gate_init=gate_init)
    return None


def _check_statistics_flag(norm: nn.modules.batchnorm._BatchNorm) -> None:
    """ValueError when a BatchNorm's ``track_running_stats`` disagrees with its buffers.

    torch decides by the buffers, not the flag, whether eval mode uses running statistics; a σBatchNorm
    has them exactly when the flag is set, so a layer whose flag was changed after construction
    cannot be converted function-preservingly.
    """
    has_stats = norm.running_mean is not None and norm.running_var is not None
    if has_stats and not norm.track_running_stats:
        raise ValueError(
            "track_running_stats=False, but the layer still holds running statistics, which torch uses in "
            "eval mode (it reads the buffers, not the flag); set the flag back to True to keep them, or set "
            "running_mean and running_var to None for batch statistics, before converting"
        )
    if not has_stats and norm.track_running_stats:
        raise ValueError(
            "track_running_stats=True, but running_mean / running_var are None, so torch normalises with "
            "batch statistics in every mode; set track_running_stats=False to say so, before converting"
        )


def _plain_norm_class(layer: nn.Module) -> type | None:
    """The convertible class ``layer`` is an instance of (``None``: not a norm layer σN converts)."""
    if isinstance(layer, SigmaNorm):
        return None
    return next((cls for cls in _CONVERTIBLE if isinstance(layer, cls)), None)


def _overrides_forward(layer: nn.Module) -> bool:
    """A subclass of a plain norm layer with its own ``forward`` (e.g. a channels-first LayerNorm)."""
    base = _plain_norm_class(layer)
    return base is not None and type(layer).forward is not base.forward


def _norm_slots(module: nn.Module) -> list[tuple[str, nn.Module, str, nn.Module]]:
    """``(qualified name, parent, attribute, layer)`` for every place a plain norm layer is registered.

    A layer registered in several places (shared between two parents, or under two names) appears
    once per place, so every alias is found and all of them can be pointed at one twin.
    """
    # Conversion order (which fixes the order of the gate-noise draws and of ``converted``): parents in
    # ``named_modules()`` order, each parent's own norm children in registration order — so a norm
    # registered directly on a parent comes before the norms nested in that parent's other children.
    slots = []
    for parent_name, parent in module.named_modules(remove_duplicate=False):
        for attr, child in parent._modules.items():
            if child is not None and _plain_norm_class(child) is not None:
                slots.append((f"{parent_name}.{attr}" if parent_name else attr, parent, attr, child))
    return slots


def norm_layer_names(module: nn.Module) -> list[str]:
    """Qualified names of the norm layers :func:`sigma_ensemble` can convert, in module order.

    One name per layer (its first in ``module.named_modules()`` order; ``layers=`` also accepts any
    other path to a shared layer); subclasses that override ``forward`` are not convertible and are
    not listed.
    """
    return [
        name
        for name, layer in module.named_modules()  # depth-first; one name per layer
        if _plain_norm_class(layer) is not None and not _overrides_forward(layer) and name
    ]


def _norm_filter(
    module: nn.Module, layers: NormSelection, slots: list[tuple[str, nn.Module, str, nn.Module]]
) -> Callable[[str, nn.Module], bool]:
    """``(name, layer) -> convert it?`` for a :data:`NormSelection` over ``module``'s norm ``slots``
    (:func:`_norm_slots`); unknown names are a ValueError."""
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
    by_name = {name: layer for name, _parent, _attr, layer in slots}
    custom = sorted(n for n in wanted if n in by_name and _overrides_forward(by_name[n]))
    if custom:
        kinds = sorted({type(by_name[n]).__name__ for n in custom})
        raise ValueError(
            f"layers: {custom} cannot be converted: their class(es) {kinds} override forward, which a "
            "σNorm layer cannot reproduce"
        )
    unknown = sorted(set(wanted) - set(by_name))
    if unknown:
        raise ValueError(
            f"layers: unknown norm layer name(s) {unknown}; available: {norm_layer_names(module)}"
        )
    chosen = set(wanted)
    return lambda name, _layer: name in chosen


def _has_hooks(layer: nn.Module) -> bool:
    return any(
        getattr(layer, attr, None)
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    )


#: norm layers with a learnable per-feature affine that σN-Ens leaves shared (named in a warning)
_UNSUPPORTED_NORMS = tuple(
    cls
    for cls in (
        getattr(nn, "RMSNorm", None),
        nn.InstanceNorm1d,
        nn.InstanceNorm2d,
        nn.InstanceNorm3d,
    )
    if cls is not None
)


def _pools_statistics(m: nn.Module) -> bool:
    """A layer whose statistics pool the rows of its whole input: the BatchNorm family (batch statistics
    in training, running averages of them in eval) and an InstanceNorm that tracks running statistics
    (pooled running averages, used in eval)."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return True
    return isinstance(m, nn.modules.instancenorm._InstanceNorm) and bool(m.track_running_stats)


def _other_norm(m: nn.Module) -> bool:
    """A norm layer σN-Ens does not convert and that matters for the members: one of
    :data:`_UNSUPPORTED_NORMS` or a class named like a norm (``LlamaRMSNorm``, ``T5LayerNorm``, …) with
    learnable parameters of its own, or any other layer that pools statistics over rows
    (:func:`_pools_statistics`: they mix the members' rows even without parameters)."""
    if isinstance(m, SigmaNorm) or _plain_norm_class(m) is not None:
        return False  # converted, or a convertible class (subclasses overriding forward are named apart)
    if _pools_statistics(m):
        return True
    own = next(m.parameters(recurse=False), None) is not None
    return own and (isinstance(m, _UNSUPPORTED_NORMS) or "norm" in type(m).__name__.lower())


def _unsupported_norms(module: nn.Module, *, batch_family: bool = True) -> dict[str, str]:
    """name -> class name of the norm layers that are not converted (:func:`_other_norm`); without the
    BatchNorm family when ``batch_family`` is False (they get their own warning; a tracking InstanceNorm
    stays listed here, and after a σNorm is named in that warning too)."""
    return {
        name: type(m).__name__
        for name, m in module.named_modules()
        if name and _other_norm(m) and (batch_family or not isinstance(m, nn.modules.batchnorm._BatchNorm))
    }


def _batch_statistics_left_shared(module: nn.Module) -> list[str]:
    """Names of the layers that pool statistics (:func:`_pools_statistics`) left plain after the first
    σNorm in module order.

    Such a layer pools the rows of all members, which differ after a σNorm (a BatchNorm in training;
    the running statistics, and so every eval output, of a BatchNorm or a tracking InstanceNorm). One
    before every σNorm (a stem kept plain) sees each sample's M identical copies: the same statistics
    as the plain model's, no mixing — so it is not listed.
    """
    names, seen_sigma = [], False
    for name, m in module.named_modules():
        if isinstance(m, SigmaNorm):
            seen_sigma = True
        elif seen_sigma and _pools_statistics(m):
            names.append(name)
    return names


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

    Pretrained affine parameters and running statistics are copied into every member, and so is
    ``requires_grad`` of the weight and bias (a frozen norm keeps its shared weight and per-member
    biases frozen; the new gate logits are trainable). A layer registered in several places gets
    one twin, registered in all of them (it stays shared); ``layers`` may name it by any of its
    paths. Subclasses of the plain layers that override ``forward`` are left as they are, with a
    warning (σNorm could not reproduce them); forward/backward hooks on a converted layer are not
    carried over (a warning names the layers). Returns the qualified names of the replaced layers
    (one per layer; empty when there was nothing to convert). ``layers`` restricts the conversion
    to some norm layers (:data:`NormSelection`). Use :func:`sigma_ensemble` unless you manage the
    member layout yourself. Arguments are checked as in :func:`sigma_ensemble`.
    """
    check_module(module, name="module")
    members, noise, gate_init = _check_conversion(members, noise, gate_init)
    slots = _norm_slots(module)
    selected = _norm_filter(module, layers, slots)
    custom = sorted({name for name, _p, _a, layer in slots if _overrides_forward(layer)})
    if custom and not isinstance(layers, Iterable):
        kinds = sorted({type(layer).__name__ for _n, _p, _a, layer in slots if _overrides_forward(layer)})
        warnings.warn(
            f"σN conversion left {custom} as they are: their class(es) {kinds} subclass a norm layer "
            "but override forward, which a σNorm layer cannot reproduce",
            stacklevel=3,
        )
    if not isinstance(layers, Iterable):  # all layers, or a predicate: a list of names is a deliberate choice
        other = _unsupported_norms(module, batch_family=False)
        if other:
            warnings.warn(
                f"σN conversion left {sorted(other)[:5]}{' …' if len(other) > 5 else ''} shared: their class(es) "
                f"{sorted(set(other.values()))} are (or look like) norm layers σN-Ens does not convert (it "
                "converts nn.BatchNorm1d/2d/3d, nn.LayerNorm and nn.GroupNorm); they stay one layer for all "
                "members",
                stacklevel=3,
            )
    aliases: dict[int, list[str]] = {}  # id(layer) -> its qualified names, in module order
    for name, _parent, _attr, layer in slots:
        if not _overrides_forward(layer):
            aliases.setdefault(id(layer), []).append(name)
    layer_of = {id(layer): layer for _n, _p, _a, layer in slots}
    # a shared layer is reported under the name module.named_modules() gives it (norm_layer_names,
    # sigma_layers and sharing use that one), whichever of its names was selected
    canonical = {id(m): name for name, m in module.named_modules() if name}
    chosen = {  # id(layer) -> its name, when any of its names is selected
        key: canonical.get(key, names[0])
        for key, names in aliases.items()
        if any(selected(n, layer_of[key]) for n in names)
    }
    twins: dict[int, SigmaNorm] = {}
    # a norm without parameters or buffers (affine=False) takes the model's dtype and device
    model_ref = next((t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()), None)
    for _name, parent, attr, layer in slots:
        key = id(layer)
        if key not in chosen:
            continue
        if key not in twins:
            try:
                twins[key] = _converted(
                    layer,
                    members=members,
                    noise=noise,
                    gate_init=gate_init,
                    generator=generator,
                    fallback=model_ref,
                )
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{chosen[key]} ({type(layer).__name__}): {exc}") from exc
            twins[key].layer_name = chosen[key]
        setattr(parent, attr, twins[key])
    mixing = _batch_statistics_left_shared(module)
    if mixing:
        warnings.warn(
            f"σN conversion left {mixing[:5]}{' …' if len(mixing) > 5 else ''} as shared layers that pool "
            "statistics (BatchNorm family, InstanceNorm with track_running_stats) after a converted one: "
            "their batch statistics (training) or running statistics (eval) are pooled over the rows of "
            "all members, so every member's output depends on the other members'",
            stacklevel=3,
        )
    hooked = sorted(
        {chosen[id(layer)] for _n, _p, _a, layer in slots if id(layer) in chosen and _has_hooks(layer)}
    )
    if hooked:
        warnings.warn(f"σN conversion dropped the hooks registered on {hooked}", stacklevel=3)
    constrained = sorted(
        {
            chosen[id(layer)]
            for _n, _p, _a, layer in slots
            if id(layer) in chosen and parametrize.is_parametrized(layer)
        }
    )
    if constrained:
        warnings.warn(
            f"σN conversion dropped the parametrizations registered on {constrained}: their σNorm twins hold "
            "the parametrized values as plain parameters, so the constraint no longer applies in training",
            stacklevel=3,
        )
    return list(chosen.values())


def _converted(
    layer: nn.Module,
    *,
    members: int,
    noise: float,
    gate_init: float,
    generator: torch.Generator | None,
    fallback: Tensor | None = None,
) -> SigmaNorm:
    """``layer``'s σNorm twin: its affine and statistics in every member, its device, dtype and flags
    (a layer with no tensors of its own takes ``fallback``'s: the model's)."""
    twin = _twin(layer, members, gate_init)
    if twin is None:  # pragma: no cover - every _CONVERTIBLE class has a twin or raises
        raise TypeError(f"no σNorm twin for {type(layer).__name__}")
    ref = next(layer.parameters(), None)
    if ref is None:
        ref = next(layer.buffers(), None)
    if ref is None:
        ref = fallback
    if ref is not None and ref.is_floating_point():
        twin.to(device=ref.device, dtype=ref.dtype)  # before loading: a float64 model stays exact
    elif ref is not None:
        twin.to(device=ref.device)
    twin.load_from_norm_module(layer, noise=noise, generator=generator)
    for param in ("weight", "bias"):
        source = getattr(layer, param, None)
        if isinstance(source, nn.Parameter):
            getattr(twin, param).requires_grad_(source.requires_grad)
    twin.train(layer.training)
    return twin


def _first_tensor(obj: Any) -> Tensor | None:
    """The first tensor in ``obj``, depth-first through the containers :func:`_map_outputs` walks."""
    if isinstance(obj, Tensor):
        return obj
    if isinstance(obj, Mapping):
        items: Iterable[Any] = obj.values()
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = (getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init)
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        return None
    return next((t for t in map(_first_tensor, items) if t is not None), None)


def _map_outputs(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        mapped = {k: _map_outputs(v, fn) for k, v in obj.items()}
        try:
            return type(obj)(**mapped)
        except TypeError:
            return type(obj)(mapped)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # e.g. HuggingFace-style outputs
        fields = {f.name: _map_outputs(getattr(obj, f.name), fn) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **fields)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_outputs(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_outputs(v, fn) for v in obj)
    return obj


class SigmaEnsemble(nn.Module):
    """A shared backbone whose norm layers are per-member σNorm layers: ``(B, ...) -> (B, M, ...)``.

    ``forward(*args, **kwargs)``: the batch size ``B`` is the leading size of the first tensor
    argument (depth-first through lists, tuples, dicts and dataclasses); every tensor argument with
    that leading size, at the top level or inside such a container, is repeated for the ``M`` members
    (interleaved), others pass through unchanged. Every output tensor whose leading size is ``B·M``
    is returned as ``(B, M, ...)``; other outputs (e.g. a scalar loss) pass through.

    Attributes: ``backbone`` (the converted module), ``members``, ``converted`` (names of the
    σNorm layers), ``settings`` (the :func:`sigma_ensemble` keywords that made it — ``members``,
    ``noise``, ``seed``, ``gate_init``, ``layers`` — a JSON-ready dict that
    :func:`ensemblize.save_ensemble` writes; built directly, ``noise``/``seed``/``gate_init`` are
    ``None`` (unknown) and ``layers`` is ``converted``). Built directly (e.g. around
    :func:`convert_norms`' output) it gets :func:`sigma_ensemble`'s guards on the backbone: a
    sequence-first transformer layer holding a σNorm is refused, torch's transformer fast path is
    switched off where a σNorm sits, and sequence-first attention gets the row check below.

    Row check: during ``forward`` every σNorm layer must see exactly ``B·M`` rows on axis 0 (the
    batch with the member axis folded in, member order intact). Anything else — tokens or patches
    reshaped into the batch — would silently mix members, so it raises a ValueError naming
    the layer (a sequence-first transformer layer holding a σNorm is refused earlier, by
    :func:`sigma_ensemble`). ``check_rows = False`` switches the check off for a model that legitimately feeds a
    norm another row count that keeps the member order (e.g. two views concatenated on axis 0).
    The check is per thread (one model may serve several threads) and skipped inside
    ``torch.compile``. Torch's transformer "fast path", which reads a norm's weights directly and
    would bypass σNorm, is switched off at conversion for every ``nn.TransformerEncoderLayer``
    whose norms became σNorm (see :func:`sigma_ensemble`).
    """

    check_rows: bool = True

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
        # also for an ensemble built by hand around convert_norms' output: the same guards as sigma_ensemble
        _refuse_sequence_first_transformers(backbone)
        _no_transformer_fast_path(backbone)
        _check_sequence_first_attention(backbone)

    def extra_repr(self) -> str:
        return f"members={self.members}, sigma_norm_layers={len(self.converted)}"

    def sigma_layers(self) -> list[tuple[str, SigmaNorm]]:
        """``(name, layer)`` for every σNorm layer, in module order (:func:`ensemblize.sigma.sigma_layers`)."""
        return sigma_layers(self)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        first = _first_tensor([*args, *kwargs.values()])
        if first is None or first.dim() == 0:
            raise TypeError(
                "SigmaEnsemble.forward needs a batched tensor argument (B, ...), given directly or inside a "
                "list, tuple, dict or dataclass"
            )
        batch = first.shape[0]
        m = self.members

        def one(a: Tensor) -> Tensor:
            return interleave(a, m) if a.dim() > 0 and a.shape[0] == batch else a

        def rep(a: Any) -> Any:  # tensors inside containers too (e.g. a dict of inputs, a list of masks)
            return _map_outputs(a, one)

        if self.check_rows and not torch.compiler.is_compiling():
            with expecting_rows(batch * m):
                out = self.backbone(*(rep(a) for a in args), **{k: rep(v) for k, v in kwargs.items()})
        else:
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

    Limits: the ensemble runs under eager mode, ``torch.compile`` and ``torch.jit.trace``, not
    ``torch.jit.script`` (its forward takes ``*args, **kwargs``). An ``nn.TransformerEncoder`` holding a
    σNorm runs without torch's nested-tensor path, so with a padding mask the outputs at padded positions
    are computed values rather than the zeros that path writes (unpadded positions agree).

    Returns:
        a :class:`SigmaEnsemble` mapping ``(B, ...)`` to ``(B, M, ...)``. Its ``settings`` record
        these keywords (``layers`` as the resolved list of converted names, also for a predicate),
        so :func:`ensemblize.save_ensemble` / :func:`ensemblize.load_ensemble` rebuild it.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``; ``members``/``seed`` not integers; ``noise``/
            ``gate_init`` not real numbers.
        ValueError: ``members < 1``, ``noise`` negative or not finite, ``gate_init`` NaN, infinite or
            outside ``±GATE_INIT_BOUND``, ``seed < 0``, ``layers`` names a layer that is not a norm
            layer of ``model``, nothing is left to convert, or a sequence-first
            ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (``batch_first=False``)
            would hold a σNorm (its attention would mix the members).
    """
    check_module(model, name="model")
    members, noise, gate_init = _check_conversion(members, noise, gate_init)
    if seed is not None:
        seed = check_int(seed, name="seed", minimum=0)
    # a model holding σNorm layers already has a member axis of its own: converting the rest (or
    # wrapping it again) would mix two member counts, and each sample's output would depend on its
    # place in the batch
    done = [
        name or "(the model)"
        for name, m in model.named_modules()
        if isinstance(m, (SigmaNorm, SigmaEnsemble))
    ]
    if done:
        raise ValueError(
            f"{type(model).__name__} is already a σN ensemble, or partly one: {done[:3]}"
            f"{' …' if len(done) > 3 else ''} are σNorm layers / σN ensembles; convert the original, "
            "unconverted model once, choosing every layer to convert with layers="
        )
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
        if _plain_norm_class(model) is not None:
            raise ValueError(
                f"the model is itself a {type(model).__name__} layer: σN-Ens converts the norm layers inside "
                "a model (it replaces them in their parent), so wrap it first, e.g. nn.Sequential(model)"
            )
        custom = sorted({type(m).__name__ for m in model.modules() if _overrides_forward(m)})
        extra = f" (norm subclasses {custom} override forward and cannot be converted)" if custom else ""
        other = _unsupported_norms(model)
        if other:
            extra += (
                f" (its {sorted(other)[:5]} are {sorted(set(other.values()))}, norm layers σN-Ens does not "
                "convert)"
            )
        raise ValueError(
            f"{type(model).__name__} has no BatchNorm/LayerNorm/GroupNorm layer to convert{extra}; "
            "σN-Ens replicates only norm layers, so the model needs at least one"
        )
    settings = {
        "members": members,
        "noise": noise,
        "seed": seed,
        "gate_init": gate_init,
        "layers": None if layers is None else list(converted),
    }
    ens = SigmaEnsemble(backbone, members, converted, settings=settings)
    ens.training = model.training  # the wrapper's flag only: each layer keeps its own
    return ens


def _refuse_sequence_first_transformers(backbone: nn.Module) -> None:
    """ValueError for a sequence-first ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
    (``batch_first=False``) holding a σNorm: it can never be a correct σN ensemble.

    Such a layer takes ``(T, N, D)``. Either its σNorms see the batch·member rows on axis 1, not 0 (a
    model that transposes to sequence-first inside: σNorm would give each *token* a member), or the
    whole model is sequence-first and :class:`SigmaEnsemble` repeats the members along the token axis,
    where the layer's attention mixes them (no row count reveals that: the norms see ``T·M`` rows).
    """
    for name, module in backbone.named_modules():
        if not isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
            continue
        if module.self_attn.batch_first:
            continue
        norms = [n for n, m in module.named_modules() if isinstance(m, SigmaNorm)]
        if norms:
            where = name or "(the model)"
            raise ValueError(
                f"{where} is a sequence-first {type(module).__name__} (batch_first=False) and its norm "
                f"layer(s) {norms} would become σNorm: σN-Ens needs every converted norm to see the batch "
                "on axis 0, and attention over a sequence-first axis would mix the members. Build the "
                "layer with batch_first=True and give the model (B, T, D). (Only a batch-first model that "
                "transposes for this layer may instead keep the layer's norms plain with layers=...; a model "
                "that takes (T, B, D) cannot be a σN ensemble, whatever is converted: the members would be "
                "repeated along T)"
            )


def _check_sequence_first_attention(backbone: nn.Module) -> None:
    """Give every sequence-first ``nn.MultiheadAttention`` (``batch_first=False``) the row check.

    Such a layer takes ``(T, N, D)``. Inside a batch-first model that transposes for it, ``N`` is the
    ``B·M`` rows and the members stay apart. In a sequence-first model :class:`SigmaEnsemble` repeats
    the members along ``T`` instead and the attention mixes them — with no norm to notice, as the
    norms see ``T·M`` rows. A forward pre-hook (:func:`_sequence_first_rows`) raises then.
    """
    for name, module in backbone.named_modules():
        if isinstance(module, nn.MultiheadAttention) and not module.batch_first:
            hooked = any(
                getattr(h, "func", None) is _sequence_first_rows for h in module._forward_pre_hooks.values()
            )
            if hooked:  # a second SigmaEnsemble around the same backbone: one check per layer
                continue
            module.register_forward_pre_hook(
                functools.partial(_sequence_first_rows, name=name or "(the model)"), with_kwargs=True
            )


def _sequence_first_rows(module: nn.Module, args: tuple, kwargs: dict, *, name: str) -> None:
    """ValueError unless a sequence-first attention's query has the ``B·M`` rows on axis 1."""
    expected = expected_rows()
    query = args[0] if args else kwargs.get("query")
    if (
        expected is None
        or not isinstance(query, torch.Tensor)
        or query.dim() != 3
        or query.shape[1] == expected
    ):
        return
    raise ValueError(
        f"{name} is a sequence-first nn.MultiheadAttention (batch_first=False) whose query has shape "
        f"{tuple(query.shape)}: inside its SigmaEnsemble axis 1 must be the batch with the member axis "
        f"folded in, {expected} rows (B·M). A model that takes (T, B, D) cannot be a σN ensemble (the "
        "members would be repeated along T, where attention mixes them): give it (B, T, D) and transpose "
        "for this layer, or build it with batch_first=True (or set ensemble.check_rows = False if axis 1 "
        "legitimately holds other rows that keep the member order, e.g. axial attention)"
    )


def _no_transformer_fast_path(backbone: nn.Module) -> None:
    """Keep every ``nn.TransformerEncoderLayer`` with a σNorm on torch's ordinary path.

    In eval mode torch's fused "fast path" reads ``norm1`` / ``norm2`` weights directly (a σNorm's
    ``(M, C)`` bias would crash it, and its gates would be skipped). Among the conditions torch checks
    is ``activation_relu_or_gelu``, a flag used nowhere else; clearing it on that layer alone keeps
    the layer on the path that calls its norms, without a process-wide switch, so other threads and
    models are untouched and ``torch.compile`` sees no global state. An ``nn.TransformerEncoder`` holding
    a σNorm also gets ``use_nested_tensor = False``: its padding-mask fast path (eval, no grad) would
    pass its layers a nested tensor, which no σNorm can normalise per member.
    """
    for module in backbone.modules():
        if isinstance(module, nn.TransformerEncoderLayer) and any(
            isinstance(getattr(module, name, None), SigmaNorm) for name in ("norm1", "norm2")
        ):
            module.activation_relu_or_gelu = 0
        # nn.TransformerEncoder's own "sparsity" fast path (eval, no grad, a padding mask) turns the input
        # into a nested tensor before its layers, without asking them: a σNorm cannot read one
        if isinstance(module, nn.TransformerEncoder) and any(
            isinstance(m, SigmaNorm) for m in module.modules()
        ):
            module.use_nested_tensor = False
