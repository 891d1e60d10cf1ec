"""Fit one LoMETab classifier candidate with model seeds 0-2 on the 9 classification benchmark tables.

Records are those of ``ensemblize experiment tabular-bench`` (the same job function, the ``quick``
budget, the same split), plus the candidate's overrides; one JSON line per fit in
``runs/s4/cand_NAME.jsonl``. Rank the candidates on the recorded ``val_*`` scores only (the
selection of docs/results/tabular_bench.md, second round, item 4):

    OMP_NUM_THREADS=1 python scripts/check_lometab_classifier_seeds.py nll '{"monitor": "log_loss"}'
"""

import json
import sys
import time

import torch

from ensemblize.experiments.tabular_methods import _estimator_job, budget_config, load_split

torch.set_num_threads(1)
name, extra = sys.argv[1], json.loads(sys.argv[2])
T = ["credit", "churn", "telco", "attrition", "hmda", "creditcard", "stackoverflow", "hpc", "wvs"]
out = open(f"runs/s4/cand_{name}.jsonl", "a")
for t in T:
    splits = load_split(t, split_seed=0)
    cfg = {**budget_config("quick", len(splits.train.y)), **extra}
    for seed in (0, 1, 2):
        rec = _estimator_job("lometab", splits, seed=seed, cfg=cfg, keep_history=False)
        rec.update(method="lometab", dataset=t, seed=seed, task=splits.train.task)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(
            time.strftime("%H:%M:%S"),
            name,
            t,
            seed,
            {k: round(v, 4) for k, v in rec["metrics"].items() if k.startswith("val_")},
            flush=True,
        )
