"""Tabular experiments (LoMETab paper): benchmark, (rank, σ_init) grid and diversity over training.

Each experiment is a plain function (Python defaults, lists for grids) that expands into independent
jobs (:mod:`ensemblize.experiments.jobs`) — one :func:`~ensemblize.experiments.tabular_methods.tabular_job`
per method × table × seed × setting — runs them in process, on local worker processes or on a Dask
cluster (``execution``), resumes an interrupted run from the per-job files in ``out``, and writes its
tables and figures from the merged records:

* :func:`tabular_bench` — every method on every table and seed: per-table mean ± std of accuracy,
  log-loss and RMSE / train-std, mean ranks per score, parameters and CPU seconds;
* :func:`tabular_grid` — the LoMETab estimator over rank ``r`` × ``σ_init``: heatmaps of test
  diversity and score, the best cell chosen on validation, the diversity range spanned;
* :func:`tabular_diversity` — member diversity per epoch for LoMETab, the additive ablation and the
  BatchEnsemble (TabM) layer on one table.

Every method but the σN-MLP research baseline (``sigma``, which has no estimator) is the public
estimator a user gets — the network estimators and the GBDT wrappers
(:mod:`ensemblize.experiments.tabular_methods` lists the methods and the budget presets) — on the
registry's 64/16/20 splits
(:func:`ensemblize.data.tables.split`); the tables are in :mod:`ensemblize.experiments.tabular_tables`.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import options as O
from .jobs import Execution, Job, experiment_folder, merged_records, torchrun_rank
from .tabular_methods import BUDGETS, METHODS, budget_config, defaults_digest, method_available, tabular_job
from .tabular_tables import (
    SCORES,
    average_ranks,
    cost_table_markdown,
    primary_metric,
    rank_table_markdown,
    score_table_markdown,
)

__all__ = [
    "EXPERIMENTS",
    "METHODS",
    "BUDGETS",
    "DEFAULT_METHODS",
    "BUDGET_TABLES",
    "budget_config",
    "tabular_job",
    "tabular_bench",
    "tabular_grid",
    "tabular_diversity",
    "bench_jobs",
    "bench_markdown",
    "complete_tables",
    "collect_records",
    "primary_metric",
    "average_ranks",
    "score_table_markdown",
    "rank_table_markdown",
    "cost_table_markdown",
]

DEFAULT_METHODS = ("lometab", "tabm", "xgboost", "catboost")
"""The comparison of issue 11: the default estimators, official TabM, XGBoost and CatBoost."""

BUDGET_TABLES: dict[str, tuple[str, ...]] = {
    "tiny": ("concrete",),
    "lite": ("concrete",),
    "quick": (),  # () -> the registry's BENCHMARK_SUITE
    "full": (),
}
"""Tables a preset runs when ``datasets`` is not given (``lite``: one small table, a quick check)."""


def _tables(datasets: Sequence[str] | None, budget: str) -> list[str]:
    """The registry tables to run: ``datasets``, or (None / empty) the preset's tables."""
    from ensemblize.data.tables import BENCHMARK_SUITE, BENCHMARK_TABLES

    if datasets is None or (not isinstance(datasets, str) and len(datasets) == 0):
        datasets = BUDGET_TABLES[budget] or BENCHMARK_SUITE
    return O.choices(datasets, option="--datasets", allowed=list(BENCHMARK_TABLES))


def _runnable(methods: Sequence[str], *, quiet: bool) -> tuple[list[str], dict[str, str]]:
    """The methods that can run here, and why each other one cannot."""
    skipped = {m: why for m in methods if (why := method_available(m)) is not None}
    if skipped and not quiet:
        for m, why in skipped.items():
            print(f"skipping {m}: {why}", file=sys.stderr)
    return [m for m in methods if m not in skipped], skipped


def _max_rows(max_rows: int | None) -> int | None:
    return None if max_rows is None else O.ints([max_rows], option="--max-rows", minimum=10)[0]


def _describe(records: Sequence[Mapping[str, Any]]) -> str:
    """A finished job's progress line: its **validation** scores and CPU seconds.

    Validation, not test: the lines are read while a run is in progress, when settings may still be
    chosen; test scores appear only in the tables written at the end.
    """
    r = records[0]
    shown = [f"val {k} {r['metrics']['val_' + k]:.4f}" for k in SCORES if "val_" + k in r["metrics"]]
    return ", ".join([*shown, f"CPU {float(r.get('cpu_seconds', math.nan)):.1f} s"])


def _run(folder, jobs: list[Job]) -> list[dict[str, Any]]:
    return merged_records(folder.run(jobs, describe=_describe))


def _quiet(execution: Execution | None) -> bool:
    """True when nothing may be printed: ``--quiet``, or a rank other than 0 under torchrun."""
    return bool(execution and execution.quiet) or torchrun_rank()[0] != 0


def _echo(text: str, folder) -> None:
    """Print ``text`` on the main process (rank 0 under torchrun) unless the run is quiet; its markdown
    tables split to 100 columns unless ``--wide``."""
    from ..report.console import fit_markdown_tables

    if folder.is_main and not folder.execution.quiet:
        print(text if folder.execution.wide else fit_markdown_tables(text))


# --------------------------------------------------------------------------------------------
# tabular-bench
# --------------------------------------------------------------------------------------------


def bench_jobs(
    *,
    datasets: Sequence[str],
    methods: Sequence[str],
    seeds: Sequence[int],
    split_seed: int,
    budget: str,
    max_rows: int | None = None,
    experiment: str = "tabular-bench",
) -> list[Job]:
    """One job per table × method × seed (in that nesting order, which is the merge order)."""
    shared = {"split_seed": split_seed, "budget": budget, "max_rows": max_rows, "defaults": defaults_digest()}
    return [
        Job.make(experiment, tabular_job, f"{ds} {m} seed={s}", method=m, dataset=ds, seed=s, **shared)
        for ds in datasets
        for m in methods
        for s in seeds
    ]


def bench_markdown(
    records: Sequence[Mapping[str, Any]], *, title: str, skipped: Mapping[str, str] = ()
) -> str:
    """The benchmark report: per-table scores and mean ranks for each score, then the cost table."""
    parts = [f"# {title}"]
    if skipped:
        parts.append("Not run: " + "; ".join(f"{m} ({why})" for m, why in dict(skipped).items()))
    for metric in SCORES:
        ranks = average_ranks(records, metric=metric)
        if not ranks["per_dataset"]:
            continue
        named = (
            "rmse / train std (RMSE in units of the training target's standard deviation)"
            if metric == "rmse"
            else metric
        )
        parts += [
            f"## Test {named} (mean ± std over seeds)",
            score_table_markdown(records, metric=metric),
            f"### Mean rank on {metric}",
            rank_table_markdown(ranks),
        ]
    parts += ["## Cost", cost_table_markdown(records)]
    return "\n\n".join(parts) + "\n"


def _warn_mixed_defaults(rows: Sequence[Mapping[str, Any]]) -> None:
    """Warn when one method's records carry different :func:`defaults_digest` values (merged folders of
    versions whose estimator defaults differ); records without one (older folders) are not judged."""
    for method in sorted({r["method"] for r in rows}):
        digests = sorted({r["defaults"] for r in rows if r["method"] == method and r.get("defaults")})
        if len(digests) > 1:
            warnings.warn(
                f"the {method!r} records were fitted with different estimator defaults ({', '.join(digests)}): "
                "the folders come from versions whose defaults differ",
                UserWarning,
                stacklevel=3,
            )


def collect_records(*outs: str | Path, complete_only: bool = False) -> list[dict[str, Any]]:
    """The records of one or more benchmark run folders, finished or not (read from ``jobs/*.json``).

    Ordered by table (the registry's order), method (:data:`METHODS` order) and seed. With
    ``complete_only``, only tables where every method present anywhere has every seed present
    anywhere are kept, so that mean ranks compare the same methods on every table.
    """
    import json

    from ensemblize.data.tables import BENCHMARK_TABLES

    rows: list[dict[str, Any]] = []
    for out in outs:
        for path in sorted((Path(out) / "jobs").glob("*.json")):
            rows += json.loads(path.read_text())["records"]
    tables = list(BENCHMARK_TABLES)
    methods = [*METHODS, *sorted({r["method"] for r in rows} - set(METHODS))]
    rows.sort(key=lambda r: (tables.index(r["dataset"]) if r["dataset"] in tables else len(tables),
                             r["dataset"], methods.index(r["method"]), r["seed"]))  # fmt: skip
    _warn_mixed_defaults(rows)
    return complete_tables(rows) if complete_only else rows


def complete_tables(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the tables where every method present anywhere has every seed present anywhere."""
    want = {(m, s) for m in {r["method"] for r in rows} for s in {r["seed"] for r in rows}}
    have: dict[str, set] = {}
    for r in rows:
        have.setdefault(r["dataset"], set()).add((r["method"], r["seed"]))
    return [r for r in rows if have[r["dataset"]] >= want]


def tabular_bench(
    *,
    datasets: Sequence[str] = (),
    methods: Sequence[str] = DEFAULT_METHODS,
    seeds: Sequence[int] = (0, 1, 2),
    split_seed: int = 0,
    budget: str = "quick",
    max_rows: int | None = None,
    out: str | Path = "runs/tabular-bench",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """Every method on every table and seed; writes ``results.json``, ``tables.md``, ``ranks.json``.

    ``datasets``: registry names (empty, the default: the preset's tables, :data:`BUDGET_TABLES`; the
    registry's ``BENCHMARK_SUITE`` for ``quick`` / ``full``); ``methods`` from
    :data:`~ensemblize.experiments.tabular_methods.METHODS` (those that cannot run here are skipped
    with the reason); ``seeds``: model seeds; ``split_seed``: the one 64/16/20 split every method
    shares; ``budget``: a preset of :data:`BUDGETS`; ``max_rows``: subsample each table first.
    Returns the records in job order.
    """
    from ensemblize.checkpoint import atomic_write_json, atomic_write_text

    start = time.perf_counter()
    budget = O.choice(budget, option="--budget", allowed=tuple(BUDGETS))
    names = _tables(datasets, budget)
    chosen = O.choices(methods, option="--methods", allowed=METHODS)
    seed_list = O.ints(seeds, option="--seeds")
    split_seed = O.ints([split_seed], option="--split-seed")[0]
    max_rows = _max_rows(max_rows)
    chosen, skipped = _runnable(chosen, quiet=_quiet(execution))
    if not chosen:
        raise O.OptionError("--methods", f"none of them can run here: {skipped}")
    settings = {"datasets": names, "methods": chosen, "seeds": seed_list, "split_seed": split_seed,
                "budget": budget, "max_rows": max_rows}  # fmt: skip
    out = Path(out)
    jobs = bench_jobs(datasets=names, methods=chosen, seeds=seed_list, split_seed=split_seed, budget=budget,
                      max_rows=max_rows)  # fmt: skip
    with experiment_folder(out, experiment="tabular-bench", settings=settings, execution=execution) as folder:
        records = _run(folder, jobs)
        if not folder.is_main:  # torchrun: rank 0 writes and prints
            return records
        title = f"tabular-bench (budget {budget}, split seed {split_seed}, seeds {seed_list})"
        md = bench_markdown(records, title=title, skipped=skipped)
        atomic_write_text(out / "tables.md", md)
        ranks = {metric: average_ranks(records, metric=metric) for metric in SCORES}
        atomic_write_json(out / "ranks.json", {"ranks": ranks, "skipped": skipped, **settings,
                                               "wall_seconds": time.perf_counter() - start})  # fmt: skip
    _echo(md, folder)
    return records


# --------------------------------------------------------------------------------------------
# tabular-grid
# --------------------------------------------------------------------------------------------


def _grid_label(rank: int, scale: float) -> str:
    return f"lometab[r={rank},σ={scale:g}]"


def tabular_grid(
    *,
    dataset: str = "concrete",
    ranks: Sequence[int] = (1, 2, 4, 8, 16),
    scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0),
    seed: int = 0,
    split_seed: int = 0,
    budget: str = "quick",
    max_epochs: int | None = None,
    max_rows: int | None = None,
    out: str | Path = "runs/tabular-grid",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """The LoMETab estimator (one network) over rank × σ_init on one table: heatmaps, best cell chosen on validation.

    Writes ``results.json``, ``grid_summary.json`` (grids of test score, validation score and test
    diversity; the best cell on validation; the diversity range in orders of magnitude) and
    ``grid.png``. Returns the records (one per cell, rank-major).
    """
    from ensemblize.checkpoint import atomic_write_json

    budget = O.choice(budget, option="--budget", allowed=tuple(BUDGETS))
    name = _tables([dataset], budget)[0]
    r_list = O.ints(ranks, option="--ranks", minimum=1)
    s_list = O.floats(scales, option="--scales")
    seed = O.ints([seed], option="--seed")[0]
    split_seed = O.ints([split_seed], option="--split-seed")[0]
    max_rows = _max_rows(max_rows)
    overrides = (
        {}
        if max_epochs is None
        else {"max_epochs": O.ints([max_epochs], option="--max-epochs", minimum=1)[0]}
    )
    shared = {
        "method": "lometab",
        "dataset": name,
        "seed": seed,
        "split_seed": split_seed,
        "budget": budget,
        "max_rows": max_rows,
        "defaults": defaults_digest(),
    }
    jobs = [
        Job.make(
            "tabular-grid",
            tabular_job,
            _grid_label(r, s),
            name=_grid_label(r, s),
            # one network: the grid measures the diversity of one LoMETab's members, not of a pool; no
            # refit on the validation rows (the regressor's default): the best cell is chosen on them
            overrides={"rank": r, "init_scale": s, "n_networks": 1, "refit_full": False, **overrides},
            **shared,
        )
        for r in r_list
        for s in s_list
    ]
    settings = {"dataset": name, "ranks": r_list, "scales": s_list, "seed": seed, "split_seed": split_seed,
                "budget": budget, "max_epochs": max_epochs, "max_rows": max_rows}  # fmt: skip
    out = Path(out)
    with experiment_folder(out, experiment="tabular-grid", settings=settings, execution=execution) as folder:
        records = _run(folder, jobs)
        if not folder.is_main:  # torchrun: rank 0 writes and prints
            return records
        summary = grid_summary(records, r_list, s_list, dataset=name)
        atomic_write_json(out / "grid_summary.json", summary)
        _grid_figure(out / "grid.png", summary)
    best = summary["best_on_val"]
    metric, div = summary["metric"], summary["diversity"]
    _echo(
        f"best on validation: r={best['rank']}, σ_init={best['init_scale']:g} (val {metric} "
        f"{best[f'val_{metric}']:.4f}, test {best[f'test_{metric}']:.4f}); {div} spans "
        f"{summary['diversity_min']:.3g}–{summary['diversity_max']:.3g} "
        f"({summary['orders_of_magnitude']:.2f} orders of magnitude)",
        folder,
    )
    return records


def grid_summary(records: Sequence[Mapping[str, Any]], r_list, s_list, *, dataset: str) -> dict[str, Any]:
    """Grids (rank × σ_init) of test score, validation score and test diversity; best cell on validation
    (accuracy ties broken by the lower validation log-loss)."""
    regression = "rmse" in records[0]["metrics"]
    metric, higher = primary_metric("regression" if regression else "binclass")
    div_name = "ambiguity" if regression else "pairwise_kl"
    shape = (len(r_list), len(s_list))
    grid = {key: np.array([r["metrics"][key] for r in records], dtype=float).reshape(shape)
            for key in (metric, f"val_{metric}", div_name)}  # fmt: skip
    val = grid[f"val_{metric}"]
    # best on validation, ties in accuracy broken by the lower validation log-loss (the estimators'
    # own rule), then by grid order
    tie = np.array([r["metrics"].get("val_log_loss", math.nan) for r in records], dtype=float).reshape(shape)
    order = sorted(
        np.ndindex(shape),
        key=lambda ij: ((-val[ij] if higher else val[ij]), tie[ij] if np.isfinite(tie[ij]) else math.inf),
    )
    best = order[0]
    div = grid[div_name]
    return {
        "dataset": dataset, "metric": metric, "diversity": div_name,
        "best_on_val": {"rank": r_list[best[0]], "init_scale": s_list[best[1]],
                        f"val_{metric}": float(val[best]), f"test_{metric}": float(grid[metric][best])},
        "diversity_min": float(div.min()), "diversity_max": float(div.max()),
        "orders_of_magnitude": float(np.log10(div.max() / div.min())) if div.min() > 0 else math.inf,
        "ranks": list(r_list), "scales": list(s_list), "grids": {k: v.tolist() for k, v in grid.items()},
    }  # fmt: skip


def _grid_figure(path: Path, summary: Mapping[str, Any]) -> Path:
    from matplotlib.colors import LogNorm

    from ensemblize.report.style import new_figure, save_figure

    r_list, s_list = summary["ranks"], summary["scales"]
    metric, div_name = summary["metric"], summary["diversity"]
    fig, axes = new_figure(1, 2, width=10, height=4)
    for ax, key, title in (
        (axes[0][0], div_name, f"test {div_name} (log colour)"),
        (axes[0][1], metric, f"test {metric}"),
    ):
        data = np.asarray(summary["grids"][key])
        norm = LogNorm() if key == div_name and (data > 0).all() else None
        im = ax.imshow(data, cmap="viridis", norm=norm, aspect="auto", origin="lower")
        ax.set_xticks(range(len(s_list)), [f"{s:g}" for s in s_list])
        ax.set_yticks(range(len(r_list)), [str(r) for r in r_list])
        ax.set(xlabel="σ_init", ylabel="rank r", title=title)
        ax.grid(False)
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", color="w", fontsize=7)
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"LoMETab on {summary['dataset']}: rank × σ_init")
    return save_figure(fig, path)


# --------------------------------------------------------------------------------------------
# tabular-diversity
# --------------------------------------------------------------------------------------------

DIVERSITY_METHODS = ("lometab", "additive", "batchensemble", "sigma")


def tabular_diversity(
    *,
    dataset: str = "credit",
    methods: Sequence[str] = ("lometab", "additive", "batchensemble"),
    seeds: Sequence[int] = (0,),
    split_seed: int = 0,
    budget: str = "quick",
    epochs: int = 40,
    max_rows: int | None = None,
    out: str | Path = "runs/tabular-diversity",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """Validation pairwise KL (ambiguity for regression) per epoch, all ``epochs`` run (no early stop),
    among the members of one network (``n_networks=1``).

    Writes ``results.json`` (records with their per-epoch ``history``), ``diversity_summary.json``
    (first epoch, peak, last-quarter mean per method; additive / LoMETab over the last quarter) and
    ``diversity.png``. Returns the records.
    """
    from ensemblize.checkpoint import atomic_write_json

    budget = O.choice(budget, option="--budget", allowed=tuple(BUDGETS))
    name = _tables([dataset], budget)[0]
    chosen = O.choices(methods, option="--methods", allowed=DIVERSITY_METHODS)
    seed_list = O.ints(seeds, option="--seeds")
    epochs = O.ints([epochs], option="--epochs", minimum=1)[0]
    split_seed = O.ints([split_seed], option="--split-seed")[0]
    max_rows = _max_rows(max_rows)
    shared = {
        "dataset": name,
        "split_seed": split_seed,
        "budget": budget,
        "max_rows": max_rows,
        # one network per fit: the curves follow the diversity of one network's members over its epochs
        "overrides": {"max_epochs": epochs, "patience": epochs + 1, "n_networks": 1},
        "keep_history": True,
        "defaults": defaults_digest(),
    }
    jobs = [
        Job.make("tabular-diversity", tabular_job, f"{m} seed={s}", method=m, seed=s, **shared)
        for m in chosen
        for s in seed_list
    ]
    settings = {"dataset": name, "methods": chosen, "seeds": seed_list, "split_seed": split_seed,
                "budget": budget, "epochs": epochs, "max_rows": max_rows}  # fmt: skip
    out = Path(out)
    with experiment_folder(
        out, experiment="tabular-diversity", settings=settings, execution=execution
    ) as folder:
        records = _run(folder, jobs)
        if not folder.is_main:  # torchrun: rank 0 writes and prints
            return records
        key = "val_ambiguity" if "rmse" in records[0]["metrics"] else "val_pairwise_kl"
        curves = diversity_curves(records, key=key)
        summary = diversity_summary(curves, epochs=epochs)
        atomic_write_json(out / "diversity_summary.json", {"dataset": name, "metric": key, **summary})
        _diversity_figure(out / "diversity.png", curves, key=key, dataset=name)
    for m in curves:
        s = summary[m]
        _echo(f"{m}: {key} first {s['first_epoch']:.3g}, peak {s['peak']:.3g}, "
              f"last quarter {s['last_quarter_mean']:.3g}, final {s['final']:.3g}", folder)  # fmt: skip
    return records


def diversity_curves(records: Sequence[Mapping[str, Any]], *, key: str) -> dict[str, list[list[float]]]:
    """``{method: [per-epoch key values of each seed]}`` from records with a ``history``."""
    curves: dict[str, list[list[float]]] = {}
    for r in records:
        rows = r.get("history") or []
        if not rows or key not in rows[0]:
            found = sorted(rows[0]) if rows else []
            raise ValueError(f"{r['method']} history has no {key!r} per epoch (keys: {found})")
        curves.setdefault(r["method"], []).append([float(row[key]) for row in rows])
    return curves


def diversity_summary(curves: Mapping[str, list[list[float]]], *, epochs: int) -> dict[str, Any]:
    """Per method: first-epoch, peak, last-quarter mean (and its std over seeds), final value, mean curve."""
    summary: dict[str, Any] = {}
    for m, runs in curves.items():
        c = np.array(runs)  # (seeds, epochs)
        last = c[:, -max(1, epochs // 4) :].mean(axis=1)
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
    return summary


def _diversity_figure(path: Path, curves: Mapping[str, list[list[float]]], *, key: str, dataset: str) -> Path:
    from ensemblize.report.style import display_name, legend_below, method_color, new_figure, save_figure

    fig, axes = new_figure(1, 1, width=6, height=4)
    ax = axes[0][0]
    for i, (m, runs) in enumerate(curves.items()):
        c = np.array(runs)
        x = np.arange(1, c.shape[1] + 1)
        ax.plot(x, c.mean(axis=0), label=display_name(m), color=method_color(i))
        if c.shape[0] > 1:
            ax.fill_between(x, c.min(axis=0), c.max(axis=0), alpha=0.2, color=method_color(i))
    if all(v > 0 for runs in curves.values() for run in runs for v in run):
        ax.set_yscale("log")
    ax.set(xlabel="epoch", ylabel=key, title=f"member diversity during training ({dataset})")
    legend_below(fig, axes)
    return save_figure(fig, path)


#: Experiment name (``ensemblize experiment NAME``) -> plain function.
EXPERIMENTS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "tabular-bench": tabular_bench,
    "tabular-grid": tabular_grid,
    "tabular-diversity": tabular_diversity,
}
