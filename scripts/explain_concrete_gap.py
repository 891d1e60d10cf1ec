"""Explanation only (nothing is chosen from it): does one of official TabM's settings close LoMETab's
concrete gap? The default regressor with one TabM setting at a time, concrete, split seeds 0 and 1,
model seeds 0–2; prints validation and test RMSE / train std per variant (docs/results/tabular_bench.md,
sixth round)::

    OMP_NUM_THREADS=1 python scripts/explain_concrete_gap.py --out runs/s11/concrete_ablation.jsonl
"""

import argparse
import json
from collections import defaultdict

import numpy as np

from ensemblize.experiments.tabular_methods import tabular_job

#: variant -> (method, overrides of the default regressor)
VARIANTS = {
    "default": ("lometab", {}),
    "d_block512": ("lometab", {"d_block": 512}),
    "members32": ("lometab", {"members": 32}),
    "patience16": ("lometab", {"patience": 16}),
    "dropout0.1": ("lometab", {"dropout": 0.1}),
    "rank1": ("batchensemble", {}),
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", required=True, help="JSON-lines file of the records (appended to)")
args = parser.parse_args()
scores = defaultdict(list)
with open(args.out, "a") as out:
    for split_seed in (0, 1):
        for name, (method, overrides) in VARIANTS.items():
            for seed in (0, 1, 2):
                (rec,) = tabular_job(method=method, dataset="concrete", seed=seed, split_seed=split_seed,
                                     budget="full", overrides=overrides)  # fmt: skip
                out.write(json.dumps({**rec, "variant": name}) + "\n")
                scores[split_seed, name].append((rec["metrics"]["val_rmse"], rec["metrics"]["rmse"]))
for (split_seed, name), pairs in sorted(scores.items()):
    val, test = np.mean(pairs, axis=0)
    print(f"split {split_seed}  {name:<12} validation {val:.4f}  test {test:.4f}")
