"""Why LoMETab trails CatBoost in test RMSE on the benchmark's regression tables: where the error is.

Explanation only — nothing here chooses a setting (defaults were chosen on validation, see
docs/results/tabular_bench.md). For each regression table (split seed 0, model seeds 0-2), fit the
default ``LoMETabRegressor`` and CatBoost (``GBDTRegressor``, lr 0.05, ≤ 4,000 rounds, early stopping
50 on validation) exactly as the benchmark does, then split each part's squared error (target /
train std) by row:

* ``out``: rows with at least one numeric feature outside its training range (a piecewise-linear
  embedding extrapolates linearly there; a tree is constant);
* ``top 1 %``: the 1 % of rows with the largest CatBoost error (the hard rows);
* the RMSE of both models without those rows.

    OMP_NUM_THREADS=1 python scripts/regression_gap.py                       # split 0, three tables
    OMP_NUM_THREADS=1 python scripts/regression_gap.py --tables ames --split-seed 0 --seeds 0,1,2
"""

import argparse

import numpy as np
import pandas as pd
import torch

from ensemblize.experiments.tabular_methods import _timed_fit, budget_config, load_split, make_estimator

torch.set_num_threads(1)


def out_of_range(train: pd.DataFrame, part: pd.DataFrame) -> np.ndarray:
    num = [
        c
        for c in train.columns
        if pd.api.types.is_numeric_dtype(train[c]) and not pd.api.types.is_bool_dtype(train[c])
    ]
    lo, hi = train[num].min(), train[num].max()
    return ((part[num] < lo) | (part[num] > hi)).any(axis=1).to_numpy()


def rmse(err: np.ndarray, keep: np.ndarray | None = None) -> float:
    e = err if keep is None else err[keep]
    return float(np.sqrt(np.mean(e**2)))


def main(tables: list[str], split_seed: int, seeds: list[int]) -> None:
    """Print, per table and part, both models' seed-mean RMSE / train std over the row groups above."""
    for table in tables:
        splits = load_split(table, split_seed=split_seed)
        y_tr = splits.train.y.to_numpy(dtype=np.float64)
        mean, std = y_tr.mean(), y_tr.std()
        fitted = []
        for seed in seeds:
            cfg = budget_config("full", len(y_tr))
            lome, _ = make_estimator("lometab", "regression", seed=seed, cfg=cfg)
            cat, _ = make_estimator("catboost", "regression", seed=seed, cfg=cfg)
            for est in (lome, cat):
                _timed_fit(est, splits, method="lometab" if est is lome else "catboost")
            fitted.append((lome, cat))
        for part_name in ("val", "test"):
            part = getattr(splits, part_name)
            y = (part.y.to_numpy(dtype=np.float64) - mean) / std
            oor = out_of_range(splits.train.X, part.X)
            rows = []
            for lome, cat in fitted:
                e_l = (lome.predict(part.X) - mean) / std - y
                e_c = (cat.predict(part.X) - mean) / std - y
                hard = np.abs(e_c) >= np.quantile(np.abs(e_c), 0.99)
                rows.append(
                    [
                        rmse(e_l),
                        rmse(e_c),
                        rmse(e_l, ~oor),
                        rmse(e_c, ~oor),
                        rmse(e_l, ~hard),
                        rmse(e_c, ~hard),
                        rmse(e_l, oor) if oor.any() else np.nan,
                        rmse(e_c, oor) if oor.any() else np.nan,
                    ]
                )
            r = np.array(rows).mean(axis=0)
            print(
                f"{table:>8} {part_name:>4}: {len(y)} rows, {oor.sum()} out of range | RMSE LoMETab / CatBoost "
                f"all {r[0]:.4f} / {r[1]:.4f} | in range {r[2]:.4f} / {r[3]:.4f} | out of range {r[6]:.4f} / "
                f"{r[7]:.4f} | without CatBoost's top 1 % {r[4]:.4f} / {r[5]:.4f}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="concrete,ames,wage", help="comma-separated regression tables")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated model seeds")
    args = parser.parse_args()
    main(args.tables.split(","), args.split_seed, [int(s) for s in args.seeds.split(",")])
