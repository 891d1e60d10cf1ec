"""Step-time ratios of the low-rank ensemble layers against their references, measured in one run.

Run: ``.venv/bin/python benchmarks/bench_lome.py`` (``--quick`` for a short run on smaller shapes,
``--forms`` to add the factored-vs-materialized sweep behind ``form="auto"``).

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
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = args.repeats or (5 if args.quick else 7)
    if args.quick:
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
        f"{' --forms' if args.forms else ''}`.",
        "",
        lin,
        "",
        conv,
    ]
    if args.forms:
        parts += ["", forms_table(3 if args.quick else 5, args.quick)]
    text = "\n".join(parts) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
