"""Shared by the adversarial property suites: how one call's outcome is classified.

A ValueError/TypeError is a *clean* error only when the innermost frame is a ``raise`` statement in
ensemblize's own source; a result is acceptable only when every floating value in it is finite.
"""

from __future__ import annotations

import json
import linecache
import math
import os
import traceback
from pathlib import Path

import numpy as np
import torch

import ensemblize as ez

SRC = str(Path(ez.__file__).parent)


def raised_by_ensemblize(exc: BaseException) -> bool:
    """``True`` when the innermost frame of ``exc`` is a ``raise`` statement in ensemblize's source."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    if not frame.filename.startswith(SRC):
        return False
    return linecache.getline(frame.filename, frame.lineno).strip().startswith("raise")


def ensemblize_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback inside ensemblize's source, outermost first."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(SRC)]


def all_finite(out: object) -> bool:
    """``True`` unless ``out`` (a tensor, array, float or a tuple/list of them) holds NaN or ±inf."""
    if isinstance(out, torch.Tensor):
        return not out.is_floating_point() or bool(torch.isfinite(out).all())
    if isinstance(out, (float, np.floating)):
        return math.isfinite(out)
    if isinstance(out, np.ndarray):
        return not np.issubdtype(out.dtype, np.floating) or bool(np.isfinite(out).all())
    if isinstance(out, (tuple, list)):
        return all(all_finite(o) for o in out)
    return True


def call_outcome(call, counts) -> tuple[str, object]:
    """Run ``call()`` and say how it ended, with the result or the exception.

    ``("result", out)``; ``("clean error", exc)`` — a ValueError/TypeError raised by ensemblize's own
    ``raise``, counted in ``counts`` (a Counter) here; ``("finding", text)`` — a ValueError/TypeError from
    deeper down (torch, NumPy, …) or any other exception, described with where it came from.
    """
    try:
        return "result", call()
    except Exception as exc:  # noqa: BLE001 - every exception is classified
        if isinstance(exc, (ValueError, TypeError)) and raised_by_ensemblize(exc):
            counts["clean error"] += 1
            return "clean error", exc
        frames = ensemblize_frames(exc)
        where = f"{frames[-1].filename[len(SRC) + 1 :]}:{frames[-1].lineno}" if frames else "?"
        internal = "internal " if isinstance(exc, (ValueError, TypeError)) else ""
        return "finding", f"{internal}{type(exc).__name__} at {where}: {str(exc)[:160]}"


def write_report(module: str, payload: dict) -> Path | None:
    """Write ``payload`` as JSON where ``ENSEMBLIZE_PROPERTY_REPORT`` says, one file per module and worker.

    ``ENSEMBLIZE_PROPERTY_REPORT=out/report.json`` gives ``out/report.<module>.json`` — and, under
    pytest-xdist, ``out/report.<module>.<worker>.json``: each worker process counts only the cases it
    ran, so each writes its own file (merge them by summing the counts). Returns the path, or ``None``
    when the variable is unset.
    """
    target = os.environ.get("ENSEMBLIZE_PROPERTY_REPORT")
    if not target:
        return None
    base = Path(target)
    parts = [base.stem, module, *filter(None, [os.environ.get("PYTEST_XDIST_WORKER")])]
    path = base.with_name(".".join(parts) + (base.suffix or ".json"))
    path.write_text(json.dumps(payload, indent=1))
    return path
