"""Four-way test ranks of classifier settings from a selection round's records (reporting only).

Run only after a round's verdict is committed: it reads test scores, and nothing may be chosen from
them. For each ``FILE:NAME`` (the JSON-lines records of ``scripts/choose_classifier_setting.py``,
candidate ``NAME``) the setting takes LoMETab's place beside the field — official TabM, XGBoost and
CatBoost — on the nine classification tables of split seeds 0, 1, 2: split 0's TabM from its
published means (``report_split0.TABM_SPLIT0``, four decimals) and its GBDTs from ``--split0``, splits
1 and 2 from ``--field`` run folders. Per table and score the four seed means are ranked (1 = best;
ties share ranks); printed: each method's mean rank per split and over the 27 cells::

    python scripts/report_classifier_candidates.py runs/s13/clfsel11.jsonl:default runs/s13/clfsel11.jsonl:b128 \\
        --split0 runs/s13/gbdt-split0 --field runs/s10/split1 runs/s11/split2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from ensemblize.experiments.tabular import collect_records

_spec = importlib.util.spec_from_file_location("report_split0", Path(__file__).with_name("report_split0.py"))
report_split0 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_split0)

SCORES = {"accuracy": -1.0, "log_loss": 1.0}  # sign: rank ascending on sign * value
FIELD = ("tabm", "xgboost", "catboost")


def seed_means(records: list[dict], method: str) -> dict[tuple[str, int, str], float]:
    """``(table, split, score) -> seed-mean test score`` of ``method``'s records (3 seeds only)."""
    vals = defaultdict(list)
    for r in records:
        if r["method"] == method:
            for s in SCORES:
                if s in r["metrics"]:
                    vals[r["dataset"], r.get("split_seed", 0), s].append(r["metrics"][s])
    return {k: float(np.mean(v)) for k, v in vals.items() if len(v) == 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="+", metavar="FILE:NAME")
    parser.add_argument("--split0", type=Path, required=True, help="split 0's GBDT run folder")
    parser.add_argument("--field", type=Path, nargs="+", required=True, help="split 1 and 2 run folders")
    args = parser.parse_args()
    field_records = collect_records(args.split0, *args.field)
    field = {m: seed_means(field_records, m) for m in FIELD}
    for s, tabm in report_split0.TABM_SPLIT0.items():
        if s in SCORES:
            field["tabm"].update({(t, 0, s): v for t, v in tabm.items()})
    for spec in args.candidates:
        source, name = spec.rsplit(":", 1)
        rows = [json.loads(x) for x in Path(source).read_text().splitlines() if x.strip()]
        mine = seed_means([{**r, "method": "lometab"} for r in rows if r["candidate"] == name], "lometab")
        methods = {"lometab": mine, **field}
        print(f"\n{spec}")
        for s, sign in SCORES.items():
            ranks = defaultdict(lambda: defaultdict(list))
            for table, split, score in sorted(k for k in mine if k[2] == s):
                key = (table, split, score)
                if any(key not in v for v in methods.values()):
                    raise SystemExit(f"{key}: missing for {[m for m, v in methods.items() if key not in v]}")
                for m, r in zip(methods, rankdata([sign * v[key] for v in methods.values()]), strict=True):
                    ranks[m][split].append(float(r))
            cells = {m: [x for per in ranks[m].values() for x in per] for m in methods}
            line = "  ".join(
                f"{m} "
                + " / ".join(f"{np.mean(ranks[m][sp]):.2f}" for sp in sorted(ranks[m]))
                + f" = {np.mean(cells[m]):.2f}"
                for m in methods
            )
            print(f"  {s} ({len(cells['lometab'])} cells; per split = pooled): {line}")
        cpu = sum(r["cpu_seconds"] for r in rows if r["candidate"] == name)
        print(f"  CPU s of its {sum(r['candidate'] == name for r in rows)} fits: {cpu:,.0f}")


if __name__ == "__main__":
    main()
