"""Choose LoMETab's default knobs by mean VALIDATION rank across the benchmark tables (issue 11, item 4).

Validation only: no test row is scored here. Every fit uses the public estimators on the raw split
DataFrames of :func:`ensemblize.data.tables.split` (split seed 0, 64/16/20), model seed 0, one torch
thread, ``eval_set`` = the validation split:

* the field: official TabM (``TabMClassifier`` / ``TabMRegressor``) at the ``quick`` shape below, and
  XGBoost / CatBoost (``GBDTClassifier`` / ``GBDTRegressor``: lr 0.05, ≤ 4,000 rounds, early
  stopping after 50);
* the candidates: ``LoMETabClassifier`` / ``LoMETabRegressor`` at the same ``quick`` shape (K = 16,
  2 blocks of 128, ≤ 80 epochs, patience 12) with one setting of their own knobs (``rank``,
  ``init_scale``, ``monitor``, ``lr``, ``weight_decay``, ...), every other parameter at its default.

Score of a setting: on each table, every evaluated setting and the three field methods are ranked
together on the validation accuracy and log-loss (classification) or RMSE (regression; ties share
ranks); a setting's per-score mean rank is averaged over the tables, and its **selection score** is
the mean of its three per-score mean ranks (accuracy, log-loss, RMSE). A setting whose total fit CPU
exceeds official TabM's is not eligible (the issue's budget).

Search: greedy coordinate descent from the current default — each stage varies one knob around the
best setting so far and keeps a candidate only when it lowers the selection score. Stages whose
knob only matters for classification (``monitor``) reuse the parent's regression fits (identical
by construction). Every fit is one JSON line in ``--out`` (``runs/tab/select/fits.jsonl``); a
rerun resumes, skipping the fits already there.

    OMP_NUM_THREADS=1 python scripts/select_lometab_default.py --out runs/tab/select
    python scripts/select_lometab_default.py --out runs/tab/select --report   # tables only
"""

from __future__ import annotations

import argparse
import calendar
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

TABLES = ("concrete", "ames", "wage", "credit", "churn", "telco", "attrition", "hmda", "creditcard",
          "stackoverflow", "hpc", "wvs")  # fmt: skip
QUICK = {"members": 16, "n_blocks": 2, "d_block": 128, "max_epochs": 80, "patience": 12}
BASE = {"rank": 2, "init_scale": 1.0, "monitor": "accuracy", "lr": 2e-3, "weight_decay": 3e-4}
STAGES: list[tuple[str, list[Any]]] = [
    ("init_scale", [2.0, 4.0]),
    ("rank", [1, 4]),
    ("monitor", ["log_loss"]),
    ("lr", [1e-3, 4e-3]),
    ("weight_decay", [0.0, 3e-3]),
]
"""(knob, values tried around the best setting so far), in order. ``init_scale`` only upwards: the
current default's members are already 2.5–12x less diverse than TabM's (docs/results/tabular_bench.md)."""
REFINE: list[tuple[str, list[Any]]] = [
    ("monitor", ["log_loss"]),
    ("dropout", [0.2, 0.0]),
    ("weight_decay", [3e-3]),
]
"""``--refine``: single-knob variations of the chosen default (session 4: the knobs the first search
did not reach, and the NLL monitor, tried before only at init_scale 2)."""
CLASSIFICATION_ONLY = {"monitor"}
FIELD = ("tabm", "xgboost", "catboost")
SCORES = (("accuracy", False), ("log_loss", True), ("rmse", True))
"""(validation score, lower is better)."""


def setting_name(setting: dict[str, Any]) -> str:
    """A stable name of a LoMETab setting, e.g. ``r2_s1_acc_lr0.002_wd0.0003``."""
    mon = {"accuracy": "acc", "log_loss": "nll"}[setting["monitor"]]
    extra = "".join(f"_{k}{v:g}" for k, v in sorted(setting.items()) if k not in BASE)
    return (f"r{setting['rank']}_s{setting['init_scale']:g}_{mon}_lr{setting['lr']:g}"
            f"_wd{setting['weight_decay']:g}{extra}")  # fmt: skip


def _splits(table: str, cache: dict):
    from ensemblize.data.tables import load_benchmark, split

    if table not in cache:
        cache[table] = split(load_benchmark(table), seed=0)
    return cache[table]


def _estimator(method: str, task: str, setting: dict[str, Any] | None):
    import ensemblize.tabular as tab

    reg = task == "regression"
    if method == "lometab":
        cls = tab.LoMETabRegressor if reg else tab.LoMETabClassifier
        if reg:  # the regressor has no classification-only knobs (it always monitors the RMSE)
            setting = {k: v for k, v in (setting or {}).items() if k not in CLASSIFICATION_ONLY}
        return cls(random_state=0, **QUICK, **(setting or {}))
    if method == "tabm":
        cls = tab.TabMRegressor if reg else tab.TabMClassifier
        return cls(random_state=0, **QUICK)
    cls = tab.GBDTRegressor if reg else tab.GBDTClassifier
    return cls(kind=method, random_state=0, learning_rate=0.05, max_rounds=4000, early_stopping_rounds=50)


def _val_scores(est, splits) -> dict[str, float]:
    from ensemblize.evaluation.tabular import evaluate_predictions

    task, val = splits.train.task, splits.val
    if task == "regression":
        y_tr = splits.train.y.to_numpy(dtype=np.float64)
        mean, std = float(y_tr.mean()), float(y_tr.std())
        pred = (np.asarray(est.predict(val.X), dtype=np.float64) - mean) / std
        return evaluate_predictions(task, (val.y.to_numpy(dtype=np.float64) - mean) / std, pred)
    lookup = {c: i for i, c in enumerate(est.classes_.tolist())}
    y = np.asarray([lookup[v] for v in val.y.tolist()], dtype=np.int64)
    out = evaluate_predictions(task, y, np.asarray(est.predict_proba(val.X), dtype=np.float64))
    out.pop("roc_auc", None)
    return out


def fit_one(method: str, table: str, setting: dict[str, Any] | None, cache: dict) -> dict[str, Any]:
    """Fit one method (one LoMETab ``setting``) on ``table`` with seed 0; its validation record."""
    splits = _splits(table, cache)
    est = _estimator(method, splits.train.task, setting)
    wall, cpu = time.perf_counter(), time.process_time()
    est.fit(splits.train.X, splits.train.y, eval_set=(splits.val.X, splits.val.y))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rec = {"method": method, "table": table, "task": splits.train.task, "seed": 0,
           "cpu_seconds": cpu, "wall_seconds": wall, "val": _val_scores(est, splits)}  # fmt: skip
    if setting is not None:
        rec["setting"] = dict(setting)
        rec["name"] = setting_name(setting)
    else:
        rec["name"] = method
    history = getattr(est, "history_", None)
    if history:
        best = history[est.best_epoch_]
        rec["best_epoch"], rec["epochs"] = int(est.best_epoch_), len(history)
        kl = best.get("val_pairwise_kl", best.get("val_ambiguity"))
        rec["val_diversity"] = None if kl is None else float(kl)
    return rec


# ------------------------------------------------------------------------------------------------
# ranking
# ------------------------------------------------------------------------------------------------
def _table_scores(records: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """name -> table -> validation scores (a name's records on a table are one fit)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in records:
        out.setdefault(r["name"], {})[r["table"]] = r["val"]
    return out


def mean_ranks(records: list[dict], names: list[str] | None = None) -> dict[str, dict[str, float]]:
    """name -> {score: mean rank over the tables where every ranked name has that score, "select": …}.

    Names ranked together: ``names`` (default: every name with all tables) plus the field.
    """
    from scipy.stats import rankdata

    scores = _table_scores(records)
    if names is None:
        names = [n for n in scores if n not in FIELD and len(scores[n]) == len(TABLES)]
    pool = [*names, *[f for f in FIELD if f in scores]]
    out: dict[str, dict[str, float]] = {n: {} for n in pool}
    for score, lower in SCORES:
        tables = [t for t in TABLES if all(score in scores[n].get(t, {}) for n in pool)]
        ranks = np.zeros((len(pool), len(tables)))
        for j, t in enumerate(tables):
            v = np.array([scores[n][t][score] for n in pool])
            ranks[:, j] = rankdata(v if lower else -v, method="average")
        for i, n in enumerate(pool):
            out[n][score] = float(ranks[i].mean()) if tables else float("nan")
    for n in pool:
        out[n]["select"] = float(np.mean([out[n][s] for s, _ in SCORES]))
    return out


def cpu_total(records: list[dict], name: str) -> float:
    """Total fit CPU seconds of ``name`` over the tables (reused fits counted once per table)."""
    return float(sum(r["cpu_seconds"] for r in records if r["name"] == name))


# ------------------------------------------------------------------------------------------------
# search
# ------------------------------------------------------------------------------------------------
def _load(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def _ensure(method, setting, tables, records, out, cache, *, reuse_from=None) -> None:
    name = method if setting is None else setting_name(setting)
    done = {r["table"] for r in records if r["name"] == name}
    for table in tables:
        if table in done:
            continue
        task = _splits(table, cache).train.task
        if reuse_from is not None and task == "regression":
            src = next(r for r in records if r["name"] == reuse_from and r["table"] == table)
            rec = {**src, "setting": dict(setting), "name": name, "reused_from": reuse_from}
        else:
            rec = fit_one(method, table, setting, cache)
        records.append(rec)
        with out.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"{time.strftime('%H:%M:%S')} {name:<40} {table:<14} cpu {rec['cpu_seconds']:6.1f}s "
              f"{json.dumps(rec['val'])}", flush=True)  # fmt: skip


def search(out_dir: Path, *, cpu_budget: float, stop_at: float | None = None) -> dict[str, Any]:
    """Run (or resume) the greedy search; returns the chosen setting.

    Stops starting stages once ``cpu_budget`` fit CPU seconds are spent, and starting candidates
    once the wall clock passes ``stop_at`` (epoch seconds); a stage cut short compares only its
    complete candidates.
    """
    torch.set_num_threads(1)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fits.jsonl"
    records, cache = _load(path), {}
    for method in FIELD:
        _ensure(method, None, TABLES, records, path, cache)
    best = dict(BASE)
    _ensure("lometab", best, TABLES, records, path, cache)
    tabm_cpu = cpu_total(records, "tabm")
    log = []
    for knob, values in STAGES:
        spent = sum(r["cpu_seconds"] for r in records if "reused_from" not in r)
        if spent > cpu_budget:
            print(f"CPU budget {cpu_budget:.0f}s spent ({spent:.0f}s); stopping before stage {knob}")
            break
        parent = setting_name(best)
        candidates = []
        for v in values:
            cand = {**best, knob: v}
            complete = sum(r["name"] == setting_name(cand) for r in records) == len(TABLES)
            if stop_at is not None and time.time() > stop_at and not complete:
                print(f"wall-clock stop reached; stage {knob} keeps {len(candidates)} candidate(s)")
                break
            reuse = parent if knob in CLASSIFICATION_ONLY else None
            _ensure("lometab", cand, TABLES, records, path, cache, reuse_from=reuse)
            candidates.append(cand)
        if not candidates:
            break
        ranks = mean_ranks(records, [parent, *[setting_name(c) for c in candidates]])
        eligible = [c for c in candidates if cpu_total(records, setting_name(c)) <= tabm_cpu]
        winner = min([best, *eligible], key=lambda c: ranks[setting_name(c)]["select"])
        log.append({"stage": knob, "parent": parent, "ranks": ranks, "chosen": setting_name(winner)})
        print(f"stage {knob}: " + ", ".join(f"{n} {r['select']:.3f}" for n, r in ranks.items())
              + f" -> {setting_name(winner)}", flush=True)  # fmt: skip
        best = winner
    (out_dir / "stages.json").write_text(json.dumps(log, indent=1))
    (out_dir / "greedy.json").write_text(json.dumps(best, indent=1))
    chosen = choose(records)
    (out_dir / "chosen.json").write_text(json.dumps(chosen, indent=1))
    return chosen


def refine(out_dir: Path) -> dict[str, Any]:
    """Try each :data:`REFINE` variation of the current choice (``chosen.json``), then choose again
    among every complete setting by :func:`choose`'s field rank."""
    torch.set_num_threads(1)
    path = out_dir / "fits.jsonl"
    records, cache = _load(path), {}
    chosen = json.loads((out_dir / "chosen.json").read_text())
    for knob, values in REFINE:
        for v in values:
            cand = {**chosen, knob: v}
            reuse = setting_name(chosen) if knob in CLASSIFICATION_ONLY else None
            _ensure("lometab", cand, TABLES, records, path, cache, reuse_from=reuse)
    new = choose(records)
    (out_dir / "chosen.json").write_text(json.dumps(new, indent=1))
    return new


def field_ranks(records: list[dict]) -> dict[str, dict[str, float]]:
    """Each complete LoMETab setting ranked with the field only (TabM, XGBoost, CatBoost), alone.

    The issue's goal measured on validation; unlike :func:`mean_ranks` over every setting, a
    setting's value does not depend on which other settings were tried.
    """
    scores = _table_scores(records)
    names = [n for n in scores if n not in FIELD and len(scores[n]) == len(TABLES)]
    return {n: mean_ranks(records, [n])[n] for n in names}


def choose(records: list[dict]) -> dict[str, Any]:
    """The final default: the complete, CPU-eligible setting with the lowest field rank (ties: the
    first tried). The greedy stages above only decide which settings get tried: ranked jointly
    with one another their order flips as settings are added (σ_init 2 over 4 in its stage, 4 over 2
    among all), which the field rank avoids."""
    tabm_cpu = cpu_total(records, "tabm")
    ranks = field_ranks(records)
    eligible = [n for n in ranks if cpu_total(records, n) <= tabm_cpu]
    name = min(eligible, key=lambda n: ranks[n]["select"])
    return dict(next(r["setting"] for r in records if r["name"] == name))


def report(out_dir: Path) -> str:
    """Markdown: every complete setting's validation field ranks (with TabM, XGBoost, CatBoost),
    its rank among all settings and the field ranked together, and its fit CPU."""
    records = _load(out_dir / "fits.jsonl")
    field, joint = field_ranks(records), mean_ranks(records)
    tabm_cpu = cpu_total(records, "tabm")
    lines = ["| setting | field rank: accuracy | log-loss | RMSE | mean | joint rank (all) | CPU s (12 fits) "
             "| × TabM CPU |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in sorted(field.items(), key=lambda kv: kv[1]["select"]):
        cpu = cpu_total(records, name)
        lines.append(f"| {name} | {r['accuracy']:.2f} | {r['log_loss']:.2f} | {r['rmse']:.2f} | "
                     f"{r['select']:.2f} | {joint[name]['select']:.2f} | {cpu:.0f} | {cpu / tabm_cpu:.2f} |")  # fmt: skip
    for name in FIELD:
        cpu = cpu_total(records, name)
        lines.append(
            f"| {name} (field) | | | | | {joint[name]['select']:.2f} | {cpu:.0f} | {cpu / tabm_cpu:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/tab/select"))
    ap.add_argument("--cpu-budget", type=float, default=2400.0, help="stop starting stages past this")
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM: start no candidate after it (today)")
    ap.add_argument("--report", action="store_true", help="print the table of the fits so far and exit")
    ap.add_argument(
        "--refine", action="store_true", help="try REFINE's variations of chosen.json, choose again"
    )
    args = ap.parse_args()
    if args.refine:
        print("chosen:", json.dumps(refine(args.out)))
    elif not args.report:
        stop_at = None
        if args.stop_at:
            hh, mm = map(int, args.stop_at.split(":"))
            now = time.gmtime()
            stop_at = calendar.timegm((now.tm_year, now.tm_mon, now.tm_mday, hh, mm, 0, 0, 0, 0))
        print("chosen:", json.dumps(search(args.out, cpu_budget=args.cpu_budget, stop_at=stop_at)))
    print(report(args.out))


if __name__ == "__main__":
    main()
