"""σNorm: per-member normalization with a sigmoid-bounded per-feature gate (σN-Ens).

Member ``t`` of ``M`` computes, for feature ``i``::

    σNorm_t(x)_i = σ(γ_{t,i}) · ( w_i · x̂_{t,i} + b_{t,i} )

* ``x̂_t`` — ``x`` normalised with member ``t``'s own statistics (BatchNorm: its own batch
  statistics in training and its own running mean / variance in eval; LayerNorm / GroupNorm:
  per-sample statistics, which are per member by construction);
* ``σ(γ_t)`` — the gate, a per-member, per-feature importance bounded in (0, 1)
  (parameter ``gate_logits``, shape ``(M, C)``); this is the quantity the softmax-temperature
  regulariser of :mod:`ensemblize.diversity` acts on;
* ``b_t`` — a per-member shift (parameter ``bias``, shape ``(M, C)``);
* ``w`` — an amplitude shared by all members (parameter ``weight``, shape ``(C,)``).

Why a shared amplitude. The gate must stay sigmoid-bounded, yet converting a pretrained norm
layer (weight ``w₀`` of any sign and size, bias ``b₀``) must be exactly function-preserving. With
gate logits initialised at ``γ₀`` (default 0, so ``σ(γ₀) = ½``), conversion sets
``w = w₀ / σ(γ₀)`` and ``b_t = b₀ / σ(γ₀)``, so every member initially computes ``w₀ x̂ + b₀``.
A gate driven to 0 switches the feature off for that member entirely (shift included), which is
the hard-partitioning limit of the method. Per member this adds ``2·C`` parameters (gate logits
and shift); the amplitude is shared.

Layouts (the member contract of :mod:`ensemblize.members`): inputs arrive with the member axis
folded into the batch in ``repeat_interleave`` order, ``(B·M, C, ...)``. For BatchNorm the view
``(B, M·C, ...)`` puts member ``t``'s channels at ``[t·C, (t+1)·C)``, so per-member BatchNorm is a
single call of the stock kernel with the gate and affine folded into its weight and bias — no
Python loop over members and no copy. LayerNorm /
GroupNorm normalise with a unit affine (the kernel's fast path) and then apply the per-member
affine as one more stock batch-norm call, in evaluation mode with mean 0 and variance 1, on the
``(B, K)`` view (the affine expanded to the ``K = M·…`` columns it takes along the token / spatial
axes): one pass forward, and one fused pass backward for the input gradient and both affine
reductions. Every layer is a handful of native autograd nodes; no Python ``autograd.Function``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_bool, check_finite_real, check_fraction, check_int, check_positive
from ..members import check_members

__all__ = [
    "SigmaNorm",
    "SigmaBatchNorm1d",
    "SigmaBatchNorm2d",
    "SigmaBatchNorm3d",
    "SigmaLayerNorm",
    "SigmaGroupNorm",
]


#: ``gate_init`` must lie in ``[-GATE_INIT_BOUND, GATE_INIT_BOUND]`` (the same bound as
#: :func:`ensemblize.sigma_ensemble`): beyond ±10 the initial gate is within 5e-5 of 0 or 1, its
#: gradient vanishes and the compensating amplitude ``1/σ(γ₀)`` blows up (1/0 at −200 in float32).
GATE_INIT_BOUND = 10.0


def _check_eps(eps: object) -> float:
    """``eps`` as float: a finite real ≥ 0 (NaN / inf / negative raise, naming ``eps``)."""
    return check_positive(eps, name="eps", allow_zero=True)


#: Rows axis 0 of a σNorm input must have while a :class:`~ensemblize.sigma.SigmaEnsemble` runs its
#: forward (None: unchecked). A context variable, not a module attribute: each thread (an inference
#: server's pool, ``nn.DataParallel`` replicas) checks against its own call.
_EXPECTED_ROWS: ContextVar[int | None] = ContextVar("ensemblize_sigma_expected_rows", default=None)


@contextmanager
def expecting_rows(rows: int | None) -> Iterator[None]:
    """Within the block every σNorm input of this thread must have ``rows`` rows (None: no check)."""
    token = _EXPECTED_ROWS.set(rows)
    try:
        yield
    finally:
        _EXPECTED_ROWS.reset(token)


def expected_rows() -> int | None:
    """The row count :func:`expecting_rows` set for this thread (None outside a checked forward or
    inside ``torch.compile``)."""
    return None if torch.compiler.is_compiling() else _EXPECTED_ROWS.get()


def _label(layer: SigmaNorm) -> str:
    """The layer's class, and its path in the model when a conversion set one: ``SigmaLayerNorm 'enc.norm1'``."""
    path = getattr(layer, "layer_name", None)
    return f"{type(layer).__name__} {path!r}" if path else type(layer).__name__


def _check_input(layer: SigmaNorm, x: object) -> Tensor:
    """Raise TypeError unless ``x`` is a real floating-point tensor of the layer's parameter dtype.

    Under autocast the dtypes may differ (the norm kernels run in float32 there).
    """
    name = _label(layer)
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point input, got dtype {x.dtype}")
    dtype = layer.weight.dtype
    if x.dtype != dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(f"{name} expects input of dtype {dtype} (its parameters' dtype), got {x.dtype}")
    expected = None if torch.compiler.is_compiling() else _EXPECTED_ROWS.get()
    if expected is not None and x.dim() > 0 and x.shape[0] != expected:
        raise ValueError(
            f"{name} got input of shape {tuple(x.shape)}, but inside its SigmaEnsemble it must see the batch "
            f"with the member axis folded in, {expected} rows (B·M), on axis 0; another leading axis (a "
            "sequence-first attention block (batch_first=False), tokens reshaped into the "
            "batch) would mix the members. Keep the batch on axis 0 at every norm (or set "
            "ensemble.check_rows = False if this row count keeps the member order)"
        )
    return x


class SigmaNorm(nn.Module):
    """Base class of σNorm layers: owns ``weight`` (C,), ``bias`` (M, C) and ``gate_logits`` (M, C).

    ``C`` is the number of gated features (channels for BatchNorm / GroupNorm, the flattened
    ``normalized_shape`` for LayerNorm).
    """

    members: int
    num_gated: int
    #: the layer's qualified name in the converted model (set by the conversion; errors name it)
    layer_name: str | None = None
    #: the layout attributes a plain norm must share to be loaded, and its kind (for errors)
    _layout: tuple[str, ...] = ()
    _plain: str = "norm layer"

    def _init_affine(self, num_gated: int, members: int, gate_init: float) -> None:
        self.members = check_members(members)
        self.num_gated = int(num_gated)
        self.gate_init = check_finite_real(gate_init, name="gate_init", bound=GATE_INIT_BOUND)
        amplitude = 1.0 / torch.sigmoid(torch.tensor(self.gate_init)).item()
        self.weight = nn.Parameter(torch.full((num_gated,), amplitude))
        self.bias = nn.Parameter(torch.zeros(members, num_gated))
        self.gate_logits = nn.Parameter(torch.full((members, num_gated), self.gate_init))

    def gates(self) -> Tensor:
        """``σ(γ)``, shape ``(M, C)``: member ``t``'s importance of feature ``i``."""
        return torch.sigmoid(self.gate_logits)

    def member_scale_shift(self) -> tuple[Tensor, Tensor]:
        """Per-member affine after normalisation: ``(σ(γ_t) ⊙ w, σ(γ_t) ⊙ b_t)``, each ``(M, C)`` (differentiable)."""
        # three native autograd ops: measured faster than one Python autograd.Function on small inputs
        g = self.gates()
        return g * self.weight, g * self.bias

    def _constant_vectors(self, size: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """``(zeros(size), ones(size))`` with ``like``'s dtype and device, kept between calls.

        Constant inputs of the norm kernels (a unit affine, a zero mean and unit variance); the
        kernels only read them. At most a few sizes are kept (a LayerNorm sees one per sequence
        length). Inside ``torch.inference_mode`` fresh ones are made and not kept, since inference
        tensors cannot be saved for a later backward.
        """
        if torch.compiler.is_compiling():  # traced: constants of the graph (no cache, no mode query)
            return like.new_zeros(size), like.new_ones(size)
        key = (size, like.dtype, like.device)
        cache: dict = self.__dict__.setdefault("_constants", {})
        found = cache.get(key)
        if found is None:
            found = (like.new_zeros(size), like.new_ones(size))
            if not torch.is_inference_mode_enabled():
                if len(cache) >= 8:
                    cache.clear()
                cache[key] = found
        return found

    @torch.no_grad()
    def load_from_norm(
        self,
        weight: Tensor | None,
        bias: Tensor | None,
        *,
        noise: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        """Copy a plain norm layer's affine into every member, function-preservingly (see module doc).

        ``noise`` adds ``noise · N(0, 1)`` to each member's gate logits so that members differ.
        ``weight`` / ``bias`` must hold ``C`` finite values (ValueError otherwise); ``noise`` must be
        finite and ≥ 0.
        """
        noise = check_positive(noise, name="noise", allow_zero=True)
        # the initial gate in the parameters' own precision, exactly as forward will compute it
        s0 = torch.sigmoid(torch.tensor(self.gate_init, dtype=self.gate_logits.dtype)).item()
        w = self._affine_source(weight, "weight", 1.0)
        b = self._affine_source(bias, "bias", 0.0)
        self.weight.copy_(w / s0)
        self.bias.copy_((b / s0).expand(self.members, -1))
        self.gate_logits.fill_(self.gate_init)
        if noise:
            eps = torch.randn(self.gate_logits.shape, generator=generator)
            self.gate_logits.add_(noise * eps)

    @torch.no_grad()
    def load_from_norm_module(
        self, norm: nn.Module, *, noise: float = 0.0, generator: torch.Generator | None = None
    ) -> None:
        """Copy a plain norm layer's affine into every member (see :meth:`load_from_norm`).

        ``norm`` must be the plain twin with the same layout (``num_features`` for BatchNorm,
        ``normalized_shape`` for LayerNorm, ``num_groups`` and ``num_channels`` for GroupNorm);
        ValueError otherwise, naming both.
        """
        mine = {key: getattr(self, key) for key in self._layout}
        theirs = {key: getattr(norm, key, None) for key in self._layout}
        theirs = {key: tuple(v) if isinstance(v, (list, torch.Size)) else v for key, v in theirs.items()}
        if mine != theirs:
            want = ", ".join(f"{key}={value}" for key, value in mine.items())
            if all(getattr(norm, key, None) is None for key in self._layout):
                raise ValueError(
                    f"{type(self).__name__} cannot load a {type(norm).__name__}: it needs a {self._plain} "
                    f"with {want}"
                )
            got = ", ".join(f"{key}={value}" for key, value in theirs.items())
            raise ValueError(
                f"{type(self).__name__}({', '.join(map(str, mine.values()))}) cannot load a "
                f"{self._plain} with {got}"
            )
        weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
        self.load_from_norm(weight, bias, noise=noise, generator=generator)

    def _affine_source(self, value: Tensor | None, name: str, default: float) -> Tensor:
        """A plain norm's ``weight`` / ``bias`` as ``C`` float64 values (``default`` when None), checked."""
        if value is None:
            return torch.full((self.num_gated,), default, dtype=torch.float64)
        if not isinstance(value, Tensor) or value.numel() != self.num_gated:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"{type(self).__name__}: {name} must hold {self.num_gated} values, got {got}")
        flat = value.detach().reshape(-1).double().cpu()  # float64: a float64 model keeps its precision
        if not torch.isfinite(flat).all():
            raise ValueError(f"{type(self).__name__}: {name} contains NaN or inf")
        return flat

    def _check_batch(self, x: Tensor) -> int:
        if x.shape[0] % self.members:
            raise ValueError(
                f"{_label(self)}: leading size {x.shape[0]} is not a multiple of members={self.members}; "
                "σNorm layers expect the interleaved (B·M, ...) layout"
            )
        return x.shape[0] // self.members


class _SigmaBatchNorm(SigmaNorm):
    """Per-member BatchNorm over ``(B·M, C, *spatial)`` with running statistics of shape ``(M, C)``."""

    _expected_dims: tuple[int, ...] = ()
    _layout = ("num_features",)
    _plain = "BatchNorm"

    def __init__(
        self,
        num_features: int,
        members: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        *,
        track_running_stats: bool = True,
        gate_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_features = check_int(num_features, name="num_features", minimum=1)
        self.eps = _check_eps(eps)
        self.momentum = (
            None if momentum is None else check_fraction(momentum, name="momentum", low_open=False)
        )
        self.track_running_stats = check_bool(track_running_stats, name="track_running_stats")
        self._init_affine(num_features, members, gate_init)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(members, num_features))
            self.register_buffer("running_var", torch.ones(members, num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, members={self.members}, eps={self.eps}, momentum={self.momentum}, "
            f"track_running_stats={self.track_running_stats}"
        )

    @torch.no_grad()
    def load_from_norm_module(
        self,
        norm: nn.modules.batchnorm._BatchNorm,
        *,
        noise: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        """Copy a plain BatchNorm's affine and running statistics into every member."""
        super().load_from_norm_module(norm, noise=noise, generator=generator)
        if self.track_running_stats and norm.track_running_stats:
            for name in ("running_mean", "running_var"):
                stat = getattr(norm, name)
                if not bool(torch.isfinite(stat).all()):
                    raise ValueError(f"{type(self).__name__}: the BatchNorm's {name} contains NaN or inf")
            self.running_mean.copy_(norm.running_mean.expand(self.members, -1))
            self.running_var.copy_(norm.running_var.expand(self.members, -1))
            self.num_batches_tracked.copy_(norm.num_batches_tracked)

    def forward(self, x: Tensor) -> Tensor:
        """``(B·M, C, *spatial) -> (B·M, C, *spatial)``; one ``F.batch_norm`` call on ``(B, M·C, *spatial)``."""
        _check_input(self, x)
        if x.dim() not in self._expected_dims:
            raise ValueError(
                f"{_label(self)} expects {self._expected_dims}-D input, got shape {tuple(x.shape)}"
            )
        if x.shape[1] != self.num_features:
            raise ValueError(f"{_label(self)}: expected {self.num_features} channels, got {x.shape[1]}")
        b = self._check_batch(x)
        m, c = self.members, self.num_features
        use_batch_stats = self.training or not self.track_running_stats
        if use_batch_stats and b * math.prod(x.shape[2:]) <= 1:
            raise ValueError(
                f"{_label(self)} with batch statistics needs more than one value per channel and member, "
                f"got input of shape {tuple(x.shape)} ({b} sample(s) per member, members={m})"
            )
        scale, shift = self.member_scale_shift()
        scale, shift = scale.view(-1), shift.view(-1)  # (M·C,) each
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        else:
            factor = 0.0
        y = F.batch_norm(
            x.reshape(b, m * c, *x.shape[2:]),
            self.running_mean.view(m * c) if self.running_mean is not None else None,
            self.running_var.view(m * c) if self.running_var is not None else None,
            scale,
            shift,
            use_batch_stats,
            factor,
            self.eps,
        )
        return y.reshape(x.shape)


class SigmaBatchNorm1d(_SigmaBatchNorm):
    """σNorm twin of ``nn.BatchNorm1d``: ``(B·M, C)`` or ``(B·M, C, L)`` -> same shape.

    Member ``t``: ``σ(γ_t) ⊙ (w ⊙ BN_t(x) + b_t)`` with BN_t using member ``t``'s statistics.
    """

    _expected_dims = (2, 3)


class SigmaBatchNorm2d(_SigmaBatchNorm):
    """σNorm twin of ``nn.BatchNorm2d``: ``(B·M, C, H, W) -> (B·M, C, H, W)``.

    Member ``t``: ``σ(γ_t) ⊙ (w ⊙ BN_t(x) + b_t)`` with BN_t using member ``t``'s statistics.
    """

    _expected_dims = (4,)


class SigmaBatchNorm3d(_SigmaBatchNorm):
    """σNorm twin of ``nn.BatchNorm3d``: ``(B·M, C, D, H, W)`` -> same shape."""

    _expected_dims = (5,)


def _member_affine(layer: SigmaNorm, xhat: Tensor, view: tuple[int, ...]) -> Tensor:
    r"""``y[b, t] = x̂[b, t] ⊙ scale_t + shift_t`` per member for a normalised ``x̂`` ``(B·M, ...)``.

    ``scale_t = σ(γ_t) ⊙ w`` and ``shift_t = σ(γ_t) ⊙ b_t`` are the layer's ``(M, C)`` gated affine
    (:meth:`SigmaNorm.member_scale_shift`); ``view`` is its broadcastable shape ``(M, ...)`` on the
    ``(B, M, ...)`` view of ``x̂`` (size 1 along the axes it is constant on: a LayerNorm's tokens, a
    GroupNorm's spatial axes). Expanded along those axes to ``K = x̂.numel() / B`` values (1/B of
    ``x̂``), the affine is per column of the ``(B, K)`` view, so it runs as one call of the stock
    batch-norm kernel in evaluation mode with running mean 0, running variance 1 and ``eps`` 0:
    ``x̂ · 1/√(1 + 0) · scale + shift``, bit for bit the ``addcmul`` it replaces. Autograd's
    batch-norm backward returns the input gradient ``g ⊙ scale`` and the batch-axis reductions
    ``(Σ_b g ⊙ x̂, Σ_b g)`` from one fused kernel; the expand's backward sums the broadcast axes on
    the small ``(M, ...)`` result. No Python ``autograd.Function`` (its per-call cost dominated on
    the small inputs of the 1-D / digits networks) and no full-size temporary beyond the output.
    """
    scale, shift = layer.member_scale_shift()  # (M, C)
    batch = xhat.shape[0] // layer.members
    full = (layer.members, *xhat.shape[1:])
    columns = math.prod(full)
    if xhat.dtype != scale.dtype:  # autocast: the affine in the parameters' dtype, as type promotion did
        xhat = xhat.to(scale.dtype)
    zero, one = layer._constant_vectors(columns, scale)
    y = F.batch_norm(
        xhat.reshape(batch, columns),
        zero,
        one,
        scale.view(view).expand(full).reshape(columns),
        shift.view(view).expand(full).reshape(columns),
        False,
        0.0,
        0.0,
    )
    return y.view(xhat.shape)


class SigmaLayerNorm(SigmaNorm):
    """σNorm twin of ``nn.LayerNorm``: ``(B·M, *, *normalized_shape)`` -> same shape.

    Member ``t``: ``σ(γ_t) ⊙ (w ⊙ LN(x) + b_t)``; LN's statistics are per sample and hence per
    member. The gate is per element of ``normalized_shape`` (flattened to ``C`` features).
    """

    _layout = ("normalized_shape",)
    _plain = "LayerNorm"

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        members: int,
        eps: float = 1e-5,
        *,
        gate_init: float = 0.0,
    ) -> None:
        super().__init__()
        is_sequence = isinstance(normalized_shape, Sequence) and not isinstance(normalized_shape, str)
        shape = tuple(normalized_shape) if is_sequence else (normalized_shape,)  # torch.Size is a Sequence
        if not shape:
            raise ValueError("normalized_shape must not be empty")
        self.normalized_shape = tuple(check_int(d, name="normalized_shape", minimum=1) for d in shape)
        self.eps = _check_eps(eps)
        self._init_affine(int(torch.tensor(self.normalized_shape).prod()), members, gate_init)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, members={self.members}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        """``(B·M, *, *normalized_shape) -> same``: normalise, then one broadcast of the member affine."""
        _check_input(self, x)
        k = len(self.normalized_shape)
        if x.dim() <= k or tuple(x.shape[x.dim() - k :]) != self.normalized_shape:
            raise ValueError(
                f"SigmaLayerNorm expects (B·M, ..., *{self.normalized_shape}) (trailing shape "
                f"{self.normalized_shape} after a batch axis), got input shape {tuple(x.shape)}"
            )
        self._check_batch(x)
        # unit affine instead of None: the same x̂, but the CPU kernel's affine path is faster
        # (measured ~20 % on the ViT / Transformer1d shapes); no gradient flows to these constants
        zero, unit = self._constant_vectors(self.num_gated, x)
        shape = self.normalized_shape
        xhat = F.layer_norm(x, shape, unit.view(shape), zero.view(shape), self.eps)
        view = (self.members, *(1,) * (x.dim() - 1 - k), *shape)
        return _member_affine(self, xhat, view)


class SigmaGroupNorm(SigmaNorm):
    """σNorm twin of ``nn.GroupNorm``: ``(B·M, C, *)`` -> same; gate per channel.

    Member ``t``: ``σ(γ_t) ⊙ (w ⊙ GN(x) + b_t)``; GroupNorm's statistics are per sample.
    """

    _layout = ("num_groups", "num_channels")
    _plain = "GroupNorm"

    def __init__(
        self, num_groups: int, num_channels: int, members: int, eps: float = 1e-5, *, gate_init: float = 0.0
    ) -> None:
        super().__init__()
        num_groups = check_int(num_groups, name="num_groups", minimum=1)
        num_channels = check_int(num_channels, name="num_channels", minimum=1)
        if num_channels % num_groups:
            raise ValueError(f"num_channels={num_channels} must be divisible by num_groups={num_groups}")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = _check_eps(eps)
        self._init_affine(num_channels, members, gate_init)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, members={self.members}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        """``(B·M, C, *) -> (B·M, C, *)``."""
        _check_input(self, x)
        if x.dim() < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"SigmaGroupNorm expects (B·M, {self.num_channels}, ...), got {tuple(x.shape)}")
        self._check_batch(x)
        # unit affine, as in SigmaLayerNorm: the kernel's faster path; the member affine follows
        zero, unit = self._constant_vectors(self.num_channels, x)
        xhat = F.group_norm(x, self.num_groups, unit, zero, self.eps)
        return _member_affine(self, xhat, (self.members, self.num_channels, *(1,) * (x.dim() - 2)))
