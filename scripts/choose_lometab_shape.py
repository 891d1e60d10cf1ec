"""Pre-registered (written 14:05 UTC, before any full-shape result was read) choice of LoMETab's default shape.

Candidates: LoMETab at the `quick` shape (K16, 2x128, <=80 epochs, patience 12; shipped knobs; records
bench-lometab for classification, bench-lometab-d0 for regression) and LoMETab at the estimators' own
full defaults (K32, 3x256, <=200 epochs, patience 16; runs/s5/bench-lometab-full).
Field: official TabM at ITS defaults (runs/s5/bench-tabm-full-{a,b}), XGBoost, CatBoost (bench-gbdt).
Rule: for each candidate, rank it with the field on each table on the VALIDATION score averaged over
seeds 0-2 (accuracy, log-loss; RMSE for regression); mean rank per score over tables; the candidate with
the lower mean of its three per-score mean ranks is the default. Ties -> the cheaper one (quick).
Test scores are NOT read by this script. (It ran from runs/s5/ while the benchmark ran; committed here
unchanged but for formatting and the later-split run folders it reads.)
"""

import json

import numpy as np
from scipy.stats import rankdata

from ensemblize.experiments.tabular import collect_records


def load(folder):
    return collect_records(f"runs/{folder}")


field = sum((load(f"s5/bench-tabm-full-{c}") for c in "abcd"), []) + [x for x in load("tab/bench-gbdt")]
quick = [x for x in load("tab/bench-lometab") if x["task"] != "regression"] + [
    x for x in load("tab/bench-lometab-d0") if x["task"] == "regression"
]
full = (
    load("s5/bench-lometab-full")
    + load("s5/bench-lometab-full-2")
    + load("s5/bench-lometab-full-3")
    + load("s5/bench-lometab-full-4")
)
cands = {"quick": quick, "full": full}
tables = sorted({x["dataset"] for x in quick})
methods = ["lometab", "tabm", "xgboost", "catboost"]


def val(recs, t, m, key):
    v = [
        x["metrics"]["val_" + key]
        for x in recs
        if x["dataset"] == t and x.get("method") == m and "val_" + key in x["metrics"]
    ]
    return np.mean(v) if len(v) == 3 else None


res = {}
for name, recs in cands.items():
    allr = field + [{**x, "method": "lometab"} for x in recs]
    per = {}
    for key, lower in (("accuracy", False), ("log_loss", True), ("rmse", True)):
        ranks, missing = [], []
        for t in tables:
            v = [val(allr, t, m, key) for m in methods]
            if v[0] is None and all(x is None for x in v):
                continue
            if any(x is None for x in v):
                missing.append(t)
                continue
            v = np.array(v)
            ranks.append(rankdata(v if lower else -v))
        per[key] = (np.mean(ranks, 0).round(3).tolist() if ranks else None, len(ranks), missing)
    means = [per[k][0][0] for k in per if per[k][0]]
    res[name] = {"per_score": per, "mean_of_means": float(np.mean(means))}
    print(name, json.dumps(per), "mean", round(float(np.mean(means)), 3))
print("methods order", methods)
best = min(res, key=lambda n: (res[n]["mean_of_means"], n != "quick"))
print("CHOSEN", best)
json.dump(res, open("runs/s5/choose_shape.json", "w"), indent=1)  # noqa: SIM115
