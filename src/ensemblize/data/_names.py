"""Validation of comma-separated name lists (corruption kinds, shift kinds, OOD sets)."""

from __future__ import annotations

from collections.abc import Iterable


def parse_names(spec: str | Iterable[str], valid: tuple[str, ...], *, what: str) -> tuple[str, ...]:
    """``"a,b"`` (or an iterable of names, or ``"all"``) -> tuple of names from ``valid``, in the given order.

    Raises ValueError for an empty list, an unknown name or a repeated one, naming ``what`` and the
    valid names.
    """
    names = [s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str) else list(spec)
    if names == ["all"]:
        return valid
    if not names:
        raise ValueError(f"no {what} named; valid names: {', '.join(valid)}")
    bad = [s for s in names if s not in valid]
    if bad:
        raise ValueError(f"unknown {what}(s) {bad}; valid names: {', '.join(valid)} (or 'all')")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names repeat: {names}")
    return tuple(names)
