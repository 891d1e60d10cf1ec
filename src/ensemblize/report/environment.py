"""The software and hardware a run used: versions, threads, device — recorded in run folders and reports."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["collect_environment", "record_environment", "PACKAGES"]

#: Packages whose installed versions are recorded (absent ones are left out).
PACKAGES = (
    "ensemblize",
    "torch",
    "numpy",
    "scikit-learn",
    "matplotlib",
    "pandas",
    "xgboost",
    "catboost",
    "transformers",
)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def collect_environment() -> dict[str, Any]:
    """A JSON-ready description of this process's environment.

    Keys: ``python``, ``platform``, ``packages`` (name -> version for the installed
    :data:`PACKAGES`), ``torch_threads`` (intra-op), ``torch_interop_threads``, ``cpu_count``,
    ``omp_num_threads`` (the variable, or ``None``), ``device`` (``"cuda: <name> ×N"`` or ``"cpu"``),
    ``cuda`` (torch's CUDA build version or ``None``).
    """
    import torch

    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        device = f"cuda: {torch.cuda.get_device_name(0)}" + (f" ×{n}" if n > 1 else "")
    else:
        device = "cpu"
    packages = {name: v for name in PACKAGES if (v := _version(name)) is not None}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": packages,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "device": device,
        "cuda": torch.version.cuda,
    }


def record_environment(folder: str | os.PathLike, *, keep_existing: bool = True) -> Path:
    """Write ``folder/environment.json`` (:func:`collect_environment`), atomically; return its path.

    ``keep_existing``: leave an existing file as it is (a resumed run keeps the environment it started
    with); ``False`` replaces it (a command that rewrites its whole result, e.g. ``tune --overwrite``).
    The HTML report shows this file instead of the report writer's own environment.
    """
    from ..checkpoint import atomic_write_json

    target = Path(folder) / "environment.json"
    if keep_existing and target.is_file():
        return target
    return atomic_write_json(target, collect_environment())
