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

__all__ = ["OptionError", "split_list", "floats", "ints", "choices", "choice"]


def split_list(text: str, *, option: str, cast: Callable[[str], Any] = str) -> list[Any]:
    """``"0, 1,2"`` -> ``[cast("0"), cast("1"), cast("2")]`` (empty items dropped)."""
    try:
        return [cast(t.strip()) for t in str(text).split(",") if t.strip()]
    except ValueError as exc:
        kind = {int: "integers", float: "numbers"}.get(cast, "values")
        raise OptionError(option, f"must be comma-separated {kind}, got {text!r}") from exc


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
    """A non-empty list of finite numbers in ``(low, high]`` (``[low, high]`` when not ``low_open``)."""
    out = []
    for v in _seq(values, option):
        ok = isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > low if low_open else v >= low) and v <= high
        if not ok:
            lo = "(" if low_open else "["
            hi = "∞)" if math.isinf(high) else f"{high:g}]"
            raise OptionError(option, f"values must lie in {lo}{low:g}, {hi}, got {v!r}")
        out.append(float(v))
    return out


def ints(values: Iterable[int], *, option: str, minimum: int = 0) -> list[int]:
    """A non-empty list of integers ≥ ``minimum``, without repeats."""
    out = []
    for v in _seq(values, option):
        if isinstance(v, bool) or not isinstance(v, Integral) or v < minimum:
            raise OptionError(option, f"values must be integers ≥ {minimum}, got {v!r}")
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
