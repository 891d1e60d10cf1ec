"""Classification test ranks of new LoMETab classifier fits against the field's published seed means.

The field — official TabM, XGBoost and CatBoost at the benchmark's settings, the nine classification
tables x split seeds 0, 1, 2, model seeds 0-2 — was fitted in earlier sessions; its fits are not on this
machine, and its seed-mean test accuracy and log-loss are published in docs/results/tabular_bench.md
(section "Current defaults", four decimals) and copied into :data:`PUBLISHED` below, with the published
LoMETab classifier (``lometab``, for "what moved"). New LoMETab fits come from run folders
(``ensemblize experiment tabular-bench ... --split-seed S --out DIR``). Per (table, split) the four seed
means, every one rounded to four decimals (the field's precision: a test accuracy is a count, and ties
are real), are ranked (1 = best; ties share ranks). The published ranks were computed on exact means,
so a published mean ranked here may differ where rounding makes a tie (``--published-lometab`` shows
by how much: accuracy 2.00 here vs 2.02 published). Reporting only::

    python scripts/report_classifier_published.py runs/s23c/clf-split0 runs/s23c/clf-split1 runs/s23c/clf-split2
    python scripts/report_classifier_published.py --published-lometab   # the published classifier, ranked here
    python scripts/report_classifier_published.py --fill runs/s23c/clf-split0 runs/s23c/clf-split1   # split 2 published
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from scipy.stats import rankdata

TABLES = ("credit", "churn", "telco", "attrition", "hmda", "creditcard", "stackoverflow", "hpc", "wvs")
SPLITS = (0, 1, 2)
METRICS = ("accuracy", "log_loss")
FIELD = ("tabm", "xgboost", "catboost")

#: published seed-mean test scores: method -> metric -> split seed -> table
PUBLISHED: dict[str, dict[str, dict[int, dict[str, float]]]] = {
    "tabm": {
        "accuracy": {
            0: {"credit": 0.8111, "churn": 0.9593, "telco": 0.8100, "attrition": 0.8696, "hmda": 0.9216, "creditcard": 0.8321, "stackoverflow": 0.8978, "hpc": 0.8378, "wvs": 0.5104},
            1: {"credit": 0.8040, "churn": 0.9573, "telco": 0.8060, "attrition": 0.8832, "hmda": 0.8971, "creditcard": 0.8422, "stackoverflow": 0.8943, "hpc": 0.8312, "wvs": 0.5054},
            2: {"credit": 0.7976, "churn": 0.9630, "telco": 0.7996, "attrition": 0.8810, "hmda": 0.8908, "creditcard": 0.8523, "stackoverflow": 0.8972, "hpc": 0.8424, "wvs": 0.5048},
        },
        "log_loss": {
            0: {"credit": 0.4239, "churn": 0.1402, "telco": 0.4024, "attrition": 0.3258, "hmda": 0.2290, "creditcard": 0.4041, "stackoverflow": 0.3047, "hpc": 0.4207, "wvs": 0.9351},
            1: {"credit": 0.4240, "churn": 0.1599, "telco": 0.4295, "attrition": 0.3024, "hmda": 0.2697, "creditcard": 0.3534, "stackoverflow": 0.3067, "hpc": 0.4701, "wvs": 0.9338},
            2: {"credit": 0.4537, "churn": 0.1455, "telco": 0.4038, "attrition": 0.3330, "hmda": 0.3115, "creditcard": 0.3612, "stackoverflow": 0.3046, "hpc": 0.4448, "wvs": 0.9341},
        },
    },
    "xgboost": {
        "accuracy": {
            0: {"credit": 0.8021, "churn": 0.9560, "telco": 0.8062, "attrition": 0.8605, "hmda": 0.9167, "creditcard": 0.8371, "stackoverflow": 0.8972, "hpc": 0.8189, "wvs": 0.4930},
            1: {"credit": 0.7924, "churn": 0.9550, "telco": 0.7982, "attrition": 0.8764, "hmda": 0.9013, "creditcard": 0.8359, "stackoverflow": 0.8972, "hpc": 0.8312, "wvs": 0.4964},
            2: {"credit": 0.7995, "churn": 0.9527, "telco": 0.7999, "attrition": 0.8605, "hmda": 0.8978, "creditcard": 0.8295, "stackoverflow": 0.8975, "hpc": 0.8362, "wvs": 0.5085},
        },
        "log_loss": {
            0: {"credit": 0.4349, "churn": 0.1473, "telco": 0.4159, "attrition": 0.3698, "hmda": 0.2337, "creditcard": 0.4114, "stackoverflow": 0.3080, "hpc": 0.4277, "wvs": 0.9437},
            1: {"credit": 0.4396, "churn": 0.1586, "telco": 0.4275, "attrition": 0.3162, "hmda": 0.2656, "creditcard": 0.3724, "stackoverflow": 0.3032, "hpc": 0.4664, "wvs": 0.9509},
            2: {"credit": 0.4429, "churn": 0.1550, "telco": 0.4062, "attrition": 0.3608, "hmda": 0.2938, "creditcard": 0.3921, "stackoverflow": 0.3073, "hpc": 0.4530, "wvs": 0.9472},
        },
    },
    "catboost": {
        "accuracy": {
            0: {"credit": 0.8088, "churn": 0.9603, "telco": 0.8081, "attrition": 0.8549, "hmda": 0.9132, "creditcard": 0.8422, "stackoverflow": 0.8972, "hpc": 0.8170, "wvs": 0.5104},
            1: {"credit": 0.8028, "churn": 0.9600, "telco": 0.8039, "attrition": 0.8707, "hmda": 0.8915, "creditcard": 0.8447, "stackoverflow": 0.8966, "hpc": 0.8247, "wvs": 0.5156},
            2: {"credit": 0.7976, "churn": 0.9587, "telco": 0.8027, "attrition": 0.8560, "hmda": 0.8985, "creditcard": 0.8346, "stackoverflow": 0.8990, "hpc": 0.8320, "wvs": 0.5085},
        },
        "log_loss": {
            0: {"credit": 0.4264, "churn": 0.1428, "telco": 0.4093, "attrition": 0.3518, "hmda": 0.2354, "creditcard": 0.4052, "stackoverflow": 0.3016, "hpc": 0.4187, "wvs": 0.9304},
            1: {"credit": 0.4255, "churn": 0.1530, "telco": 0.4279, "attrition": 0.3109, "hmda": 0.2702, "creditcard": 0.3648, "stackoverflow": 0.3014, "hpc": 0.4665, "wvs": 0.9395},
            2: {"credit": 0.4437, "churn": 0.1451, "telco": 0.4006, "attrition": 0.3464, "hmda": 0.2958, "creditcard": 0.3813, "stackoverflow": 0.3026, "hpc": 0.4500, "wvs": 0.9376},
        },
    },
    "lometab": {
        "accuracy": {
            0: {"credit": 0.8111, "churn": 0.9567, "telco": 0.8074, "attrition": 0.8832, "hmda": 0.9209, "creditcard": 0.8485, "stackoverflow": 0.8972, "hpc": 0.8374, "wvs": 0.5138},
            1: {"credit": 0.8036, "churn": 0.9553, "telco": 0.8148, "attrition": 0.8798, "hmda": 0.8978, "creditcard": 0.8510, "stackoverflow": 0.8954, "hpc": 0.8354, "wvs": 0.5026},
            2: {"credit": 0.8058, "churn": 0.9597, "telco": 0.8013, "attrition": 0.8753, "hmda": 0.8943, "creditcard": 0.8561, "stackoverflow": 0.8972, "hpc": 0.8435, "wvs": 0.5051},
        },
        "log_loss": {
            0: {"credit": 0.4194, "churn": 0.1477, "telco": 0.4025, "attrition": 0.3195, "hmda": 0.2310, "creditcard": 0.4103, "stackoverflow": 0.3008, "hpc": 0.3955, "wvs": 0.9297},
            1: {"credit": 0.4176, "churn": 0.1770, "telco": 0.4235, "attrition": 0.2958, "hmda": 0.2663, "creditcard": 0.3463, "stackoverflow": 0.3033, "hpc": 0.4518, "wvs": 0.9370},
            2: {"credit": 0.4414, "churn": 0.1489, "telco": 0.4018, "attrition": 0.3344, "hmda": 0.3084, "creditcard": 0.3616, "stackoverflow": 0.3065, "hpc": 0.4213, "wvs": 0.9339},
        },
    },
}  # fmt: skip


def new_means(folders: list[str]) -> dict[str, dict[int, dict[str, float]]]:
    """metric -> split -> table -> seed-mean test score of the LoMETab records in ``folders`` (3 seeds)."""
    from ensemblize.experiments.tabular import collect_records

    values: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for r in collect_records(*folders):
        if r["method"] == "lometab" and r["task"] != "regression":
            for metric in METRICS:
                values[metric, int(r.get("split_seed", 0)), r["dataset"]].append(float(r["metrics"][metric]))
    out: dict[str, dict[int, dict[str, float]]] = {m: defaultdict(dict) for m in METRICS}
    for (metric, s, t), v in values.items():
        if len(v) != 3:
            raise SystemExit(f"lometab / {t} / split {s}: {len(v)} seeds, expected 3")
        out[metric][s][t] = float(np.mean(v))
    return out


def ranks_of(
    lometab: dict[str, dict[int, dict[str, float]]], metric: str
) -> dict[tuple[int, str], dict[str, float]]:
    """(split, table) -> method -> rank of 4 on ``metric`` at four decimals, where LoMETab has the cell."""
    sign = -1.0 if metric == "accuracy" else 1.0
    cells = {}
    for s in SPLITS:
        for t in TABLES:
            if t not in lometab[metric].get(s, {}):
                continue
            row = {"lometab": lometab[metric][s][t], **{m: PUBLISHED[m][metric][s][t] for m in FIELD}}
            cells[s, t] = dict(zip(row, rankdata([sign * round(v, 4) for v in row.values()]), strict=True))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*")
    parser.add_argument(
        "--published-lometab", action="store_true", help="rank the published classifier instead"
    )
    parser.add_argument("--fill", action="store_true",
                        help="cells the folders lack take the published classifier's means (marked *)")  # fmt: skip
    args = parser.parse_args()
    lometab = PUBLISHED["lometab"] if args.published_lometab else new_means(args.folders)
    filled = set()
    if args.fill and not args.published_lometab:
        lometab = {m: {s: dict(lometab[m].get(s, {})) for s in SPLITS} for m in METRICS}
        for m in METRICS:
            for s in SPLITS:
                for t, v in PUBLISHED["lometab"][m][s].items():
                    if t not in lometab[m][s]:
                        lometab[m][s][t] = v
                        filled.add((s, t))
    methods = ("lometab", *FIELD)
    for metric in METRICS:
        cells = ranks_of(lometab, metric)
        print(f"\n{metric}\n")
        print(
            "| split | table | LoMETab (published) | " + " | ".join(FIELD) + " | LoMETab rank (published) |"
        )
        print("|---|---|---|---|---|---|---|")
        was = ranks_of(PUBLISHED["lometab"], metric)
        for (s, t), r in cells.items():
            mark = "*" if (s, t) in filled else ""
            print(f"| {s} | {t} | {lometab[metric][s][t]:.4f}{mark} ({PUBLISHED['lometab'][metric][s][t]:.4f}) | "
                  + " | ".join(f"{PUBLISHED[m][metric][s][t]:.4f}" for m in FIELD)
                  + f" | {r['lometab']:g} ({was[s, t]['lometab']:g}) |")  # fmt: skip
        print(f"mean rank, {metric}, {len(cells)} of {len(TABLES) * len(SPLITS)} cells: "
              + ", ".join(f"{m} {np.mean([r[m] for r in cells.values()]):.2f}" for m in methods))  # fmt: skip
        for s in SPLITS:
            per = [r for (s2, _), r in cells.items() if s2 == s]
            if per:
                print(
                    f"  split {s}: " + ", ".join(f"{m} {np.mean([r[m] for r in per]):.2f}" for m in methods)
                )


if __name__ == "__main__":
    main()
