"""Does LoMETab's regression rank hold when the GBDTs also refit on training + validation rows?

The shipped ``LoMETabRegressor`` refits each network on training + validation rows for its early-stopped
epoch count (``refit_full=True``, the fifteenth round); the benchmark's XGBoost and CatBoost early-stop
on the validation rows and keep the model trained on the training rows only. This check gives the GBDTs
the same refit (``GBDTRegressor(refit_full=True)``: after early stopping, a booster fitted on training +
validation rows for the chosen round count) and ranks the four methods again per (table, split): LoMETab
and official TabM from their published seed means (``report_regression_published.py``; the refitting
LoMETab's means from docs/results/tabular_bench.md), the refitted GBDTs fitted here (model seeds 0-2,
benchmark settings: lr 0.05, <= 4,000 rounds, patience 50, one thread). It chooses nothing: it is
reported whatever it shows. Test scores are read (that is its purpose); no default depends on it::

    OMP_NUM_THREADS=1 python scripts/gbdt_refit_sensitivity.py --fit --tables concrete,ames,wage --out F1
    OMP_NUM_THREADS=1 python scripts/gbdt_refit_sensitivity.py --fit --tables deliveries,computers,nmes --out F2
    python scripts/gbdt_refit_sensitivity.py --report F1 F2
    python scripts/gbdt_refit_sensitivity.py --report F1 F2 --lometab runs/s23/reg-split{0,1,2}   # newer LoMETab fits
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

SPLITS = (0, 1, 2)
SEEDS = (0, 1, 2)
GBDTS = ("xgboost", "catboost")


def _published():
    path = Path(__file__).with_name("report_regression_published.py")
    spec = importlib.util.spec_from_file_location("report_regression_published", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fit(tables: list[str], out: Path) -> None:
    from ensemblize.experiments.tabular_methods import tabular_job

    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["base_method"], r["dataset"], r["split_seed"], r["seed"]))
    for table in tables:
        for split in SPLITS:
            for method in GBDTS:
                for seed in SEEDS:
                    if (method, table, split, seed) in done:
                        continue
                    (record,) = tabular_job(method=method, dataset=table, seed=seed, split_seed=split, budget="full",
                                            overrides={"gbdt_refit": True}, name=f"{method}_refit")  # fmt: skip
                    with out.open("a") as fh:
                        fh.write(json.dumps(record) + "\n")
                    print(f"{table} split {split} {method} seed {seed}: rmse {record['metrics']['rmse']:.4f} "
                          f"rounds {record['rounds']} cpu {record['cpu_seconds']:.1f} s", flush=True)  # fmt: skip


def report(files: list[Path], lometab_folders: list[str] | None = None) -> None:
    """Rank per (table, split); LoMETab from the published refitting three-network means, or, where
    ``lometab_folders`` (tabular-bench run folders) hold the cell, from those fits."""
    module = _published()
    published, benchmark, extension = module.PUBLISHED, module.BENCHMARK, module.EXTENSION
    lometab, fresh = module.overlay(published["lometab_refit3"], module.new_means(lometab_folders or []))
    if fresh:
        print(f"LoMETab from the run folders in {len(fresh)} cells (marked *), elsewhere its published "
              "refitting three-network means")  # fmt: skip
    values: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    cpu: dict[str, float] = defaultdict(float)
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            assert r["setting"].get("refit_full") is True, r["setting"]
            values[r["base_method"], int(r["split_seed"]), r["dataset"]].append(float(r["metrics"]["rmse"]))
            cpu[r["base_method"]] += float(r["cpu_seconds"])
    cells = {}
    print(
        "| split | table | LoMETab | official TabM | XGBoost refit (no refit) | CatBoost refit (no refit) | LoMETab rank |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in SPLITS:
        for t in (*benchmark, *extension):
            if any(len(values.get((m, s, t), [])) != len(SEEDS) for m in GBDTS):
                continue
            refit = {m: float(np.mean(values[m, s, t])) for m in GBDTS}
            row = {"lometab": lometab[s][t], "tabm": published["tabm"][s][t], **refit}
            ranks = dict(zip(row, rankdata(list(row.values())), strict=True))
            cells[s, t] = ranks
            mark = "*" if (s, t) in fresh else ""
            print(f"| {s} | {t} | {row['lometab']:.4f}{mark} | {row['tabm']:.4f} | "
                  + " | ".join(f"{refit[m]:.4f} ({published[m][s][t]:.4f})" for m in GBDTS)
                  + f" | {ranks['lometab']:g} |")  # fmt: skip
    for name, tables in (("benchmark (3 tables)", benchmark), ("extension (3 tables)", extension),
                         ("all six", (*benchmark, *extension))):  # fmt: skip
        sel = [r for (s, t), r in cells.items() if t in tables]
        if len(sel) != len(tables) * len(SPLITS):
            print(f"{name}: {len(sel)} of {len(tables) * len(SPLITS)} cells")
            continue
        print(f"mean rank, {name}: " + ", ".join(f"{m} {np.mean([r[m] for r in sel]):.2f}" for m in sel[0]))
    print("CPU seconds of the refitted GBDT fits: " + ", ".join(f"{m} {v:.0f}" for m, v in cpu.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--tables", default="concrete,ames,wage")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", nargs="*", type=Path)
    parser.add_argument("--lometab", nargs="*", default=[],
                        help="tabular-bench run folders whose LoMETab fits replace its published means")  # fmt: skip
    args = parser.parse_args()
    if args.fit:
        fit(args.tables.split(","), args.out)
    if args.report:
        report(args.report, args.lometab)


if __name__ == "__main__":
    main()
