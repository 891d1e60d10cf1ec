"""Step-time ratios of the low-rank ensemble layers against their references, measured in one run.

Run: ``.venv/bin/python benchmarks/bench_lome.py`` (``--quick`` for a short run on smaller shapes,
``--forms`` to add the factored-vs-materialized sweep behind ``form="auto"``, ``--tabm-only`` for
sections 0 and 0b alone).

0. LoMELinear against the **official** ``tabm.LinearBatchEnsemble`` (the issue's target: ≤ 1.3×),
   forward + backward to the input and all parameters, ranks 1, 2, 4, at d = 512, K = 32, B = 256
   and at LoMETab's shapes: the former defaults (K = 32, B = 256, d_block = 256: a hidden 256 -> 256
   layer, and the first layer 128 -> 256 — 8 numeric features × d_embedding 16 — fed the broadcast
   ``(B, K, d_in)`` view the model gives it) and the current ones (K = 16, d_block = 128, at the
   classifier's batch 256 and the regressor's 128). Also the previous implementation (autograd through
   ``member_weights``) and the factored form at rank 2. Ratios are medians of per-round paired ratios.
0c. ``--fit-real``: ``LoMETabRegressor.fit`` (one network, its defaults, so with the refit) against
   official TabM at equal K, depth and width on the benchmark's real regression tables, with early
   stopping (``benchmarks/results/lome_vs_tabm_real.md``).
0b. ``LoMETabClassifier.fit`` end to end against official TabM (``tabm.TabM.make``, same K, depth,
   width, piecewise embeddings, batch size, epochs) trained by the same ``train_model`` loop.
   ``--fit-regression`` instead times ``LoMETabRegressor.fit`` (with and without ``refit_full``) against
   official TabM with one output (``benchmarks/results/lome_vs_tabm_regression.md``).
1. Linear, d_in = d_out = 512, K = 32, B = 256: forward+backward step time of LoMELinear (r = 1, 2, 4,
   8, 16; materialized and factored) and AdditiveLowRankLinear (r = 4) relative to the rank-1
   BatchEnsembleLinear and to K independent layers (EnsembleLinear, one batched matmul).
2. BatchEnsembleConv2d (64 -> 64 channels, 3x3, 16x16, B = 32, K = 4): the folded grouped convolution
   vs the multiply form (x·r -> conv -> ·s) and vs a plain conv on the K-times batch.

All configurations are timed in interleaved repeats (one step of each per repeat), the median is
taken, and only ratios are the headline; the table is printed and written to
``benchmarks/results/lome.md``.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ensemblize.checkpoint import atomic_write_text
from ensemblize.nn import (
    AdditiveLowRankLinear,
    BatchEnsembleConv2d,
    BatchEnsembleLinear,
    EnsembleLinear,
    LoMELinear,
)
from ensemblize.nn.lome import _LowRankEnsembleLinear

RESULTS = Path(__file__).resolve().parent / "results" / "lome.md"


def make_step(module: nn.Module, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """One training step's compute: forward, backward to the input and all parameters."""
    forward = fn if fn is not None else module
    x = x.detach().requires_grad_(True)

    def step() -> None:
        for p in module.parameters():
            p.grad = None
        x.grad = None
        forward(x).sum().backward()

    return step


def interleaved_medians(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    for step in steps.values():  # warm-up
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def paired_ratios(steps: dict[str, Callable[[], None]], reference: str, repeats: int) -> dict[str, float]:
    """Median over rounds of (step time / reference step time in the same round); order rotates per round."""
    for step in steps.values():  # warm-up
        step()
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    ref = times[reference]
    out = {n: statistics.median([t / f for t, f in zip(ts, ref, strict=True)]) for n, ts in times.items()}
    out["_reference_seconds"] = statistics.median(ref)
    return out


def load_average() -> str:
    return "/".join(Path("/proc/loadavg").read_text().split()[:3])


def tabm_table(shapes: list[tuple[str, int, int, int, int, bool]], ranks: list[int], repeats: int) -> str:
    """LoMELinear (and its previous autograd implementation) / official ``tabm.LinearBatchEnsemble``."""
    import tabm

    lines = [
        "### LoMELinear vs the official `tabm.LinearBatchEnsemble` (forward + backward, same run)",
        "",
        f"Load average (1/5/15 min) at start: {load_average()}.",
        "",
        "| shape | input | layer | step time / tabm.LinearBatchEnsemble |",
        "|---|---|---|---:|",
    ]
    for label, fin, fout, members, batch, broadcast in shapes:
        torch.manual_seed(0)
        base = torch.randn(batch, fin) if broadcast else torch.randn(batch, members, fin)
        ref = tabm.LinearBatchEnsemble(fin, fout, k=members, scaling_init="random-signs")
        layers: dict[str, tuple[nn.Module, Callable | None]] = {"tabm.LinearBatchEnsemble": (ref, None)}
        for r in ranks:
            layer = LoMELinear(fin, fout, members, r, 1.0)
            layers[f"LoMELinear r={r} auto ({layer.resolved_form(batch)})"] = (layer, None)
        mid = ranks[len(ranks) // 2]
        old = LoMELinear(fin, fout, members, mid, 1.0)
        layers[f"LoMELinear r={mid}, previous (autograd through member_weights)"] = (
            old,
            lambda x, m=old: _LowRankEnsembleLinear._materialized(m, x),
        )
        layers[f"LoMELinear r={mid} factored"] = (
            LoMELinear(fin, fout, members, mid, 1.0, form="factored"),
            None,
        )

        def make(
            module: nn.Module,
            fn: Callable | None,
            base: torch.Tensor = base,
            view: tuple[int, int, int] | None = (batch, members, fin) if broadcast else None,
        ) -> Callable[[], None]:
            x = base.detach().requires_grad_(True)
            forward = fn if fn is not None else module
            params = list(module.parameters())

            def step() -> None:
                for p in params:
                    p.grad = None
                x.grad = None
                inp = x if view is None else x.unsqueeze(1).expand(*view)
                forward(inp).sum().backward()

            return step

        ratios = paired_ratios({n: make(*v) for n, v in layers.items()}, "tabm.LinearBatchEnsemble", repeats)
        kind = "broadcast (B, K, in) view" if broadcast else "(B, K, in) rows"
        for name in layers:
            if name == "tabm.LinearBatchEnsemble":
                continue
            bold = "**" if " auto (" in name else ""
            lines.append(f"| {label} | {kind} | {name} | {bold}{ratios[name]:.2f}{bold} |")
        lines.append(
            f"| {label} | {kind} | tabm.LinearBatchEnsemble (reference) | 1.00 "
            f"({ratios['_reference_seconds'] * 1e3:.1f} ms) |"
        )
    lines += [
        "",
        f"Median over {repeats} rounds of the per-round paired ratio (one step of every layer per round, order "
        f"rotated); load average at end: {load_average()}. Issue target: the auto form at r ≤ 4 ≤ 1.30.",
    ]
    return "\n".join(lines)


class _OfficialTabM(nn.Module):
    """``tabm.TabM`` taking the estimator's ``(B, F)`` numeric matrix (no categorical columns here)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x_num=x)
        return out.squeeze(-1) if self.regression else out

    regression = False


def fit_official_tabm(
    x, y, *, members: int, n_blocks: int, d_block: int, epochs: int, seed: int, regression: bool = False
) -> None:
    """Official TabM end to end on a numeric table: split, quantile transform, bins, ``train_model``
    (``regression``: one output, MSE on the standardised target, as the estimators train)."""
    import rtdl_num_embeddings as rtdl
    import tabm
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import QuantileTransformer

    from ensemblize.tabular.train import train_model

    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=None if regression else y
    )
    if regression:
        mean, std = y_tr.mean(), y_tr.std()
        y_tr, y_va = ((y_tr - mean) / std).astype("float32"), ((y_va - mean) / std).astype("float32")
    qt = QuantileTransformer(
        n_quantiles=min(1000, len(x_tr)), output_distribution="normal", random_state=seed
    )
    x_tr = torch.as_tensor(qt.fit_transform(x_tr), dtype=torch.float32)
    x_va = torch.as_tensor(qt.transform(x_va), dtype=torch.float32)
    torch.manual_seed(seed)
    bins = rtdl.compute_bins(x_tr, n_bins=48)
    model = tabm.TabM.make(
        n_num_features=x_tr.shape[1],
        d_out=1 if regression else int(y.max()) + 1,
        num_embeddings=rtdl.PiecewiseLinearEmbeddings(bins, 16, activation=False, version="B"),
        k=members,
        n_blocks=n_blocks,
        d_block=d_block,
        dropout=0.1,
    )
    wrapped = _OfficialTabM(model)
    wrapped.regression = regression
    train_model(
        wrapped,
        x_tr,
        torch.as_tensor(y_tr),
        x_va,
        torch.as_tensor(y_va),
        regression=regression,
        members=members,
        lr=2e-3,
        weight_decay=3e-4,
        batch_size=256,
        max_epochs=epochs,
        patience=epochs,
        seed=seed,
    )


FIT_SHAPES = ((16, 2, 128, "the estimator's default"), (32, 3, 256, "the former default, TabM's k"))
"""(K, n_blocks, d_block, label) at which ``LoMETabClassifier.fit`` is timed against official TabM."""


def fit_table(n_rows: int, epochs: int, repeats: int) -> str:
    """Seconds of ``LoMETabClassifier.fit`` / seconds of official TabM at equal K, depth and width, same data.

    One interleaved comparison per shape of :data:`FIT_SHAPES`.
    """
    from sklearn.datasets import make_classification

    from ensemblize.tabular import LoMETabClassifier

    x, y = make_classification(n_samples=n_rows, n_features=8, n_informative=6, n_classes=3, random_state=0)
    x = x.astype("float32")
    start_load = load_average()
    rows = []
    for members, n_blocks, d_block, label in FIT_SHAPES:
        shape = f"K = {members}, {n_blocks}×{d_block}"
        reference = f"official TabM (tabm.TabM.make, {shape})"
        runs = {
            reference: lambda m=members, b=n_blocks, d=d_block: fit_official_tabm(
                x, y, members=m, n_blocks=b, d_block=d, epochs=epochs, seed=0
            ),
            f"LoMETabClassifier (r = 2, {shape}: {label})": lambda m=members, b=n_blocks, d=d_block: (
                LoMETabClassifier(
                    members=m,
                    n_blocks=b,
                    d_block=d,
                    batch_size=256,
                    max_epochs=epochs,
                    patience=epochs,
                    n_networks=1,  # one network against one TabM; the default pools 3 (3 fits)
                    random_state=0,
                ).fit(x, y)
            ),
        }
        ratios = paired_ratios(runs, reference, repeats)
        rows += [f"| {name} | **{ratios[name]:.2f}** | {ratios['_reference_seconds']:.1f} |" for name in runs]
    lines = [
        "### `LoMETab*.fit` end to end vs official TabM",
        "",
        f"{n_rows} rows × 8 numeric features, 3 classes (`make_classification`, seed 0), 80/20 train/validation "
        f"split, {epochs} epochs (patience = epochs, so both run every epoch), batch 256, AdamW lr 2e-3 wd 3e-4, "
        "piecewise-linear embeddings (48 bins, d = 16), dropout 0.1, both trained by "
        "`ensemblize.tabular.train.train_model`; official TabM gets a QuantileTransformer and "
        "`rtdl_num_embeddings.compute_bins`, LoMETab its own preprocessing. Each shape is compared with "
        "official TabM at the same K, depth and width. "
        f"Load average at start {start_load}, at end {load_average()}.",
        "",
        "| method | fit time / official TabM fit time (same shape) | official TabM fit s (secondary) |",
        "|---|---:|---:|",
        *rows,
        "",
        f"Median over {repeats} interleaved rounds of the paired ratio.",
    ]
    return "\n".join(lines)


def fit_table_regression(n_rows: int, epochs: int, repeats: int) -> str:
    """Seconds of ``LoMETabRegressor.fit`` (without and with ``refit_full``) / seconds of official TabM
    at the estimator's default K, depth and width, same data, one interleaved comparison."""
    from sklearn.datasets import make_regression

    from ensemblize.tabular import LoMETabRegressor

    x, y = make_regression(n_samples=n_rows, n_features=8, n_informative=6, noise=10.0, random_state=0)
    x, y = x.astype("float32"), y.astype("float64")
    members, n_blocks, d_block = 16, 2, 128
    start_load = load_average()
    reference = f"official TabM (tabm.TabM.make, K = {members}, {n_blocks}×{d_block})"

    def lometab(refit: bool) -> Callable[[], None]:
        est = LoMETabRegressor(members=members, n_blocks=n_blocks, d_block=d_block, batch_size=256,
                               max_epochs=epochs, patience=epochs, n_networks=1, refit_full=refit,
                               random_state=0)  # fmt: skip
        return lambda: est.fit(x, y)

    runs = {
        reference: lambda: fit_official_tabm(
            x, y, members=members, n_blocks=n_blocks, d_block=d_block, epochs=epochs, seed=0, regression=True
        ),
        "LoMETabRegressor (refit_full=False: the same training as TabM)": lometab(False),
        "LoMETabRegressor (refit_full=True, the default: + a refit on all rows)": lometab(True),
    }
    ratios = paired_ratios(runs, reference, repeats)
    rows = [f"| {name} | **{ratios[name]:.2f}** | {ratios['_reference_seconds']:.1f} |" for name in runs]
    return "\n".join(
        [
            "### `LoMETabRegressor.fit` end to end vs official TabM",
            "",
            f"{n_rows} rows × 8 numeric features (`make_regression`, seed 0), 80/20 train/validation split, "
            f"{epochs} epochs (patience = epochs), batch 256, as the classification comparison otherwise; "
            "MSE on the standardised target. With `refit_full=True` the estimator then retrains the network "
            "on training + validation rows for its best epoch + 1 epochs (1 to "
            f"{epochs}, 1.25× the rows each) — extra work by design, not overhead. "
            f"Load average at start {start_load}, at end {load_average()}.",
            "",
            "| method | fit time / official TabM fit time (same shape) | official TabM fit s (secondary) |",
            "|---|---:|---:|",
            *rows,
            "",
            f"Median over {repeats} interleaved rounds of the paired ratio.",
        ]
    )


REAL_TABLES = ("concrete", "ames", "wage")
"""The benchmark's pre-defined regression tables (:data:`ensemblize.data.tables.BENCHMARK_SUITE`)."""


def _cpu_fit(est, splits) -> float:
    """CPU seconds of ``est.fit`` on a split's training rows with its validation rows as ``eval_set``."""
    t0 = time.process_time()
    est.fit(splits.train.X, splits.train.y, eval_set=(splits.val.X, splits.val.y))
    return time.process_time() - t0


def fit_table_real(tables: tuple[str, ...], seeds: tuple[int, ...], split_seed: int = 0) -> str:
    """CPU seconds of ``LoMETabRegressor.fit`` (one network, every other knob its default, so
    ``refit_full=True``) / CPU seconds of official TabM (:class:`ensemblize.tabular.TabMRegressor`) at
    the same K, depth and width, on real tables with early stopping: the realistic counterpart of
    :func:`fit_table_regression`, whose fixed epochs without early stopping are the refit's worst case.

    Two official-TabM references: its own training defaults (dropout 0.1, patience 16, batch 256) and
    LoMETabRegressor's (dropout 0, patience 24, batch 128), so the second ratio isolates the layer and
    the refit. One fit of each per (table, model seed), in rotating order; ratios are per pair.
    """
    from ensemblize.data.tables import load_benchmark, split
    from ensemblize.tabular import LoMETabRegressor, TabMRegressor

    shape = {"members": 16, "n_blocks": 2, "d_block": 128}
    start_load = load_average()
    rows, ratios = [], {"own": [], "same": [], "phase1": []}
    for table in tables:
        splits = split(load_benchmark(table), seed=split_seed)
        for seed in seeds:
            makers = {
                "lome": lambda s=seed: LoMETabRegressor(**shape, n_networks=1, random_state=s),
                "own": lambda s=seed: TabMRegressor(**shape, random_state=s),
                "same": lambda s=seed: TabMRegressor(
                    **shape, dropout=0.0, patience=24, batch_size=128, random_state=s
                ),
            }
            order = list(makers)
            k = seed % len(order)
            cpu, fitted = {}, {}
            for name in order[k:] + order[:k]:
                fitted[name] = makers[name]()
                cpu[name] = _cpu_fit(fitted[name], splits)
            lome = fitted["lome"]
            refit_s = lome.refit_history_[-1]["seconds"] if lome.refit_history_ else 0.0
            phase1 = cpu["lome"] - refit_s
            ratios["own"].append(cpu["lome"] / cpu["own"])
            ratios["same"].append(cpu["lome"] / cpu["same"])
            ratios["phase1"].append(phase1 / cpu["same"])
            rows.append(
                f"| {table} | {seed} | {cpu['lome']:.1f} ({phase1:.1f} + refit {refit_s:.1f}; best epoch "
                f"{lome.best_epochs_[0]}, {len(lome.history_)} epochs + {lome.refit_epochs_[0]}) | "
                f"{cpu['own']:.1f} ({len(fitted['own'].history_)} epochs) | "
                f"{cpu['same']:.1f} ({len(fitted['same'].history_)} epochs) | "
                f"**{ratios['own'][-1]:.2f}** | **{ratios['same'][-1]:.2f}** | {ratios['phase1'][-1]:.2f} |"
            )

    gmean = statistics.geometric_mean
    return "\n".join(
        [
            "### `LoMETabRegressor.fit` vs official TabM at equal K, depth and width on real tables (early stopping)",
            "",
            f"Tables {', '.join(tables)} (`load_benchmark`, 64/16/20 split seed {split_seed}, the validation "
            f"rows as `eval_set`), model seeds {', '.join(map(str, seeds))}. LoMETabRegressor: K = 16, 2×128, "
            "`n_networks=1` (one network against one TabM; the default pools three), every other knob its "
            "default — so it early-stops on validation and then refits on training + validation rows for "
            "its best epoch + 1 epochs. Official TabM: `TabMRegressor(members=16, n_blocks=2, d_block=128)` "
            "(a) at its own training defaults (dropout 0.1, patience 16, batch 256), (b) at LoMETab's "
            "(dropout 0, patience 24, batch 128). CPU seconds (`time.process_time`, one thread) of each "
            "`fit`; the refit's seconds are its recorded training time. Load average at start "
            f"{start_load}, at end {load_average()}.",
            "",
            "| table | seed | LoMETab CPU s (validation fit + refit) | TabM (a) CPU s | TabM (b) CPU s | "
            "LoMETab / (a) | LoMETab / (b) | validation fit alone / (b) |",
            "|---|---:|---|---|---|---:|---:|---:|",
            *rows,
            "",
            f"Geometric mean over the {len(ratios['own'])} pairs: LoMETab / TabM (a) **{gmean(ratios['own']):.2f}**, "
            f"LoMETab / TabM (b) **{gmean(ratios['same']):.2f}**, LoMETab's validation fit alone / TabM (b) "
            f"{gmean(ratios['phase1']):.2f}.",
        ]
    )


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def linear_table(d: int, members: int, batch: int, ranks: list[int], repeats: int) -> tuple[str, dict]:
    torch.manual_seed(0)
    x = torch.randn(batch, members, d)
    layers: dict[str, nn.Module] = {
        "BatchEnsembleLinear (rank 1, reference)": BatchEnsembleLinear(d, d, members, first_layer=True),
        "EnsembleLinear (K independent, reference)": EnsembleLinear(d, d, members),
    }
    for r, form in itertools.product(ranks, ("materialized", "factored")):
        layers[f"LoMELinear r={r} {form}"] = LoMELinear(d, d, members, r, 0.5, form=form)
    for form in ("materialized", "factored"):
        layers[f"AdditiveLowRankLinear r=4 {form}"] = AdditiveLowRankLinear(d, d, members, 4, 0.5, form=form)
    steps = {name: make_step(layer, x) for name, layer in layers.items()}
    med = interleaved_medians(steps, repeats)
    be = med["BatchEnsembleLinear (rank 1, reference)"]
    ens = med["EnsembleLinear (K independent, reference)"]
    lines = [
        f"### Linear layer, in = out = {d}, K = {members}, B = {batch} (forward + backward)",
        "",
        "| layer | params | params / K-independent | step time / BatchEnsemble | step time / K-independent |",
        "|---|---:|---:|---:|---:|",
    ]
    ens_params = n_params(layers["EnsembleLinear (K independent, reference)"])
    for name, layer in layers.items():
        auto = ""
        if isinstance(layer, (LoMELinear, AdditiveLowRankLinear)):
            pick = type(layer)(d, d, members, layer.rank, 0.5).resolved_form(batch)
            auto = " (auto)" if pick == layer.form else ""
        lines.append(
            f"| {name}{auto} | {n_params(layer):,} | {n_params(layer) / ens_params:.3f} | "
            f"{med[name] / be:.2f} | {med[name] / ens:.2f} |"
        )
    lines += [
        "",
        f'(auto) marks the form `form="auto"` picks at this shape. Reference step times: BatchEnsemble '
        f"{be * 1e3:.1f} ms, K-independent {ens * 1e3:.1f} ms; median of {repeats} interleaved repeats.",
    ]
    return "\n".join(lines), med


def conv_table(cin: int, cout: int, size: int, batch: int, members: int, repeats: int) -> tuple[str, dict]:
    torch.manual_seed(0)
    be = BatchEnsembleConv2d(cin, cout, 3, members, padding=1, init="normal")
    plain = nn.Conv2d(cin, cout, 3, padding=1)
    x = torch.randn(batch * members, cin, size, size)

    def multiply(inp: torch.Tensor) -> torch.Tensor:
        # row b·K + k belongs to member k: r.repeat(B, 1) puts r_k on those rows
        r = be.r.repeat(batch, 1)[:, :, None, None]
        s = be.s.repeat(batch, 1)[:, :, None, None]
        b = be.bias.repeat(batch, 1)[:, :, None, None]
        return F.conv2d(inp * r, be.weight, None, be.stride, be.padding) * s + b

    with torch.no_grad():  # the two forms compute the same function
        torch.testing.assert_close(multiply(x), be(x), rtol=1e-4, atol=1e-4)
    steps = {
        "folded (one grouped conv)": make_step(be, x),
        "multiply (x·r -> conv -> ·s)": make_step(be, x, multiply),
        "plain conv on K-times batch": make_step(plain, x),
    }
    med = interleaved_medians(steps, repeats)
    ref = med["plain conv on K-times batch"]
    lines = [
        f"### BatchEnsembleConv2d, {cin} -> {cout} channels, 3x3, {size}x{size}, B = {batch}, K = {members} "
        "(forward + backward)",
        "",
        "| form | step time / plain conv on K-times batch | step time / multiply form |",
        "|---|---:|---:|",
    ]
    mult = med["multiply (x·r -> conv -> ·s)"]
    for name, t in med.items():
        lines.append(f"| {name} | {t / ref:.2f} | {t / mult:.2f} |")
    lines += ["", f"Plain conv step: {ref * 1e3:.1f} ms; median of {repeats} interleaved repeats."]
    return "\n".join(lines), med


def forms_table(repeats: int, quick: bool) -> str:
    """factored / materialized step-time ratio over a grid, with the form ``auto`` picks."""
    dims = [64, 256] if quick else [64, 512]
    grid = itertools.product(dims, [8, 32], [1, 8, 64, 256], [1, 4, 16])
    lines = [
        "### factored / materialized step-time ratio (forward + backward), and `auto`'s pick",
        "",
        "| d | K | B | r | LoME fact/mat | LoME auto | Additive fact/mat | Additive auto |",
        "|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    agree = total = 0
    for d, k, b, r in grid:
        torch.manual_seed(0)
        x = torch.randn(b, k, d)
        row = [f"{d}", f"{k}", f"{b}", f"{r}"]
        for cls in (LoMELinear, AdditiveLowRankLinear):
            steps = {
                form: make_step(cls(d, d, k, r, 0.5, form=form), x) for form in ("materialized", "factored")
            }
            med = interleaved_medians(steps, repeats)
            ratio = med["factored"] / med["materialized"]
            pick = cls(d, d, k, r, 0.5).resolved_form(b)
            faster = "factored" if ratio < 1 else "materialized"
            ok = pick == faster or 0.8 < ratio < 1.25  # near-ties count as agreement
            agree += ok
            total += 1
            row += [f"{ratio:.2f}", pick + ("" if ok else " ✗")]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"`auto` picks the faster form (or one within 25 %) in {agree}/{total} cells; ✗ marks misses.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--forms", action="store_true", help="add the factored-vs-materialized sweep")
    parser.add_argument("--tabm-only", action="store_true", help="only the official-TabM comparisons")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--fit-regression",
        action="store_true",
        help="only LoMETabRegressor.fit vs official TabM (writes --out, default results/lome_vs_tabm_regression.md)",
    )
    parser.add_argument(
        "--fit-real",
        action="store_true",
        help="only LoMETabRegressor.fit vs official TabM at equal shape on real tables with early stopping "
        "(writes --out, default results/lome_vs_tabm_real.md)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = args.repeats or (5 if args.quick else 7)
    fit_only = {  # flag -> (default report name, section builder)
        "fit_real": (
            "lome_vs_tabm_real.md",
            lambda: (
                fit_table_real(("concrete",), (0,)) if args.quick else fit_table_real(REAL_TABLES, (0, 1, 2))
            ),
        ),
        "fit_regression": (
            "lome_vs_tabm_regression.md",
            lambda: (
                fit_table_regression(600, 2, 3)
                if args.quick
                else fit_table_regression(2000, 3, max(repeats, 5))
            ),
        ),
    }
    for flag, (name, section) in fit_only.items():
        if getattr(args, flag):
            out = args.out if args.out != RESULTS else RESULTS.with_name(name)
            text = (
                f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU. Command: "
                f"`.venv/bin/python benchmarks/bench_lome.py --{flag.replace('_', '-')}"
                f"{' --quick' if args.quick else ''}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).\n\n"
                + section()
                + "\n"
            )
            print(text)
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, text)
            return
    if args.quick:
        shapes = [
            ("d=128, K=8, B=64", 128, 128, 8, 64, False),
            ("first 64->128, K=8, B=64", 64, 128, 8, 64, True),
        ]
        vs_tabm = tabm_table(shapes, [1, 2, 4], repeats)
        vs_fit = fit_table(600, 1, 3)
    else:
        shapes = [
            ("d=512, K=32, B=256 (issue)", 512, 512, 32, 256, False),
            ("LoMETab hidden 256->256, K=32, B=256", 256, 256, 32, 256, False),
            ("LoMETab first 128->256, K=32, B=256", 128, 256, 32, 256, True),
            ("LoMETab default hidden 128->128, K=16, B=256", 128, 128, 16, 256, False),
            ("LoMETab default first 128->128, K=16, B=256", 128, 128, 16, 256, True),
            ("regressor default hidden 128->128, K=16, B=128", 128, 128, 16, 128, False),
            ("regressor default first 128->128, K=16, B=128", 128, 128, 16, 128, True),
        ]
        vs_tabm = tabm_table(shapes, [1, 2, 4], max(repeats, 15))
        vs_fit = fit_table(2000, 3, max(repeats // 2, 5))
    if args.tabm_only:
        lin = conv = ""
    elif args.quick:
        lin, _ = linear_table(128, 8, 64, [1, 4, 16], repeats)
        conv, _ = conv_table(16, 16, 8, 8, 4, repeats)
    else:
        lin, _ = linear_table(512, 32, 256, [1, 2, 4, 8, 16], repeats)
        conv, _ = conv_table(64, 64, 16, 32, 4, repeats)
    parts = [
        "## Low-rank ensemble layers: step-time ratios" + (" (quick run)" if args.quick else ""),
        "",
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} thread(s), float32, CPU; seed 0. "
        f"Command: `.venv/bin/python benchmarks/bench_lome.py{' --quick' if args.quick else ''}"
        f"{' --forms' if args.forms else ''}{' --tabm-only' if args.tabm_only else ''}`.",
        "",
        vs_tabm,
        "",
        vs_fit,
    ]
    if not args.tabm_only:
        parts += ["", lin, "", conv]
    if args.forms:
        parts += ["", forms_table(3 if args.quick else 5, args.quick)]
    text = "\n".join(parts) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
