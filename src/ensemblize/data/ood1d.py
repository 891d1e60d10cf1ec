"""Out-of-distribution sets for 1-D signals (MNIST-1D), all generated offline.

* Near-OOD — :func:`held_out_classes`: train on some MNIST-1D digits, treat the other digits' test
  signals as OOD (same generator, unseen templates).
* Far-OOD — generators of raw signals ``(n, C, L)`` float32 in the data's raw units (MNIST-1D:
  pooled mean 0, standard deviation 1), each matched to that scale:

  - :func:`gaussian_noise_signals` — i.i.d. ``N(0, std²)`` values (white noise);
  - :func:`smooth_noise_signals` — white noise smoothed by a Gaussian of ``σ`` samples, then
    rescaled to mean 0 and standard deviation ``std`` per signal (random smooth curves: the
    texture of a signal without a digit's template);
  - :func:`shuffled_samples` — each ID test signal's time steps permuted (the same values, no shape);
  - :func:`sinusoid_signals` — ``std·√2·sin(2π f t / L + φ)`` with ``f`` uniform in 1..4 cycles
    and ``φ ~ U[0, 2π)`` (regular, structured, not a digit).

:func:`signal_ood_sets` builds them for an :class:`~ensemblize.data.images.ImageSplits` of signals
and returns them in the model's *normalised* space; :data:`SIGNAL_OOD_NAMES` lists them and
:func:`parse_signal_ood_names` validates a command-line value such as ``"gaussian,sinusoids"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from scipy import ndimage
from torch import Tensor

from .._checks import check_int, check_positive
from ._names import parse_names
from .images import ImageSplits
from .ood import NearOOD, _check_shape, _FarOOD

__all__ = [
    "SIGNAL_OOD_NAMES",
    "gaussian_noise_signals",
    "held_out_classes",
    "parse_signal_ood_names",
    "shuffled_samples",
    "signal_ood_sets",
    "sinusoid_signals",
    "smooth_noise_signals",
]

SIGNAL_OOD_NAMES: tuple[str, ...] = ("gaussian", "smooth_noise", "shuffled", "sinusoids")
"""Names of the far-OOD signal sets of :func:`signal_ood_sets`."""


def gaussian_noise_signals(n: int, *, shape: Sequence[int], seed: int = 0, std: float = 1.0) -> np.ndarray:
    """``(n, C, L)`` float32 i.i.d. ``N(0, std²)`` values."""
    n = check_int(n, name="n")
    c, length = _check_shape(shape, ("C", "L"))
    std = check_positive(std, name="std")
    return np.random.default_rng(seed).normal(0.0, std, size=(n, c, length)).astype(np.float32)


def smooth_noise_signals(
    n: int, *, shape: Sequence[int], seed: int = 0, sigma: float = 2.0, std: float = 1.0
) -> np.ndarray:
    """``(n, C, L)`` float32: white noise smoothed along time (Gaussian, ``sigma`` samples, edges wrap),
    then shifted and scaled to mean 0 and standard deviation ``std`` per signal and channel."""
    n = check_int(n, name="n")
    c, length = _check_shape(shape, ("C", "L"))
    sigma = check_positive(sigma, name="sigma")
    std = check_positive(std, name="std")
    z = np.random.default_rng(seed).standard_normal((n, c, length))
    smooth = ndimage.gaussian_filter1d(z, sigma, axis=-1, mode="wrap")
    smooth -= smooth.mean(axis=-1, keepdims=True)
    scale = smooth.std(axis=-1, keepdims=True)
    return (std * smooth / np.where(scale > 0, scale, 1.0)).astype(np.float32)


def sinusoid_signals(n: int, *, shape: Sequence[int], seed: int = 0, std: float = 1.0) -> np.ndarray:
    """``(n, C, L)`` float32 ``std·√2·sin(2π f t / L + φ)`` (standard deviation ``std`` over a whole
    period), ``f`` uniform in {1, 2, 3, 4}, ``φ ~ U[0, 2π)``, one draw per signal (channels alike)."""
    n = check_int(n, name="n")
    c, length = _check_shape(shape, ("C", "L"))
    std = check_positive(std, name="std")
    rng = np.random.default_rng(seed)
    freq = rng.integers(1, 5, size=n)
    phase = rng.uniform(0.0, 2 * np.pi, size=n)
    t = np.arange(length)
    wave = std * np.sqrt(2.0) * np.sin(2 * np.pi * freq[:, None] * t[None, :] / length + phase[:, None])
    return np.repeat(wave[:, None, :], c, axis=1).astype(np.float32)


def shuffled_samples(signals: np.ndarray | Tensor, *, seed: int = 0) -> np.ndarray:
    """Permute each signal's time steps independently (channels move together).

    ``signals`` ``(N, C, L)`` -> ``(N, C, L)`` float32: every signal keeps its exact multiset of
    values but loses its temporal structure.
    """
    x = signals.detach().cpu().numpy() if isinstance(signals, Tensor) else np.asarray(signals)
    if x.ndim != 3:
        raise ValueError(f"signals must be (N, C, L), got shape {x.shape}")
    n, c, length = x.shape
    perm = np.argsort(np.random.default_rng(seed).random((n, length)), axis=1)
    return np.take_along_axis(x, np.broadcast_to(perm[:, None, :], x.shape), axis=2).astype(np.float32)


_SIGNAL_SETS = _FarOOD(
    order=SIGNAL_OOD_NAMES,
    generate={
        "gaussian": gaussian_noise_signals,
        "smooth_noise": smooth_noise_signals,
        "sinusoids": sinusoid_signals,
    },
    shuffle=shuffled_samples,
    clip01=False,
)


def parse_signal_ood_names(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"gaussian,sinusoids"`` (or an iterable, or ``"all"``) -> validated tuple of :data:`SIGNAL_OOD_NAMES`."""
    return parse_names(spec, SIGNAL_OOD_NAMES, what="signal OOD set")


def signal_ood_sets(
    splits: ImageSplits, *, kinds: str | Iterable[str] = SIGNAL_OOD_NAMES, n: int | None = None, seed: int = 0
) -> dict[str, Tensor]:
    """Far-OOD sets for signal ``splits`` ``(N, C, L)``: name -> float32 ``(n, C, L)`` in the normalised space.

    Generated in raw units with the scale of the raw train signals (``std`` = the mean of
    ``splits.std``), then normalised like the ID data. ``n`` defaults to the ID test-set size.
    ``"shuffled"`` permutes the time steps of ID test signals (drawn without replacement, cycling
    when ``n`` exceeds the test set). Each set uses its own seed offset, so adding a kind never
    changes the others.
    """
    names = parse_signal_ood_names(kinds)
    if splits.x_test.dim() != 3:
        raise ValueError(
            f"signal_ood_sets needs (N, C, L) signals, got test inputs {tuple(splits.x_test.shape)}"
        )
    std = float(splits.std.mean())
    return _SIGNAL_SETS.build(splits, names, n=n, seed=seed, shape=splits.input_shape, std=std)


def held_out_classes(
    seed: int = 0,
    *,
    id_classes: Sequence[int] = (0, 1, 2, 3, 4, 5),
    train_size: int | None = None,
    val_fraction: float = 0.1,
    cache: bool | str = True,
) -> NearOOD:
    """Near-OOD split of MNIST-1D: ID = ``id_classes`` (relabelled ``0..k-1``), OOD = the other digits' test signals.

    ``splits`` is ``load_mnist1d(seed=seed, classes=id_classes, ...)``; ``x_ood`` are the held-out
    digits' signals of the package's test set, normalised with the ID train statistics, ``y_ood``
    their digit labels. No signal of a held-out digit is in the ID train / val / test sets.
    """
    from .mnist1d import _check_classes, generate_mnist1d, load_mnist1d

    ids = _check_classes(id_classes, name="id_classes", most=9)
    splits = load_mnist1d(
        seed=seed, classes=ids, train_size=train_size, val_fraction=val_fraction, cache=cache
    )
    ood = tuple(c for c in range(10) if c not in ids)
    data = generate_mnist1d(cache=cache)
    keep = np.isin(data["y_test"], ood)
    return NearOOD(
        splits=splits,
        x_ood=splits.normalize(data["x_test"][keep][:, None, :]),
        y_ood=torch.from_numpy(data["y_test"][keep]),
        id_classes=ids,
        ood_classes=ood,
    )
