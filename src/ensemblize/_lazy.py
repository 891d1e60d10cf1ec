"""Lazy public namespaces: a package lists its names, they are imported on first access."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_namespace(
    package: str, attributes: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """Return ``(__getattr__, __dir__, __all__)`` for ``package``.

    ``attributes`` maps a public name to the module defining it; ``submodules`` are names of
    ``package``'s own submodules, importable as attributes.
    """
    subs = tuple(submodules)
    names = sorted([*attributes, *subs])

    def __getattr__(name: str) -> Any:
        if name in subs:
            return importlib.import_module(f"{package}.{name}")
        if name in attributes:
            return getattr(importlib.import_module(attributes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
