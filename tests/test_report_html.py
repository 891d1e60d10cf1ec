"""report.html: content checked as text, then rendered in a real headless Chromium (Debian's package).

The browser test is skipped only when no Chromium is installed and ENSEMBLIZE_REQUIRE_BROWSER is not
"1"; scripts/test installs Chromium and sets the variable, so in CI it always runs.
"""

from __future__ import annotations

import base64
import json
import os
import re

import pytest

from chromium_cdp import Chromium, find_chromium
from ensemblize.report.html import REPORT_NAME, render_report, write_report
from ensemblize.report.results import load_results, summarize
from report_fixtures import make_run_folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return make_run_folder(tmp_path_factory.mktemp("run"), seeds=2, experiment=True)


def _summary_rows(page: str) -> list[list[str]]:
    table = re.search(r'<table class="sortable summary">(.*?)</table>', page, re.S).group(1)
    body = table.split("<tbody>")[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_report_sections_and_self_contained(run_folder):
    path = write_report(run_folder)
    assert path == run_folder / REPORT_NAME
    page = path.read_text()
    headings = re.findall(r"<h2 id=\"[a-z]+\">(.*?)</h2>", page)
    assert headings == [
        "Claims and verdicts", "Summary", "Figures", "Tables written by the run", "Every record",
        "Configuration", "Environment", "Files",
    ]  # fmt: skip
    assert "<title>ensemblize compare — " in page
    # self-contained: no external resource of any kind
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    # every PNG of the folder is embedded, byte for byte
    order = ["reliability.png", "risk_coverage.png", "shift.png", "ood_histograms.png"]
    pngs = [run_folder / name for name in order]
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == len(pngs) == 4
    assert [base64.b64decode(e) for e in embedded] == [p.read_bytes() for p in pngs]
    # readable names, claims, configuration, environment
    assert "Deep ensemble" in page and "σN-Ens" in page
    assert "σN-Ens is better calibrated than the single model" in page
    assert 'class="verdict v-supported"' in page and 'class="verdict v-not-supported"' in page
    assert "<td>resnet_small</td>" in page
    for key in (
        "python",
        "packages.torch",
        "packages.numpy",
        "packages.ensemblize",
        "torch_threads",
        "device",
    ):
        assert f"<td>{key}</td>" in page, key


def test_summary_values_match_the_tables(run_folder):
    page = render_report(run_folder)
    rows = _summary_rows(page)
    stats = summarize(load_results(run_folder), by=("dataset", "method"))
    assert [r[1] for r in rows] == ["Single model", "Deep ensemble", "σN-Ens"]
    for row, s in zip(rows, stats, strict=True):
        assert row[2] == "2"  # seeds
        mean, std, _ = s["stats"]["accuracy"]
        assert row[3] == f"{mean:.4f} ± {std:.4f}"
    # the sort key of the accuracy cell is the exact mean
    keys = re.findall(r'<td data-sort="([^"]+)">[0-9.]+ ± ', page)
    assert float(keys[0]) == pytest.approx(stats[0]["stats"]["accuracy"][0])


def test_markdown_tables_become_sortable_tables(run_folder):
    page = render_report(run_folder)
    assert "<h3>table.md</h3>" in page
    assert '<td data-sort="0.9">0.9</td>' in page


def test_environment_recorded_by_the_run_wins(tmp_path):
    folder = make_run_folder(tmp_path / "r", seeds=1, figures=False)
    cfg = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({"config": cfg, "environment": {"device": "cuda: H200"}}))
    page = render_report(folder)
    assert "<td>cuda: H200</td>" in page and "Recorded by the run." in page
    assert "ensemblize run — " in page  # the nested {"config": ...} layout of RunFolder is read too
    (folder / "run.json").write_text(json.dumps({"config": {"experiment": "tau-sweep", "seeds": [0, 1]}}))
    assert "<title>ensemblize experiment tau-sweep — " in render_report(folder)


def test_bad_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        write_report(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="not a run folder"):
        write_report(tmp_path)
    (tmp_path / "run.json").write_text("{broken")
    with pytest.raises(ValueError, match="run.json"):
        write_report(tmp_path)
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        write_report(tmp_path)
    assert not (tmp_path / REPORT_NAME).exists()


# --- in a real browser --------------------------------------------------------------------------------

_browser = pytest.mark.skipif(
    find_chromium() is None and os.environ.get("ENSEMBLIZE_REQUIRE_BROWSER") != "1",
    reason="no Chromium installed (apt-get install chromium); scripts/test installs it for CI",
)

_SUMMARY_COLUMN = """(() => {
  const t = document.querySelector('table.summary');
  const col = Array.from(t.tHead.rows[0].cells).findIndex(th => th.textContent === %s);
  return Array.from(t.tBodies[0].rows).map(r => [r.cells[1].textContent, parseFloat(r.cells[col].dataset.sort)]);
})()"""


@_browser
@pytest.mark.slow
def test_report_in_headless_chromium(run_folder):
    path = write_report(run_folder)
    with Chromium() as browser:
        browser.open(path)
        images = browser.evaluate(
            "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}))"
        )
        assert len(images) == len(list(run_folder.glob("*.png"))) == 4
        assert all(i["complete"] and i["width"] > 0 for i in images), images
        assert browser.evaluate("document.querySelectorAll('h2').length") == 8

        # sorting: click the "ece" header of the summary table — rows reorder ascending, then descending
        before = browser.evaluate(_SUMMARY_COLUMN % json.dumps("ece"))
        ece = [v for _, v in before]
        assert ece != sorted(ece), "fixture must start unsorted by ECE for the test to mean anything"
        browser.click(f"table.summary thead th:nth-child({1 + _column(browser, 'ece')})")
        after = browser.evaluate(_SUMMARY_COLUMN % json.dumps("ece"))
        assert [v for _, v in after] == sorted(ece)
        assert sorted(after) == sorted(before)  # same rows, reordered
        assert browser.evaluate("document.querySelector('table.summary th[aria-sort]').textContent") == "ece"
        browser.click(f"table.summary thead th:nth-child({1 + _column(browser, 'ece')})")
        assert [v for _, v in browser.evaluate(_SUMMARY_COLUMN % json.dumps("ece"))] == sorted(
            ece, reverse=True
        )
        # text column: method names sort alphabetically
        browser.click("table.summary thead th:nth-child(2)")
        names = browser.evaluate(
            "Array.from(document.querySelectorAll('table.summary tbody tr')).map(r => r.cells[1].textContent)"
        )
        assert names == sorted(names)
        assert browser.console_errors == []


def _column(browser: Chromium, name: str) -> int:
    return browser.evaluate(
        f"Array.from(document.querySelector('table.summary').tHead.rows[0].cells).findIndex(th => th.textContent === {json.dumps(name)})"
    )


@_browser
@pytest.mark.slow
def test_the_browser_check_catches_errors_and_broken_images(tmp_path):
    """Negative control: the same checks fail on a page with a console error and an undecodable image."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="data:image/png;base64,AAAA">'
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    with Chromium() as browser:
        browser.open(page)
        assert browser.evaluate("Array.from(document.images).map(i => i.naturalWidth)") == [0]
        assert any("boom" in e for e in browser.console_errors)
        assert any("undefinedFunction" in e for e in browser.console_errors)
