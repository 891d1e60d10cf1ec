"""Would pooling several independently seeded LoMETab fits beat one? Validation scores only.

For each benchmark table (split seed 0, the estimators' defaults, one thread) the default estimator is
fitted with model seeds ``0 … 3·B − 1`` and its **validation** outputs are kept (member probabilities
or predictions, ``OUT/bag/TABLE_sSEED.npy``; nothing touches the test split). Candidate ``bagB`` with
"seed" ``s`` pools the members of the fits with seeds ``B·s … B·s + B − 1`` (probabilities averaged
over all ``B·K`` members, regression predictions likewise); its CPU time is the sum of theirs. Each
candidate is written as ``OUT/cand_bagB.jsonl`` in the records of
``scripts/check_lometab_classifier_seeds.py`` (three "seeds" per table), ready for
``scripts/rank_lometab_candidates.py``; ``bag1`` is the default itself refitted (a noise check):

    OMP_NUM_THREADS=1 python scripts/check_lometab_bagging.py --tables concrete,ames,wage,credit,churn,telco --out runs/s7 &
    OMP_NUM_THREADS=1 python scripts/check_lometab_bagging.py --tables attrition,hmda,creditcard,stackoverflow,hpc,wvs --out runs/s7 &
    wait; python scripts/check_lometab_bagging.py --pool-only --bags 1,2,3 --out runs/s7
    python scripts/rank_lometab_candidates.py runs/s7/cand_bag{1,2,3}.jsonl
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ensemblize.experiments.tabular_methods import (
    _class_index,
    _member_outputs,
    _scores,
    budget_config,
    load_split,
    make_estimator,
)

TABLES = "concrete,ames,wage,credit,churn,telco,attrition,hmda,creditcard,stackoverflow,hpc,wvs"

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tables", default=TABLES, help="comma list")
parser.add_argument("--fits", type=int, default=9, help="model seeds 0 … fits − 1 per table")
parser.add_argument("--bags", default="1,3", help="pool sizes B (3·B ≤ fits)")
parser.add_argument("--out", type=Path, default=Path("runs/s7"))
parser.add_argument("--pool-only", action="store_true", help="only pool the saved fits")
args = parser.parse_args()
tables = args.tables.split(",")
folder = args.out / "bag"
folder.mkdir(parents=True, exist_ok=True)
torch.set_num_threads(1)


def fit_one(table: str, seed: int) -> None:
    path = folder / f"{table}_s{seed}.npy"
    if path.exists():
        return
    splits = load_split(table, split_seed=0)
    cfg = budget_config("full", len(splits.train.y))
    est, _ = make_estimator("lometab", splits.train.task, seed=seed, cfg=cfg)
    cpu = time.process_time()
    est.fit(splits.train.X, splits.train.y, eval_set=(splits.val.X, splits.val.y))
    cpu = time.process_time() - cpu
    np.save(path, _member_outputs(est, splits.val.X, splits.train.task))
    (folder / f"{table}_s{seed}.json").write_text(json.dumps({"cpu_seconds": cpu, "classes": est.classes_.tolist()
                                                             if hasattr(est, "classes_") else None}))  # fmt: skip
    print(time.strftime("%H:%M:%S"), table, seed, f"{cpu:.0f} CPU s", flush=True)


def pooled_record(table: str, seeds: list[int], index: int) -> dict:
    splits = load_split(table, split_seed=0)
    task = splits.train.task
    outs = [np.load(folder / f"{table}_s{s}.npy") for s in seeds]
    metas = [json.loads((folder / f"{table}_s{s}.json").read_text()) for s in seeds]
    members = np.concatenate(outs, axis=1)
    if task == "regression":
        y_tr = splits.train.y.to_numpy(dtype=np.float64)
        mean, std = y_tr.mean(), y_tr.std()
        y = (splits.val.y.to_numpy(dtype=np.float64) - mean) / std
        pred = ((members - mean) / std).mean(axis=1)
    else:
        y = _class_index(np.asarray(metas[0]["classes"]), splits.val.y, part="val_")
        pred = members.mean(axis=1)
        pred = pred / pred.sum(axis=1, keepdims=True)
    return {
        "method": "lometab",
        "dataset": table,
        "seed": index,
        "task": task,
        "members": int(members.shape[1]),
        "cpu_seconds": float(sum(m["cpu_seconds"] for m in metas)),
        "metrics": _scores(task, y, pred, prefix="val_"),
        "setting": {"pooled_seeds": seeds},
    }


if not args.pool_only:
    for table in tables:
        for seed in range(args.fits):
            fit_one(table, seed)
for b in (int(v) for v in args.bags.split(",")):
    if 3 * b > args.fits:
        raise SystemExit(f"bag size {b} needs {3 * b} fits, got --fits {args.fits}")
    recs = [pooled_record(t, list(range(b * s, b * s + b)), s) for t in tables for s in range(3)]
    (args.out / f"cand_bag{b}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for t in tables:
        scores = [r["metrics"] for r in recs if r["dataset"] == t]
        print(f"bag{b}", t, {k: round(float(np.mean([m[k] for m in scores])), 4) for k in scores[0]})
