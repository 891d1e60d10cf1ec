"""One self-contained ``report.html`` for a run folder: tables, figures, configuration, environment.

:func:`write_report` reads what a run folder holds and writes ``report.html`` next to it. The page
needs nothing but itself: figures are embedded as base64 PNG, the style and the table-sorting
script (a few lines) are inline, and no external resource is referenced. Sections, in order:

1. **Header** — the command, the folder, when the report was written and whether the run completed
   (``manifest.json`` with ``complete: true``).
2. **Claims and verdicts** — for experiments: ``claims.json`` (a list of ``{"claim", "verdict",
   "evidence"}``) or a ``"claims"`` list in ``run.json``; verdicts are colour-coded.
3. **Summary** — ``results.json`` grouped by dataset and method (and setting / target / scoring when
   present): number of seeds, the headline metrics as mean ± std over seeds, parameters, train
   seconds. Sortable: click a column header.
   **Re-evaluation** — the same summary of ``evaluation.json`` when ``ensemblize evaluate`` wrote one
   (a folder holding only an evaluation, ``evaluate --out DIR``, gets this section instead).
4. **Figures** — every PNG in the folder, with a caption saying what it shows.
5. **Tables written by the run** — every ``*.md`` file (pipe tables become sortable tables).
6. **Every record** — one row per (method, dataset, seed, …) with every metric (collapsed).
7. **Configuration** — ``run.json`` as a key/value table.
8. **Environment** — versions of Python, torch, NumPy, ensemblize, threads and device, from the run
   when it recorded them (``run.json`` ``"environment"`` or ``environment.json``), otherwise this
   process's, labelled as such.
9. **Files** — the folder's files and sizes.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..checkpoint import atomic_write_text
from .environment import collect_environment
from .style import display_name

__all__ = ["write_report", "render_report", "REPORT_NAME", "FIGURE_CAPTIONS"]

REPORT_NAME = "report.html"
#: Metrics shown in the summary table when the records have them (in this order).
SUMMARY_METRICS = (
    "accuracy", "nll", "log_loss", "ece", "brier", "rmse", "r2", "corr_accuracy", "corr_ece", "ood_maxprob_auroc",
    "ood_mi_auroc", "aurc", "eaurc", "augrc", "disagreement", "pairwise_kl", "mutual_information",
)  # fmt: skip
_MAX_FALLBACK_METRICS = 10
_GROUP_KEYS = ("dataset", "method", "setting", "target", "scoring")
FIGURE_CAPTIONS = {
    "reliability.png": "Reliability: accuracy per confidence bin against the diagonal (gap hatched), "
    "samples per bin beneath (log scale); ECE in each title.",
    "risk_coverage.png": "Risk–coverage: error rate among the accepted samples as the least confident are "
    "rejected; AURC in the legend (lower is better).",
    "shift.png": "Accuracy, ECE and NLL under corruptions, by severity (0 = clean), averaged over kinds.",
    "ood_histograms.png": "Max-probability densities on the test set and each OOD set; AUROC (OOD detection "
    "by max probability) in titles and legend.",
    "severity_ece.png": "ECE and accuracy by corruption severity, mean ± std over seeds.",
    "diversity.png": "Member diversity.",
    "frontier.png": "Accuracy–calibration trade-off across the sweep.",
}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1200px;padding:1em 1.5em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.meta{color:#666}table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;white-space:nowrap}th{background:#f4f4f4}
table.sortable th{cursor:pointer;user-select:none}table.sortable th::after{content:" \\2195";color:#aaa}
th[aria-sort=ascending]::after{content:" \\2191"!important;color:#222}th[aria-sort=descending]::after{content:" \\2193"!important;color:#222}
.scroll{overflow-x:auto}figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.92em}.verdict{font-weight:600;padding:.1em .5em;border-radius:.3em}
.v-supported{background:#d9f2dd}.v-refuted,.v-not-supported{background:#f8d7d7}.v-other{background:#fff3cd}
details summary{cursor:pointer;color:#0645ad}pre{background:#f7f7f7;padding:.6em;overflow-x:auto}
"""

_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("thead th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var key = function (row) {
        var cell = row.cells[col], v = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
        var n = parseFloat(v);
        return v === "" ? null : (isNaN(n) ? v : n);
      };
      var body = table.tBodies[0];
      Array.from(body.rows).map(function (r) { return [key(r), r]; }).sort(function (a, b) {
        if (a[0] === null || b[0] === null) { return (a[0] === null) - (b[0] === null); }
        var c = (typeof a[0] === "number" && typeof b[0] === "number") ? a[0] - b[0] : String(a[0]).localeCompare(String(b[0]));
        return asc ? c : -c;
      }).forEach(function (p) { body.appendChild(p[1]); });
    });
  });
});
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


# --- reading the folder -------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ValueError(f"{path} is not a regular file (a symbolic link, FIFO or folder); a report reads only "
                         "the run folder's own files")  # fmt: skip
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path} is not readable JSON: {err}") from err


def _config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.is_file():
        return {}
    cfg = _read_json(path)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(cfg).__name__}")
    inner = cfg.get("config")
    return {**inner, **{k: v for k, v in cfg.items() if k != "config"}} if isinstance(inner, dict) else cfg


def _records(run_dir: Path, name: str = "results.json") -> list[dict[str, Any]]:
    from .results import load_results

    return load_results(run_dir / name) if (run_dir / name).is_file() else []


# --- HTML pieces -------------------------------------------------------------------------------------


def _cell(value: Any, sort: Any = None) -> str:
    attr = "" if sort is None else f' data-sort="{_e(sort)}"'
    return f"<td{attr}>{_e(value)}</td>"


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, sortable: bool = True, cls: str = ""
) -> str:
    """``rows`` are sequences of ready ``<td>`` strings (see :func:`_cell`)."""
    classes = " ".join(c for c in ("sortable" if sortable else "", cls) if c)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f'<div class="scroll"><table class="{classes}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _fmt_stat(mean: float, std: float, n: int, name: str) -> str:
    if n == 0 or not math.isfinite(mean):
        return "—"
    if name == "params":
        return f"{mean:,.0f}"
    digits = 1 if name.endswith("seconds") else 4
    return f"{mean:.{digits}f}" if n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def _summary_metrics(records: Sequence[Mapping[str, Any]]) -> list[str]:
    present = list(dict.fromkeys(m for r in records for m in r["metrics"]))
    chosen = [m for m in SUMMARY_METRICS if m in present]
    return chosen or present[:_MAX_FALLBACK_METRICS]


def _summary_section(
    records: Sequence[Mapping[str, Any]],
    *,
    title: str = "Summary",
    anchor: str = "summary",
    note: str = "",
) -> str:
    from .results import failed_note, summarize

    if not records:
        return f"<h2>{_e(title)}</h2><p>No results.json in this folder.</p>"
    by = [k for k in _GROUP_KEYS if any(k in r for r in records)]
    metrics = _summary_metrics(records)
    rows = []
    for s in summarize(records, by=by):
        row = [_cell(display_name(s[k]) if k == "method" else ("—" if s[k] is None else s[k])) for k in by]
        row.append(_cell(s["n"], s["n"]))
        for m in [*metrics, "params", "train_seconds"]:
            mean, std, n = s["stats"].get(m, (math.nan, math.nan, 0))
            row.append(
                _cell(
                    _fmt_stat(mean, std, n, m) + failed_note(s, m), mean if n and math.isfinite(mean) else ""
                )
            )
        rows.append(row)
    headers = [*by, "seeds", *metrics, "params", "train seconds"]
    note = (
        note
        + "Mean ± std over seeds (std with ddof = 1), as in the console tables. Click a column header to sort."
    )
    return f'<h2 id="{anchor}">{_e(title)}</h2><p class="meta">{_e(note)}</p>' + _table(
        headers, rows, cls="summary"
    )


def _evaluation_section(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return ""
    return _summary_section(
        records,
        title="Re-evaluation (ensemblize evaluate)",
        anchor="evaluation",
        note="The saved checkpoints evaluated again by `ensemblize evaluate` (evaluation.json). ",
    )


def _records_section(records: Sequence[Mapping[str, Any]]) -> str:
    if not records:
        return ""
    keys = [
        k for k in ("method", "dataset", "seed", *_GROUP_KEYS[2:], "members") if any(k in r for r in records)
    ]
    metrics = list(dict.fromkeys(m for r in records for m in r["metrics"]))
    rows = []
    for r in records:
        row = [_cell(r.get(k, "—")) for k in keys]
        for m in metrics:
            v = r["metrics"].get(m)
            ok = v is not None and math.isfinite(float(v))
            row.append(_cell(f"{float(v):.4g}" if ok else "—", float(v) if ok else ""))
        row += [
            _cell(f"{r['params']:,}", r["params"]),
            _cell(f"{r['train_seconds']:.1f}", r["train_seconds"]),
        ]
        rows.append(row)
    table = _table([*keys, *metrics, "params", "train seconds"], rows, cls="records")
    return (
        f'<h2 id="records">Every record</h2><details><summary>{len(records)} records × '
        f"{len(metrics)} metrics (results.json)</summary>{table}</details>"
    )


def _claims(run_dir: Path, config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    claims = (
        _read_json(run_dir / "claims.json")
        if (run_dir / "claims.json").is_file()
        else config.get("claims", [])
    )
    if not isinstance(claims, list) or not all(isinstance(c, Mapping) and "claim" in c for c in claims):
        raise ValueError(f"claims in {run_dir} must be a list of objects with a 'claim' key")
    return claims


def _claims_section(claims: Sequence[Mapping[str, Any]]) -> str:
    if not claims:
        return ""
    rows = []
    for c in claims:
        verdict = str(c.get("verdict", "—"))
        slug = re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-")
        cls = f"v-{slug}" if slug in ("supported", "refuted", "not-supported") else "v-other"
        rows.append([
            f"<td>{_e(c['claim'])}</td>",
            f'<td data-sort="{_e(verdict)}"><span class="verdict {cls}">{_e(verdict)}</span></td>',
            _cell(c.get("evidence", "")),
        ])  # fmt: skip
    return '<h2 id="claims">Claims and verdicts</h2>' + _table(
        ["claim", "verdict", "evidence"], rows, cls="claims"
    )


def _mine(paths: Any, only: Collection[str] | None) -> list[Path]:
    """``paths`` limited to the file names in ``only`` (None: all of them) and to regular files that are
    not symbolic links: a link in a folder someone handed over must not copy a file from elsewhere into
    the report, and a FIFO named like a figure must not block it forever."""
    return [p for p in paths if (only is None or p.name in only) and p.is_file() and not p.is_symlink()]


def _figures_section(run_dir: Path, only: Collection[str] | None = None) -> str:
    known = list(FIGURE_CAPTIONS)
    pngs = sorted(
        _mine(run_dir.glob("*.png"), only),
        key=lambda p: (known.index(p.name) if p.name in known else len(known), p.name),
    )
    if not pngs:
        return ""
    parts = ['<h2 id="figures">Figures</h2>']
    for p in pngs:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        caption = FIGURE_CAPTIONS.get(p.name, "")
        parts.append(
            f'<figure><img alt="{_e(p.stem)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{_e(p.name)}</b>{' — ' + _e(caption) if caption else ''}</figcaption></figure>"
        )
    return "".join(parts)


def _sort_key(text: str) -> str:
    m = re.match(r"\s*[-+]?(\d[\d,]*\.?\d*(e[-+]?\d+)?|\.\d+)", text)
    return m.group(0).replace(",", "").strip() if m else text


def _markdown_to_html(text: str) -> str:
    """Pipe tables become sortable tables, ``#`` lines headings, other lines paragraphs."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if (
            line.startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip())
        ):
            split = lambda s: [c.strip() for c in s.strip().strip("|").split("|")]  # noqa: E731
            headers = split(line)
            i += 2
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append([_cell(c, _sort_key(c)) for c in split(lines[i])])
                i += 1
            out.append(_table(headers, rows))
            continue
        if line.startswith("#"):
            out.append(f"<h3>{_e(line.lstrip('#').strip())}</h3>")
        elif line:
            out.append(f"<p>{_e(line)}</p>")
        i += 1
    return "".join(out)


def _markdown_section(run_dir: Path, only: Collection[str] | None = None) -> str:
    files = sorted(_mine(run_dir.glob("*.md"), only))
    if not files:
        return ""
    parts = ['<h2 id="tables">Tables written by the run</h2>']
    for p in files:
        parts.append(f"<h3>{_e(p.name)}</h3>{_markdown_to_html(p.read_text())}")
    return "".join(parts)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            items += _flatten(v, key + ".")
        else:
            items.append((key, json.dumps(v) if isinstance(v, list | dict | bool) or v is None else v))
    return items


def _kv_section(title: str, anchor: str, d: Mapping[str, Any], note: str = "") -> str:
    if not d:
        return f'<h2 id="{anchor}">{_e(title)}</h2><p>Not recorded.</p>'
    rows = [[_cell(k), _cell(v)] for k, v in _flatten(d)]
    note_html = f'<p class="meta">{_e(note)}</p>' if note else ""
    return f'<h2 id="{anchor}">{_e(title)}</h2>{note_html}' + _table(
        ["key", "value"], rows, sortable=False, cls=anchor
    )


def _environment(run_dir: Path, config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(config.get("environment"), Mapping):
        return dict(config["environment"]), "Recorded by the run."
    if (run_dir / "environment.json").is_file():
        return dict(_read_json(run_dir / "environment.json")), "Recorded by the run (environment.json)."
    return collect_environment(), "The run did not record its environment: these are the report writer's."


def _files_section(run_dir: Path, only: Collection[str] | None = None) -> str:
    files = sorted(
        p
        for p in _mine(run_dir.rglob("*"), only)
        if p.is_file() and p.name != REPORT_NAME and not p.name.startswith(".")
    )
    rows = [
        [_cell(str(p.relative_to(run_dir))), _cell(f"{p.stat().st_size:,}", p.stat().st_size)] for p in files
    ]
    return (
        f'<h2 id="files">Files</h2><details><summary>{len(files)} files</summary>'
        + _table(["file", "bytes"], rows)
        + "</details>"
    )


def _status(run_dir: Path, finishing: bool = False) -> str:
    if finishing:  # written by a finished run just before its manifest (which lists this report)
        return "complete (manifest.json written with this report)"
    path = run_dir / "manifest.json"
    if not path.is_file():
        return "no manifest.json (run in progress, interrupted, or written before manifests existed)"
    manifest = _read_json(path)
    return (
        "complete (manifest.json)"
        if isinstance(manifest, dict) and manifest.get("complete")
        else "incomplete"
    )


def _command(config: Mapping[str, Any]) -> str:
    """``run`` / ``experiment NAME`` from run.json (``experiment`` in run folders, ``command`` in older ones)."""
    name = config.get("experiment", config.get("command", "run"))
    return "run" if name == "run" else f"experiment {name}" if "experiment" in config else str(name)


def render_report(
    run_dir: str | Path, *, finishing: bool = False, only: Collection[str] | None = None
) -> str:
    """The report page of ``run_dir`` as one HTML string (see the module doc for its sections).

    ``finishing``: the run is complete and its manifest is being (re)written right after this
    report (a finished command, or ``ensemblize report`` on a finished run); the status says so.
    ``only``: the file names the command wrote, when the folder may hold other files (``tune
    --out`` in a user's folder): figures, tables and the file list show only those."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    config = {k: v for k, v in _config(run_dir).items() if k not in ("environment", "claims")}
    full = _config(run_dir)
    records = _records(run_dir)
    evaluation = _records(run_dir, "evaluation.json")
    if not records and not config and not evaluation:
        raise ValueError(
            f"{run_dir} holds neither results.json, run.json nor evaluation.json: not a run folder (nor an evaluation folder)"
        )
    env, env_note = _environment(run_dir, full)
    if config:
        command = _command(config)
    elif (
        records
    ):  # no run.json: a tuning result (`ensemblize tune` writes report.json beside it) or a bare run
        command = "tune" if (run_dir / "report.json").is_file() else "run"
    else:
        command = "evaluate"
    title = f"ensemblize {command} — {run_dir.resolve().name}"
    status = (
        "an evaluation folder (ensemblize evaluate --out), not a run folder"
        if command == "evaluate"
        else _status(run_dir, finishing)
    )
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">folder {_e(run_dir.resolve())} · report written {when} · status: {_e(status)}</p>',
        _claims_section(_claims(run_dir, full)),
        _summary_section(records) if records or not evaluation else "",
        _evaluation_section(evaluation),
        _figures_section(run_dir, only),
        _markdown_section(run_dir, only),
        _records_section(records),
        _kv_section("Configuration", "configuration", config, "run.json"),
        _kv_section("Environment", "environment", env, env_note),
        _files_section(run_dir, only),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "".join(body)
        + f"<script>{_JS}</script></body></html>\n"
    )


def write_report(
    run_dir: str | Path, *, finishing: bool = False, only: Collection[str] | None = None
) -> Path:
    """Write ``run_dir/report.html`` (self-contained: figures embedded, no external resource) atomically.

    Returns the path. Raises ``FileNotFoundError`` when ``run_dir`` does not exist and ``ValueError``
    when it is neither a run folder (``results.json`` or ``run.json``) nor an evaluation folder
    (``evaluation.json``), or a file in it is malformed.
    """
    page = render_report(run_dir, finishing=finishing, only=only)
    return atomic_write_text(Path(run_dir) / REPORT_NAME, page)
