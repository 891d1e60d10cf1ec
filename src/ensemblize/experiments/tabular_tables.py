"""Tables of the tabular benchmark from its records: per-table scores, mean ranks per score, cost.

Records are the dicts of :func:`ensemblize.experiments.tabular_methods.tabular_job` (or
:class:`~ensemblize.report.results.Record` objects). Scores (:data:`SCORES`): ``accuracy`` (higher
is better), ``log_loss`` and ``rmse`` (lower is better). ``metric=None`` means each table's primary
score: RMSE for regression, accuracy for classification.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ensemblize._checks import check_choice

__all__ = [
    "SCORES",
    "primary_metric",
    "mean_scores",
    "average_ranks",
    "score_table_markdown",
    "rank_table_markdown",
    "cost_table_markdown",
]

SCORES = {"accuracy": True, "log_loss": False, "rmse": False}
"""Score name -> higher is better."""

_LABEL = {"accuracy": "acc ↑", "log_loss": "log-loss ↓", "rmse": "RMSE ↓"}


def primary_metric(task: str) -> tuple[str, bool]:
    """``(metric name, higher is better)``: ``("rmse", False)`` for regression, else ``("accuracy", True)``."""
    return ("rmse", False) if task == "regression" else ("accuracy", True)


def _rows(records: Iterable) -> list[dict[str, Any]]:
    return [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]


def _metric_for(rows: list[dict[str, Any]], metric: str | None) -> dict[str, str]:
    """dataset -> the score ranked there: ``metric``, or the primary one (RMSE where records have it)."""
    regression = {r["dataset"] for r in rows if "rmse" in r["metrics"]}
    return {r["dataset"]: metric or ("rmse" if r["dataset"] in regression else "accuracy") for r in rows}


def mean_scores(
    records: Iterable, *, metric: str | None = None
) -> dict[str, dict[str, tuple[float, float, int]]]:
    """``{dataset: {method: (mean, std, n)}}`` of ``metric`` over seeds.

    A method with a non-finite score on any seed (a diverged fit) gets ``(nan, nan, n_finite)``
    there: it has no score on that table (ranked last by :func:`average_ranks`; shown as failed).
    ``metric=None``: each dataset's primary score (RMSE if its records have ``rmse``, else accuracy).
    Datasets without ``metric`` are left out. Order follows first appearance.
    """
    from ensemblize.report.results import summarize

    if metric is not None:
        check_choice(metric, tuple(SCORES), name="metric")
    rows = _rows(records)
    which = _metric_for(rows, metric)
    table: dict[str, dict[str, tuple[float, float, int]]] = {}
    for s in summarize(rows, by=("dataset", "method")):
        name = which[s["dataset"]]
        if name in s["stats"]:
            mean, std, n = s["stats"][name]
            if s["failed"].get(name):
                mean, std = math.nan, math.nan
            table.setdefault(s["dataset"], {})[s["method"]] = (mean, std, n)
    return table


def average_ranks(records: Iterable, *, metric: str | None = None) -> dict[str, Any]:
    """Rank the methods on every dataset by their mean test ``metric`` and average the ranks.

    On each dataset the methods present are ranked 1..n by mean score over seeds (lower RMSE /
    log-loss, higher accuracy is better); tied means (equal to 10 decimals, so that floating-point
    noise in the mean is not a win) share the average of their ranks. A method without a finite
    score there (a seed failed) ranks last (several such share the last ranks). Returns
    ``{"metric": metric, "per_dataset": {dataset: {method: rank}}, "average": {method: mean rank},
    "n_datasets": {method: count}}`` with ``average`` sorted best first.
    """
    from scipy.stats import rankdata

    rows = _rows(records)
    which = _metric_for(rows, metric)
    table = mean_scores(rows, metric=metric)
    per_dataset: dict[str, dict[str, float]] = {}
    for ds, by_method in table.items():
        methods = list(by_method)
        if not any(math.isfinite(by_method[m][0]) for m in methods):
            continue
        higher = SCORES[which[ds]]
        means = np.round(np.array([by_method[m][0] for m in methods]), 10)  # float noise is a tie
        keys = np.where(np.isfinite(means), -means if higher else means, np.inf)  # failed: last
        ranks = rankdata(keys, method="average")
        per_dataset[ds] = dict(zip(methods, (float(v) for v in ranks), strict=True))
    collected: dict[str, list[float]] = {}
    for ranks in per_dataset.values():
        for m, r in ranks.items():
            collected.setdefault(m, []).append(r)
    average = dict(sorted(((m, float(np.mean(v))) for m, v in collected.items()), key=lambda kv: kv[1]))
    return {
        "metric": metric,
        "per_dataset": per_dataset,
        "average": average,
        "n_datasets": {m: len(v) for m, v in collected.items()},
    }


def _methods_in_order(table: dict[str, dict[str, Any]]) -> list[str]:
    methods: list[str] = []
    for by_method in table.values():
        methods += [m for m in by_method if m not in methods]
    return methods


def score_table_markdown(records: Iterable, *, metric: str | None = None, digits: int = 4) -> str:
    """Markdown: one row per method, one column per dataset, mean ± std of the test ``metric``."""
    rows = _rows(records)
    which = _metric_for(rows, metric)
    table = mean_scores(rows, metric=metric)
    datasets = list(table)
    head = ["method", *(f"{ds} ({_LABEL[which[ds]]})" for ds in datasets)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in _methods_in_order(table):
        cells = []
        for ds in datasets:
            mean, std, n = table[ds].get(m, (math.nan, math.nan, 0))
            if m in table[ds] and not math.isfinite(mean):
                cells.append(f"failed ({n} seed(s) finite)")
            else:
                cells.append("—" if n == 0 else f"{mean:.{digits}f} ± {std:.{digits}f}")
        lines.append("| " + " | ".join([m, *cells]) + " |")
    return "\n".join(lines)


def rank_table_markdown(ranks: dict[str, Any]) -> str:
    """Markdown of :func:`average_ranks`: per-dataset ranks and the average, best first."""
    datasets = list(ranks["per_dataset"])
    head = ["method", "avg rank", "datasets", *datasets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, avg in ranks["average"].items():
        cells = [
            f"{ranks['per_dataset'][ds][m]:g}" if m in ranks["per_dataset"][ds] else "—" for ds in datasets
        ]
        lines.append("| " + " | ".join([m, f"{avg:.2f}", str(ranks["n_datasets"][m]), *cells]) + " |")
    return "\n".join(lines)


def _seconds(v: float) -> str:
    """Seconds with enough digits to tell small costs apart: 0.32 → ``0.32``, 36.5 → ``36.5``, 6736 → ``6,736``."""
    if not math.isfinite(v):
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def cost_table_markdown(records: Iterable) -> str:
    """Markdown: per method, fits, members, mean parameters (GBDT: trees), wall and CPU seconds.

    CPU seconds are the process CPU time of each fit (``cpu_seconds``); "total" sums them over every
    fit of the method, "per fit" is their mean.
    """
    by: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(records):
        by.setdefault(r["method"], []).append(r)
    lines = [
        "| method | fits | members | params (GBDT: trees), mean | wall s per fit | CPU s per fit | CPU s total |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, rows in by.items():
        cpu = np.array([float(r.get("cpu_seconds", math.nan)) for r in rows])
        wall = np.array([float(r["train_seconds"]) for r in rows])
        params = np.mean([float(r["params"]) for r in rows])
        members = sorted({int(r["members"]) for r in rows})
        missing = int((~np.isfinite(cpu)).sum())
        total = f"{_seconds(float(np.nansum(cpu)))}" + (f" ({missing} fit(s) not timed)" if missing else "")
        per_fit = _seconds(float(np.nanmean(cpu))) if np.isfinite(cpu).any() else "—"
        lines.append(
            f"| {m} | {len(rows)} | {'/'.join(map(str, members))} | {params:,.0f} | {_seconds(float(wall.mean()))} | "
            f"{per_fit} | {total} |"
        )
    return "\n".join(lines)
