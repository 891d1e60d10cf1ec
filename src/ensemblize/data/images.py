"""Image data that works offline: scikit-learn's bundled digits, and CIFAR-10/100 from disk.

* :func:`load_digits` — the 1,797 real 8×8 handwritten digits that ship with scikit-learn.
* :func:`load_cifar` — CIFAR-10 or CIFAR-100 from a folder the user already has (no download). Both
  official on-disk formats are read: the binary version (``cifar-10-batches-bin``: raw bytes, read
  with NumPy) and the python version (``cifar-10-batches-py`` / ``cifar-100-python``). The python
  version is a pickle; it is read by :func:`ensemblize.data.array_pickle.load_array_pickle`, which
  builds no NumPy object from the file (arrays are made afterwards from their raw bytes, numbers only),
  so a tampered file cannot run code or corrupt memory.

Both return an :class:`ImageSplits` with a seeded, stratified train/val/test split and inputs
normalised with the *train* split's per-channel mean and standard deviation.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch import Tensor

from .._checks import check_fraction, check_int
from .array_pickle import load_array_pickle

__all__ = [
    "ImageSplits",
    "load_cifar",
    "load_digits",
    "load_images",
    "split_and_normalize",
    "subsample_train",
]


@dataclass
class ImageSplits:
    """Train / validation / test inputs, normalised with the train split's statistics.

    The splits of every classification dataset in the project (images and 1-D signals alike):
    ``x_*`` are float32 tensors ``(N, C, H, W)`` for images or ``(N, C, L)`` for signals (MNIST-1D),
    in normalised units; ``y_*`` int64 labels in ``[0, num_classes)``. ``mean`` and ``std`` are
    per-channel ``(C,)`` tensors of the train split's *raw* inputs ([0, 1]-scaled pixels for images,
    the generator's units for signals); :meth:`normalize` / :meth:`denormalize` move between raw
    inputs and model inputs, for any number of trailing axes.
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor
    mean: Tensor
    std: Tensor
    num_classes: int
    class_names: tuple[str, ...]

    @property
    def in_channels(self) -> int:
        """Input channels ``C``."""
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """The last axis' size: the image width ``W`` (images are square) or the signal length ``L``."""
        return int(self.x_train.shape[-1])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One input's shape: ``(C, H, W)`` or ``(C, L)``."""
        return tuple(int(s) for s in self.x_train.shape[1:])

    def _per_channel(self, stat: Tensor, x: Tensor) -> Tensor:
        return stat.view(1, -1, *([1] * (x.dim() - 2)))

    def normalize(self, x01: Tensor | np.ndarray) -> Tensor:
        """Raw inputs (``[0, 1]`` pixels ``(N, C, H, W)`` or signals ``(N, C, L)``) -> model inputs."""
        x = torch.as_tensor(x01, dtype=torch.float32)
        return (x - self._per_channel(self.mean, x)) / self._per_channel(self.std, x)

    def denormalize(self, x: Tensor) -> Tensor:
        """Model inputs -> raw inputs (not clipped)."""
        return x * self._per_channel(self.std, x) + self._per_channel(self.mean, x)

    def describe(self) -> str:
        """One line: name, input shape, classes and split sizes."""
        shape = "×".join(str(s) for s in self.input_shape)
        return (
            f"{self.name}: {shape}, {self.num_classes} classes, "
            f"train/val/test = {len(self.y_train)}/{len(self.y_val)}/{len(self.y_test)}"
        )


def _split_seed(seed: object) -> int:
    seed = check_int(seed, name="seed", minimum=0)
    if seed >= 2**32:
        raise ValueError(f"seed must be < 2**32, got {seed}")
    return seed


def _check_stratifiable(what: str, fraction: float, labels: np.ndarray, *, name: str) -> None:
    """ValueError when ``fraction`` of ``labels`` gives fewer rows than classes (a stratified split needs
    at least one per class)."""
    pool, n_classes = len(labels), len(np.unique(labels))
    if int(np.ceil(fraction * pool)) < n_classes:
        raise ValueError(
            f"{what}={fraction} gives {int(np.ceil(fraction * pool))} of {pool} {name} examples, fewer "
            f"than its {n_classes} classes: a stratified split needs at least one per class"
        )


def _int_labels(values: object, *, where: object) -> np.ndarray:
    """A python batch's labels as int64 ``(N,)``; ValueError naming ``where`` unless they are whole numbers
    (a float 2.9 was truncated to class 2; text raised int()'s error without the file's name)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64).reshape(-1)
    if arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all():
        return arr.astype(np.int64).reshape(-1)
    raise ValueError(
        f"{where}: labels must be whole numbers (class indices), got {arr.dtype} values {arr.reshape(-1)[:3].tolist()}"
    )


def split_and_normalize(
    name: str,
    images01: np.ndarray,
    labels: np.ndarray,
    *,
    seed: int,
    val_fraction: float,
    test_fraction: float,
    classes: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> ImageSplits:
    """Seeded stratified split of ``images01`` ``(N, C, H, W)`` in [0, 1] and train-split normalisation.

    ``classes`` keeps only those labels, relabelled ``0..k-1`` in the given order.
    """
    seed = _split_seed(seed)
    check_fraction(val_fraction, name="val_fraction")
    check_fraction(test_fraction, name="test_fraction")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got {val_fraction} + {test_fraction}")
    if images01.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {images01.shape}")
    labels = np.asarray(labels, dtype=np.int64)
    names = list(class_names) if class_names is not None else [str(c) for c in range(int(labels.max()) + 1)]
    if classes is not None:
        classes = [check_int(c, name="classes entry", minimum=0) for c in classes]
        present = set(np.unique(labels).tolist())
        unknown = [c for c in classes if c not in present]
        if unknown or len(set(classes)) != len(classes) or not classes:
            raise ValueError(
                f"classes must be distinct labels present in {name}; got {classes} (unknown: {unknown})"
            )
        keep = np.isin(labels, classes)
        remap = np.full(int(labels.max()) + 1, -1, dtype=np.int64)
        remap[classes] = np.arange(len(classes))
        images01, labels = images01[keep], remap[labels[keep]]
        names = [names[c] for c in classes]
    idx = np.arange(len(labels))
    for what, fraction in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
        _check_stratifiable(what, fraction, labels, name=name)
    idx_trainval, idx_test = train_test_split(
        idx, test_size=test_fraction, random_state=seed, stratify=labels
    )
    val_share = val_fraction / (1 - test_fraction)
    idx_train, idx_val = train_test_split(
        idx_trainval, test_size=val_share, random_state=seed, stratify=labels[idx_trainval]
    )
    x_train01 = images01[idx_train]
    mean = x_train01.mean(axis=(0, 2, 3))
    std = x_train01.std(axis=(0, 2, 3))
    std = np.where(std > 0, std, 1.0)

    def norm(x: np.ndarray) -> Tensor:
        return torch.from_numpy(
            ((x - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)
        )

    def lab(i: np.ndarray) -> Tensor:
        return torch.from_numpy(labels[i].copy())

    return ImageSplits(
        name=name,
        x_train=norm(images01[idx_train]),
        y_train=lab(idx_train),
        x_val=norm(images01[idx_val]),
        y_val=lab(idx_val),
        x_test=norm(images01[idx_test]),
        y_test=lab(idx_test),
        mean=torch.tensor(mean, dtype=torch.float32),
        std=torch.tensor(std, dtype=torch.float32),
        num_classes=len(names),
        class_names=tuple(names),
    )


def subsample_train(splits: ImageSplits, train_size: int, *, seed: int) -> ImageSplits:
    """``splits`` with a seeded, stratified subset of ``train_size`` training examples (a low-data regime).

    Validation and test sets, the normalisation statistics (``mean`` / ``std`` of the *full* train
    split) and the class names are kept, so runs at different ``train_size`` are evaluated on the
    same data in the same units. ``train_size`` equal to the train split's size returns it unchanged.
    Raises ValueError unless ``num_classes <= train_size <= len(y_train)``.
    """
    from dataclasses import replace

    from .._checks import check_int

    available = len(splits.y_train)
    train_size = check_int(train_size, name="train_size", minimum=splits.num_classes)
    if train_size > available:
        raise ValueError(
            f"train_size={train_size} exceeds the {available} examples of {splits.name}'s train split"
        )
    if train_size == available:
        return splits
    keep, _ = train_test_split(
        np.arange(available), train_size=train_size, random_state=seed, stratify=splits.y_train.numpy()
    )
    keep = np.sort(keep)
    return replace(splits, x_train=splits.x_train[keep], y_train=splits.y_train[keep])


def load_digits(
    *,
    seed: int = 0,
    val_fraction: float = 0.15,
    test_fraction: float = 0.2,
    classes: Sequence[int] | None = None,
) -> ImageSplits:
    """scikit-learn's 1,797 real 8×8 digits as ``(N, 1, 8, 8)``, split and normalised.

    Pixels (0–16 in the source) are scaled to [0, 1] before normalisation. The split is
    stratified and seeded: 65 / 15 / 20 % train / val / test by default.
    """
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images01 = (bunch.images.astype(np.float64) / 16.0)[:, None, :, :]
    return split_and_normalize(
        "digits",
        images01,
        bunch.target,
        seed=seed,
        val_fraction=val_fraction,
        test_fraction=test_fraction,
        classes=classes,
        class_names=[str(i) for i in range(10)],
    )


# --- CIFAR from disk -------------------------------------------------------------------------------

_CIFAR_LAYOUTS = {
    10: {
        "py": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"),
        "bin": ("cifar-10-batches-bin", [f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"]),
    },
    100: {
        "py": ("cifar-100-python", ["train"], ["test"], b"fine_labels"),
        "bin": ("cifar-100-binary", ["train.bin"], ["test.bin"]),
    },
}


def _read_py_batch(path: Path) -> dict:
    try:
        obj = load_array_pickle(path.read_bytes())
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise ValueError(f"{path} is not a CIFAR python batch: {exc}") from None
    if not isinstance(obj, dict) or b"data" not in obj:
        raise ValueError(f"{path} is not a CIFAR python batch (no b'data' entry)")
    return obj


def _read_bin_batch(path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    label_bytes = 1 if num_classes == 10 else 2  # CIFAR-100 rows carry (coarse, fine)
    row = label_bytes + 3072
    if raw.size % row:
        raise ValueError(f"{path} size {raw.size} is not a multiple of the {row}-byte CIFAR record")
    rows = raw.reshape(-1, row)
    return rows[:, label_bytes:], rows[:, label_bytes - 1].astype(np.int64)


def _find_cifar(root: Path, num_classes: int) -> tuple[str, Path]:
    layouts = _CIFAR_LAYOUTS[num_classes]
    for kind in ("bin", "py"):
        folder = layouts[kind][0]
        for base in (root / folder, root):
            files = layouts[kind][1] + layouts[kind][2]
            if all((base / f).is_file() for f in files):
                return kind, base
    expected = "; ".join(
        f"{layouts[k][0]}/{{{', '.join(layouts[k][1] + layouts[k][2])}}}" for k in ("py", "bin")
    )
    partial = ""
    for kind in ("bin", "py"):  # a folder with some of a layout's files: name the missing ones
        for base in (root / layouts[kind][0], root):
            files = layouts[kind][1] + layouts[kind][2]
            present = [f for f in files if (base / f).is_file()]
            if present and not partial:
                missing = [f for f in files if f not in present]
                partial = (
                    f" {base} holds {len(present)} of the {len(files)} files; missing: {', '.join(missing)}."
                )
    raise FileNotFoundError(
        f"CIFAR-{num_classes} not found under {root}.{partial} Expected one of: {expected}. "
        "ensemblize never downloads data; place the official archive's extracted folder there."
    )


def load_cifar(
    root: str | Path,
    *,
    num_classes: int = 10,
    seed: int = 0,
    val_fraction: float = 0.1,
) -> ImageSplits:
    """CIFAR-10 (``num_classes=10``) or CIFAR-100 (100) from ``root``, as ``(N, 3, 32, 32)``.

    The official test set is kept as the test split; ``val_fraction`` of the official train set is
    held out (stratified, seeded) for validation. Raises FileNotFoundError naming the expected files.
    """
    if num_classes not in _CIFAR_LAYOUTS:
        raise ValueError(f"num_classes must be 10 or 100, got {num_classes!r}")
    seed = _split_seed(seed)
    if not 0 < check_fraction(val_fraction, name="val_fraction") < 1:
        raise ValueError(f"val_fraction must be in (0, 1) (the rest trains), got {val_fraction!r}")
    kind, base = _find_cifar(Path(root), num_classes)
    _, train_files, test_files, *rest = _CIFAR_LAYOUTS[num_classes][kind]

    def read(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for f in files:
            if kind == "bin":
                x, y = _read_bin_batch(base / f, num_classes)
            else:
                batch = _read_py_batch(base / f)
                if rest[0] not in batch:
                    raise ValueError(f"{base / f}: no {rest[0]!r} entry (the batch's labels)")
                raw = np.asarray(batch[b"data"])
                if raw.ndim != 2 or raw.shape[1] != 3072 or raw.dtype != np.uint8:
                    raise ValueError(
                        f"{base / f}: data must be uint8 rows of 3072 values (3 x 32 x 32, channels first), "
                        f"got {raw.dtype} {raw.shape}"
                    )
                x, y = raw, _int_labels(batch[rest[0]], where=base / f)
            # a batch whose labels and images are out of step would shift every later label silently
            if len(x) != len(y):
                raise ValueError(f"{base / f}: {len(x)} images but {len(y)} labels")
            if len(y) and (y.min() < 0 or y.max() >= num_classes):
                raise ValueError(
                    f"{base / f}: labels must lie in [0, {num_classes - 1}], got {int(y.min())}..{int(y.max())}"
                )
            xs.append(x)
            ys.append(y)
        x = np.concatenate(xs).reshape(-1, 3, 32, 32).astype(np.float64) / 255.0
        return x, np.concatenate(ys)

    x_tr, y_tr = read(train_files)
    x_te, y_te = read(test_files)
    _check_stratifiable("val_fraction", val_fraction, y_tr, name=f"cifar{num_classes} training")
    # The official test set stays the test split; only the official train set is split into train/val.
    idx_train, idx_val = train_test_split(
        np.arange(len(y_tr)), test_size=val_fraction, random_state=seed, stratify=y_tr
    )
    mean = x_tr[idx_train].mean(axis=(0, 2, 3))
    std = x_tr[idx_train].std(axis=(0, 2, 3))
    std = np.where(std > 0, std, 1.0)

    def norm(x: np.ndarray) -> Tensor:
        return torch.from_numpy(
            ((x - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)
        )

    return ImageSplits(
        name=f"cifar{num_classes}",
        x_train=norm(x_tr[idx_train]),
        y_train=torch.from_numpy(y_tr[idx_train].copy()),
        x_val=norm(x_tr[idx_val]),
        y_val=torch.from_numpy(y_tr[idx_val].copy()),
        x_test=norm(x_te),
        y_test=torch.from_numpy(y_te.copy()),
        mean=torch.tensor(mean, dtype=torch.float32),
        std=torch.tensor(std, dtype=torch.float32),
        num_classes=num_classes,
        class_names=tuple(str(i) for i in range(num_classes)),
    )


def load_images(name: str, *, seed: int = 0, root: str | Path | None = None) -> ImageSplits:
    """Load an image dataset by name: ``"digits"``, ``"cifar10"`` or ``"cifar100"`` (the latter need ``root``)."""
    if name == "digits":
        return load_digits(seed=seed)
    if name in ("cifar10", "cifar100"):
        if root is None:
            raise ValueError(
                f"dataset {name!r} is read from disk: pass root=<folder with the extracted archive>"
            )
        return load_cifar(root, num_classes=int(name[5:]), seed=seed)
    raise ValueError(f"unknown image dataset {name!r}; choose 'digits', 'cifar10' or 'cifar100'")
