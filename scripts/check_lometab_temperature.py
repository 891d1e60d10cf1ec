"""Should ``LoMETabClassifier`` calibrate by default? A validation-only check (issue 11, item 4).

The classifier can fit one temperature ``T`` on its validation split after training
(``calibration="temperature"``, :mod:`ensemblize.tabular.estimator_base`, step 6). Scoring that on the
same split would flatter it, so this script **cross-fits**: the validation split of each table is cut
into two stratified halves; ``T`` fitted on one half rescales the other half's member probabilities
(``softmax(log p_k / T)``, the same as ``softmax(z_k / T)``), and the two halves are scored together.
No test row is read.

Setting: the selection script's protocol (``scripts/select_lometab_default.py``: split seed 0,
model seed 0, ``eval_set`` = validation, the ``quick`` shape) on its 9 classification tables, with the
committed defaults and ``calibration="none"``. The uncalibrated validation scores must reproduce that
script's record of the same setting (checked and printed). Ranks: the calibrated and uncalibrated
LoMETab each ranked with the field (official TabM, XGBoost, CatBoost: their validation records in
``runs/tab/select/fits.jsonl``) on validation accuracy and log-loss.

    OMP_NUM_THREADS=1 python scripts/check_lometab_temperature.py --select runs/tab/select --out runs/tab/temperature.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import torch

_SELECT = Path(__file__).with_name("select_lometab_default.py")
_spec = importlib.util.spec_from_file_location("select_lometab_default", _SELECT)
select = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(select)

DEFAULT = {"rank": 2, "init_scale": 4.0, "monitor": "accuracy", "lr": 2e-3, "weight_decay": 3e-4}


def _halves(y: np.ndarray, seed: int = 0) -> np.ndarray:
    """A stratified 0/1 assignment of the validation rows to two halves."""
    rng = np.random.default_rng(seed)
    half = np.zeros(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        half[idx[len(idx) // 2 :]] = 1
    return half


def _scores(task: str, y: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    from ensemblize.evaluation.tabular import evaluate_predictions

    out = evaluate_predictions(task, y, proba)
    return {"accuracy": out["accuracy"], "log_loss": out["log_loss"]}


def check_table(table: str, cache: dict) -> dict:
    from ensemblize.models.temperature_scaling import fit_temperature

    splits = select._splits(table, cache)
    task = splits.train.task
    est = select._estimator("lometab", task, {**DEFAULT, "calibration": "none"})
    cpu = time.process_time()
    est.fit(splits.train.X, splits.train.y, eval_set=(splits.val.X, splits.val.y))
    cpu = time.process_time() - cpu
    lookup = {c: i for i, c in enumerate(est.classes_.tolist())}
    y = np.asarray([lookup[v] for v in splits.val.y.tolist()], dtype=np.int64)
    members = est.predict_members(splits.val.X)  # (N, K, C), T = 1
    logp = torch.from_numpy(np.log(np.clip(members, 1e-300, None)))
    half = _halves(y)
    crossfit = np.empty((len(y), members.shape[-1]))
    temps = []
    for h in (0, 1):
        fit_rows, score_rows = half == h, half != h
        t = fit_temperature(logp[fit_rows], torch.from_numpy(y[fit_rows]))
        temps.append(t)
        crossfit[score_rows] = torch.softmax(logp[score_rows] / t, dim=-1).mean(1).numpy()
    crossfit /= crossfit.sum(1, keepdims=True)
    plain = members.mean(1)
    plain /= plain.sum(1, keepdims=True)
    t_full = fit_temperature(logp, torch.from_numpy(y))
    return {"table": table, "cpu_seconds": cpu, "temperatures_halves": temps, "temperature_full": t_full,
            "val_plain": _scores(task, y, plain), "val_crossfit": _scores(task, y, crossfit)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--select", type=Path, default=Path("runs/tab/select"), help="the selection run folder")
    ap.add_argument("--out", type=Path, default=Path("runs/tab/temperature.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    field = [r for r in select._load(args.select / "fits.jsonl") if r["task"] != "regression"]
    reference = {r["table"]: r["val"] for r in field if r["name"] == select.setting_name(DEFAULT)}
    done = {r["table"]: r for r in select._load(args.out)}
    cache: dict = {}
    tables = [t for t in select.TABLES if select._splits(t, cache).train.task != "regression"]
    for table in tables:
        if table not in done:
            done[table] = check_table(table, cache)
            with args.out.open("a") as fh:
                fh.write(json.dumps(done[table]) + "\n")
        r = done[table]
        ref = reference.get(table, {})
        print(f"{table:<14} T half {r['temperatures_halves'][0]:.3f}/{r['temperatures_halves'][1]:.3f} "
              f"full {r['temperature_full']:.3f}  val log-loss {r['val_plain']['log_loss']:.4f} -> "
              f"{r['val_crossfit']['log_loss']:.4f}  acc {r['val_plain']['accuracy']:.4f} -> "
              f"{r['val_crossfit']['accuracy']:.4f}  (selection record: log-loss {ref.get('log_loss', float('nan')):.4f})")  # fmt: skip
    # ranks with the field on validation
    records = [r for r in field if r["name"] in select.FIELD]
    for name, key in (("uncalibrated", "val_plain"), ("temperature (cross-fitted)", "val_crossfit")):
        recs = records + [
            {"name": name, "table": t, "task": "classification", "val": done[t][key]} for t in tables
        ]
        ranks = select.mean_ranks(recs, [name])  # the selection's ranking; no RMSE here (classification)
        print(f"{name:<28} " + "  ".join(f"{n}: acc {v['accuracy']:.2f} log-loss {v['log_loss']:.2f}"
                                          for n, v in ranks.items()))  # fmt: skip
    better = sum(done[t]["val_crossfit"]["log_loss"] < done[t]["val_plain"]["log_loss"] for t in tables)
    print(f"cross-fitted temperature lowers validation log-loss on {better} of {len(tables)} tables")


if __name__ == "__main__":
    main()
