"""Out-of-distribution sets for the embedded data (scikit-learn digits), all offline.

* Near-OOD — :func:`held_out_classes`: train on some digit classes, treat the held-out classes'
  test images as OOD (same pen, same scanner, unseen concepts).
* Far-OOD — pixel-space generators that return ``(n, C, H, W)`` float32 images in [0, 1]:
  :func:`gaussian_noise_images`, :func:`uniform_noise_images`, :func:`shuffled_pixels` (each image's
  pixel positions permuted: same intensity histogram, no shape) and :func:`photo_crops` (random
  crops of the two real photos bundled with scikit-learn, ``china.jpg`` and ``flower.jpg``, resized
  with Pillow). :func:`ood_sets` builds them for an :class:`~ensemblize.data.images.ImageSplits` and
  returns them in the ID set's *normalised* space, ready for the model.

:data:`NAMES` lists the far-OOD set names; :func:`parse_ood_names` validates a command-line value
such as ``"gaussian,photos"``. Olivetti faces are not used: scikit-learn downloads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int, check_positive
from ._names import parse_names
from .images import ImageSplits, load_digits
from .mnist1d import _check_classes

__all__ = [
    "NAMES",
    "NearOOD",
    "gaussian_noise_images",
    "held_out_classes",
    "ood_sets",
    "parse_ood_names",
    "photo_crops",
    "shuffled_pixels",
    "uniform_noise_images",
]

NAMES: tuple[str, ...] = ("gaussian", "uniform", "shuffled", "photos")
"""Far-OOD set names accepted by :func:`ood_sets` (and ``--ood`` on the command line)."""


def parse_ood_names(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"gaussian,photos"`` (or an iterable, or ``"all"``) -> validated tuple of :data:`NAMES`."""
    return parse_names(spec, NAMES, what="OOD set")


def _check_shape(shape: object, axes: tuple[str, ...]) -> tuple[int, ...]:
    """``shape`` as a tuple of ``len(axes)`` ints >= 1, one per named axis (``("C", "H", "W")``)."""
    dims = tuple(shape) if isinstance(shape, Iterable) else None
    if dims is None or len(dims) != len(axes):
        raise ValueError(f"shape must be ({', '.join(axes)}), got {shape!r}")
    return tuple(
        check_int(d, name=f"shape[{i}] ({axis})") for i, (axis, d) in enumerate(zip(axes, dims, strict=True))
    )


def _image_shape(shape: object) -> tuple[int, int, int]:
    c, h, w = _check_shape(shape, ("C", "H", "W"))
    if c not in (1, 3):
        raise ValueError(f"shape must have 1 or 3 channels, got {c}")
    return c, h, w


# --- near-OOD ----------------------------------------------------------------------------------------


@dataclass
class NearOOD:
    """In-distribution splits on ``id_classes`` plus the held-out classes' test images.

    ``splits`` holds the ID classes relabelled ``0..k-1`` in ``id_classes`` order and normalised with
    their own train statistics; ``x_ood`` ``(N_ood, 1, 8, 8)`` float32 are the held-out classes' test
    images in that same normalised space, ``y_ood`` their original digit labels.
    """

    splits: ImageSplits
    x_ood: Tensor
    y_ood: Tensor
    id_classes: tuple[int, ...]
    ood_classes: tuple[int, ...]


def held_out_classes(
    seed: int = 0,
    *,
    id_classes: Sequence[int] = (0, 1, 2, 3, 4, 5),
    val_fraction: float = 0.15,
    test_fraction: float = 0.2,
) -> NearOOD:
    """Near-OOD split of the digits: ID = ``id_classes``, OOD = the other digits' test images.

    The OOD images are the held-out classes' members of the test split of
    ``load_digits(seed=seed, val_fraction=..., test_fraction=...)``; no image of a held-out class is
    ever in the ID train / val / test sets.
    """
    ids = _check_classes(id_classes, name="id_classes", most=9)
    ood = tuple(c for c in range(10) if c not in ids)
    splits = load_digits(seed=seed, val_fraction=val_fraction, test_fraction=test_fraction, classes=ids)
    full = load_digits(seed=seed, val_fraction=val_fraction, test_fraction=test_fraction)
    keep = torch.isin(full.y_test, torch.tensor(ood))
    x01 = full.denormalize(full.x_test[keep])
    return NearOOD(
        splits=splits,
        x_ood=splits.normalize(x01),
        y_ood=full.y_test[keep].clone(),
        id_classes=ids,
        ood_classes=ood,
    )


# --- far-OOD generators (pixel space) ------------------------------------------------------------


def gaussian_noise_images(
    n: int, *, shape: Sequence[int], seed: int = 0, mean: float = 0.5, std: float = 1.0
) -> np.ndarray:
    """``(n, C, H, W)`` i.i.d. ``N(mean, std²)`` pixels clipped to [0, 1] (Outlier Exposure's "Gaussian")."""
    n = check_int(n, name="n", minimum=1)
    shape = _image_shape(shape)
    check_positive(std, name="std")
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(mean, std, size=(n, *shape)), 0.0, 1.0).astype(np.float32)


def uniform_noise_images(n: int, *, shape: Sequence[int], seed: int = 0) -> np.ndarray:
    """``(n, C, H, W)`` i.i.d. ``U[0, 1]`` pixels."""
    n = check_int(n, name="n", minimum=1)
    shape = _image_shape(shape)
    return np.random.default_rng(seed).random((n, *shape), dtype=np.float64).astype(np.float32)


def shuffled_pixels(images01: np.ndarray | Tensor, *, seed: int = 0) -> np.ndarray:
    """Permute each image's pixel positions independently (channels move together).

    ``images01`` ``(N, C, H, W)`` in [0, 1] -> ``(N, C, H, W)`` float32: every image keeps its exact
    multiset of pixel values (its intensity / colour histogram) but loses all spatial structure.
    """
    x = images01.detach().cpu().numpy() if isinstance(images01, Tensor) else np.asarray(images01)
    if x.ndim != 4:
        raise ValueError(f"images01 must be (N, C, H, W), got shape {x.shape}")
    n, c, h, w = x.shape
    rng = np.random.default_rng(seed)
    perm = np.argsort(rng.random((n, h * w)), axis=1)  # one independent permutation per image
    flat = x.reshape(n, c, h * w)
    out = np.take_along_axis(flat, np.broadcast_to(perm[:, None, :], flat.shape), axis=2)
    return out.reshape(n, c, h, w).astype(np.float32)


def photo_crops(
    n: int,
    *,
    shape: Sequence[int],
    seed: int = 0,
    min_crop: float = 0.1,
    max_crop: float = 0.5,
) -> np.ndarray:
    """Random square crops of scikit-learn's bundled photos, resized to ``shape`` with Pillow.

    Each crop picks one of ``china.jpg`` / ``flower.jpg`` (427×640 RGB), a side of
    ``U[min_crop, max_crop] × 427`` pixels and a uniform position; it is converted to grayscale
    (Pillow's ``L``: ITU-R 601 luma) when ``C = 1`` and box-resized to ``H × W``.
    Returns ``(n, C, H, W)`` float32 in [0, 1].
    """
    from PIL import Image
    from sklearn.datasets import load_sample_images

    n = check_int(n, name="n", minimum=1)
    c, h, w = _image_shape(shape)
    if not 0 < min_crop <= max_crop <= 1:
        raise ValueError(f"need 0 < min_crop <= max_crop <= 1, got {min_crop!r}, {max_crop!r}")
    photos = [Image.fromarray(p) for p in load_sample_images().images]
    rng = np.random.default_rng(seed)
    out = np.empty((n, c, h, w), dtype=np.float32)
    for i in range(n):  # Pillow crops and resizes one image at a time
        photo = photos[int(rng.integers(len(photos)))]
        side = int(round(rng.uniform(min_crop, max_crop) * min(photo.size)))
        side = max(side, 1)
        left = int(rng.integers(0, photo.size[0] - side + 1))
        top = int(rng.integers(0, photo.size[1] - side + 1))
        crop = photo.crop((left, top, left + side, top + side))
        if c == 1:
            crop = crop.convert("L")
        arr = np.asarray(crop.resize((w, h), Image.BOX), dtype=np.float32) / 255.0
        out[i] = arr[None] if c == 1 else arr.transpose(2, 0, 1)
    return out


# --- sets for an ImageSplits -------------------------------------------------------------------------


@dataclass(frozen=True)
class _FarOOD:
    """How one modality builds its far-OOD sets: the one body of :func:`ood_sets` and
    :func:`~ensemblize.data.ood1d.signal_ood_sets`.

    ``order`` lists every set name (a set's seed derives from its index); ``generate`` maps each name
    but ``"shuffled"`` to a generator ``(n, *, seed, **options)`` of raw inputs; ``shuffle(x, *, seed)``
    permutes the positions of ID test inputs in raw units, clipped to [0, 1] first when ``clip01``.
    """

    order: tuple[str, ...]
    generate: Mapping[str, Callable[..., np.ndarray]]
    shuffle: Callable[..., np.ndarray]
    clip01: bool

    def build(
        self, splits: ImageSplits, names: tuple[str, ...], *, n: int | None, seed: int, **options: Any
    ) -> dict[str, Tensor]:
        """Sets ``names`` for ``splits``, in its normalised space; ``n`` defaults to the ID test-set size.

        Each set draws from its own seed, derived from ``(seed, order.index(name))``, so adding a kind
        never changes the others. ``"shuffled"`` draws ID test inputs without replacement (cycling when
        ``n`` exceeds the test set) and shuffles each; ``options`` go to every generator.
        """
        n = len(splits.x_test) if n is None else check_int(n, name="n", minimum=1)
        out: dict[str, Tensor] = {}
        for name in names:
            sub = int(np.random.SeedSequence(seed, spawn_key=(self.order.index(name),)).generate_state(1)[0])
            if name == "shuffled":
                test = splits.denormalize(splits.x_test)
                test = (test.clamp(0.0, 1.0) if self.clip01 else test).numpy()
                rng = np.random.default_rng(sub)
                pick = np.concatenate([rng.permutation(len(test)) for _ in range(-(-n // len(test)))])[:n]
                raw = self.shuffle(test[pick], seed=sub + 1)
            else:
                raw = self.generate[name](n, seed=sub, **options)
            out[name] = splits.normalize(raw)
        return out


_PIXEL_SETS = _FarOOD(
    order=NAMES,
    generate={"gaussian": gaussian_noise_images, "uniform": uniform_noise_images, "photos": photo_crops},
    shuffle=shuffled_pixels,
    clip01=True,
)


def ood_sets(
    splits: ImageSplits, *, kinds: str | Iterable[str] = NAMES, n: int | None = None, seed: int = 0
) -> dict[str, Tensor]:
    """Far-OOD sets for ``splits``: name -> float32 ``(n, C, H, W)`` in the ID *normalised* space.

    ``n`` defaults to the ID test-set size (so AUROC compares equal-sized sets). ``"shuffled"``
    permutes the pixels of ID test images (drawn without replacement, cycling when ``n`` exceeds
    the test set). Each set uses its own seed offset, so adding a kind never changes the others.
    """
    shape = tuple(int(s) for s in splits.x_test.shape[1:])
    return _PIXEL_SETS.build(splits, parse_ood_names(kinds), n=n, seed=seed, shape=shape)
