"""Split seed 0's four-way test ranks with official TabM from its published means.

Official TabM's split-0 fits (the fifth round, 6,736 CPU s) are not on this machine; its seed-mean
test scores are published in docs/results/tabular_bench.md ("Per-table results, fifth round", four
decimals) and copied below. The other methods come from run folders (re-run here). Per table and
score the four seed means are ranked (1 = best; ties share ranks) and the mean rank printed. TabM's
means are rounded to four decimals, the others exact — a tie within 0.00005 of TabM can rank either
way. Reporting only::

    python scripts/report_split0.py runs/s13/lometab-split0 runs/s13/gbdt-split0
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from scipy.stats import rankdata

from ensemblize.experiments.tabular import collect_records

#: official TabM at its defaults, split seed 0, seeds 0-2: published test means (fifth round)
TABM_SPLIT0 = {
    "accuracy": {"hpc": 0.8378, "churn": 0.9593, "wvs": 0.5104, "attrition": 0.8696, "hmda": 0.9216,
                 "creditcard": 0.8321, "credit": 0.8111, "telco": 0.8100, "stackoverflow": 0.8978},
    "log_loss": {"hpc": 0.4207, "churn": 0.1402, "wvs": 0.9351, "attrition": 0.3258, "hmda": 0.2290,
                 "creditcard": 0.4041, "credit": 0.4239, "telco": 0.4024, "stackoverflow": 0.3047},
    "rmse": {"concrete": 0.2816, "ames": 0.3533, "wage": 0.9114},
}  # fmt: skip
HIGHER_IS_BETTER = {"accuracy": True, "log_loss": False, "rmse": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()

    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in collect_records(*args.folders):
        if r.get("split_seed", 0) != 0:
            raise SystemExit(f"{r['method']} / {r['dataset']}: split seed {r['split_seed']}, not 0")
        for score in HIGHER_IS_BETTER:
            if score in r["metrics"]:
                values[score, r["dataset"], r["method"]].append(r["metrics"][score])
    methods = sorted({m for (_, _, m) in values})
    for score, tabm in TABM_SPLIT0.items():
        ranks: dict[str, list[float]] = defaultdict(list)
        print(f"\n#### Test {score}, split seed 0 (seed means; TabM published)\n")
        print("| table | " + " | ".join([*methods, "tabm"]) + " | ranks |")
        print("|---|" + "---|" * (len(methods) + 2))
        for table, t in tabm.items():
            means = {m: values[score, table, m] for m in methods}
            if any(len(v) != 3 for v in means.values()):
                print(f"| {table} | incomplete: {', '.join(f'{m} {len(v)}' for m, v in means.items())} |")
                continue
            row = {m: float(np.mean(v)) for m, v in means.items()} | {"tabm": t}
            names = list(row)
            sign = -1.0 if HIGHER_IS_BETTER[score] else 1.0
            r = rankdata([sign * row[n] for n in names])
            for n, x in zip(names, r, strict=True):
                ranks[n].append(float(x))
            cells = " | ".join(f"{row[n]:.4f}" for n in names)
            print(f"| {table} | {cells} | " + " / ".join(f"{x:g}" for x in r) + " |")
        print(
            "\nmean rank: " + ", ".join(f"{n} {np.mean(v):.2f} ({len(v)} tables)" for n, v in ranks.items())
        )


if __name__ == "__main__":
    main()
