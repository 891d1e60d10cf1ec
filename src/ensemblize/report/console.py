"""Markdown reports on a console: tables wider than the terminal split into narrower ones.

A command's ``results.md`` keeps its tables whole; what it prints goes through
:func:`fit_markdown_tables`, which leaves every other line alone.
"""

from __future__ import annotations

import re

__all__ = ["fit_markdown_tables"]


_PIPE = re.compile(r"(?<!\\)\|")  # a cell separator; ``\|`` is a pipe inside a cell


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _PIPE.split(line.strip().strip("|"))]


def _render(rows: list[list[str]], columns: list[int]) -> list[str]:
    return ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]


def _split(table: list[str], width: int) -> list[str]:
    """One markdown table (header, separator, rows) as several of at most ``width`` characters, each
    repeating the first column (the row's name); a single column wider than that keeps a table of its own."""
    rows = [_cells(line) for line in table]
    n = len(rows[0])
    if any(len(r) != n for r in rows) or n < 3 or max(len(line) for line in table) <= width:
        return table  # not a plain table, or it fits
    groups: list[list[int]] = [[0]]
    for c in range(1, n):
        candidate = [*groups[-1], c]
        if len(groups[-1]) == 1 or max(len(line) for line in _render(rows, candidate)) <= width:
            groups[-1] = candidate
        else:
            groups.append([0, c])
    out: list[str] = []
    for i, columns in enumerate(groups):
        out += ([""] if i else []) + _render(rows, columns)
    return out


def fit_markdown_tables(text: str, *, width: int = 100) -> str:
    """``text`` with every markdown table (a run of lines starting with ``|``) wider than ``width``
    split by columns into tables that fit, each keeping the first column; other lines unchanged."""
    out: list[str] = []
    block: list[str] = []
    fenced = False  # inside a ``` code block nothing is a table
    for line in text.splitlines():
        if not fenced and line.lstrip().startswith("|"):
            block.append(line)
            continue
        out += _split(block, width) if block else []
        block = []
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line)
    out += _split(block, width) if block else []
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
