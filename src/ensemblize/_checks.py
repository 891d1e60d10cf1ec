"""Input validation shared by the library: each check names the offending value."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch


def to_numpy(x: object, *, name: str) -> np.ndarray:
    """Convert a tensor / array-like to a NumPy array (float64 for floats) without mutating the input."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu")
        if x.is_floating_point():
            x = x.double()
        return x.numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from exc
    if arr.dtype == object:
        raise TypeError(f"{name} must be numeric, got an object array")
    return arr


def check_finite(x: np.ndarray | torch.Tensor, *, name: str) -> None:
    """Raise ValueError if ``x`` holds NaN or ±inf."""
    bad = ~torch.isfinite(x) if isinstance(x, torch.Tensor) else ~np.isfinite(x)
    if bool(bad.any()):
        n = int(bad.sum())
        raise ValueError(f"{name} contains {n} non-finite value(s) (NaN or inf)")


def looks_like_probabilities(z: np.ndarray | torch.Tensor) -> bool:
    """True when every entry of ``z`` (classes on the last axis, at least two) is in [0, 1] and every
    row sums to 1 (within 1e-4; 1e-2 in half precision, where a softmax's rows miss 1 by up to 2e-3):
    a softmax's output, practically never a network's logits."""
    t = torch.as_tensor(z).detach() if not isinstance(z, torch.Tensor) else z.detach()
    if t.dim() < 1 or t.shape[-1] < 2 or t.numel() == 0 or not t.is_floating_point():
        return False
    tol = 1e-2 if t.element_size() < 4 else 1e-4
    t = t.double()
    return bool(((t >= 0) & (t <= 1)).all()) and bool(((t.sum(dim=-1) - 1).abs() <= tol).all())


def check_not_probabilities(z: np.ndarray | torch.Tensor, *, name: str = "logits") -> None:
    """Raise ValueError when logits ``z`` (classes on the last axis, at least two) look like probabilities.

    Every entry in [0, 1] and every row summing to 1 (within 1e-4) is what ``softmax`` returns and
    practically never what a network's logits are; taken as logits, such rows give a silently wrong
    answer (a softmax of probabilities), so they are refused.
    """
    if looks_like_probabilities(z):
        raise ValueError(
            f"{name} look like probabilities (every entry in [0, 1], every row summing to 1), but logits are "
            "expected here: pass the model's raw outputs (or log-probabilities, e.g. log(p)), not softmax(z)"
        )


def check_labels(labels: np.ndarray | torch.Tensor, num_classes: int, *, name: str = "labels") -> None:
    """Raise ValueError unless every label is an integer in ``[0, num_classes)``."""
    if isinstance(labels, torch.Tensor):
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must be integer class indices, got dtype {labels.dtype}")
        lo, hi = (int(labels.min()), int(labels.max())) if labels.numel() else (0, 0)
    else:
        if not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"{name} must be integer class indices, got dtype {labels.dtype}")
        lo, hi = (int(labels.min()), int(labels.max())) if labels.size else (0, 0)
    if lo < 0 or hi >= num_classes:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} has value {bad} outside [0, {num_classes})")


def check_int(value: object, *, name: str, minimum: int = 1) -> int:
    """Return ``value`` as int if it is an integer (NumPy integers included, bool excluded) ≥ ``minimum``.

    Raises TypeError for a non-integer and ValueError below ``minimum``, naming ``name`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_positive(value: object, *, name: str, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it is a finite real > 0 (or ≥ 0), else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return v


def check_fraction(value: object, *, name: str, low_open: bool = True) -> float:
    """Return ``value`` if it lies in (0, 1] (or [0, 1] with ``low_open=False``), else raise."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    ok = (0 < v <= 1) if low_open else (0 <= v <= 1)
    if not ok:
        raise ValueError(f"{name} must lie in {'(0, 1]' if low_open else '[0, 1]'}, got {value!r}")
    return v


def check_open_unit(value: object, *, name: str) -> float:
    """Return ``value`` as float if it is a real number strictly inside (0, 1), else raise naming it.

    TypeError for a non-real (bool included), ValueError for NaN or a value outside (0, 1).
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number in (0, 1), got {value!r} ({type(value).__name__})")
    v = float(value)
    if not 0 < v < 1:  # False for NaN too
        raise ValueError(f"{name} must lie strictly inside (0, 1), got {value!r}")
    return v


def check_size(value: object, *, name: str, maximum: int, minimum: int = 1) -> int:
    """Return ``value`` as int if it is an integer in ``[minimum, maximum]`` (a size read from a file or
    passed by a user, bounded *before* anything is allocated), else raise naming it and the bounds.
    """
    v = check_int(value, name=name, minimum=minimum)
    if v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return v


def check_finite_real(value: object, *, name: str, bound: float | None = None) -> float:
    """Return ``value`` as float if it is a finite real (and ``|value| <= bound`` when given), else raise."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if bound is not None and abs(v) > bound:
        raise ValueError(f"{name} must lie in [-{bound:g}, {bound:g}], got {value!r}")
    return v


def check_int_pair(value: object, *, name: str, minimum: int = 1) -> tuple[int, int]:
    """An int or a pair of ints (``nn.Conv2d``'s ``kernel_size``/``stride``/``padding`` style), each
    ``>= minimum`` (NumPy integers accepted), returned as a tuple of two Python ints."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return (check_int(items[0], name=name, minimum=minimum), check_int(items[1], name=name, minimum=minimum))


def check_bool(value: object, *, name: str) -> bool:
    """Return ``value`` if it is a bool (not an int, not a NumPy bool), else raise TypeError naming it."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return value


def check_choice(value: object, options: tuple[str, ...], *, name: str) -> str:
    """Return ``value`` if it is one of ``options``, else raise ValueError naming it and the options."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def float64_copy(x: object, *, name: str) -> np.ndarray:
    """A float64 NumPy copy of a floating-point array or tensor (moved to the CPU, detached).

    Raises TypeError, naming ``name``, for an integer / bool dtype or for anything that is not a
    NumPy array or torch tensor.
    """
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
        return x.detach().to("cpu", torch.float64).numpy()
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        return x.astype(np.float64)
    raise TypeError(f"{name} must be a NumPy array or torch tensor, got {type(x).__name__}")


def check_float_input(x: torch.Tensor, *, like: torch.Tensor, name: str) -> None:
    """Raise TypeError unless the layer input ``x`` is floating point with the dtype of ``like`` (a weight).

    A metadata check only (no host sync), so layers can run it on every call; ``name`` is the layer.
    Under autocast the dtypes may differ (an autocast layer before it hands on its lower precision;
    torch's own layers accept that there).
    """
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point input, got dtype {x.dtype}")
    if x.dtype != like.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"{name}: input dtype {x.dtype} does not match the layer's {like.dtype}; "
            f"convert one of them (e.g. x.to({like.dtype}) or layer.to({x.dtype}))"
        )


def check_rate(value: object, *, name: str) -> float:
    """Return ``value`` as float if it is a real number in ``[0, 1)`` (a dropout rate), else raise naming it.

    TypeError for a non-real (bool included), ValueError for NaN or a value outside ``[0, 1)``.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number in [0, 1), got {value!r} ({type(value).__name__})")
    v = float(value)
    if not 0 <= v < 1:  # False for NaN too
        raise ValueError(f"{name} must lie in [0, 1), got {value!r}")
    return v


def check_module(value: object, *, name: str) -> torch.nn.Module:
    """Return ``value`` if it is a ``torch.nn.Module``, else raise TypeError naming ``name`` and its type."""
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")
    return value


def check_instance(
    value: object, types: type | tuple[type, ...], *, name: str, what: str | None = None
) -> Any:
    """Return ``value`` if it is an instance of ``types``, else raise TypeError naming ``name`` and its type.

    ``what`` words the expectation in the message (``"a bool or a folder path"``); by default it is
    the type name(s) with an article, e.g. ``"an ImageSetup"`` or ``"a str or PathLike"``.
    """
    if not isinstance(value, types):
        if what is None:
            names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            what = f"{'an' if names[0] in 'AEIOUaeiou' else 'a'} {names}"
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def device_unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot be used on this machine (a sentence), or None when it can."""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "this torch build or machine has no CUDA device"
        if device.index is not None and device.index >= torch.cuda.device_count():
            return f"this machine has {torch.cuda.device_count()} CUDA device(s)"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return "this machine has no MPS device"
    return None


def check_device(value: object, *, name: str = "device") -> torch.device:
    """``value`` as a torch device this machine has; a ValueError naming ``name`` and the value otherwise."""
    try:
        device = torch.device(value)  # type: ignore[arg-type]
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{name}={value!r} is not a valid torch device") from exc
    why = device_unavailable(device)
    if why is not None:
        raise ValueError(f"{name}={value!r} is not available: {why}; use device='cpu'")
    return device


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points at the first caller outside ensemblize.

    Called by the function that warns, it counts that function and every ensemblize frame above it,
    so a warning names the user's line (and Python's filters, e.g. ``"ignore"`` or once per
    location, apply to it) however deep inside the library it was raised.
    """
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
        level += 1
    return level
