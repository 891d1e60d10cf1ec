"""The results.json contract: a list of records, one per (method, dataset, seed[, setting]).

A record has ``method``, ``dataset``, ``seed``, ``members``, ``params``, ``train_seconds`` and a
flat ``metrics`` mapping of floats; extra keys (``setting``, ...) are allowed. Tables aggregate
records over seeds as mean ± std.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import atomic_write_json
from ..evaluation.names import CLEAN_METRICS, HEADLINE_METRICS  # re-exported: the lists live in evaluation

__all__ = [
    "Record",
    "write_results",
    "load_results",
    "summarize",
    "format_table",
    "console_tables",
    "CLEAN_METRICS",
    "HEADLINE_METRICS",
]


REQUIRED = ("method", "dataset", "seed", "members", "params", "train_seconds", "metrics")


@dataclass
class Record:
    """One trained-and-evaluated model. ``metrics`` maps names to floats (NaN allowed)."""

    method: str
    dataset: str
    seed: int
    members: int
    params: int
    train_seconds: float
    metrics: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: the fields, metrics as floats (NaN kept) and ``extra``'s keys at the top level."""
        d = asdict(self)
        extra = d.pop("extra")
        d["metrics"] = {k: _to_float(v) for k, v in self.metrics.items()}
        return {**d, **extra}


def _to_float(v: Any) -> float:
    f = float(v)
    return f


def _as_dict(r: Record | dict) -> dict[str, Any]:
    d = r.to_dict() if isinstance(r, Record) else dict(r)
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise ValueError(f"result record is missing {missing}: {d}")
    return d


def write_results(out: str | Path, records: Iterable[Record | dict], *, name: str = "results.json") -> Path:
    """Atomically write the records to ``out/name`` and return the path."""
    rows = [_as_dict(r) for r in records]
    return atomic_write_json(Path(out) / name, rows)


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Read a results.json (a folder is taken to contain one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results.json at {path}")
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(rows, list):
        raise ValueError(f"{path} does not hold a list of records")
    return [_as_dict(r) for r in rows]


def _hashable(value: Any) -> Any:
    """A grouping key for ``value``: itself when hashable, else its canonical JSON (e.g. a dict setting)."""
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
    return value


def summarize(
    records: Iterable[Record | dict], *, by: Sequence[str] = ("dataset", "method")
) -> list[dict[str, Any]]:
    """Group records by ``by`` keys and give, per metric, ``(mean, std, n)`` over the group's finite
    values (std with ddof=0 when n = 1, ddof=1 otherwise), and in ``"failed"`` the number of records
    whose value is present but NaN or infinite (a diverged seed), so that no table can show the mean
    of the surviving seeds as if it were all of them. Group order follows first appearance."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        d = _as_dict(r)
        groups[tuple(_hashable(d.get(k)) for k in by)].append(d)
    out = []
    for rows in groups.values():
        key = tuple(rows[0].get(k) for k in by)
        metric_names: list[str] = []
        for row in rows:
            metric_names += [m for m in row["metrics"] if m not in metric_names]
        stats, failed = {}, {}
        for m in [*metric_names, "params", "train_seconds"]:
            present = [row["metrics"][m] if m in row["metrics"] else row.get(m) for row in rows]
            vals = np.array([math.nan if v is None else v for v in present], dtype=float)
            bad = sum(1 for v in present if v is not None and not math.isfinite(float(v)))
            if bad:
                failed[m] = bad
            finite = vals[np.isfinite(vals)]
            if finite.size == 0:
                stats[m] = (math.nan, math.nan, 0)
            else:
                std = float(finite.std(ddof=1)) if finite.size > 1 else 0.0
                stats[m] = (float(finite.mean()), std, int(finite.size))
        out.append({**dict(zip(by, key, strict=True)), "n": len(rows), "stats": stats, "failed": failed})
    return out


#: Record fields (not metrics) every table ends with, and their column headers (one unit each).
TRAILING = {"params": "params", "train_seconds": "train_s"}
#: Record fields and metrics shown as integers.
INTEGER_FIELDS = frozenset({"params", "members", "epochs", "n_trees"})


def _fmt(mean: float, std: float, n: int, digits: int, *, integer: bool = False) -> str:
    """``mean ± std`` (just ``mean`` for one value): integers as integers (thousands separated),
    a value ≥ 10⁴ without decimals, others with ``digits`` decimals."""
    if n == 0 or not math.isfinite(mean):
        return "—"
    if integer or abs(mean) >= 1e4:
        body = f"{mean:,.0f}"
        return body if n <= 1 or round(std) == 0 else f"{body} ± {std:,.0f}"
    body = f"{mean:.{digits}f}"
    return body if n <= 1 else f"{body} ± {std:.{digits}f}"


def failed_note(summary_row: dict[str, Any], metric: str) -> str:
    """``" (2 of 3 failed)"`` when some records of a :func:`summarize` group have a non-finite
    ``metric``, else ``""``: the shown mean is then over the other records only."""
    k = summary_row.get("failed", {}).get(metric, 0)
    return f" ({k} of {summary_row['n']} failed)" if k else ""


def _rows(
    summary: Sequence[dict[str, Any]], by: Sequence[str], columns: Sequence[str], digits: int
) -> tuple[list[str], list[list[str]]]:
    header = [*by, "n", *(TRAILING.get(c, c) for c in columns)]
    rows = []
    for s in summary:
        row = [str(s[k]) for k in by] + [str(s["n"])]
        for m in columns:
            mean, std, n = s["stats"].get(m, (math.nan, math.nan, 0))
            cell = _fmt(mean, std, n, 1 if m == "train_seconds" else digits, integer=m in INTEGER_FIELDS)
            row.append(cell + failed_note(s, m))
        rows.append(row)
    return header, rows


def _render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(header)]
    line = "  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join([line, sep, *body])


def format_table(
    records: Iterable[Record | dict],
    *,
    metrics: Sequence[str] | None = None,
    by: Sequence[str] = ("dataset", "method"),
    digits: int = 4,
) -> str:
    """A plain-text table: one row per group, mean ± std over seeds for each metric, then ``params``
    (an integer) and ``train_s`` (seconds, one decimal). One table however wide; see
    :func:`console_tables` for tables that fit a terminal."""
    summary = summarize(records, by=by)
    if not summary:
        return "(no results)"
    if metrics is None:
        metrics = [m for m in summary[0]["stats"] if m not in TRAILING]
    return _render(*_rows(summary, by, [*metrics, *TRAILING], digits))


def console_tables(
    records: Iterable[Record | dict],
    *,
    metrics: Sequence[str] | None = None,
    by: Sequence[str] = ("dataset", "method"),
    digits: int = 4,
    width: int = 100,
    wide: bool = False,
) -> str:
    """:func:`format_table` split into tables at most ``width`` characters wide (``wide``: one table).

    The first (headline) table holds the first metrics, ``params`` and ``train_s``; the following
    tables hold the remaining metrics in order. Every table repeats the ``by`` columns and ``n``. A
    single column wider than ``width`` still gets a table of its own.
    """
    summary = summarize(records, by=by)
    if not summary:
        return "(no results)"
    if metrics is None:
        metrics = [m for m in summary[0]["stats"] if m not in TRAILING]
    if wide:
        return _render(*_rows(summary, by, [*metrics, *TRAILING], digits))

    def fits(columns: Sequence[str]) -> bool:
        text = _render(*_rows(summary, by, columns, digits))
        return max(len(line) for line in text.splitlines()) <= width

    groups: list[list[str]] = [list(TRAILING)]
    for m in metrics:
        first = len(groups) == 1
        candidate = [*groups[-1][: -len(TRAILING)], m, *TRAILING] if first else [*groups[-1], m]
        if fits(candidate) or groups[-1] in ([], list(TRAILING)):
            groups[-1] = candidate
        else:
            groups.append([m])
    return "\n\n".join(_render(*_rows(summary, by, cols, digits)) for cols in groups)
