"""Regression test ranks of new LoMETab regressor fits against the field's published seed means.

The field — official TabM, XGBoost and CatBoost at the benchmark's settings, six regression tables
(the benchmark's concrete, ames, wage and the extension's deliveries, computers, nmes) x split seeds
0, 1, 2, model seeds 0-2 — was fitted in earlier sessions; its fits are not on this machine, and its
seed-mean test RMSE / train std is published in docs/results/tabular_bench.md ("Current defaults"
and "Regression extension" sections, four decimals) and copied into :data:`PUBLISHED` below, with
the regressor it replaces (``lometab``, for "what moved"). The new LoMETab fits come from run folders
(``ensemblize experiment tabular-bench ... --split-seed S --out DIR``). Per (table, split) the four
seed means are ranked (1 = best; ties share ranks); the field's means are rounded to four decimals,
LoMETab's exact — a difference under 0.00005 can rank either way. Reporting only::

    python scripts/report_regression_published.py runs/s16/reg-split0 runs/s16/reg-split1 runs/s16/reg-split2
    python scripts/report_regression_published.py --published-lometab   # the published default (a check)
    python scripts/report_regression_published.py --was lometab_refit3 runs/s23/reg-split{0,1,2}   # vs refit, 3 networks
    python scripts/report_regression_published.py --was lometab_refit3 --fill runs/s23/reg-split{0,1,2}   # all six
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from scipy.stats import rankdata

BENCHMARK = ("concrete", "ames", "wage")
EXTENSION = ("deliveries", "computers", "nmes")
SPLITS = (0, 1, 2)

#: published seed-mean test RMSE / train std: method -> split seed -> table
PUBLISHED: dict[str, dict[int, dict[str, float]]] = {
    "tabm": {
        0: {"concrete": 0.2816, "ames": 0.3533, "wage": 0.9114, "deliveries": 0.2733, "computers": 0.2552, "nmes": 1.0191},
        1: {"concrete": 0.2881, "ames": 0.2376, "wage": 0.7936, "deliveries": 0.2850, "computers": 0.2608, "nmes": 1.0022},
        2: {"concrete": 0.2862, "ames": 0.2722, "wage": 0.8182, "deliveries": 0.2652, "computers": 0.2431, "nmes": 1.0085},
    },
    "xgboost": {
        0: {"concrete": 0.2746, "ames": 0.3494, "wage": 0.9294, "deliveries": 0.2851, "computers": 0.2526, "nmes": 1.0318},
        1: {"concrete": 0.2906, "ames": 0.2716, "wage": 0.8142, "deliveries": 0.3024, "computers": 0.2587, "nmes": 1.0018},
        2: {"concrete": 0.2678, "ames": 0.2965, "wage": 0.8267, "deliveries": 0.2809, "computers": 0.2409, "nmes": 1.0219},
    },
    "catboost": {
        0: {"concrete": 0.2707, "ames": 0.3298, "wage": 0.9155, "deliveries": 0.2723, "computers": 0.2459, "nmes": 1.0288},
        1: {"concrete": 0.2854, "ames": 0.2596, "wage": 0.7953, "deliveries": 0.2845, "computers": 0.2517, "nmes": 0.9995},
        2: {"concrete": 0.2454, "ames": 0.2830, "wage": 0.8161, "deliveries": 0.2702, "computers": 0.2393, "nmes": 1.0120},
    },
    "lometab": {
        0: {"concrete": 0.2770, "ames": 0.3681, "wage": 0.9117, "deliveries": 0.2722, "computers": 0.2520, "nmes": 1.0183},
        1: {"concrete": 0.3007, "ames": 0.2440, "wage": 0.7892, "deliveries": 0.2847, "computers": 0.2580, "nmes": 0.9941},
        2: {"concrete": 0.2661, "ames": 0.2727, "wage": 0.8183, "deliveries": 0.2678, "computers": 0.2385, "nmes": 1.0058},
    },
    # the refitting three-network regressor (fifteenth round; "Update: the regressor refits by default")
    "lometab_refit3": {
        0: {"concrete": 0.2435, "ames": 0.3619, "wage": 0.9121, "deliveries": 0.2728, "computers": 0.2451, "nmes": 1.0154},
        1: {"concrete": 0.2867, "ames": 0.2384, "wage": 0.7868, "deliveries": 0.2833, "computers": 0.2556, "nmes": 0.9919},
        2: {"concrete": 0.2537, "ames": 0.2695, "wage": 0.8184, "deliveries": 0.2693, "computers": 0.2305, "nmes": 1.0055},
    },
}  # fmt: skip
FIELD = ("tabm", "xgboost", "catboost")
FORMER = ("lometab", "lometab_refit3")
"""The published LoMETab defaults a new run can be compared with (``--was``): the pre-refit regressor
and the refitting three-network one."""


def new_means(folders: list[str]) -> dict[int, dict[str, float]]:
    """split -> table -> seed-mean test RMSE of the LoMETab records in ``folders`` (3 seeds each)."""
    from ensemblize.experiments.tabular import collect_records

    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in collect_records(*folders):
        if r["method"] == "lometab" and r["task"] == "regression":
            values[int(r.get("split_seed", 0)), r["dataset"]].append(float(r["metrics"]["rmse"]))
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for (s, t), v in values.items():
        if len(v) != 3:
            raise SystemExit(f"lometab / {t} / split {s}: {len(v)} seeds, expected 3")
        out[s][t] = float(np.mean(v))
    return out


def overlay(
    base: dict[int, dict[str, float]], new: dict[int, dict[str, float]]
) -> tuple[dict[int, dict[str, float]], set]:
    """``base``'s cells with ``new``'s where it has them; also the (split, table) cells taken from ``new``."""
    merged = {s: dict(base.get(s, {})) for s in SPLITS}
    fresh = {(s, t) for s, tables in new.items() for t in tables}
    for s, t in fresh:
        merged[s][t] = new[s][t]
    return merged, fresh


def ranks_of(lometab: dict[int, dict[str, float]]) -> dict[tuple[int, str], dict[str, float]]:
    """(split, table) -> method -> rank of 4 (1 = lowest RMSE, ties share), where LoMETab has the cell."""
    cells = {}
    for s in SPLITS:
        for t in (*BENCHMARK, *EXTENSION):
            if t not in lometab.get(s, {}):
                continue
            row = {"lometab": lometab[s][t], **{m: PUBLISHED[m][s][t] for m in FIELD}}
            cells[s, t] = dict(zip(row, rankdata(list(row.values())), strict=True))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*")
    parser.add_argument("--published-lometab", action="store_true", help="rank the published default instead")
    parser.add_argument("--was", choices=FORMER, default="lometab",
                        help="the published LoMETab default shown in brackets (and ranked by --published-lometab)")  # fmt: skip
    parser.add_argument("--fill", action="store_true",
                        help="cells the folders lack take the --was default's published means (marked *)")  # fmt: skip
    args = parser.parse_args()
    lometab = PUBLISHED[args.was] if args.published_lometab else new_means(args.folders)
    filled = set()
    if args.fill and not args.published_lometab:
        lometab, fresh = overlay(PUBLISHED[args.was], lometab)
        filled = {(s, t) for s in SPLITS for t in lometab[s]} - fresh
    cells = ranks_of(lometab)
    methods = ("lometab", *FIELD)
    print("| split | table | LoMETab (published default) | " + " | ".join(FIELD) + " | LoMETab rank |")
    print("|---|---|---|---|---|---|---|")
    for (s, t), r in cells.items():
        was = PUBLISHED[args.was][s][t]
        mark = "*" if (s, t) in filled else ""
        print(f"| {s} | {t} | {lometab[s][t]:.4f}{mark} ({was:.4f}) | "
              + " | ".join(f"{PUBLISHED[m][s][t]:.4f}" for m in FIELD) + f" | {r['lometab']:g} |")  # fmt: skip
    for name, tables in (("benchmark (3 tables)", BENCHMARK), ("extension (3 tables)", EXTENSION),
                         ("all six", (*BENCHMARK, *EXTENSION))):  # fmt: skip
        sel = [r for (s, t), r in cells.items() if t in tables]
        if len(sel) != len(tables) * len(SPLITS):
            print(f"{name}: {len(sel)} of {len(tables) * len(SPLITS)} cells")
            continue
        print(f"mean rank, {name}, three splits: "
              + ", ".join(f"{m} {np.mean([r[m] for r in sel]):.2f}" for m in methods))  # fmt: skip
        for s in SPLITS:
            per = [r for (s2, t), r in cells.items() if s2 == s and t in tables]
            print(f"  split {s}: " + ", ".join(f"{m} {np.mean([r[m] for r in per]):.2f}" for m in methods))


if __name__ == "__main__":
    main()
