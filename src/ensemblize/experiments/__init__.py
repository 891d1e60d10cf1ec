"""The papers' experiments, one module each, discovered by the command line.

A module here that defines ``COMMANDS: dict[str, Callable]`` contributes each entry as
``ensemblize experiment NAME``. The callable is a Typer command function (type-annotated keyword
arguments with defaults); by convention every one accepts ``--out DIR`` and ``--seed N`` (plus
``--seeds`` where several seeds are run), writes ``results.json`` and figures into ``out`` and
prints its table. Keep the heavy imports inside the function so ``ensemblize --help`` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable


def discover() -> dict[str, Callable]:
    """Map experiment name -> command function for every module in this package."""
    found: dict[str, Callable] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, fn in getattr(module, "COMMANDS", {}).items():
            if name in found:
                raise RuntimeError(f"experiment {name!r} is defined twice (second in {module.__name__})")
            found[name] = fn
    return found
