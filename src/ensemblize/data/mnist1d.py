"""MNIST-1D (Greydanus & Steinbach, 2024), generated offline with the ``mnist1d`` package.

:func:`load_mnist1d` returns the same :class:`~ensemblize.data.images.ImageSplits` as
``load_digits``, with signals ``(N, 1, 40)`` instead of images:

* **Generation.** ``mnist1d.data.make_dataset`` with the package's default arguments
  (``get_dataset_args()``: 5,000 signals of length 40, ``train_split=0.8``, generator seed 42), so
  train / test are the package's own 4,000 / 1,000. Nothing is downloaded and no pickle is read:
  the package's ``get_dataset`` (which fetches and unpickles ``mnist1d_data.pkl``) is never called.
  (Whether the generated arrays equal that published pickle is not checked: it would need the
  download. They equal the package's ``make_dataset(get_dataset_args())``, which the tests check.)
  The generator seeds Python's and NumPy's *global* random state; :func:`generate_mnist1d` restores
  both afterwards, so loading the data never changes a caller's random stream.
* **Cache.** Generation takes about 2 s (plus about 1.5 s to import the package, which imports
  matplotlib). The four arrays are cached as one ``.npz`` written atomically and read back with
  ``allow_pickle=False``, in ``$ENSEMBLIZE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ensemblize``, else
  ``~/.cache/ensemblize`` (``cache=False`` turns it off; a path picks the folder). A cached file
  that does not hold the expected arrays is regenerated. A cache folder that cannot be written is
  skipped (the data are then regenerated on every call).
* **Splits.** A seeded, stratified ``val_fraction`` of the package's train set becomes the
  validation set; the package's test set stays the test set. Inputs are normalised with the train
  split's mean and standard deviation (the generator already standardises the pooled data, so this
  is close to the identity). ``train_size`` keeps a seeded, stratified subset of the train split (a
  low-data regime) with validation, test and normalisation unchanged
  (:func:`~ensemblize.data.images.subsample_train`). ``classes`` keeps only those labels,
  relabelled ``0..k-1`` (the near-OOD protocol of :func:`ensemblize.data.ood1d.held_out_classes`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

from .._checks import check_instance, check_int, check_open_unit, check_size
from .images import ImageSplits, subsample_train

__all__ = ["MNIST1D_LENGTH", "MNIST1D_SIZES", "default_cache_dir", "generate_mnist1d", "load_mnist1d"]

MNIST1D_LENGTH = 40
"""Samples per MNIST-1D signal (the package's ``final_seq_length``)."""

MNIST1D_SIZES = (4000, 1000)
"""The package's own train / test sizes with its default arguments."""

_FORMAT = "ensemblize.mnist1d/1"
_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def default_cache_dir() -> Path:
    """``$ENSEMBLIZE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ensemblize``, else ``~/.cache/ensemblize``."""
    if os.environ.get("ENSEMBLIZE_CACHE_DIR"):
        return Path(os.environ["ENSEMBLIZE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ensemblize"


def _package_args(generation_seed: int):
    from mnist1d.data import get_dataset_args

    args = get_dataset_args()
    args.seed = generation_seed
    return args


def _make(generation_seed: int) -> dict[str, np.ndarray]:
    """Run the package's generator with its defaults, leaving the global random states as found."""
    from mnist1d.data import make_dataset

    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002 - the package seeds the legacy global state
    try:
        data = make_dataset(_package_args(generation_seed))
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002
    return {
        "x_train": np.asarray(data["x"], dtype=np.float64),
        "y_train": np.asarray(data["y"], dtype=np.int64),
        "x_test": np.asarray(data["x_test"], dtype=np.float64),
        "y_test": np.asarray(data["y_test"], dtype=np.int64),
    }


def _cache_file(folder: Path, generation_seed: int) -> Path:
    from importlib.metadata import version

    key = {"format": _FORMAT, "mnist1d": version("mnist1d"), "seed": generation_seed}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return folder / f"mnist1d_seed{generation_seed}_{digest}.npz"


def _valid(arrays: dict[str, np.ndarray]) -> bool:
    x_tr, y_tr, x_te, y_te = (arrays.get(k) for k in _ARRAYS)
    if any(a is None for a in (x_tr, y_tr, x_te, y_te)):
        return False
    shapes_ok = (
        x_tr.shape == (MNIST1D_SIZES[0], MNIST1D_LENGTH)
        and x_te.shape == (MNIST1D_SIZES[1], MNIST1D_LENGTH)
        and y_tr.shape == (MNIST1D_SIZES[0],)
        and y_te.shape == (MNIST1D_SIZES[1],)
    )
    types_ok = x_tr.dtype == x_te.dtype == np.float64 and y_tr.dtype == y_te.dtype == np.int64
    return bool(shapes_ok and types_ok and np.isfinite(x_tr).all() and np.isfinite(x_te).all())


def _read_cache(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # unreadable, truncated, empty
        return None
    return arrays if _valid(arrays) else None


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Atomic write: a temporary file in the same folder, then ``os.replace``; skipped if not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def generate_mnist1d(
    *, generation_seed: int = 42, cache: bool | str | os.PathLike = True
) -> dict[str, np.ndarray]:
    """The package's MNIST-1D arrays: ``x_train`` ``(4000, 40)``, ``x_test`` ``(1000, 40)`` float64, labels int64.

    ``generation_seed`` is the generator's seed (the package default, 42, gives the standard
    dataset); ``cache`` is ``True`` (:func:`default_cache_dir`), ``False`` or a folder. Returns
    fresh copies: the caller may modify them.
    """
    generation_seed = check_int(generation_seed, name="generation_seed", minimum=0)
    check_instance(cache, (bool, str, os.PathLike), name="cache", what="a bool or a folder path")
    folder = None if cache is False else default_cache_dir() if cache is True else Path(cache)
    if folder is not None and cache is not True and folder.exists() and not folder.is_dir():
        raise ValueError(f"cache must be a folder (or True / False), but {str(folder)!r} is a file")
    path = _cache_file(folder, generation_seed) if folder is not None else None
    arrays = _read_cache(path) if path is not None and path.is_file() else None
    if arrays is None:
        arrays = _make(generation_seed)
        if path is not None:
            _write_cache(path, arrays)
    return {k: np.array(arrays[k]) for k in _ARRAYS}


def _keep_classes(
    x: np.ndarray, y: np.ndarray, classes: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray]:
    if classes is None:
        return x, y
    remap = np.full(10, -1, dtype=np.int64)
    remap[list(classes)] = np.arange(len(classes))
    keep = remap[y] >= 0
    return x[keep], remap[y[keep]]


def _check_classes(
    classes: Sequence[int] | None, *, name: str = "classes", most: int = 10
) -> tuple[int, ...] | None:
    """``classes`` as a tuple of 2..``most`` distinct digits in 0..9 (``None`` passes), else raise naming it.

    The one check of a digit-class list (MNIST-1D ``classes``, the near-OOD ``id_classes``).
    """
    if classes is None:
        return None
    out = tuple(check_size(c, name=name, minimum=0, maximum=9) for c in classes)
    if not 2 <= len(out) <= most or len(set(out)) != len(out):
        leave = " (to leave at least one digit out)" if most < 10 else ""
        raise ValueError(f"{name} must be 2..{most} distinct digits in 0..9{leave}, got {classes!r}")
    return out


def load_mnist1d(
    *,
    seed: int = 0,
    val_fraction: float = 0.1,
    train_size: int | None = None,
    classes: Sequence[int] | None = None,
    generation_seed: int = 42,
    cache: bool | str | os.PathLike = True,
) -> ImageSplits:
    """MNIST-1D as ``(N, 1, 40)`` signals: train / val / test split and normalised (see the module doc).

    Args:
        seed: seeds the stratified validation split and the ``train_size`` subset.
        val_fraction: share of the package's 4,000 training signals held out for validation.
        train_size: keep only this many training signals (stratified); ``None`` keeps all.
        classes: keep only these digits, relabelled ``0..k-1`` in the given order.
        generation_seed: the generator's seed (42: the package's standard dataset).
        cache: see :func:`generate_mnist1d`.

    Returns:
        :class:`~ensemblize.data.images.ImageSplits` named ``"mnist1d"``; default sizes
        train / val / test = 3,600 / 400 / 1,000.
    """
    seed = check_int(seed, name="seed", minimum=0)
    check_open_unit(val_fraction, name="val_fraction")
    ids = _check_classes(classes)
    data = generate_mnist1d(generation_seed=generation_seed, cache=cache)
    x_pool, y_pool = _keep_classes(data["x_train"], data["y_train"], ids)
    x_test, y_test = _keep_classes(data["x_test"], data["y_test"], ids)
    idx_train, idx_val = train_test_split(
        np.arange(len(y_pool)), test_size=val_fraction, random_state=seed, stratify=y_pool
    )
    idx_train, idx_val = np.sort(idx_train), np.sort(idx_val)
    mean = x_pool[idx_train].mean(keepdims=True)[0]  # (1,): one channel
    std = x_pool[idx_train].std(keepdims=True)[0]

    def model_inputs(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((x[:, None, :] - mean) / std).astype(np.float32))

    names = [str(c) for c in (ids if ids is not None else range(10))]
    splits = ImageSplits(
        name="mnist1d",
        x_train=model_inputs(x_pool[idx_train]),
        y_train=torch.from_numpy(y_pool[idx_train]),
        x_val=model_inputs(x_pool[idx_val]),
        y_val=torch.from_numpy(y_pool[idx_val]),
        x_test=model_inputs(x_test),
        y_test=torch.from_numpy(y_test.copy()),
        mean=torch.tensor(mean, dtype=torch.float32),
        std=torch.tensor(std, dtype=torch.float32),
        num_classes=len(names),
        class_names=tuple(names),
    )
    return splits if train_size is None else subsample_train(splits, train_size, seed=seed)
