"""Training-step time and memory of the image ensembles, as ratios against references measured in one run.

Run: ``.venv/bin/python benchmarks/bench_image.py [--quick] [--threads N] [--out benchmarks/results/image.md]``.

For each case (backbone × input shape) and each method — single model, deep ensemble (M copies),
BatchEnsemble, Packed-Ensembles PE(alpha=2, M, gamma=1), σN-Ens — one *training step* is timed:
``zero_grad; logits = model(x) -> (B, M, classes); loss = mean over members and samples of the
cross-entropy (+ the softmax-temperature diversity regulariser for σN-Ens, as in training);
backward; SGD(momentum 0.9, weight decay 5e-4).step()``, in train mode.

The reference ("floor") is the *plain backbone on an M-times batch*: the same step on ``B·M``
samples. An implicit ensemble that shares all convolutions/attention runs exactly that compute,
so ``step / floor`` measures its overhead; the deep ensemble does the same arithmetic as the
floor but in M smaller passes with M weight sets.

Timing protocol: every method of a case is built once, warmed up (``--warmup`` steps each), then
timed in ``--rounds`` interleaved rounds (one sample of ``--steps-per-sample`` steps of each method
per round; the order rotates every round). Ratios are the median over rounds of the *paired* per-round ratio (method time /
floor time in the same round), which cancels slow drifts of the shared machine's load; the bare
median step time is printed only as a secondary column. Each step is timed by the wall clock and
by the thread's CPU time (user + system, page faults included): with one intra-op thread the CPU
time is the step's compute without the time it waits for a core while other processes run, so its
ratio is the steadier measure of "compute vs the floor" on a loaded machine; both are reported.

Memory, two honest measures (CPU has no allocator peak counter like ``torch.cuda.max_memory_allocated``):

* **activation MB** — the bytes autograd keeps for backward: every tensor passed to the
  ``saved_tensors_hooks`` pack hook during one forward + loss, de-duplicated by storage, excluding
  storages owned by parameters. Deterministic, exact for what autograd saves; it does not count
  transient buffers, gradients or optimizer state.
* **peak RSS Δ MB** (full run only) — a fresh subprocess per method builds the model and data,
  reads its RSS, resets the kernel's peak-RSS mark (``/proc/self/clear_refs``), runs 3 training
  steps and reads the peak (``VmHWM``); the difference is the
  step's peak resident memory beyond what the process already held (activations, gradients,
  momentum buffers, workspaces, allocator slack). It is coarse (page granularity, glibc allocator
  reuse) — read it to within ~10 %.

With ``--profile`` (on in the full run), for the CIFAR-shaped ResNet (BatchNorm) and the
digits-shaped ViT (LayerNorm): (a) the norm layers alone are timed — plain norm vs σNorm vs a
variant that isolates or fixes the overhead — and (b) the σN-Ens and floor steps are profiled with
``torch.profiler`` and the per-op self-CPU-time difference is tabulated.

Threads: one intra-op thread by default (the machine is shared, ratios are more stable); the load
average at measurement time is printed in the header.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ensemblize import sigma_ensemble
from ensemblize.checkpoint import atomic_write_text
from ensemblize.default_job import DEFAULT_SIGMA_NORMS
from ensemblize.diversity import softmax_temperature_loss
from ensemblize.models.ensembles import count_parameters
from ensemblize.models.registry import build_ensemble, build_model
from ensemblize.nn.sigma_norm import SigmaLayerNorm, SigmaNorm
from ensemblize.runner import sigma_norm_selection

PROFILE_CASES = ("resnet_small-cifar", "vit_small-digits")  # one BatchNorm and one LayerNorm network
RESULTS = Path(__file__).resolve().parent / "results" / "image.md"

NUM_CLASSES = 10
TAU, LAM = 1.0, 1e-3  # diversity regulariser knobs; the step's cost does not depend on their values
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
TARGET = 1.05  # issue 10 item 7: σN-Ens step time <= 1.05 x the floor

METHOD_LABELS = {
    "floor": "plain backbone on B·M batch (floor)",
    "single": "single model (B batch)",
    "deep": "deep ensemble (M copies)",
    "batchensemble": "BatchEnsemble",
    "packed": "Packed-Ensembles (α=2, γ=1)",
    "sigma": "σN-Ens (+ diversity loss)",
    "sigma_default": "σN-Ens default: σNorm in the last stage (+ diversity loss)",
}


@dataclass(frozen=True)
class Case:
    """One backbone on one input shape; ``methods`` are the ensembles that apply to it."""

    key: str
    backbone: str
    in_channels: int
    image_size: int
    methods: tuple[str, ...]
    signal: bool = False  # 1-D input (C, L) with L = image_size, e.g. MNIST-1D's (1, 40)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one input sample: ``(C, L)`` for a signal, ``(C, H, W)`` for an image."""
        size = (self.image_size,) if self.signal else (self.image_size, self.image_size)
        return (self.in_channels, *size)

    @property
    def input_label(self) -> str:
        return "×".join(str(d) for d in self.sample_shape)


RESNET_METHODS = ("floor", "single", "deep", "batchensemble", "packed", "sigma", "sigma_default")
VIT_METHODS = (
    "floor",
    "single",
    "deep",
    "sigma",
    "sigma_default",
)  # packed / batchensemble need a layer factory
CASES = (
    Case("resnet_small-cifar", "resnet_small", 3, 32, RESNET_METHODS),
    Case("resnet_small-digits", "resnet_small", 1, 8, RESNET_METHODS),
    Case("vit_small-digits", "vit_small", 1, 8, VIT_METHODS),
    Case("vit_small-cifar", "vit_small", 3, 32, VIT_METHODS),
    Case("resnet1d-mnist1d", "resnet1d", 1, 40, RESNET_METHODS, signal=True),
    Case("transformer1d-mnist1d", "transformer1d", 1, 40, VIT_METHODS, signal=True),
)


@dataclass
class Setup:
    """A model, its optimizer, one fixed batch and the loss that training would use."""

    model: nn.Module
    x: Tensor
    y: Tensor
    loss: Callable[[], Tensor]
    optimizer: torch.optim.Optimizer


def build_setup(case: Case, method: str, *, members: int, batch: int, seed: int = 0) -> Setup:
    """Build ``method`` for ``case`` with a seeded random batch (floor: ``B·M`` samples, else ``B``)."""
    torch.manual_seed(seed)
    spec = {"in_channels": case.in_channels, "num_classes": NUM_CLASSES, "image_size": case.image_size}
    if method == "floor":
        model: nn.Module = build_model(case.backbone, **spec)
        n = batch * members
    elif method == "single":
        model = build_ensemble("single", case.backbone, members=1, **spec)
        n = batch
    elif method == "sigma_default":  # the library's σN-Ens default: σNorm in the last stage only
        net = build_model(case.backbone, **spec)
        model = sigma_ensemble(net, members=members, layers=sigma_norm_selection(DEFAULT_SIGMA_NORMS, net))
        n = batch
    else:
        kw = {"alpha": 2.0, "gamma": 1} if method == "packed" else {}
        model = build_ensemble(method, case.backbone, members=members, **spec, **kw)
        n = batch
    model.train()
    x = torch.randn(n, *case.sample_shape)
    y = torch.randint(0, NUM_CLASSES, (n,))

    def loss() -> Tensor:
        out = model(x)
        if out.dim() == 2:  # plain backbone: (N, classes)
            return F.cross_entropy(out, y)
        # (B, M, classes): mean over members of the per-member mean cross-entropy
        m = out.shape[1]
        value = F.cross_entropy(out.flatten(0, 1), y.repeat_interleave(m))
        if method.startswith("sigma"):
            value = value + softmax_temperature_loss(model, TAU, LAM)
        return value

    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    return Setup(model, x, y, loss, opt)


def train_step(s: Setup) -> float:
    s.optimizer.zero_grad(set_to_none=True)
    loss = s.loss()
    loss.backward()
    s.optimizer.step()
    return float(loss.detach())


def activation_bytes(s: Setup) -> int:
    """Bytes autograd saves for backward in one forward + loss (unique storages, parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in s.model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr != 0:
            seen[ptr] = max(seen.get(ptr, 0), st.nbytes())
        return t

    s.optimizer.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = s.loss()
    del loss
    return sum(seen.values())


def median_interval(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95 % confidence interval of the median: the order statistics
    ``floor(n/2 − z√n/2)`` and ``ceil(n/2 + z√n/2)`` (1-based, clipped to ``[1, n]``) of ``values``
    (the binomial sign-test interval, normal approximation)."""
    v, n = sorted(values), len(values)
    half = z * math.sqrt(n) / 2
    lo, hi = max(1, math.floor(n / 2 - half)), min(n, math.ceil(n / 2 + half + 1))
    return v[lo - 1], v[hi - 1]


def _paired_ratios(times: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Median over rounds of each method's time / the floor's in the same round, and IQR / median."""
    ratio, spread = {}, {}
    for n, ts in times.items():
        paired = [t / f for t, f in zip(ts, times["floor"], strict=True)]
        ratio[n] = statistics.median(paired)
        if len(paired) >= 4:
            q = statistics.quantiles(paired, n=4)
            spread[n] = (q[2] - q[0]) / ratio[n]
        else:
            spread[n] = float("nan")
    return ratio, spread


@dataclass
class Timing:
    """Interleaved timing of one case: median wall step seconds, and the paired ratios vs the floor
    (median, IQR / median) in wall-clock time and in this thread's CPU time."""

    med: dict[str, float]
    ratio: dict[str, float]
    spread: dict[str, float]
    cpu_ratio: dict[str, float]
    cpu_spread: dict[str, float]
    interval: dict[str, tuple[float, float]]
    cpu_interval: dict[str, tuple[float, float]]


def time_case(setups: dict[str, Setup], *, rounds: int, warmup: int, steps_per_sample: int = 1) -> Timing:
    """Interleaved timing: ``rounds`` rounds of one sample per method, the order rotating every round;
    a sample is ``steps_per_sample`` consecutive steps of that method, timed together and divided by
    their number (more steps per sample: less per-sample noise, same pairing).

    Each step is timed twice: wall clock (``time.perf_counter``) and the thread's CPU time
    (``time.thread_time``: user + system time of this thread, page faults included). With one
    intra-op thread the CPU time is the step's compute; unlike the wall clock it does not count the
    time the step waits for a core while other processes run, the main noise on a shared machine.
    """
    names = list(setups)
    for _ in range(warmup):
        for name in names:
            train_step(setups[name])
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            c0, t0 = time.thread_time(), time.perf_counter()
            for _ in range(steps_per_sample):
                loss = train_step(setups[name])
            wall[name].append((time.perf_counter() - t0) / steps_per_sample)
            cpu[name].append((time.thread_time() - c0) / steps_per_sample)
            if not torch.isfinite(torch.tensor(loss)):
                raise RuntimeError(f"{name}: non-finite loss {loss} during timing")
    ratio, spread = _paired_ratios(wall)
    cpu_ratio, cpu_spread = _paired_ratios(cpu)
    med = {n: statistics.median(ts) for n, ts in wall.items()}

    def intervals(times: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
        floor = times["floor"]
        return {
            n: median_interval([t / f for t, f in zip(ts, floor, strict=True)]) for n, ts in times.items()
        }

    return Timing(med, ratio, spread, cpu_ratio, cpu_spread, intervals(wall), intervals(cpu))


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} field")


def peak_rss_child(case_key: str, method: str, members: int, batch: int, threads: int) -> None:
    """Subprocess body: print the peak-RSS increase (bytes) over 3 training steps as JSON.

    ``ru_maxrss`` survives ``exec`` on Linux (a child spawned from a big parent starts with the
    parent's peak), so the peak is read from ``/proc/self/status`` ``VmHWM`` after resetting it to the
    current RSS through ``/proc/self/clear_refs``; the result is VmHWM(after) − VmRSS(before).
    """
    torch.set_num_threads(threads)
    case = next(c for c in CASES if c.key == case_key)
    s = build_setup(case, method, members=members, batch=batch)
    before = _proc_status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    for _ in range(3):
        train_step(s)
    after = _proc_status_kib("VmHWM")
    print(json.dumps({"delta_bytes": (after - before) * 1024}))


def peak_rss(case: Case, method: str, members: int, batch: int, threads: int) -> float:
    cmd = [
        sys.executable,
        __file__,
        "--_peak-child",
        case.key,
        method,
        "--members",
        str(members),
        "--batch",
        str(batch),
        "--threads",
        str(threads),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])["delta_bytes"]


def profile_table(case: Case, *, members: int, batch: int, steps: int) -> tuple[str, dict[str, float]]:
    """Per-op self CPU time (ms per step) of σN-Ens vs the floor, largest differences first.

    The two methods are profiled alternately, one step per profiler session, so both see the same
    machine load; per-op times are summed over ``steps`` sessions each.
    """
    from torch.profiler import ProfilerActivity, profile

    setups = {m: build_setup(case, m, members=members, batch=batch) for m in ("floor", "sigma")}
    for s in setups.values():
        for _ in range(2):
            train_step(s)
    per_op: dict[str, dict[str, float]] = {"floor": {}, "sigma": {}}
    for _ in range(steps):
        for method, s in setups.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                train_step(s)
            for e in prof.key_averages():
                ops = per_op[method]
                ops[e.key] = ops.get(e.key, 0.0) + e.self_cpu_time_total / 1e3 / steps
    totals = {m: sum(ops.values()) for m, ops in per_op.items()}
    names = set(per_op["floor"]) | set(per_op["sigma"])
    diffs = sorted(
        ((per_op["sigma"].get(n, 0.0) - per_op["floor"].get(n, 0.0), n) for n in names), reverse=True
    )
    only_sigma = sum(v for n, v in per_op["sigma"].items() if per_op["floor"].get(n, 0.0) == 0.0)
    lines = [
        f"#### Per-op profile, {case.backbone} on {case.input_label} (torch.profiler self CPU time, "
        f"{steps} alternating steps each)",
        "",
        "| op | floor ms/step | σN-Ens ms/step | difference ms/step |",
        "|---|---:|---:|---:|",
    ]
    for d, n in diffs[:10] + [d for d in diffs[-3:] if d[0] < 0]:
        lines.append(
            f"| `{n}` | {per_op['floor'].get(n, 0.0):.2f} | {per_op['sigma'].get(n, 0.0):.2f} | {d:+.2f} |"
        )
    lines += [
        f"| **all ops** | {totals['floor']:.2f} | {totals['sigma']:.2f} | "
        f"{totals['sigma'] - totals['floor']:+.2f} |",
        "",
        f"Ops that only σN-Ens runs (gates, products, views, diversity loss): {only_sigma:.2f} ms/step "
        f"= {only_sigma / totals['floor']:.1%} of the floor's profiled step. Profiler overhead inflates "
        "small ops; large shared ops (convolutions, matmuls) differ by load noise.",
    ]
    return "\n".join(lines), {"only_sigma_ms": only_sigma, "floor_ms": totals["floor"]}


def _norm_inputs(model: nn.Module, x: Tensor) -> list[tuple[SigmaNorm, torch.Size]]:
    """Every σNorm layer of ``model`` with the shape of its input in one forward on ``x``."""
    found: list[tuple[SigmaNorm, torch.Size]] = []
    hooks = [
        mod.register_forward_pre_hook(lambda mod, args: found.append((mod, args[0].shape)))
        for mod in model.modules()
        if isinstance(mod, SigmaNorm)
    ]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return found


def layer_table(case: Case, *, members: int, batch: int, rounds: int) -> tuple[str, dict[str, float]]:
    """Forward + backward (to input and parameters) of the norm layers alone, summed over the network.

    Variants per layer, all on the same ``(B·M, ...)`` input and upstream gradient:

    * *plain*: the backbone's own norm (``nn.BatchNorm2d(C)`` / ``nn.LayerNorm(D)``) on the B·M batch;
    * *σNorm*: the σN-Ens layer as shipped (gate sigmoid, products, reshape, one kernel call);
    * BatchNorm: *kernel on view*: only ``F.batch_norm`` on the ``(B, M·C, H, W)`` view with leaf
      ``(M·C,)`` weight and bias — the σNorm layer minus its gate arithmetic;
    * LayerNorm: *kernels only*: the two kernels σLayerNorm runs — ``F.layer_norm`` with a unit
      affine, then ``F.batch_norm`` in evaluation mode (mean 0, variance 1, eps 0) on the ``(B, K)``
      view with leaf ``(K,)`` scale and shift — i.e. the σNorm layer minus its gate arithmetic
      (sigmoid, products, expansion along the tokens) and checks.
    """
    s = build_setup(case, "sigma", members=members, batch=batch)
    layers = _norm_inputs(s.model, s.x)
    steps: dict[str, list[Callable[[], None]]] = {}
    m = members
    for layer, shape in layers:
        torch.manual_seed(1)
        x = torch.randn(shape, requires_grad=True)
        g = torch.randn(shape)
        b = shape[0] // m
        if isinstance(layer, SigmaLayerNorm):
            plain: nn.Module = nn.LayerNorm(layer.normalized_shape, eps=layer.eps)
            d = layer.normalized_shape
            cols = math.prod(shape) // b
            # leaf (K,) scale / shift and the kernels' constants (unit LN affine, BN mean 0 / var 1)
            consts = (
                torch.ones(cols, requires_grad=True),
                torch.zeros(cols, requires_grad=True),
                torch.zeros(cols),
                torch.ones(cols),
                torch.ones(d),
                torch.zeros(d),
            )

            def variant(x: Tensor, *, eps=layer.eps, b=b, d=d, cols=cols, consts=consts) -> Tensor:
                scale, shift, zero_k, one_k, unit_d, zero_d = consts
                xhat = F.layer_norm(x, d, unit_d, zero_d, eps)
                y = F.batch_norm(xhat.view(b, cols), zero_k, one_k, scale, shift, False, 0.0, 0.0)
                return y.view(x.shape)

            vname = "kernels only (layer_norm + eval batch_norm, leaf affine)"
        else:
            c = shape[1]
            plain = nn.BatchNorm2d(c) if len(shape) == 4 else nn.BatchNorm1d(c)
            w = torch.ones(m * c, requires_grad=True)
            bias = torch.zeros(m * c, requires_grad=True)
            rm, rv = torch.zeros(m * c), torch.ones(m * c)

            def variant(x: Tensor, *, b=b, c=c, w=w, bias=bias, rm=rm, rv=rv) -> Tensor:
                y = F.batch_norm(x.view(b, m * c, *x.shape[2:]), rm, rv, w, bias, True, 0.1, 1e-5)
                return y.view(x.shape)

            vname = "kernel on view"
        plain.train()
        layer.train()
        for name, fn in (("plain", plain), ("σNorm", layer), (vname, variant)):
            steps.setdefault(name, []).append(lambda fn=fn, x=x, g=g: fn(x).backward(g))

    def run(name: str) -> None:
        for step in steps[name]:
            step()

    names = list(steps)
    for name in names:
        run(name)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            run(name)
            times[name].append(time.perf_counter() - t0)
    med = {n: statistics.median(ts) * 1e3 for n, ts in times.items()}
    kinds = sorted({type(layer).__name__ for layer, _ in layers})
    lines = [
        f"#### Norm layers alone, {case.backbone} on {case.input_label}: {len(layers)} × {'/'.join(kinds)}, "
        f"forward + backward, summed over the network (median of {rounds} interleaved rounds)",
        "",
        "| variant | ms per step (all norm layers) | / plain |",
        "|---|---:|---:|",
    ]
    for name in names:
        lines.append(f"| {name} | {med[name]:.2f} | {med[name] / med['plain']:.2f} |")
    return "\n".join(lines), med


def run_case(case: Case, args: argparse.Namespace) -> tuple[list[str], dict[str, float]]:
    m, b = args.members, args.batch
    methods = [x for x in case.methods if args.methods is None or x in args.methods]
    setups = {method: build_setup(case, method, members=m, batch=b) for method in methods}
    act = {name: activation_bytes(s) for name, s in setups.items()}
    timing = time_case(setups, rounds=args.rounds, warmup=args.warmup, steps_per_sample=args.steps_per_sample)
    med = timing.med
    peaks: dict[str, float] = {}
    if args.peak:
        for name in methods:
            peaks[name] = peak_rss(case, name, m, b, args.threads)
    rows = []
    for name in methods:
        s = setups[name]
        vs_deep = f"{med[name] / med['deep']:.2f}" if "deep" in med else "—"
        peak = f"{peaks[name] / 2**20:.0f}" if name in peaks else "—"
        iqr, cpu_iqr = (
            "—" if v != v else f"{v:.2f}"  # NaN: too few rounds
            for v in (timing.spread[name], timing.cpu_spread[name])
        )
        rows.append(
            f"| {METHOD_LABELS[name]} | {case.backbone} | {case.input_label} | "
            f"{count_parameters(s.model):,} | **{timing.ratio[name]:.2f}** | {iqr} | "
            f"**{timing.cpu_ratio[name]:.2f}** | {cpu_iqr} | {vs_deep} | "
            f"{act[name] / 2**20:.1f} | {peak} | {med[name] * 1e3:.1f} |"
        )
    summary = {
        f"{name}_{key}": value
        for name in ("sigma", "sigma_default")
        if name in setups
        for key, value in (
            ("vs_floor", timing.ratio[name]),
            ("vs_floor_cpu", timing.cpu_ratio[name]),
            ("interval", timing.interval[name]),
            ("interval_cpu", timing.cpu_interval[name]),
        )
    }
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smaller batch, fewer rounds, no subprocess peaks"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--batch", type=int, default=None, help="B (default 64; 16 with --quick)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7; 3 quick)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--steps-per-sample", type=int, default=1, help="consecutive steps per timed sample (default 1)"
    )
    parser.add_argument(
        "--methods", nargs="*", default=None, help=f"subset of {list(METHOD_LABELS)} (floor is always kept)"
    )
    parser.add_argument("--cases", nargs="*", default=None, help=f"subset of {[c.key for c in CASES]}")
    parser.add_argument("--no-peak", dest="peak", action="store_false", default=None)
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--_peak-child", nargs=2, metavar=("CASE", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.batch is None:
        args.batch = 16 if args.quick else 64
    if args._peak_child:
        peak_rss_child(*args._peak_child, args.members, args.batch, args.threads)
        return
    args.rounds = args.rounds or (3 if args.quick else 7)
    if args.methods is not None:
        unknown = set(args.methods) - set(METHOD_LABELS)
        if unknown:
            raise SystemExit(f"unknown method(s) {sorted(unknown)}; choose from {list(METHOD_LABELS)}")
        args.methods = ["floor", *[m for m in args.methods if m != "floor"]]
    args.peak = (not args.quick) if args.peak is None else args.peak
    args.profile = (not args.quick) if args.profile is None else args.profile
    cases = [c for c in CASES if args.cases is None or c.key in args.cases]
    if args.cases is not None and len(cases) != len(args.cases):
        raise SystemExit(f"unknown case in {args.cases}; choose from {[c.key for c in CASES]}")

    load_start = os.getloadavg()
    t_start = time.perf_counter()
    rows, summaries = [], {}
    for case in cases:
        case_rows, summaries[case.key] = run_case(case, args)
        rows += case_rows
    prof_parts = []
    if args.profile:
        for case in (c for c in cases if c.key in PROFILE_CASES):
            prof_parts.append(
                layer_table(case, members=args.members, batch=args.batch, rounds=args.rounds)[0]
            )
            prof_parts.append(profile_table(case, members=args.members, batch=args.batch, steps=3)[0])
    prof = (
        "\n\n".join(
            [
                f"### Where σN-Ens spends its time vs the floor (B = {args.batch}, M = {args.members})",
                *prof_parts,
            ]
        )
        if prof_parts
        else ""
    )
    load_end = os.getloadavg()
    elapsed = time.perf_counter() - t_start

    cmd = " ".join(["`.venv/bin/python benchmarks/bench_image.py", *sys.argv[1:]]) + "`"
    header = [
        "## Image ensembles: training-step time and memory" + (" (quick run)" if args.quick else ""),
        "",
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} thread(s), float32, CPU; seed 0; M = {args.members}, B = {args.batch}; "
        f"{args.warmup} warm-up steps, {args.rounds} interleaved rounds of {args.steps_per_sample} step(s) per "
        f"method. Command: {cmd}.",
        f"Load average (1/5/15 min) at start {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, "
        f"at end {load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f} on {os.cpu_count()} CPU(s); "
        f"benchmark wall time {elapsed:.0f} s.",
        "",
        "Step = forward + mean member cross-entropy (+ diversity loss for σN-Ens, τ = "
        f"{TAU}, λ = {LAM}) + backward + SGD step, train mode, random data. "
        "**ratio vs floor**: median over rounds of (method step time / plain backbone step on the B·M batch, "
        "same round), wall clock; *IQR/ratio*: interquartile range of those paired ratios over their median "
        "(noise). **CPU ratio vs floor**: the same with the thread's CPU time (user + system) instead of the "
        "wall clock, i.e. without the time a step waits for a core on the shared machine; *CPU IQR/ratio* its noise. "
        "**ratio vs deep**: median step time / deep-ensemble median step time. "
        "**activation MB**: bytes autograd saves for backward (unique storages, parameters excluded). "
        "**peak RSS Δ MB**: peak-RSS (VmHWM) increase over 3 steps in a fresh subprocess (coarse).",
        "",
        "| method | backbone | input | params | ratio vs floor | IQR/ratio | CPU ratio vs floor | CPU IQR/ratio "
        "| ratio vs deep | activation MB | peak RSS Δ MB | step ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdict = [
        "",
        f"### σN-Ens against the issue's target (step time ≤ {TARGET:.2f}× the floor)",
        "",
        "Median paired ratio with its distribution-free ~95 % interval [lo, hi] (order statistics of the "
        f"{args.rounds} per-round ratios). *meets*: median ≤ {TARGET:.2f}; *clearly*: the whole interval is.",
        "",
        "| case | σN-Ens, every norm: wall | CPU | σN-Ens default (last stage): wall | CPU |",
        "|---|---|---|---|---|",
    ]

    def cell(sm: dict, name: str, cpu: bool) -> str:
        if f"{name}_vs_floor" not in sm:
            return "—"
        r = sm[f"{name}_vs_floor{'_cpu' if cpu else ''}"]
        lo, hi = sm[f"{name}_interval{'_cpu' if cpu else ''}"]
        word = "clearly meets" if hi <= TARGET else "meets" if r <= TARGET else "MISSES"
        return f"{r:.3f} [{lo:.3f}, {hi:.3f}] {word}"

    for key, sm in summaries.items():
        verdict.append(
            f"| {key} | {cell(sm, 'sigma', False)} | {cell(sm, 'sigma', True)} | "
            f"{cell(sm, 'sigma_default', False)} | {cell(sm, 'sigma_default', True)} |"
        )
    text = "\n".join(header + rows + verdict + (["", prof] if prof else [])) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
