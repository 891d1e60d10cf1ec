"""Tabular experiments (LoMETab paper): benchmark, (rank, σ_init) grid and diversity over training.

Commands (``ensemblize experiment NAME``):

* ``tabular-bench`` — every method on every dataset and seed; per-dataset mean ± std, average rank,
  parameter counts, train time;
* ``tabular-grid`` — LoMETab over rank ``r`` × ``σ_init``: heatmaps of diversity and score, the
  best cell chosen on validation, the diversity range spanned;
* ``tabular-diversity`` — member diversity per epoch for LoMETab, the additive low-rank ablation
  and TabM on one classification table.

All methods go through :func:`run_tabular_method` on the same :class:`~ensemblize.data.tabular.PreparedTable`
(the TabM protocol: fixed split, noisy quantile transform, one-hot). Methods (:data:`METHODS`):

=============  =================================================================================
``lometab``    :class:`~ensemblize.tabular.model.LoMETabModel`, ``layer="lome"`` (rank r, σ_init)
``tabm``       ``layer="batchensemble"`` (TabM: rank-1 multiplicative adapters)
``additive``   ``layer="additive"`` (``W + A_k B_kᵀ``, the paper's ablation)
``mlp``        ``layer="plain"``, K = 1
``sigma``      σN-Ens of a normalised MLP (:mod:`ensemblize.tabular.sigma_mlp`) with the diversity
               regulariser (τ, λ)
``xgboost``    :func:`~ensemblize.tabular.gbdt.fit_gbdt` (default-tuned, early stopping on val)
``catboost``   idem (skipped with a message when not installed)
=============  =================================================================================

Budgets (:data:`BUDGETS`): ``tiny`` (tests), ``lite`` (K = 8, 2 blocks of 128, ≤ 40 epochs with
patience 8 — the many-table benchmark on a shared 2-core machine), ``quick`` (the reduced budget this machine affords:
K = 16, 2 blocks of 128, ≤ 40 epochs with patience 8 on tables with > 10k training rows, ≤ 80 epochs
with patience 12 otherwise) and ``full`` (the paper's architecture: K = 32, 3 blocks of 256, ≤ 200
epochs, patience 16). Every record's ``metrics`` hold the test score (``rmse`` on the standardised
target, or ``accuracy`` and — binary — ``roc_auc``), the validation score (``val_rmse`` /
``val_accuracy``) and, for ensembles, test diversity (``ambiguity``, or ``pairwise_kl`` and
``disagreement``). ``params`` is the parameter count (GBDT: the number of trees).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import typer

__all__ = [
    "METHODS",
    "BUDGETS",
    "budget_config",
    "run_tabular_method",
    "primary_metric",
    "average_ranks",
    "score_table_markdown",
    "rank_table_markdown",
    "COMMANDS",
]

METHODS = ("lometab", "tabm", "additive", "mlp", "sigma", "xgboost", "catboost")
_LAYER = {"lometab": "lome", "tabm": "batchensemble", "additive": "additive", "mlp": "plain"}
_GBDT = ("xgboost", "catboost")

BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "small": {"members": 4, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2,
                  "n_bins": 8, "gbdt_rounds": 20, "gbdt_patience": 5},
        "large": {"members": 4, "n_blocks": 1, "d_block": 16, "max_epochs": 3, "patience": 2,
                  "n_bins": 8, "gbdt_rounds": 20, "gbdt_patience": 5},
    },
    "lite": {
        "small": {"members": 8, "n_blocks": 2, "d_block": 128, "max_epochs": 40, "patience": 8,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
        "large": {"members": 8, "n_blocks": 2, "d_block": 128, "max_epochs": 30, "patience": 8,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
    },
    "quick": {
        "small": {"members": 16, "n_blocks": 2, "d_block": 128, "max_epochs": 80, "patience": 12,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
        "large": {"members": 16, "n_blocks": 2, "d_block": 128, "max_epochs": 40, "patience": 8,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
    },
    "full": {
        "small": {"members": 32, "n_blocks": 3, "d_block": 256, "max_epochs": 200, "patience": 16,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
        "large": {"members": 32, "n_blocks": 3, "d_block": 256, "max_epochs": 200, "patience": 16,
                  "n_bins": 48, "gbdt_rounds": 2000, "gbdt_patience": 50},
    },
}  # fmt: skip
"""Preset -> table size (``"large"``: more than 10,000 training rows) -> hyper-parameters."""

_COMMON = {"dropout": 0.1, "d_embedding": 16, "lr": 2e-3, "weight_decay": 3e-4, "rank": 2,
           "init_scale": 0.5, "tau": 1.0, "lam": 1e-3, "noise": 0.5, "norm": "batchnorm"}  # fmt: skip
_LARGE_ROWS = 10_000


def budget_config(budget: str, n_train: int, **overrides: Any) -> dict[str, Any]:
    """Hyper-parameters of preset ``budget`` for a table with ``n_train`` training rows, then ``overrides``.

    Raises ValueError for an unknown preset or an unknown override name.
    """
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {tuple(BUDGETS)}, got {budget!r}")
    cfg = {**_COMMON, **BUDGETS[budget]["large" if n_train > _LARGE_ROWS else "small"]}
    unknown = sorted(set(overrides) - set(cfg))
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {unknown}; known: {sorted(cfg)}")
    return {**cfg, **overrides}


def primary_metric(task: str) -> tuple[str, bool]:
    """``(metric name, higher is better)``: ``("rmse", False)`` for regression, else ``("accuracy", True)``."""
    return ("rmse", False) if task == "regression" else ("accuracy", True)


def _bins(prepared, x_train, y_train, n_bins: int):
    from ensemblize.tabular.estimators import safe_bins

    n_num = prepared.n_numeric
    if n_num == 0:
        return None
    n_bins = min(int(n_bins), len(x_train) - 1)
    return safe_bins(
        x_train[:, :n_num],
        y_train,
        n_bins=n_bins,
        method="quantile",
        regression=prepared.task == "regression",
    )


def _scores(task: str, y: np.ndarray, members_out: np.ndarray, *, prefix: str) -> dict[str, float]:
    """Ensemble score (and diversity) from raw member outputs ``(N, K, C)`` logits / ``(N, K)``."""
    from ensemblize import metrics
    from ensemblize.data.tabular import evaluate_predictions

    if task == "regression":
        out = {f"{prefix}{k}": v for k, v in evaluate_predictions(task, y, members_out.mean(axis=1)).items()}
        if members_out.shape[1] > 1:
            out[f"{prefix}ambiguity"] = float(metrics.ambiguity(members_out))
        return out
    z = members_out - members_out.max(axis=-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    out = {f"{prefix}{k}": v for k, v in evaluate_predictions(task, y, probs.mean(axis=1)).items()}
    if members_out.shape[1] > 1:
        out[f"{prefix}pairwise_kl"] = float(metrics.pairwise_kl(probs))
        out[f"{prefix}disagreement"] = float(metrics.disagreement(probs))
    return out


def run_tabular_method(
    method: str,
    prepared,
    *,
    seed: int,
    budget: str = "quick",
    keep_history: bool = False,
    **hp: Any,
):
    """Train and evaluate one method on one prepared table -> :class:`ensemblize.report.results.Record`.

    Args:
        method: one of :data:`METHODS`.
        prepared: a :class:`~ensemblize.data.tabular.PreparedTable`.
        seed: seeds the initialisation, dropout, batch order, σN gate noise and the GBDT.
        budget: preset of :data:`BUDGETS`; ``hp`` overrides any of its keys (``members``,
            ``n_blocks``, ``d_block``, ``max_epochs``, ``patience``, ``rank``, ``init_scale``,
            ``lr``, ``weight_decay``, ``dropout``, ``tau``, ``lam``, ``noise``, ``norm``,
            ``n_bins``, ``gbdt_rounds``, ``gbdt_patience``, ``d_embedding``).
        keep_history: store the per-epoch training history in ``record.extra["history"]``.

    Returns a Record with ``metrics`` = test score (+ diversity for ensembles) and ``val_*`` score,
    ``params`` = parameters (GBDT: trees), ``train_seconds``, and ``extra`` holding the setting.

    Raises:
        ValueError: unknown method / budget / hyper-parameter.
        ImportError: ``catboost`` / ``xgboost`` requested but not installed.
    """
    import torch

    from ensemblize.report.results import Record

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    task = prepared.task
    regression = task == "regression"
    cfg = budget_config(budget, len(prepared.X_train), **hp)

    if method in _GBDT:
        from ensemblize.tabular.gbdt import fit_gbdt

        params = {"max_rounds": cfg["gbdt_rounds"], "early_stopping_rounds": cfg["gbdt_patience"]}
        model = fit_gbdt(
            method, prepared.X_train, prepared.y_train, prepared.X_val, prepared.y_val,
            task=task, seed=int(seed), params=params, n_classes=prepared.n_classes,
        )  # fmt: skip
        metrics = {}
        for prefix, x, y in (
            ("", prepared.X_test, prepared.y_test),
            ("val_", prepared.X_val, prepared.y_val),
        ):
            from ensemblize.data.tabular import evaluate_predictions

            metrics.update(
                {f"{prefix}{k}": v for k, v in evaluate_predictions(task, y, model.predict(x)).items()}
            )
        rounds = model.best_iteration + 1
        trees = rounds * (prepared.n_classes if task == "multiclass" else 1)
        return Record(
            method=method, dataset=prepared.name, seed=int(seed), members=1, params=int(trees),
            train_seconds=float(model.train_seconds), metrics=metrics,
            extra={"budget": budget, "setting": {"rounds": rounds, **params}},
        )  # fmt: skip

    from ensemblize.tabular.model import LoMETabModel
    from ensemblize.tabular.train import predict_members, train_model

    x_tr = torch.from_numpy(prepared.X_train)
    y_tr = torch.from_numpy(prepared.y_train)
    x_va = torch.from_numpy(prepared.X_val)
    y_va = torch.from_numpy(prepared.y_val)
    members = 1 if method == "mlp" else int(cfg["members"])
    n_out = 1 if regression else int(prepared.n_classes)
    arch = {
        "n_num": prepared.n_numeric,
        "cat_cardinalities": prepared.preprocessor.cat_cardinalities_,
        "n_out": n_out,
        "regression": regression,
        "n_blocks": int(cfg["n_blocks"]),
        "d_block": int(cfg["d_block"]),
        "dropout": float(cfg["dropout"]),
        "embedding": "piecewise" if prepared.n_numeric else "none",
        "bins": _bins(prepared, x_tr, y_tr, cfg["n_bins"]),
        "d_embedding": int(cfg["d_embedding"]),
    }
    setting = {
        k: cfg[k] for k in ("n_blocks", "d_block", "dropout", "lr", "weight_decay", "max_epochs", "patience")
    }
    regularizer = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        if method == "sigma":
            from ensemblize.tabular.sigma_mlp import build_sigma_tab_mlp, sigma_regularizer

            model = build_sigma_tab_mlp(
                members=members, noise=float(cfg["noise"]), seed=int(seed), norm=cfg["norm"], **arch
            )
            regularizer = sigma_regularizer(float(cfg["tau"]), float(cfg["lam"]))
            setting.update({k: cfg[k] for k in ("tau", "lam", "noise", "norm")})
        else:
            layer = _LAYER[method]
            model = LoMETabModel(
                **arch,
                members=members,
                layer=layer,
                rank=int(cfg["rank"]),
                init_scale=float(cfg["init_scale"]),
            )
            if layer in ("lome", "additive"):
                setting.update({"rank": cfg["rank"], "init_scale": cfg["init_scale"]})
        res = train_model(
            model, x_tr, y_tr, x_va, y_va,
            regression=regression, members=members, lr=float(cfg["lr"]),
            weight_decay=float(cfg["weight_decay"]), max_epochs=int(cfg["max_epochs"]),
            patience=int(cfg["patience"]), seed=int(seed), regularizer=regularizer,
        )  # fmt: skip
    metrics = {}
    for prefix, x, y in (("", prepared.X_test, prepared.y_test), ("val_", prepared.X_val, prepared.y_val)):
        out = predict_members(model, torch.from_numpy(x)).double().numpy()
        if out.ndim == 2 and not regression:  # pragma: no cover - models always return (N, K, C)
            raise RuntimeError(f"unexpected output shape {out.shape}")
        metrics.update(_scores(task, y, out, prefix=prefix))
    extra: dict[str, Any] = {
        "budget": budget,
        "setting": setting,
        "best_epoch": res.best_epoch,
        "epochs": len(res.history),
        "stopped_early": res.stopped_early,
    }
    if keep_history:
        extra["history"] = res.history
    return Record(
        method=method, dataset=prepared.name, seed=int(seed), members=members,
        params=int(sum(p.numel() for p in model.parameters())), train_seconds=float(res.train_seconds),
        metrics=metrics, extra=extra,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _task_of(records: Sequence[dict]) -> dict[str, str]:
    """dataset -> task, inferred from the metric present (``rmse`` means regression)."""
    return {r["dataset"]: ("regression" if "rmse" in r["metrics"] else "classification") for r in records}


def _mean_scores(records: Iterable) -> tuple[dict[str, dict[str, tuple[float, float, int]]], dict[str, str]]:
    from ensemblize.report.results import summarize

    rows = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
    tasks = _task_of(rows)
    table: dict[str, dict[str, tuple[float, float, int]]] = {}
    for s in summarize(rows, by=("dataset", "method")):
        metric, _ = primary_metric("regression" if tasks[s["dataset"]] == "regression" else "binclass")
        table.setdefault(s["dataset"], {})[s["method"]] = s["stats"].get(metric, (math.nan, math.nan, 0))
    return table, tasks


def average_ranks(records: Iterable) -> dict[str, Any]:
    """Rank the methods on every dataset by their mean test score and average the ranks.

    On each dataset the methods present are ranked 1..n by mean test score over seeds (lower RMSE
    / higher accuracy is better); tied means (equal to 10 decimals, so that floating-point noise in
    the mean is not a win) share the average of their ranks. Returns
    ``{"per_dataset": {dataset: {method: rank}}, "average": {method: mean rank},
    "n_datasets": {method: count}}`` with ``average`` sorted best first.
    """
    from scipy.stats import rankdata

    table, tasks = _mean_scores(records)
    per_dataset: dict[str, dict[str, float]] = {}
    for ds, by_method in table.items():
        methods = [m for m, (mean, _, n) in by_method.items() if n > 0 and math.isfinite(mean)]
        if not methods:
            continue
        means = np.round(np.array([by_method[m][0] for m in methods]), 10)  # float noise is a tie
        key = means if tasks[ds] == "regression" else -means
        per_dataset[ds] = dict(zip(methods, (float(v) for v in rankdata(key, method="average")), strict=True))
    collected: dict[str, list[float]] = {}
    for ranks in per_dataset.values():
        for m, r in ranks.items():
            collected.setdefault(m, []).append(r)
    average = dict(sorted(((m, float(np.mean(v))) for m, v in collected.items()), key=lambda kv: kv[1]))
    return {
        "per_dataset": per_dataset,
        "average": average,
        "n_datasets": {m: len(v) for m, v in collected.items()},
    }


def score_table_markdown(records: Iterable, *, digits: int = 4) -> str:
    """Markdown: one row per method, one column per dataset, mean ± std of the primary test score."""
    table, tasks = _mean_scores(list(records))
    datasets = list(table)
    methods: list[str] = []
    for ds in datasets:
        methods += [m for m in table[ds] if m not in methods]
    head = ["method", *(f"{ds} ({'RMSE ↓' if tasks[ds] == 'regression' else 'acc ↑'})" for ds in datasets)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        cells = []
        for ds in datasets:
            mean, std, n = table[ds].get(m, (math.nan, math.nan, 0))
            cells.append("—" if n == 0 else f"{mean:.{digits}f} ± {std:.{digits}f}")
        lines.append("| " + " | ".join([m, *cells]) + " |")
    return "\n".join(lines)


def rank_table_markdown(ranks: dict[str, Any]) -> str:
    """Markdown of :func:`average_ranks`: per-dataset ranks and the average, best first."""
    datasets = list(ranks["per_dataset"])
    head = ["method", "avg rank", "datasets", *datasets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, avg in ranks["average"].items():
        cells = [
            f"{ranks['per_dataset'][ds][m]:g}" if m in ranks["per_dataset"][ds] else "—" for ds in datasets
        ]
        lines.append("| " + " | ".join([m, f"{avg:.2f}", str(ranks["n_datasets"][m]), *cells]) + " |")
    return "\n".join(lines)


def _cost_table_markdown(records: Iterable) -> str:
    from ensemblize.report.results import summarize

    lines = ["| dataset | method | members | params (GBDT: trees) | train s |", "|---|---|---|---|---|"]
    rows = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
    members = {(r["dataset"], r["method"]): r["members"] for r in rows}
    for s in summarize(rows, by=("dataset", "method")):
        p, t = s["stats"]["params"], s["stats"]["train_seconds"]
        lines.append(
            f"| {s['dataset']} | {s['method']} | {members[(s['dataset'], s['method'])]} | "
            f"{p[0]:,.0f} | {t[0]:.1f} ± {t[1]:.1f} |"
        )
    return "\n".join(lines)


def _parse_list(text: str, *, name: str, choices: Sequence[str] | None = None) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise typer.BadParameter(f"--{name} is empty: {text!r}")
    if choices is not None:
        bad = [t for t in items if t not in choices]
        if bad:
            raise typer.BadParameter(f"unknown --{name} {bad}; choose from {list(choices)}")
    return items


def _parse_seeds(text: str) -> list[int]:
    try:
        return [int(t) for t in _parse_list(text, name="seeds")]
    except ValueError as exc:
        raise typer.BadParameter(f"--seeds must be comma-separated integers, got {text!r}") from exc


def _available(method: str) -> bool:
    if method not in _GBDT:
        return True
    try:
        __import__(method)
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------

DEFAULT_BENCH_DATASETS = "diamonds,concrete,credit,churn,hpc,wvs,breast_cancer"


def tabular_bench(
    datasets: str = typer.Option(
        DEFAULT_BENCH_DATASETS, "--datasets", help="Comma-separated BENCHMARK_TABLES names."
    ),
    methods: str = typer.Option(",".join(METHODS), "--methods", help=f"Comma-separated, from {METHODS}."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated model seeds."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the fixed train/val/test split."),
    budget: str = typer.Option("quick", "--budget", help=f"Preset: {tuple(BUDGETS)}."),
    out: Path = typer.Option(Path("runs/tabular-bench"), "--out", help="Output folder."),
) -> None:
    """Every method on every dataset and seed: mean ± std test score, average rank, params, train time."""
    import torch

    from ensemblize.checkpoint import atomic_write_text
    from ensemblize.data.tabular import BENCHMARK_TABLES, load_benchmark, prepare
    from ensemblize.report.results import format_table, write_results

    names = _parse_list(datasets, name="datasets", choices=list(BENCHMARK_TABLES))
    chosen = _parse_list(methods, name="methods", choices=METHODS)
    seed_list = _parse_seeds(seeds)
    if budget not in BUDGETS:
        raise typer.BadParameter(f"--budget must be one of {tuple(BUDGETS)}, got {budget!r}")
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    records: list = []
    for m in chosen:
        if not _available(m):
            typer.echo(f"skipping {m}: not installed (optional extra: pip install ensemblize[gbdt])")
    chosen = [m for m in chosen if _available(m)]
    for name in names:
        prepared = prepare(load_benchmark(name), seed=split_seed)
        for m in chosen:
            for s in seed_list:
                t0 = time.perf_counter()
                rec = run_tabular_method(m, prepared, seed=s, budget=budget)
                rec.extra["split_seed"] = split_seed
                records.append(rec)
                write_results(out, records)  # partial results survive an interrupted run
                shown = {k: round(v, 4) for k, v in rec.metrics.items() if not k.startswith("val_")}
                typer.echo(f"{name} {m} seed={s}: {shown} ({time.perf_counter() - t0:.0f}s)", err=True)
    ranks = average_ranks(records)
    text = "\n\n".join(format_table([r for r in records if r.dataset == d]) for d in names)
    md = "\n\n".join(
        [
            f"# tabular-bench (budget {budget}, split seed {split_seed}, seeds {seed_list})",
            "## Test score (mean ± std over seeds)",
            score_table_markdown(records),
            "## Average rank",
            rank_table_markdown(ranks),
            "## Cost",
            _cost_table_markdown(records),
            "## All metrics",
            "```\n" + text + "\n```",
        ]
    )
    atomic_write_text(out / "tables.md", md + "\n")
    typer.echo(text)
    typer.echo("\n" + rank_table_markdown(ranks))


def tabular_grid(
    dataset: str = typer.Option("concrete", "--dataset", help="A BENCHMARK_TABLES name."),
    ranks: str = typer.Option("1,2,4,8,16", "--ranks", help="Comma-separated adapter ranks r."),
    scales: str = typer.Option("0.1,0.3,1,3", "--scales", help="Comma-separated σ_init values."),
    seed: int = typer.Option(0, "--seed", help="Model seed (the split uses --split-seed)."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the fixed split."),
    budget: str = typer.Option("quick", "--budget", help=f"Preset: {tuple(BUDGETS)}."),
    max_epochs: int = typer.Option(0, "--max-epochs", help="Override the preset's max epochs (0: keep)."),
    out: Path = typer.Option(Path("runs/tabular-grid"), "--out", help="Output folder."),
) -> None:
    """LoMETab over rank × σ_init: heatmaps of diversity and test score; best cell chosen on validation."""
    import torch

    from ensemblize.checkpoint import atomic_write_json
    from ensemblize.data.tabular import load_benchmark, prepare
    from ensemblize.report.results import format_table, write_results

    try:
        r_list = [int(v) for v in _parse_list(ranks, name="ranks")]
        s_list = [float(v) for v in _parse_list(scales, name="scales")]
    except ValueError as exc:
        raise typer.BadParameter(f"bad --ranks/--scales: {exc}") from exc
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare(load_benchmark(dataset), seed=split_seed)
    metric, higher = primary_metric(prepared.task)
    div_name = "ambiguity" if prepared.task == "regression" else "pairwise_kl"
    overrides = {"max_epochs": max_epochs} if max_epochs else {}
    records = []
    for r in r_list:
        for s in s_list:
            rec = run_tabular_method(
                "lometab", prepared, seed=seed, budget=budget, rank=r, init_scale=s, **overrides
            )
            rec.method = f"lometab[r={r},σ={s:g}]"
            rec.extra.update({"rank": r, "init_scale": s})
            records.append(rec)
            write_results(out, records)
            typer.echo(
                f"r={r} σ_init={s:g}: {metric}={rec.metrics[metric]:.4f} {div_name}={rec.metrics[div_name]:.3g}",
                err=True,
            )
    grid = {
        key: np.array(
            [
                [rec.metrics[key] for rec in records[i * len(s_list) : (i + 1) * len(s_list)]]
                for i in range(len(r_list))
            ]
        )
        for key in (metric, f"val_{metric}", div_name)
    }
    val = grid[f"val_{metric}"]
    best = np.unravel_index(np.argmax(val) if higher else np.argmin(val), val.shape)
    div = grid[div_name]
    summary = {
        "dataset": dataset,
        "metric": metric,
        "diversity": div_name,
        "best_on_val": {"rank": r_list[best[0]], "init_scale": s_list[best[1]],
                        f"val_{metric}": float(val[best]), f"test_{metric}": float(grid[metric][best])},
        "diversity_min": float(div.min()),
        "diversity_max": float(div.max()),
        "orders_of_magnitude": float(np.log10(div.max() / div.min())) if div.min() > 0 else math.inf,
        "ranks": r_list,
        "scales": s_list,
        "grids": {k: v.tolist() for k, v in grid.items()},
    }  # fmt: skip
    atomic_write_json(out / "grid_summary.json", summary)
    _grid_figure(out / "grid.png", grid, r_list, s_list, metric=metric, div_name=div_name, dataset=dataset)
    typer.echo(format_table(records))
    typer.echo(
        f"best on validation: r={summary['best_on_val']['rank']}, σ_init={summary['best_on_val']['init_scale']:g} "
        f"(val {metric} {float(val[best]):.4f}, test {float(grid[metric][best]):.4f}); {div_name} spans "
        f"{summary['diversity_min']:.3g}–{summary['diversity_max']:.3g} ({summary['orders_of_magnitude']:.2f} orders of magnitude)"
    )


def _grid_figure(path: Path, grid: dict, r_list, s_list, *, metric: str, div_name: str, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], div_name, f"test {div_name} (log colour)"),
        (axes[1], metric, f"test {metric}"),
    ):
        data = grid[key]
        norm = LogNorm() if key == div_name and (data > 0).all() else None
        im = ax.imshow(data, cmap="viridis", norm=norm, aspect="auto", origin="lower")
        ax.set_xticks(range(len(s_list)), [f"{s:g}" for s in s_list])
        ax.set_yticks(range(len(r_list)), [str(r) for r in r_list])
        ax.set_xlabel("σ_init")
        ax.set_ylabel("rank r")
        ax.set_title(title)
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                ax.text(j, i, f"{data[i, j]:.3g}", ha="center", va="center", color="w", fontsize=7)
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"LoMETab on {dataset}: rank × σ_init")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tabular_diversity(
    dataset: str = typer.Option("credit", "--dataset", help="A classification BENCHMARK_TABLES name."),
    methods: str = typer.Option("lometab,additive,tabm", "--methods", help="Ensemble methods to compare."),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated model seeds."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the fixed split."),
    budget: str = typer.Option("quick", "--budget", help=f"Preset: {tuple(BUDGETS)}."),
    epochs: int = typer.Option(40, "--epochs", min=1, help="Epochs, all run (no early stopping)."),
    out: Path = typer.Option(Path("runs/tabular-diversity"), "--out", help="Output folder."),
) -> None:
    """Validation pairwise KL (ambiguity for regression) per epoch for LoMETab, additive and TabM."""
    import torch

    from ensemblize.checkpoint import atomic_write_json
    from ensemblize.data.tabular import load_benchmark, prepare
    from ensemblize.report.results import format_table, write_results

    chosen = _parse_list(methods, name="methods", choices=("lometab", "additive", "tabm", "sigma"))
    seed_list = _parse_seeds(seeds)
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare(load_benchmark(dataset), seed=split_seed)
    key = "val_ambiguity" if prepared.task == "regression" else "val_pairwise_kl"
    records, curves = [], {}
    for m in chosen:
        for s in seed_list:
            rec = run_tabular_method(
                m, prepared, seed=s, budget=budget, max_epochs=epochs, patience=epochs + 1, keep_history=True
            )
            records.append(rec)
            curves.setdefault(m, []).append([row[key] for row in rec.extra["history"]])
            write_results(out, records)
    summary = {}
    for m, runs in curves.items():
        c = np.array(runs)  # (seeds, epochs)
        last = c[:, -max(1, epochs // 4) :].mean(axis=1)  # mean over the last quarter of training
        summary[m] = {
            "first_epoch": float(c[:, 0].mean()),
            "peak": float(c.max(axis=1).mean()),
            "last_quarter_mean": float(last.mean()),
            "last_quarter_std_over_seeds": float(last.std()),
            "final": float(c[:, -1].mean()),
            "curve_mean": c.mean(axis=0).tolist(),
        }
    if "lometab" in summary and "additive" in summary:
        summary["additive_over_lometab_last_quarter"] = (
            summary["additive"]["last_quarter_mean"] / summary["lometab"]["last_quarter_mean"]
        )
    atomic_write_json(out / "diversity_summary.json", {"dataset": dataset, "metric": key, **summary})
    _diversity_figure(out / "diversity.png", curves, key=key, dataset=dataset)
    typer.echo(format_table(records))
    for m in curves:
        s = summary[m]
        typer.echo(
            f"{m}: {key} first {s['first_epoch']:.3g}, peak {s['peak']:.3g}, last quarter {s['last_quarter_mean']:.3g}, final {s['final']:.3g}"
        )
    if "additive_over_lometab_last_quarter" in summary:
        typer.echo(
            f"additive / lometab {key} over the last quarter: {summary['additive_over_lometab_last_quarter']:.3g}"
        )


def _diversity_figure(path: Path, curves: dict, *, key: str, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, runs in curves.items():
        c = np.array(runs)
        x = np.arange(1, c.shape[1] + 1)
        ax.plot(x, c.mean(axis=0), label=m)
        if c.shape[0] > 1:
            ax.fill_between(x, c.min(axis=0), c.max(axis=0), alpha=0.2)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(key)
    ax.set_title(f"member diversity during training ({dataset})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


COMMANDS = {
    "tabular-bench": tabular_bench,
    "tabular-grid": tabular_grid,
    "tabular-diversity": tabular_diversity,
}
