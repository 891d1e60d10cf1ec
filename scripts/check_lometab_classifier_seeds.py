"""Fit one LoMETab candidate with model seeds 0-2 on benchmark tables; print validation scores only.

Records are those of ``ensemblize experiment tabular-bench`` (the same job function, the ``quick``
budget — the estimators' default shape — the same split), plus the candidate's overrides; one JSON
line per fit in ``OUT/cand_NAME.jsonl``. Rank the candidates on the recorded ``val_*`` scores only
(the selection of docs/results/tabular_bench.md, second round, item 4); nothing here prints a test
score. ``TABLES`` defaults to the 9 classification tables; ``--tables all`` adds the 3 regression
tables (fitted by ``LoMETabRegressor`` at its own defaults, e.g. dropout 0). ``--split-seed N``
fits on another 64/16/20 split (records then carry ``split_seed``), for checks away from the
selection split:

    OMP_NUM_THREADS=1 python scripts/check_lometab_classifier_seeds.py nll '{"monitor": "log_loss"}'
    OMP_NUM_THREADS=1 python scripts/check_lometab_classifier_seeds.py tree '{"bin_method": "tree"}' \\
        --tables concrete,ames,wage --out runs/s6
"""

import argparse
import json
import time
from pathlib import Path

import torch

from ensemblize.experiments.tabular_methods import _estimator_job, budget_config, load_split

CLASSIFICATION = [
    "credit",
    "churn",
    "telco",
    "attrition",
    "hmda",
    "creditcard",
    "stackoverflow",
    "hpc",
    "wvs",
]
REGRESSION = ["concrete", "ames", "wage"]

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("name")
parser.add_argument("overrides", type=json.loads, help="estimator parameters as a JSON object")
parser.add_argument("--tables", default=",".join(CLASSIFICATION), help="comma list, or 'all'")
parser.add_argument("--out", default="runs/s4", help="folder of cand_NAME.jsonl")
parser.add_argument("--split-seed", type=int, default=0, help="the 64/16/20 split (0: the benchmark's)")
args = parser.parse_args()
tables = CLASSIFICATION + REGRESSION if args.tables == "all" else args.tables.split(",")

torch.set_num_threads(1)
Path(args.out).mkdir(parents=True, exist_ok=True)
with open(Path(args.out) / f"cand_{args.name}.jsonl", "a") as out:
    for t in tables:
        splits = load_split(t, split_seed=args.split_seed)
        cfg = {**budget_config("quick", len(splits.train.y)), **args.overrides}
        for seed in (0, 1, 2):
            rec = _estimator_job("lometab", splits, seed=seed, cfg=cfg, keep_history=False)
            rec.update(
                method="lometab", dataset=t, seed=seed, task=splits.train.task, split_seed=args.split_seed
            )
            out.write(json.dumps(rec) + "\n")
            out.flush()
            val = {k: round(v, 4) for k, v in rec["metrics"].items() if k.startswith("val_")}
            print(
                time.strftime("%H:%M:%S"),
                args.name,
                t,
                seed,
                val,
                f"{rec['cpu_seconds']:.0f} CPU s",
                flush=True,
            )
