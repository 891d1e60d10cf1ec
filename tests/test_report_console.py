"""fit_markdown_tables: wide markdown tables printed as several that fit, nothing lost or reordered."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemblize.report.console import fit_markdown_tables

_cell = st.text(alphabet="abcdefghij0123456789.±", min_size=1, max_size=18)


def _tables(text: str) -> list[list[list[str]]]:
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip("|").split("|")])
        elif block:
            tables.append(block)
            block = []
    return tables


@settings(max_examples=80, deadline=None)
@given(
    n_cols=st.integers(2, 12),
    n_rows=st.integers(1, 4),
    data=st.data(),
    width=st.integers(30, 120),
)
def test_every_cell_survives_in_order_and_lines_fit_where_they_can(n_cols, n_rows, data, width):
    header = data.draw(st.lists(_cell, min_size=n_cols, max_size=n_cols))
    rows = [data.draw(st.lists(_cell, min_size=n_cols, max_size=n_cols)) for _ in range(n_rows)]
    lines = ["| " + " | ".join(r) + " |" for r in [header, ["---"] * n_cols, *rows]]
    text = "\n".join(["Title", *lines, "", "a closing line"])
    out = fit_markdown_tables(text, width=width)
    assert out.splitlines()[0] == "Title" and out.splitlines()[-1] == "a closing line"
    parts = _tables(out)
    full = [header, ["---"] * n_cols, *rows]
    # each part repeats the name column; together they hold every other column once, in order
    assert all([r[0] for r in part] == [r[0] for r in full] for part in parts)
    columns = [list(col) for col in zip(*full, strict=True)]
    kept = [list(c) for part in parts for c in list(zip(*part, strict=True))[1:]]
    assert kept == columns[1:]
    for part in parts:
        rendered = ["| " + " | ".join(r) + " |" for r in part]
        assert len(part[0]) == 2 or max(map(len, rendered)) <= width  # a lone wide column may overflow


def test_narrow_tables_and_other_text_are_unchanged():
    text = "# T\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\nend"
    assert fit_markdown_tables(text) == text


def test_escaped_pipes_code_fences_and_the_final_newline_survive():
    wide = "| name | " + " | ".join(f"column_{i}_with_a_long_name" for i in range(6)) + " |"
    rule = "|---" * 7 + "|"
    row = "| a \\| b | " + " | ".join(["0.123456 ± 0.000001"] * 6) + " |"
    text = "\n".join(["```", wide, "```", wide, rule, row]) + "\n"
    out = fit_markdown_tables(text, width=80)
    lines = out.splitlines()
    assert out.endswith("\n") and lines[:3] == ["```", wide, "```"]  # a fenced table is left alone
    assert all(len(line) <= 80 for line in lines[3:]) and lines[5].startswith("| a \\| b |")
