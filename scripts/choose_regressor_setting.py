"""Choose the regressor's training setting by validation RMSE over several splits (issue 11, item 4).

Validation only: the rule below reads ``val_rmse`` and nothing else; test scores are in the records
(the benchmark's job records) but are not printed or used here. The rule was committed before any of
its fits ran.

Why several splits: on the small regression tables (concrete: 165 validation rows) one split's
validation cannot tell the regressor's settings apart (docs/results/tabular_bench.md, sixth round).
Every candidate is therefore scored on three 64/16/20 splits (split seeds 0, 1, 2), three model
seeds each, and ranked per (table, split) cell.

Candidates: the shipped ``LoMETabRegressor`` default and five single-knob changes of it —
``batch_size`` 128 and 64 (at "auto" = 256 a 659-row training set gets three steps an epoch),
``dropout`` 0.1 (the classifier's), ``weight_decay`` 3e-3 (10x) and ``lr`` 1e-3 (half).

Rule, two stages:

1. **Screen** on the three cheap regression tables (concrete, wage, nmes) x split seeds 0, 1, 2 =
   9 cells: in each cell the six settings are ranked on the seed-mean validation RMSE (ties share
   ranks); a setting's score is its mean rank over the cells. The best-scoring non-default setting
   goes on only if it scores better than the default; otherwise the default stays and stage 2 is
   not run.
2. **Confirm** on all six regression tables (adding ames, deliveries, computers) x split seeds
   0, 1, 2 = 18 cells, that setting against the default alone: it replaces the default only if its
   mean rank over the 18 cells is lower (it wins more than half the cells); a tie keeps the default.

Rounds (``--round``; :data:`ROUNDS`): **7** — the candidates above (its default pinned to
``batch_size=256``, what "auto" meant on these tables when it ran; ``batch128`` won and is now the
default). **8** — the same rule from round 7's winner (the shipped default, auto batch 128), with five
single-knob changes aimed at small regression tables: ``n_bins`` 16 (coarser piecewise-linear
embeddings), ``init_scale`` 2.0 and 8.0 (less / more member diversity), ``n_blocks`` 3 and
``members`` 32; its default's fits are round 7's ``batch128`` fits (``--import-default
regsel.jsonl:batch128``: the same fits, as "auto" now resolves to 128 there). **9** — the same rule
and default (imported the same way), on the one axis no round had touched, the learning-rate
schedule: ``lr_schedule="plateau"`` (lr × 0.3 after every 4 epochs without a better validation RMSE,
at the default patience 12), the same with patience 24 (cuts after 8 and 16 stalled epochs), and
patience 24 at a constant lr (the control that separates the longer patience from the cuts). The
screen ranks four settings per cell.
**13** — the same rule from the shipped regressor (patience 24, auto batch 128, independent network
seeds; its fits: the current benchmark folders, ``--import runs/s13/lometab-split0 … lometabx-split2``),
one candidate: ``ema_decay=0.999``, an exponential moving average of the weights that validation,
early stopping and the fitted network use (see ``choose_classifier_setting.py``, round 13, for why).
The screen then ranks two settings per cell (the candidate goes on to the confirmation only if its
mean rank over the 9 screen cells is lower than the default's)::

    python scripts/choose_regressor_setting.py --round 13 --out F --import runs/s13/lometab-split{0,1,2} runs/s13/lometabx-split{0,1,2}
    OMP_NUM_THREADS=1 python scripts/choose_regressor_setting.py --round 13 --stage 1 --tables concrete --out F
    python scripts/choose_regressor_setting.py --round 13 --report --out F

(The screen kept the default: ``ema`` 1.67 vs 1.33 — worse on concrete in all three splits; the
confirmation was not run.)

**15** — the same two-stage rule from the shipped regressor, one candidate: ``refit_full=True``
(after early stopping has chosen each network's epoch count, retrain it from its initial weights on
training + validation rows for that many epochs). A refitted network has trained on the validation
rows, so its validation score cannot rank it; this round therefore runs **nested** (:data:`NESTED`):
each (table, split, seed) fit gets only the split's 64 % training rows, divided 80 / 20 (seeded by
the split seed, the same rows for both candidates) into inner training and inner validation rows
(``eval_set``), and both candidates are scored on the split's **validation** rows, which neither saw —
the ``val_rmse`` the rule reads (RMSE / the inner training target's std). The test rows are not
loaded by these fits. Rule, stages and tables as above; the default's fits are new (nested)::

    OMP_NUM_THREADS=1 python scripts/choose_regressor_setting.py --round 15 --stage 1 --tables concrete --out F
    python scripts/choose_regressor_setting.py --round 15 --report --out F

**16** — the same two-stage rule, nested as round 15, from the shipped (refitting) regressor, one
candidate: ``n_networks=5`` (five pooled networks instead of three: 80 members; the regressor's CPU
is 0.35x official TabM's, so there is room). Network ``s`` of a pooled estimator is seeded by
``(random_state, s)`` alone, so the first three networks of a five-network fit are, bitwise, the
three-network default (checked on diabetes with refit before this round: ``predict_members`` equal in
the first 48 columns). Each (table, split, seed) is therefore fitted once, at five networks, and
scored twice (:data:`PREFIX_ROUNDS`): the mean of the first three networks' members (``default``) and
of all five (``networks5``). The default's ``cpu_seconds`` is the shared fit's; compare costs from
the published figures (5/3 of the network work), not from these records::

    OMP_NUM_THREADS=1 python scripts/choose_regressor_setting.py --round 16 --stage 1 --tables concrete --out F
    python scripts/choose_regressor_setting.py --round 16 --report --out F

Each fit is :func:`ensemblize.experiments.tabular_methods.tabular_job` (method ``lometab``, budget
``full``, the candidate's overrides) — exactly the benchmark's job — one JSON line per fit in
``--out``; a rerun skips the fits already there. ``--import RUN_DIR`` first copies the default's
records from a benchmark run folder (same estimator defaults) so they are not fitted twice::

    OMP_NUM_THREADS=1 python scripts/choose_regressor_setting.py --stage 1 --tables concrete --out F
    OMP_NUM_THREADS=1 python scripts/choose_regressor_setting.py --stage 1 --tables wage,nmes --out F
    python scripts/choose_regressor_setting.py --report --out F
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

#: round -> candidates (name -> overrides of the shipped regressor); "default" is the round's baseline
ROUNDS: dict[int, dict[str, dict]] = {
    # round 7 ran when "auto" meant 256 on these tables; pinning 256 reproduces that default here
    7: {
        "default": {"batch_size": 256},
        "batch128": {"batch_size": 128},
        "batch64": {"batch_size": 64},
        "dropout0.1": {"dropout": 0.1},
        "wd3e-3": {"weight_decay": 3e-3},
        "lr1e-3": {"lr": 1e-3},
    },
    # round 8, from round 7's winner (now the default, auto batch 128): the embedding, diversity and depth
    8: {
        "default": {},
        "bins16": {"n_bins": 16},
        "init2": {"init_scale": 2.0},
        "init8": {"init_scale": 8.0},
        "depth3": {"n_blocks": 3},
        "k32": {"members": 32},
    },
    # round 9, from the same default: the learning-rate schedule (every earlier round trained at a
    # constant lr; regression fits reach their best epoch early and stall — nmes 0-8, wage 3-19)
    9: {
        "default": {},
        "plateau": {"lr_schedule": "plateau"},
        "plateau_p24": {"lr_schedule": "plateau", "patience": 24},
        "p24": {"patience": 24},
    },
    # round 13, from the shipped regressor (patience 24): weight averaging
    13: {
        "default": {},
        "ema": {"ema_decay": 0.999},
    },
    # round 15 (nested, see NESTED): retrain on training + validation rows at the chosen epochs
    15: {
        "default": {},
        "refit": {"refit_full": True},
    },
    # round 16 (nested, scored on network prefixes of one fit, see PREFIX_ROUNDS): five pooled networks
    16: {
        "default": {},
        "networks5": {"n_networks": 5},
    },
}

#: rounds whose candidates differ only in how many pooled networks are averaged: round -> (the
#: candidate that is fitted, {candidate: networks scored}); every candidate is the first networks of it
PREFIX_ROUNDS: dict[int, tuple[str, dict[str, int]]] = {16: ("networks5", {"default": 3, "networks5": 5})}

#: rounds scored nested: fitted on an inner 80/20 division of the training rows, scored on the split's
#: validation rows (a candidate that trains on its eval_set cannot be ranked on it)
NESTED = frozenset({15, 16})
INNER_VAL_FRACTION = 0.2

SCREEN_TABLES = ("concrete", "wage", "nmes")
CONFIRM_TABLES = ("concrete", "ames", "wage", "deliveries", "computers", "nmes")
SPLITS = (0, 1, 2)
SEEDS = (0, 1, 2)


def _nested_splits(dataset: str, split_seed: int):
    """Split ``split_seed``'s training rows divided 80 / 20 (seeded by the split seed) into inner training
    (``train``) and inner validation (``val``) rows; its validation rows as ``test``; its test rows dropped."""
    from sklearn.model_selection import train_test_split

    from ensemblize.data.tables import TableSplits
    from ensemblize.experiments.tabular_methods import load_split

    splits = load_split(dataset, split_seed=split_seed)
    inner_tr, inner_va = train_test_split(
        np.arange(splits.train.n_rows), test_size=INNER_VAL_FRACTION, random_state=int(split_seed)
    )
    inner_tr, inner_va = np.sort(inner_tr), np.sort(inner_va)
    return TableSplits(
        train=splits.train.subset(inner_tr), val=splits.train.subset(inner_va), test=splits.val,
        seed=splits.seed, fractions=splits.fractions,
        indices={"train": splits.indices["train"][inner_tr], "val": splits.indices["train"][inner_va],
                 "test": splits.indices["val"]},
    )  # fmt: skip


def nested_job(*, dataset: str, seed: int, split_seed: int, overrides: dict) -> dict:
    """The benchmark's LoMETab regressor job on an inner division of split ``split_seed``'s training rows.

    Inner training / inner validation = a seeded 80 / 20 shuffle of the training rows (seed
    ``split_seed``; the same for every candidate and model seed); the estimator early-stops on the
    inner validation rows; ``metrics["val_rmse"]`` is its RMSE on the split's validation rows (in
    units of the inner training target's std), ``metrics["inner_val_rmse"]`` the inner one. The
    split's test rows are dropped before anything is fitted.
    """
    from ensemblize.experiments.tabular_methods import _estimator_job, budget_config

    nested = _nested_splits(dataset, split_seed)
    inner_tr, inner_va = range(nested.train.n_rows), range(nested.val.n_rows)
    cfg = budget_config("full", nested.train.n_rows, **overrides)
    body = _estimator_job("lometab", nested, seed=seed, cfg=cfg, keep_history=False)
    m = body["metrics"]
    # _estimator_job scores "test" (here: the split's validation rows) and "val_" (the inner validation)
    metrics = {"val_rmse": m["rmse"], "inner_val_rmse": m["val_rmse"]}
    return {"method": "lometab", "dataset": dataset, "seed": seed, "split_seed": split_seed,
            "task": "regression", "nested": True, "n_inner_train": int(len(inner_tr)),
            "n_inner_val": int(len(inner_va)), **{k: v for k, v in body.items() if k != "metrics"},
            "metrics": metrics}  # fmt: skip


def nested_prefix_jobs(
    *, dataset: str, seed: int, split_seed: int, overrides: dict, networks: dict[str, int]
) -> dict[str, dict]:
    """:func:`nested_job`'s fit, once, scored on the pooled members of its first ``networks[name]``
    networks for each ``name``: ``{name: record}``."""
    import warnings

    from ensemblize.data.table_preprocessing import UnknownCategoryWarning, UnseenMissingValueWarning
    from ensemblize.experiments.tabular_methods import _scores, _timed_fit, budget_config, make_estimator

    nested = _nested_splits(dataset, split_seed)
    cfg = budget_config("full", nested.train.n_rows, **overrides)
    est, applied = make_estimator("lometab", "regression", seed=seed, cfg=cfg)
    wall, cpu = _timed_fit(est, nested, method="lometab")
    y_tr = nested.train.y.to_numpy(dtype=np.float64)
    mean, std = float(np.mean(y_tr)), float(np.std(y_tr))
    with warnings.catch_warnings():  # unseen categories / missing values in held-out rows: expected
        warnings.simplefilter("ignore", UnknownCategoryWarning)
        warnings.simplefilter("ignore", UnseenMissingValueWarning)
        outer = (np.asarray(est.predict_members(nested.test.X), dtype=np.float64) - mean) / std
        inner = (np.asarray(est.predict_members(nested.val.X), dtype=np.float64) - mean) / std
    y_outer = (nested.test.y.to_numpy(dtype=np.float64) - mean) / std
    y_inner = (nested.val.y.to_numpy(dtype=np.float64) - mean) / std
    per_net = outer.shape[1] // int(est.n_networks_)
    records = {}
    for name, n_nets in networks.items():
        if n_nets > int(est.n_networks_):
            raise ValueError(f"candidate {name!r} needs {n_nets} networks; the fit has {est.n_networks_}")
        k = n_nets * per_net
        metrics = {"val_rmse": _scores("regression", y_outer, outer[:, :k].mean(axis=1), prefix="")["rmse"],
                   "inner_val_rmse": _scores("regression", y_inner, inner[:, :k].mean(axis=1), prefix="")["rmse"]}  # fmt: skip
        records[name] = {"method": "lometab", "dataset": dataset, "seed": seed, "split_seed": split_seed,
                         "task": "regression", "nested": True, "networks_scored": n_nets,
                         "n_inner_train": nested.train.n_rows, "n_inner_val": nested.val.n_rows,
                         "members": k, "cpu_seconds": cpu, "train_seconds": wall, "setting": applied,
                         "best_epochs": est.best_epochs_[:n_nets],
                         "refit_epochs": (getattr(est, "refit_epochs_", None) or [None] * n_nets)[:n_nets],
                         "metrics": metrics}  # fmt: skip
    return records


def load(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def import_run(run_dir: Path, out: Path) -> int:
    """Append the default LoMETab regression records of a benchmark run folder not yet in ``out``."""
    have = {(r["candidate"], r["dataset"], r["split_seed"], r["seed"]) for r in load(out)}
    n = 0
    with out.open("a") as f:
        for path in sorted((run_dir / "jobs").glob("*_lometab_*.json")):
            job = json.loads(path.read_text())
            if job["job"]["params"].get("overrides"):
                continue
            for rec in job["records"]:
                key = ("default", rec["dataset"], rec["split_seed"], rec["seed"])
                if rec["task"] != "regression" or key in have:
                    continue
                f.write(json.dumps({**rec, "candidate": "default"}) + "\n")
                have.add(key)
                n += 1
    return n


def import_candidate(source: Path, name: str, out: Path) -> int:
    """Append ``source``'s records of candidate ``name`` to ``out`` as ``"default"`` (not yet there)."""
    have = {(r["candidate"], r["dataset"], r["split_seed"], r["seed"]) for r in load(out)}
    n = 0
    with out.open("a") as f:
        for rec in load(source):
            key = ("default", rec["dataset"], rec["split_seed"], rec["seed"])
            if rec["candidate"] == name and key not in have:
                f.write(json.dumps({**rec, "candidate": "default", "imported_as": name}) + "\n")
                have.add(key)
                n += 1
    return n


def cell_means(records: list[dict], names, tables) -> dict[tuple[str, int], dict[str, float]]:
    """(table, split) -> {setting: seed-mean validation RMSE}, only cells where every setting has 3 seeds."""
    vals = defaultdict(list)
    for r in records:
        vals[r["candidate"], r["dataset"], r["split_seed"]].append(r["metrics"]["val_rmse"])
    cells = {}
    for t in tables:
        for s in SPLITS:
            if all(len(vals[n, t, s]) == len(SEEDS) for n in names):
                cells[t, s] = {n: float(np.mean(vals[n, t, s])) for n in names}
    return cells


def mean_ranks(cells: dict[tuple[str, int], dict[str, float]], names) -> dict[str, float]:
    ranks = defaultdict(list)
    for scores in cells.values():
        for n, r in zip(names, rankdata([scores[n] for n in names]), strict=True):
            ranks[n].append(float(r))
    return {n: float(np.mean(ranks[n])) for n in names}


def report(records: list[dict], candidates: dict[str, dict]) -> None:
    screen_names = list(candidates)
    cells = cell_means(records, screen_names, SCREEN_TABLES)
    print(f"stage 1: {len(cells)} of {len(SCREEN_TABLES) * len(SPLITS)} cells complete")
    for (t, s), scores in cells.items():
        print(f"  {t:>10} split {s}: " + "  ".join(f"{n} {v:.4f}" for n, v in scores.items()))
    if len(cells) < len(SCREEN_TABLES) * len(SPLITS):
        return
    ranks = mean_ranks(cells, screen_names)
    print("  mean validation rank: " + ", ".join(f"{n} {r:.2f}" for n, r in ranks.items()))
    best = min((n for n in screen_names if n != "default"), key=lambda n: ranks[n])
    if ranks[best] >= ranks["default"]:
        print(
            f"stage 1: no setting beats the default ({best} {ranks[best]:.2f} vs {ranks['default']:.2f}); default stays"
        )
        return
    print(f"stage 1 winner: {best} ({ranks[best]:.2f} vs default {ranks['default']:.2f}) -> stage 2")
    cells = cell_means(records, ["default", best], CONFIRM_TABLES)
    print(f"stage 2: {len(cells)} of {len(CONFIRM_TABLES) * len(SPLITS)} cells complete")
    for (t, s), scores in cells.items():
        print(f"  {t:>10} split {s}: default {scores['default']:.4f}  {best} {scores[best]:.4f}")
    if len(cells) < len(CONFIRM_TABLES) * len(SPLITS):
        return
    ranks = mean_ranks(cells, ["default", best])
    verdict = "REPLACES the default" if ranks[best] < ranks["default"] else "does not replace the default"
    print(f"stage 2: {best} {ranks[best]:.3f} vs default {ranks['default']:.3f}: {verdict}")


def fit_prefixes(
    round_: int, candidates: dict, *, table: str, split: int, seed: int, out: Path, have: set
) -> None:
    """One :data:`PREFIX_ROUNDS` fit, appended to ``out`` as one record per candidate not yet in ``have``."""
    fitted, networks = PREFIX_ROUNDS[round_]
    recs = nested_prefix_jobs(dataset=table, seed=seed, split_seed=split, overrides=candidates[fitted],
                              networks=networks)  # fmt: skip
    with out.open("a") as f:
        for name, r in recs.items():
            if (name, table, split, seed) not in have:
                f.write(json.dumps({**r, "candidate": name}) + "\n")
                have.add((name, table, split, seed))
    scores = ", ".join(f"{name} val {r['metrics']['val_rmse']:.4f}" for name, r in recs.items())
    print(
        f"{table} split {split} seed {seed}: {scores} ({recs[fitted]['cpu_seconds']:.0f} CPU s)", flush=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file of the fits (appended to)")
    parser.add_argument("--stage", type=int, choices=(1, 2))
    parser.add_argument(
        "--candidates", default=None, help="comma list (default: stage 1 all, stage 2 required)"
    )
    parser.add_argument("--tables", default=None, help="comma list (default: the stage's tables)")
    parser.add_argument(
        "--import", dest="imports", type=Path, nargs="*", default=[], help="benchmark run folders"
    )
    parser.add_argument("--report", action="store_true", help="print the rule's result; fit nothing")
    parser.add_argument("--round", type=int, choices=sorted(ROUNDS), default=7, help="the candidate set")
    parser.add_argument(
        "--import-default",
        default=None,
        metavar="FILE:NAME",
        help="copy candidate NAME's records of an earlier round's FILE as this round's default",
    )
    args = parser.parse_args()
    candidates = ROUNDS[args.round]
    for run_dir in args.imports:
        print(f"imported {import_run(run_dir, args.out)} default records from {run_dir}")
    if args.import_default:
        source, name = args.import_default.rsplit(":", 1)
        print(f"imported {import_candidate(Path(source), name, args.out)} records of {name} as the default")
    if args.report:
        report(load(args.out), candidates)
        return
    if args.stage is None:
        parser.error("--stage (or --report) is required")
    from ensemblize.experiments.tabular_methods import tabular_job

    if args.stage == 1:
        names = args.candidates.split(",") if args.candidates else list(candidates)
        tables = args.tables.split(",") if args.tables else list(SCREEN_TABLES)
    else:
        if not args.candidates:
            parser.error("--stage 2 needs --candidates default,WINNER")
        names = args.candidates.split(",")
        tables = args.tables.split(",") if args.tables else list(CONFIRM_TABLES)
    unknown = sorted(set(names) - set(candidates))
    if unknown:
        parser.error(f"unknown candidates {unknown}; known: {sorted(candidates)}")
    have = {(r["candidate"], r["dataset"], r["split_seed"], r["seed"]) for r in load(args.out)}
    for t in tables:
        for s in SPLITS:
            for n in names:
                for seed in SEEDS:
                    if (n, t, s, seed) in have:
                        continue
                    if args.round in PREFIX_ROUNDS:
                        fit_prefixes(
                            args.round, candidates, table=t, split=s, seed=seed, out=args.out, have=have
                        )
                        continue
                    if args.round in NESTED:
                        rec = nested_job(dataset=t, seed=seed, split_seed=s, overrides=candidates[n])
                    else:
                        (rec,) = tabular_job(method="lometab", dataset=t, seed=seed, split_seed=s,
                                             budget="full", overrides=candidates[n])  # fmt: skip
                    with args.out.open("a") as f:
                        f.write(json.dumps({**rec, "candidate": n}) + "\n")
                    print(f"{t} split {s} {n} seed {seed}: val {rec['metrics']['val_rmse']:.4f} "
                          f"({rec['cpu_seconds']:.0f} CPU s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
