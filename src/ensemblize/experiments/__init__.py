"""The papers' experiments as plain functions, one module per family, and the jobs they run.

A module here that defines ``EXPERIMENTS: dict[str, Callable]`` contributes each entry as
``ensemblize experiment NAME``. The callable is a plain Python function with keyword arguments and
plain defaults (lists for grids); it expands into independent jobs and runs them through
:mod:`ensemblize.experiments.jobs` (``execution=Execution(workers=..., scheduler=...)``), writes
``results.json``, tables and figures into ``out``, prints its tables and returns the records.
:mod:`ensemblize.cli` is the only module that knows Typer: it builds each command from the function.

* :mod:`.jobs` — job specs, executors (in process, local processes, Dask), resume, progress;
* :mod:`.options` — argument checks raising :class:`~ensemblize.experiments.jobs.OptionError`;
* :mod:`.image` — σN-Ens image experiments (compare, τ / λ sweeps, ensemble size, fine-tuning),
  with their tables and figures in :mod:`.image_report`;
* :mod:`.selective` — SYNC vs SelectiveNet vs Deep Gamblers vs softmax response;
* :mod:`.tabular` — LoMETab tabular experiments.

Keep heavy imports inside the functions so ``ensemblize --help`` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

__all__ = ["discover"]

_INFRASTRUCTURE = ("jobs", "options", "image_report")


def discover() -> dict[str, Callable]:
    """Map experiment name -> plain experiment function for every module in this package."""
    found: dict[str, Callable] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in _INFRASTRUCTURE:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, fn in getattr(module, "EXPERIMENTS", {}).items():
            if name in found:
                raise RuntimeError(f"experiment {name!r} is defined twice (second in {module.__name__})")
            found[name] = fn
    return found
