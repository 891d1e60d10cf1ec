"""Rank LoMETab candidates against the field on validation scores only (3 seeds, 12 tables).

Each candidate (``runs/.../cand_NAME.jsonl`` from ``scripts/check_lometab_classifier_seeds.py``, every
table and seed) is ranked with the field — official TabM at its defaults, XGBoost, CatBoost — on the
seed-averaged validation accuracy, log-loss and RMSE, and so is the shipped default (the rule of
``scripts/choose_lometab_shape.py``). A candidate missing a table is completed with the default's
records for it when ``--fill-from-default`` is given (for overrides that only act on one task):

    python scripts/rank_lometab_candidates.py runs/s6/cand_tree.jsonl
"""

import argparse
import json
from pathlib import Path

from choose_lometab_shape import default_lometab_records, field_records, seed_means, select

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("candidates", nargs="+", type=Path)
parser.add_argument("--fill-from-default", action="store_true")
args = parser.parse_args()

field = seed_means(field_records())
default = default_lometab_records()
candidates = {"default": default}
for path in args.candidates:
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    name = path.stem.removeprefix("cand_")
    if args.fill_from_default:
        have = {r["dataset"] for r in recs}
        recs += [r for r in default if r["dataset"] not in have]
    candidates[name] = recs
for name, recs in candidates.items():
    ranks = select.mean_ranks(field + seed_means(recs, name), names=[name])
    print(
        f"{name:>12}",
        json.dumps({k: round(v, 3) for k, v in ranks[name].items()}),
        f"| TabM {ranks['tabm']['select']:.3f} | CatBoost {ranks['catboost']['select']:.3f}",
        f"| CPU s {sum(r['cpu_seconds'] for r in recs):.0f}",
    )
