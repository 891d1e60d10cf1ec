"""Checks of experiment arguments, run before any work; each failure is an :class:`OptionError`
naming the command-line option and the allowed values.

Experiments take plain Python values (lists of seeds, tuples of floats); the command line splits
its comma-separated text with :func:`split_list` and passes lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from numbers import Integral, Real
from typing import Any

from .jobs import OptionError

__all__ = ["OptionError", "split_list", "floats", "ints", "choices", "choice", "device"]


def split_list(text: str, *, option: str, cast: Callable[[str], Any] = str) -> list[Any]:
    """``"0, 1,2"`` -> ``[cast("0"), cast("1"), cast("2")]``; an empty item (``"0,,1"``, ``"0,"``) is an
    OptionError, so a typo is never read as a shorter list."""
    kind = {int: "integers", float: "numbers"}.get(cast, "values")
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items) and any(items):
        raise OptionError(option, f"must be comma-separated {kind} without empty items, got {text!r}")
    try:
        return [cast(t) for t in items if t]
    except ValueError as exc:
        raise OptionError(option, f"must be comma-separated {kind}, got {text!r}") from exc


def device(value: str | None, *, option: str = "--device") -> str | None:
    """``value`` if it names a torch device this machine has (``None``: the default device)."""
    if value is None:
        return None
    import torch

    from ensemblize._checks import device_unavailable

    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise OptionError(option, f"is not a torch device: {value!r}") from exc
    why = device_unavailable(dev)
    if why is not None:
        raise OptionError(option, f"{value!r} is not available: {why}")
    return value


def _seq(values: Iterable[Any] | Any, option: str) -> list[Any]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise OptionError(option, f"must be a list, got {values!r}")
    out = list(values)
    if not out:
        raise OptionError(option, "is empty")
    return out


def floats(
    values: Iterable[float], *, option: str, low: float = 0.0, high: float = math.inf, low_open: bool = True
) -> list[float]:
    """A non-empty list of finite numbers in ``(low, high]`` (``[low, high]`` when not ``low_open``), without repeats."""
    out = []
    for v in _seq(values, option):
        ok = isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > low if low_open else v >= low) and v <= high
        if not ok:
            lo = "(" if low_open else "["
            hi = "∞)" if math.isinf(high) else f"{high:g}]"
            raise OptionError(option, f"each value must lie in {lo}{low:g}, {hi}, got {v!r}")
        out.append(float(v))
    if len(set(out)) != len(out):  # two identical jobs: refused here, before a run folder is written
        raise OptionError(option, f"has repeated values: {out}")
    return out


def ints(values: Iterable[int], *, option: str, minimum: int = 0, maximum: int | None = None) -> list[int]:
    """A non-empty list of integers in ``[minimum, maximum]``, without repeats."""
    out = []
    for v in _seq(values, option):
        if isinstance(v, bool) or not isinstance(v, Integral) or v < minimum:
            raise OptionError(option, f"each value must be an integer ≥ {minimum}, got {v!r}")
        if maximum is not None and v > maximum:
            raise OptionError(option, f"each value must be at most {maximum}, got {v!r}")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise OptionError(option, f"has repeated values: {out}")
    return out


def choice(value: str, *, option: str, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise OptionError(option, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def choices(values: Iterable[str], *, option: str, allowed: Sequence[str]) -> list[str]:
    """A non-empty list of names from ``allowed``, without repeats."""
    out = _seq(values, option)
    bad = [v for v in out if v not in allowed]
    if bad:
        raise OptionError(option, f"unknown {bad}; choose from {', '.join(allowed)}")
    if len(set(out)) != len(out):
        raise OptionError(option, f"has repeated values: {out}")
    return [str(v) for v in out]
