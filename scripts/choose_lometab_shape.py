"""Pre-registered (written 14:05 UTC, before any full-shape result was read) choice of LoMETab's default shape.

Candidates: LoMETab at the `quick` shape (K16, 2x128, <=80 epochs, patience 12; shipped knobs; records
bench-lometab for classification, bench-lometab-d0 for regression) and LoMETab at the estimators' own
full defaults (K32, 3x256, <=200 epochs, patience 16; runs/s5/bench-lometab-full).
Field: official TabM at ITS defaults (runs/s5/bench-tabm-full-{a,b}), XGBoost, CatBoost (bench-gbdt).
Rule: for each candidate, rank it with the field on each table on the VALIDATION score averaged over
seeds 0-2 (accuracy, log-loss; RMSE for regression); mean rank per score over tables; the candidate with
the lower mean of its three per-score mean ranks is the default. Ties -> the cheaper one (quick).
Test scores are NOT read by this script. (It ran from runs/s5/ while the benchmark ran; committed here
ranking through ``select_lometab_default.mean_ranks`` instead of its own copy of that loop — the same
numbers: 1.944 vs 2.037 — and reading the later-split run folders.)
"""

import importlib.util
import json
from pathlib import Path

import numpy as np

from ensemblize.experiments.tabular import collect_records

_SELECT = Path(__file__).with_name("select_lometab_default.py")
_spec = importlib.util.spec_from_file_location("select_lometab_default", _SELECT)
select = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(select)


def load(folder):
    return collect_records(f"runs/{folder}")


def seed_means(records, name=None):
    """One ``select.mean_ranks`` record per (method, table): validation scores averaged over seeds 0-2."""
    out = []
    for t in dict.fromkeys(x["dataset"] for x in records):
        for m in dict.fromkeys(x["method"] for x in records):
            fits = [x for x in records if x["dataset"] == t and x["method"] == m]
            if len(fits) != 3:
                continue
            keys = [k for k in fits[0]["metrics"] if k.startswith("val_")]
            val = {k[4:]: float(np.mean([x["metrics"][k] for x in fits])) for k in keys}
            out.append({"name": name or m, "table": t, "val": val})
    return out


def field_records():
    """Official TabM at its defaults (third round), XGBoost and CatBoost: seeds 0-2, all 12 tables."""
    return sum((load(f"s5/bench-tabm-full-{c}") for c in "abcd"), []) + load("tab/bench-gbdt")


def default_lometab_records():
    """The shipped LoMETab default (``quick`` rows; regression at dropout 0)."""
    return [x for x in load("tab/bench-lometab") if x["task"] != "regression"] + [
        x for x in load("tab/bench-lometab-d0") if x["task"] == "regression"
    ]


def main():
    full = sum((load(f"s5/bench-lometab-full{suffix}") for suffix in ("", "-2", "-3", "-4")), [])
    field_means = seed_means(field_records())
    res = {}
    for name, recs in {"quick": default_lometab_records(), "full": full}.items():
        res[name] = select.mean_ranks(field_means + seed_means(recs, name), names=[name])
        print(name, json.dumps({n: {k: round(v, 3) for k, v in r.items()} for n, r in res[name].items()}))
    best = min(res, key=lambda n: (res[n][n]["select"], n != "quick"))
    print("CHOSEN", best)


if __name__ == "__main__":
    main()
