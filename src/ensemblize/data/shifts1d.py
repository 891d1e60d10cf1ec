"""Distribution shifts for 1-D signals at severities 1..5 (the signal twin of :mod:`ensemblize.data.corruptions`).

``shift_signals(signals, kind, severity, seed)`` applies one of :data:`SIGNAL_SHIFTS` to float
signals ``(N, C, L)`` or ``(C, L)`` (NumPy array or torch tensor) in their *raw* units (for MNIST-1D
the generator's units: pooled mean 0, standard deviation 1). The result has the same shape, type,
dtype and device; nothing is clipped. Severity 0 is the identity (a copy). Constants, one per
severity 1..5, are in :data:`SIGNAL_SHIFT_CONSTANTS`; with ``x`` a signal, ``t = 0..L-1`` its time
index and ``c`` the severity's constant:

* ``gaussian_noise`` — ``x + c·z``, ``z ~ N(0, 1)`` i.i.d. per value.
* ``time_shift`` — ``out[t] = x[clip(t - s·c, 0, L-1)]``: the signal moves ``c`` samples later
  (``s = +1``) or earlier (``s = -1``, one sign per signal) and the vacated end repeats the edge
  sample. Not circular on purpose: MNIST-1D's generator already applies circular translations, so
  a circular shift would stay in distribution.
* ``amplitude_scale`` — ``x·exp(s·c)`` with a sign ``s = ±1`` per signal (louder or quieter).
* ``blur`` — Gaussian smoothing along time with ``σ = c`` samples (SciPy's ``gaussian_filter1d``:
  weights ``∝ exp(-k² / (2σ²))`` for ``|k| <= round(4σ)``, normalised; edges repeat the end sample).
  Deterministic.
* ``dropout`` — ``out[t] = 0`` where ``u_t < c``, else ``x[t]`` (``u_t ~ U[0, 1)`` per time step,
  shared by the channels): a share ``c`` of samples lost, set to the data mean. Higher severities
  drop a superset of the samples lower ones drop.
* ``baseline_wander`` — ``x + c·sin(2π t / L + φ)`` with a phase ``φ ~ U[0, 2π)`` per signal: a slow
  drift of the baseline, one period per signal (sensor drift).

**Randomness.** Signal ``i`` draws from its own stream
``np.random.default_rng(SeedSequence(seed, spawn_key=(crc32(kind), i)))`` (the scheme of
:mod:`ensemblize.data.corruptions`): its result depends only on ``(seed, kind, i)`` and its values,
and every severity uses the same draws (common random numbers), so a higher severity scales the
*same* perturbation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from scipy import ndimage

from .._checks import check_choice, check_int, check_size, float64_copy
from ._names import parse_names
from .corruptions import _streams

__all__ = ["SIGNAL_SHIFTS", "SIGNAL_SHIFT_CONSTANTS", "parse_signal_shifts", "shift_signals"]

# One constant per severity 1..5, in the signal's raw units (MNIST-1D: standard deviation 1) or
# samples. Chosen so that severity 1 costs a ResNet1d a few points of accuracy and severity 5 a lot
# (measured on MNIST-1D; see tests/test_data_shifts1d.py for the monotone effect).
SIGNAL_SHIFT_CONSTANTS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.1, 0.2, 0.3, 0.45, 0.6),  # noise std
    "time_shift": (2, 4, 6, 9, 12),  # samples
    "amplitude_scale": (0.15, 0.3, 0.45, 0.6, 0.8),  # log-factor: x·exp(±c)
    "blur": (0.5, 0.6, 0.7, 0.85, 1.0),  # Gaussian σ in samples
    "dropout": (0.02, 0.05, 0.1, 0.2, 0.3),  # share of samples set to 0
    "baseline_wander": (0.4, 0.8, 1.2, 1.6, 2.0),  # sinusoid amplitude
}

SIGNAL_SHIFTS: tuple[str, ...] = tuple(SIGNAL_SHIFT_CONSTANTS)
"""Names of the supported 1-D shift kinds."""


def _as_signals(signals: object) -> tuple[np.ndarray, bool]:
    """Validated float64 copy ``(N, C, L)`` and whether the input was a single ``(C, L)`` signal."""
    arr = float64_copy(signals, name="signals")
    if arr.ndim not in (2, 3):
        raise ValueError(f"signals must be (N, C, L) or (C, L), got shape {tuple(arr.shape)}")
    if arr.size and not np.isfinite(arr).all():
        raise ValueError("signals contain non-finite values (NaN or inf)")
    return (arr[None], True) if arr.ndim == 2 else (arr, False)


def _signs(rngs: list[np.random.Generator]) -> np.ndarray:
    """One ``±1`` per signal, ``(N,)``."""
    return np.array([1.0 if r.random() < 0.5 else -1.0 for r in rngs])


def _gaussian_noise(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    z = np.stack([r.standard_normal(x.shape[1:]) for r in rngs]) if rngs else np.zeros_like(x)
    return x + c * z


def _time_shift(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    length = x.shape[-1]
    t = np.arange(length)
    source = np.clip(t[None, :] - _signs(rngs)[:, None].astype(np.int64) * int(c), 0, length - 1)
    return np.take_along_axis(x, np.broadcast_to(source[:, None, :], x.shape), axis=-1)


def _amplitude_scale(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    return x * np.exp(_signs(rngs) * c)[:, None, None]


def _blur(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    return ndimage.gaussian_filter1d(x, c, axis=-1, mode="nearest", truncate=4.0)


def _dropout(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    u = np.stack([r.random(x.shape[-1]) for r in rngs]) if rngs else np.ones((0, x.shape[-1]))
    return np.where(u[:, None, :] < c, 0.0, x)


def _baseline_wander(x: np.ndarray, c: float, rngs: list[np.random.Generator]) -> np.ndarray:
    length = x.shape[-1]
    phase = np.array([r.uniform(0.0, 2 * np.pi) for r in rngs])
    wave = np.sin(2 * np.pi * np.arange(length)[None, :] / length + phase[:, None])
    return x + c * wave[:, None, :]


_FUNCTIONS: dict[str, Callable[[np.ndarray, float, list[np.random.Generator]], np.ndarray]] = {
    "gaussian_noise": _gaussian_noise,
    "time_shift": _time_shift,
    "amplitude_scale": _amplitude_scale,
    "blur": _blur,
    "dropout": _dropout,
    "baseline_wander": _baseline_wander,
}
assert set(_FUNCTIONS) == set(SIGNAL_SHIFT_CONSTANTS)


def shift_signals(
    signals: np.ndarray | torch.Tensor, kind: str, severity: int, seed: int = 0
) -> np.ndarray | torch.Tensor:
    """Apply the 1-D shift ``kind`` at ``severity`` (0 = identity, 1..5) to raw signals; see the module doc.

    Args:
        signals: float array or tensor ``(N, C, L)`` or ``(C, L)`` in raw units. Not modified.
        kind: one of :data:`SIGNAL_SHIFTS`.
        severity: 0 (unshifted copy), 1 (mild) .. 5 (strong).
        seed: non-negative int; signal ``i`` uses its own stream derived from ``(seed, kind, i)``.

    Returns:
        Same shape, type (array / tensor), dtype and device as ``signals``.

    Raises:
        ValueError: unknown kind (the message lists the valid ones), severity outside 0..5, a bad
            shape or non-finite values. TypeError: non-float input.
    """
    kind = check_choice(kind, SIGNAL_SHIFTS, name="signal shift kind")
    severity = check_size(severity, name="severity", minimum=0, maximum=5)
    seed = check_int(seed, name="seed", minimum=0)
    x, single = _as_signals(signals)
    if severity == 0:
        out = x
    else:
        out = _FUNCTIONS[kind](x, SIGNAL_SHIFT_CONSTANTS[kind][severity - 1], _streams(seed, kind, 0, len(x)))
    if single:
        out = out[0]
    if isinstance(signals, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(out)).to(dtype=signals.dtype, device=signals.device)
    return np.array(out, dtype=signals.dtype)


def parse_signal_shifts(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"gaussian_noise,blur"`` (or an iterable of names, or ``"all"``) -> validated tuple of kinds."""
    return parse_names(spec, SIGNAL_SHIFTS, what="signal shift")
