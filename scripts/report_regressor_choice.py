"""Test RMSE of the regressor settings of ``scripts/choose_regressor_setting.py``, ranked with the field.

Reporting only: run after the choice (which reads validation scores only) is made and committed. For
each (table, split seed) the seed-mean test RMSE / train std of the shipped default and of the named
setting (records of the choice's JSON-lines file) is ranked with the field — official TabM, XGBoost and
CatBoost at their defaults, from the benchmark run folders given with ``--field`` — and the mean test
rank of 4 is printed per split: once with the default as LoMETab, once with the setting. Split 0's
field on concrete / ames / wage comes from the fifth round's published means
(docs/results/tabular_bench.md; its run folders are not on this machine)::

    python scripts/report_regressor_choice.py runs/s12/regsel.jsonl batch128 \\
        --field runs/s10/split1 runs/s11/split2 runs/s11/regx-split0 runs/s11/regx-split2
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

FIELD = ("tabm", "xgboost", "catboost")
#: split seed 0, fifth round (docs/results/tabular_bench.md, "Test rmse"): seed-mean test RMSE / train std
PUBLISHED_SPLIT0 = {
    ("concrete", "tabm"): 0.2816,
    ("ames", "tabm"): 0.3533,
    ("wage", "tabm"): 0.9114,
    ("concrete", "xgboost"): 0.2746,
    ("ames", "xgboost"): 0.3494,
    ("wage", "xgboost"): 0.9294,
    ("concrete", "catboost"): 0.2707,
    ("ames", "catboost"): 0.3298,
    ("wage", "catboost"): 0.9155,
}
CORE = ("concrete", "ames", "wage")


def field_means(run_dirs: list[Path]) -> dict[tuple[str, int, str], float]:
    """(table, split seed, method) -> seed-mean test RMSE of the field's regression fits."""
    fits = defaultdict(list)
    for run_dir in run_dirs:
        for path in sorted((run_dir / "jobs").glob("*.json")):
            for rec in json.loads(path.read_text())["records"]:
                if rec["task"] == "regression" and rec["method"] in FIELD:
                    fits[rec["dataset"], rec["split_seed"], rec["method"]].append(rec["metrics"]["rmse"])
    out = {k: float(np.mean(v)) for k, v in fits.items() if len(v) == 3}
    for (table, method), value in PUBLISHED_SPLIT0.items():
        out.setdefault((table, 0, method), value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("setting")
    parser.add_argument("--field", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    fits = defaultdict(list)
    for line in args.records.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            fits[rec["candidate"], rec["dataset"], rec["split_seed"]].append(rec["metrics"]["rmse"])
    field = field_means(args.field)
    cells = sorted({(t, s) for (_, t, s) in fits})
    print(
        f"{'table':>10} split | default  {args.setting:>8} | tabm     xgboost  catboost | rank default / setting"
    )
    ranks = defaultdict(list)
    for t, s in cells:
        mine = {n: fits.get((n, t, s), []) for n in ("default", args.setting)}
        others = [field.get((t, s, m)) for m in FIELD]
        if any(len(v) != 3 for v in mine.values()) or None in others:
            continue
        row = {n: float(np.mean(v)) for n, v in mine.items()}
        r = {}
        for n in row:
            four = rankdata([row[n], *others])
            r[n] = float(four[0])
            for m, rank in zip(("lometab", *FIELD), four, strict=True):
                ranks[n, m, s, t in CORE].append(float(rank))
        print(
            f"{t:>10} {s:>5} | {row['default']:.4f}   {row[args.setting]:.4f} | "
            + "   ".join(f"{v:.4f}" for v in others)
            + f" | {r['default']:.0f} / {r[args.setting]:.0f}"
        )
    print(
        "mean test rank of 4 (LoMETab / TabM / XGBoost / CatBoost), with LoMETab = the default | the setting:"
    )
    for core, label in ((True, "3 benchmark tables"), (False, "3 extension tables")):
        for s in sorted({s for (_, _, s, c) in ranks if c == core}):
            text = [
                " / ".join(f"{np.mean(ranks[n, m, s, core]):.2f}" for m in ("lometab", *FIELD))
                for n in ("default", args.setting)
            ]
            print(f"  split {s}, {label}: {text[0]} | {text[1]}")


if __name__ == "__main__":
    main()
