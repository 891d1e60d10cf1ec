"""Classification datasets by name, with what their shift and OOD evaluations need.

One entry point so that experiments swap datasets with a name::

    bench = load_dataset("mnist1d", seed=0)            # or "digits", "cifar10", "cifar100" (root=...)
    bench.splits                                        # ImageSplits: x_train/y_train/x_val/.../mean/std
    bench.default_model                                 # "resnet1d" for signals, "resnet_small" for images
    bench.shift(x, "gaussian_noise", 3, seed=0)         # model inputs -> shifted model inputs
    bench.ood_sets(kinds=None, n=None, seed=0)          # {"gaussian": x_ood, ...} model inputs
    bench.near_ood                                      # {"heldout": x} with heldout=True, else {}
    Benchmark.for_splits(splits)                        # the same from splits alone (modality from rank)

:func:`load_dataset` ``(name, *, seed, train_size=None, heldout=False, root=None)``:

* ``name`` — :data:`DATASETS`: ``"digits"`` (scikit-learn's 8×8 digits), ``"mnist1d"``
  (:func:`~ensemblize.data.mnist1d.load_mnist1d`, signals ``(N, 1, 40)``), ``"cifar10"`` /
  ``"cifar100"`` (from ``root``; never downloaded).
* ``seed`` — the split seed (validation split, and the ``train_size`` subset).
* ``train_size`` — keep a stratified, seeded subset of this many training examples (a low-data
  regime); validation, test and normalisation are unchanged
  (:func:`~ensemblize.data.images.subsample_train`).
* ``heldout`` — near-OOD protocol: train on classes 0–5 only, and ``near_ood["heldout"]`` holds the
  other classes' test inputs (digits: :func:`ensemblize.data.ood.held_out_classes`; MNIST-1D:
  :func:`ensemblize.data.ood1d.held_out_classes`). Not available for CIFAR.

A :class:`Benchmark` knows its modality (``"image"`` or ``"signal"``) and dispatches:

====================  ==============================================  ==============================================
                      image (digits, CIFAR)                           signal (MNIST-1D)
====================  ==============================================  ==============================================
``shift_kinds``       CIFAR-10-C kinds (:mod:`.corruptions`; no        :data:`~ensemblize.data.shifts1d.SIGNAL_SHIFTS`
                      ``saturate`` on grayscale)
``shift``             denormalise, clip to [0, 1], ``corrupt(...,     denormalise, ``shift_signals(...)``, normalise
                      reference_size=min(32, W))``, normalise
``ood_kinds``         :data:`ensemblize.data.ood.NAMES`                :data:`~ensemblize.data.ood1d.SIGNAL_OOD_NAMES`
``ood_sets``          :func:`ensemblize.data.ood.ood_sets`             :func:`~ensemblize.data.ood1d.signal_ood_sets`
====================  ==============================================  ==============================================

``reduced_shift_kinds`` is the cheaper subset an evaluation preset may use (images: one kind per
CIFAR-10-C family plus two; signals: all six, they are cheap). Both modalities name a
``"gaussian_noise"`` shift and a ``"gaussian"`` OOD set, so a preset naming only those works on any
dataset. Severities are 1..5 everywhere (0 returns the inputs unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from torch import Tensor

from .._checks import check_bool, check_choice, check_size
from .corruptions import CORRUPTIONS
from .images import ImageSplits, subsample_train
from .shifts1d import SIGNAL_SHIFTS

__all__ = ["DATASETS", "DEFAULT_MODEL", "MODALITY", "REDUCED_SHIFTS", "SHIFTS", "Benchmark", "load_dataset"]

DATASETS: tuple[str, ...] = ("digits", "mnist1d", "cifar10", "cifar100")
"""Names accepted by :func:`load_dataset`."""

MODALITY: dict[str, str] = {"digits": "image", "mnist1d": "signal", "cifar10": "image", "cifar100": "image"}
"""Each dataset's modality: ``"image"`` (``(N, C, H, W)``) or ``"signal"`` (``(N, C, L)``)."""

DEFAULT_MODEL: dict[str, str] = {"image": "resnet_small", "signal": "resnet1d"}
"""The backbone a run uses per modality when none is named."""

SHIFTS: dict[str, tuple[str, ...]] = {"image": CORRUPTIONS, "signal": SIGNAL_SHIFTS}
"""Per modality, every shift kind (images: CIFAR-10-C, ``saturate`` only applies to colour images)."""

REDUCED_SHIFTS: dict[str, tuple[str, ...]] = {
    "image": ("gaussian_noise", "gaussian_blur", "contrast", "pixelate", "elastic_transform"),
    "signal": ("gaussian_noise", "time_shift", "amplitude_scale", "blur", "dropout", "baseline_wander"),
}
"""Per modality, the shift kinds of a cheaper evaluation (images: one per CIFAR-10-C family plus two;
signals: all six, they are cheap)."""


@dataclass(frozen=True)
class Benchmark:
    """A dataset's splits plus its shifts and OOD sets (see the module docstring for the dispatch).

    Attributes:
        splits: train / val / test inputs and labels (:class:`~ensemblize.data.images.ImageSplits`).
        modality: ``"image"`` (``(N, C, H, W)``) or ``"signal"`` (``(N, C, L)``).
        near_ood: extra OOD inputs in model space, e.g. ``{"heldout": x}``; empty by default.
    """

    splits: ImageSplits
    modality: str
    near_ood: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice(self.modality, tuple(DEFAULT_MODEL), name="modality")

    @classmethod
    def for_splits(cls, splits: ImageSplits, *, near_ood: dict[str, Tensor] | None = None) -> Benchmark:
        """The benchmark of already loaded ``splits``: ``"signal"`` for ``(N, C, L)`` inputs, ``"image"``
        for ``(N, C, H, W)`` (what an evaluation that is handed only the splits should use)."""
        modality = {3: "signal", 4: "image"}.get(splits.x_test.dim())
        if modality is None:
            raise ValueError(
                f"splits must hold (N, C, L) signals or (N, C, H, W) images, got {tuple(splits.x_test.shape)}"
            )
        return cls(splits=splits, modality=modality, near_ood=dict(near_ood or {}))

    @property
    def name(self) -> str:
        """The dataset's name (``splits.name``)."""
        return self.splits.name

    @property
    def default_model(self) -> str:
        """The backbone a run uses when none is named: ``"resnet_small"`` (images) or ``"resnet1d"``."""
        return DEFAULT_MODEL[self.modality]

    @property
    def shift_kinds(self) -> tuple[str, ...]:
        """Every shift kind that applies to this data."""
        kinds = SHIFTS[self.modality]
        return tuple(k for k in kinds if not (k == "saturate" and self.splits.in_channels != 3))

    @property
    def reduced_shift_kinds(self) -> tuple[str, ...]:
        """A cheaper subset of :attr:`shift_kinds` for quick evaluations."""
        return REDUCED_SHIFTS[self.modality]

    @property
    def ood_kinds(self) -> tuple[str, ...]:
        """Names of the far-OOD sets :meth:`ood_sets` can build."""
        if self.modality == "signal":
            from .ood1d import SIGNAL_OOD_NAMES

            return SIGNAL_OOD_NAMES
        from .ood import NAMES

        return NAMES

    def shift(self, x: Tensor, kind: str, severity: int, *, seed: int = 0) -> Tensor:
        """Model inputs ``x`` -> the same inputs under shift ``kind`` at ``severity`` (0..5), as model inputs.

        Images go to [0, 1] pixels (clipped), through the CIFAR-10-C corruption with
        ``reference_size = min(32, W)`` and back; signals go to raw units, through
        :func:`~ensemblize.data.shifts1d.shift_signals` and back. ``seed`` seeds the corruption.
        """
        if kind not in self.shift_kinds:
            raise ValueError(
                f"unknown shift {kind!r} for {self.name}; valid kinds: {', '.join(self.shift_kinds)}"
            )
        if self.modality == "signal":
            from .shifts1d import shift_signals

            raw = self.splits.denormalize(x).detach().cpu().double()
            return self.splits.normalize(shift_signals(raw, kind, severity, seed))
        from .corruptions import corrupt

        if check_size(severity, name="severity", minimum=0, maximum=5) == 0:
            return x.detach().clone()
        x01 = self.splits.denormalize(x).clamp(0, 1).detach().cpu().numpy().astype(np.float64)
        ref = min(32, int(x.shape[-1]))
        return self.splits.normalize(corrupt(x01, kind, severity, seed, reference_size=ref))

    def ood_sets(
        self, *, kinds: str | Iterable[str] | None = None, n: int | None = None, seed: int = 0
    ) -> dict[str, Tensor]:
        """Far-OOD sets (name -> model inputs ``(n, ...)``); ``kinds=None`` builds all of :attr:`ood_kinds`.

        ``n`` defaults to the test-set size. Does not include :attr:`near_ood`.
        """
        kinds = self.ood_kinds if kinds is None else kinds
        if self.modality == "signal":
            from .ood1d import signal_ood_sets

            return signal_ood_sets(self.splits, kinds=kinds, n=n, seed=seed)
        from .ood import ood_sets

        return ood_sets(self.splits, kinds=kinds, n=n, seed=seed)


def _load_heldout(name: str, seed: int) -> tuple[ImageSplits, dict[str, Tensor]]:
    if name == "digits":
        from .ood import held_out_classes as digits_heldout

        near = digits_heldout(seed)
    elif name == "mnist1d":
        from .ood1d import held_out_classes as mnist1d_heldout

        near = mnist1d_heldout(seed)
    else:
        raise ValueError(f"heldout=True (near-OOD class hold-out) supports digits and mnist1d, not {name!r}")
    return near.splits, {"heldout": near.x_ood}


def load_dataset(
    name: str,
    *,
    seed: int,
    train_size: int | None = None,
    heldout: bool = False,
    root: str | Path | None = None,
) -> Benchmark:
    """A :class:`Benchmark` for dataset ``name`` (one of :data:`DATASETS`); see the module docstring.

    Raises ValueError for an unknown name (listing the valid ones), ``heldout`` on CIFAR, CIFAR
    without ``root``, or a ``train_size`` outside ``[num_classes, train split size]``.
    """
    check_choice(name, DATASETS, name="dataset")
    check_bool(heldout, name="heldout")
    near: dict[str, Tensor] = {}
    if heldout:
        splits, near = _load_heldout(name, seed)
    elif name == "mnist1d":
        from .mnist1d import load_mnist1d

        splits = load_mnist1d(seed=seed)
    else:
        from .images import load_images

        splits = load_images(name, seed=seed, root=root)
    if train_size is not None:
        splits = subsample_train(splits, train_size, seed=seed)
    return Benchmark(splits=splits, modality=MODALITY[name], near_ood=near)
