"""Claim tables for docs/results/selective.md from one ``ensemblize experiment selective`` run folder.

Usage::

    .venv/bin/python docs/results/selective/claims.py RUN_DIR [RUN_DIR ...]

Reads ``RUN_DIR/jobs/*.json`` (so it also works on a run still in progress) and prints Markdown:
a compact per-method summary (AURC, AUGRC, low-coverage risk, accuracy, validation-threshold
coverage/risk at each target) and the paired per-seed comparisons behind each claim. Everything is
computed on test from the stored metrics; nothing is selected here (γ and μ are reported, never
chosen; Deep Gamblers' reward was chosen on validation by the experiment itself).

Conventions: percentages (AURC / AUGRC ×100), mean ± std (ddof = 1) over seeds; "low-coverage
risk" = mean selective risk at 10, 20, 30, 40, 50 % coverage; W/T/L = seeds where the first method
is better / exactly tied / worse, paired by seed (same data split and initial weights).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

LOW = ("0.1", "0.2", "0.3", "0.4", "0.5")
OWN, SR = "w/o SR", "w/ SR"


def _order(key: tuple[str, float | None, str]) -> tuple:
    """Table order: SR, then per target SelectiveNet, SYNC-SMP by γ, SYNC-entropy, σN; Deep Gamblers last."""
    method, target, scoring = key
    rank = ("SR", "SelectiveNet", "SYNC-SMP", "SYNC-entropy", "σN-SYNC-SMP", "DeepGamblers")
    kind = next(i for i, r in enumerate(rank) if method.split("(")[0] == r)
    group = -1.0 if method == "SR" else 2.0 if method == "DeepGamblers" else float(target)
    return (group, kind, method, scoring != OWN)


TRAIN_SECONDS = "train_seconds"


def load(run: Path) -> tuple[dict[tuple[str, float | None, str], dict[int, dict[str, float]]], dict]:
    """``{(method, target, scoring): {seed: metrics}}`` from every finished job of ``run``, and
    ``{seed: (reward, {reward: validation AURC})}`` of Deep Gamblers' validation choice."""
    table: dict[tuple[str, float | None, str], dict[int, dict[str, float]]] = {}
    rewards: dict[int, tuple[float, dict[str, float]]] = {}
    for path in sorted((run / "jobs").glob("*.json")):
        for rec in json.loads(path.read_text())["records"]:
            key = (rec["method"], rec["target"], rec["scoring"])
            table.setdefault(key, {})[int(rec["seed"])] = {
                **rec["metrics"],
                TRAIN_SECONDS: rec["train_seconds"],
                "params": rec["params"],
            }
            if "reward" in rec:
                rewards[int(rec["seed"])] = (rec["reward"], rec["val_aurc_by_reward"])
    return dict(sorted(table.items(), key=lambda kv: _order(kv[0]))), rewards


def low_cov(m: dict[str, float]) -> float:
    """Mean selective risk over coverages 10–50 %."""
    return sum(m[f"risk@{c}"] for c in LOW) / len(LOW)


def ms(values: Sequence[float], scale: float = 100.0, digits: int = 2) -> str:
    """``mean ± std`` (ddof 1) of ``values × scale``."""
    v = [x * scale for x in values]
    if not v:
        return "—"
    mean = sum(v) / len(v)
    if len(v) == 1:
        return f"{mean:.{digits}f}"
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def paired(
    a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], stat: Callable[[dict[str, float]], float]
) -> str:
    """Paired difference ``a − b`` (×100) and W/T/L for ``a`` (lower is better)."""
    seeds = sorted(set(a) & set(b))
    d = [stat(a[s]) - stat(b[s]) for s in seeds]
    w = sum(x < -1e-12 for x in d)
    t = sum(abs(x) <= 1e-12 for x in d)
    return f"Δ {ms(d)} (W/T/L {w}/{t}/{len(d) - w - t})"


def aurc(m: dict[str, float]) -> float:
    return m["aurc"]


def augrc(m: dict[str, float]) -> float:
    return m["augrc"]


def summary(table: dict, targets: Sequence[float]) -> list[str]:
    """One row per (method, target, scoring): AURC, AUGRC, low-coverage risk, accuracy, and the
    validation-threshold (achieved test coverage / test risk) at the model's own target."""
    lines = [
        "| method | target c | scoring | AURC ×100 | AUGRC ×100 | risk 10–50 % | acc % | val-thr. @ target: test cov. / risk % "
        "| params | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, target, scoring), per_seed in table.items():
        rows = list(per_seed.values())
        thr = "—"
        if target is not None:
            cov = ms([r[f"thr_coverage@{target:g}"] for r in rows], digits=1)
            risk = ms([r[f"thr_risk@{target:g}"] for r in rows], digits=1)
            thr = f"{cov} / {risk}"
        elif method in ("SR", "DeepGamblers"):
            thr = "; ".join(
                f"{t:g}: {ms([r[f'thr_coverage@{t:g}'] for r in rows], digits=1)} / "
                f"{ms([r[f'thr_risk@{t:g}'] for r in rows], digits=1)}"
                for t in targets
            )
        lines.append(
            f"| {method} | {'—' if target is None else f'{target:g}'} | {scoring} | "
            f"{ms([aurc(r) for r in rows])} | {ms([augrc(r) for r in rows])} | "
            f"{ms([low_cov(r) for r in rows])} | {ms([r['accuracy'] for r in rows], digits=1)} | {thr} | "
            f"{int(rows[0]['params']):,} | {ms([r[TRAIN_SECONDS] for r in rows], scale=1.0, digits=0)} |"
        )
    return lines


def claims(table: dict, targets: Sequence[float], syncs: Sequence[str]) -> list[str]:
    """Paired comparisons behind claims 1–3 and the supplementary findings."""
    sn = {c: table.get(("SelectiveNet", c, OWN), {}) for c in targets}
    sn_sr = {c: table.get(("SelectiveNet", c, SR), {}) for c in targets}
    out = [
        "#### Claim 1: own score (w/o SR), risk at 10–50 % coverage (%), paired vs SelectiveNet's own score",
        "",
        "| method | " + " | ".join(f"c = {c:g}" for c in targets) + " |",
        "|---|" + "---|" * len(targets),
        "| SelectiveNet | " + " | ".join(ms([low_cov(m) for m in sn[c].values()]) for c in targets) + " |",
    ]
    for name in syncs:
        cells = []
        for c in targets:
            cur = table.get((name, c, OWN), {})
            cells.append(f"{ms([low_cov(m) for m in cur.values()])} ({paired(cur, sn[c], low_cov)})")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out += [
        "",
        "#### Claim 2: SYNC-type own score (w/o SR) vs SelectiveNet w/ SR — AURC ×100 and risk 10–50 %, paired",
        "",
        "| method (w/o SR) | c | AURC | SN w/ SR AURC | Δ AURC | risk 10–50 % | SN w/ SR | Δ risk 10–50 % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in syncs:
        for c in targets:
            cur = table.get((name, c, OWN), {})
            out.append(
                f"| {name} | {c:g} | {ms([aurc(m) for m in cur.values()])} | "
                f"{ms([aurc(m) for m in sn_sr[c].values()])} | {paired(cur, sn_sr[c], aurc)} | "
                f"{ms([low_cov(m) for m in cur.values()])} | {ms([low_cov(m) for m in sn_sr[c].values()])} | "
                f"{paired(cur, sn_sr[c], low_cov)} |"
            )
    out += [
        "",
        "#### Claim 3: sync target (μ fixed), w/o SR: AURC ×100 / risk 10–50 %; paired SMP(γ) − entropy AURC",
        "",
        "| c | SMP γ=2 | SR target (γ=1) | neg. entropy | SMP γ=2 − entropy | SMP γ=1 − entropy | SMP γ=8 − entropy |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in targets:
        ent = table.get(("SYNC-entropy", c, OWN), {})

        def cell(rows: dict) -> str:
            return f"{ms([aurc(m) for m in rows.values()])} / {ms([low_cov(m) for m in rows.values()])}"

        g = {k: table.get((f"SYNC-SMP(γ={k})", c, OWN), {}) for k in ("1", "2", "8")}
        out.append(
            f"| {c:g} | {cell(g['2'])} | {cell(g['1'])} | {cell(ent)} | {paired(g['2'], ent, aurc)} | "
            f"{paired(g['1'], ent, aurc)} | {paired(g['8'], ent, aurc)} |"
        )
    sr = table.get(("SR", None, SR), {})
    out += [
        "",
        "#### Softmax response as ranker: SR baseline vs every other model and scoring (AURC ×100, paired; "
        "negative Δ = SR better)",
        "",
        "| model | c | scoring | AURC | Δ SR − model |",
        "|---|---|---|---|---|",
    ]
    for (method, target, scoring), per_seed in table.items():
        if method == "SR":
            continue
        out.append(
            f"| {method} | {'—' if target is None else f'{target:g}'} | {scoring} | "
            f"{ms([aurc(m) for m in per_seed.values()])} | {paired(sr, per_seed, aurc)} |"
        )
    out += [
        "",
        "#### σN-SYNC-SMP(γ=2) vs single-model SYNC-SMP(γ=2), same μ and target (AURC ×100, paired; "
        "negative Δ = σN better)",
        "",
        "| c | scoring | σN-SYNC | SYNC | Δ σN − SYNC |",
        "|---|---|---|---|---|",
    ]
    for c in targets:
        for scoring in (OWN, SR):
            a = table.get(("σN-SYNC-SMP(γ=2)", c, scoring), {})
            b = table.get(("SYNC-SMP(γ=2)", c, scoring), {})
            out.append(
                f"| {c:g} | {scoring} | {ms([aurc(m) for m in a.values()])} | "
                f"{ms([aurc(m) for m in b.values()])} | {paired(a, b, aurc)} |"
            )
    return out


def transfer(table: dict, targets: Sequence[float]) -> str:
    """Validation thresholds applied to test: achieved test coverage − target (points), over every
    (model, scoring) at its own target (SR and Deep Gamblers at every target)."""
    gaps = []
    for (_, target, _), per_seed in table.items():
        for t in targets if target is None else (target,):
            gaps.append(sum(m[f"thr_coverage@{t:g}"] - t for m in per_seed.values()) / len(per_seed) * 100)
    if not gaps:
        return ""
    mean = sum(gaps) / len(gaps)
    mad = sum(abs(g) for g in gaps) / len(gaps)
    return (
        f"Validation-threshold transfer: over {len(gaps)} (model, scoring, target) rows, achieved test "
        f"coverage − target = {mean:+.1f} points on average (mean |gap| {mad:.1f}; row means from "
        f"{min(gaps):+.1f} to {max(gaps):+.1f})."
    )


def main(argv: Sequence[str]) -> int:
    """Print the summary and claim tables of every run folder in ``argv``."""
    for arg in argv:
        table, rewards = load(Path(arg))
        targets = sorted({t for (_, t, _) in table if t is not None})
        syncs = [m for m in dict.fromkeys(k[0] for k in table) if m.startswith(("SYNC", "σN"))]
        seeds = sorted({s for per_seed in table.values() for s in per_seed})
        print(f"### {arg} (seeds {seeds})\n")
        print("\n".join(summary(table, targets)))
        print()
        print("\n".join(claims(table, targets, syncs)))
        print()
        print(transfer(table, targets))
        print()
        for seed, (reward, by_reward) in sorted(rewards.items()):
            vals = ", ".join(f"o={o}: {v * 100:.3f}" for o, v in by_reward.items())
            print(f"Deep Gamblers seed {seed}: chosen o = {reward:g} (validation AURC ×100 {vals})  ")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
