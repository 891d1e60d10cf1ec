"""Why did the selective verdicts move? A 2 × 2 ablation of the two training changes since the Nov 30 run.

Changes between the previous docs/results/selective.md run and the regenerated one that alter
*training* (the AUGRC fix changes only a reported number):

* the SelectiveNet selection head divides by 10 before its last Linear (reference Keras head);
* ``fit``'s default ``decay_filter="standard"`` no longer decays norm affine parameters and biases
  (the previous run decayed every parameter, i.e. ``decay_filter="all"``).

This script trains the same models as ``ensemblize experiment selective`` (same data split,
initial weights, batch order, hyper-parameters; the ÷10 module has no parameters, so both head
variants start from identical weights) under the four combinations and prints test accuracy, AURC
×100 of the own score (w/o SR) and of SR on f (w/ SR), and risk at 10–50 % coverage. Nothing is
selected from it.

Usage::

    .venv/bin/python docs/results/selective/ablation.py OUT.jsonl [--seeds 0,1,2] [--epochs 40]
        [--dataset digits] [--max-train N] [--kinds SelectiveNet,SYNC-SMP] [--target 0.5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def run_one(*, kind: str, seed: int, divide: bool, decay: str, args: argparse.Namespace) -> dict:
    """Train one model and return its test metrics."""
    import numpy as np
    from torch import nn

    from ensemblize import metrics
    from ensemblize.evaluation.selective import score_model
    from ensemblize.experiments import selective as S
    from ensemblize.training import fit

    splits = S._load(args.dataset, None, seed)
    x_tr, y_tr = S._subsample(splits.x_train, splits.y_train, args.max_train, seed)
    model = S._model(args.dataset, None)
    gamma = 2.0 if kind == "SYNC-SMP" else None
    net = S._build(kind, splits, model=model, seed=seed, members=4, classes=splits.num_classes)
    if not divide:
        net.selector[3] = nn.Identity()
    t0 = time.perf_counter()
    fit(net, (x_tr, y_tr), loss_fn=S._loss(kind, target=args.target, gamma=gamma, mu=1.0),
        epochs=args.epochs, lr=0.05, batch_size=128, seed=seed, decay_filter=decay, progress=False)  # fmt: skip
    secs = time.perf_counter() - t0
    s = score_model(net, splits.x_test, kind="selective")
    err = (s.pred != splits.y_test.numpy()).astype(np.float64)
    out = {"kind": kind, "seed": seed, "divide": divide, "decay": decay, "target": args.target}
    out["accuracy"] = float(1 - err.mean())
    for name, conf in (("own", s.own), ("sr", s.sr)):
        out[f"aurc_{name}"] = float(metrics.aurc(conf, err))
        out[f"low_{name}"] = float(
            np.mean([metrics.risk_at_coverage(conf, err, c) for c in (0.1, 0.2, 0.3, 0.4, 0.5)])
        )
    out["mean_selection"] = float(np.mean(s.own))
    out["train_seconds"] = secs
    return out


def summarize(path: Path) -> str:
    """Markdown: mean ± std over seeds per (kind, ÷10 head, decay groups)."""
    import numpy as np

    rows: dict[tuple, list[dict]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rows.setdefault((r["kind"], r["divide"], r["decay"]), []).append(r)

    def ms(vals: list[float]) -> str:
        v = np.array(vals) * 100
        return f"{v.mean():.2f} ± {v.std(ddof=1):.2f}" if v.size > 1 else f"{v.mean():.2f}"

    out = [
        "| model (c = 0.5) | selection head | weight decay on | n | acc % | AURC w/o SR | AURC w/ SR | risk 10–50 % w/o SR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (kind, divide, decay), rs in sorted(
        rows.items(), key=lambda kv: (kv[0][0], not kv[0][1], kv[0][2] != "standard")
    ):
        head = "÷10 (reference)" if divide else "no ÷10 (previous)"
        groups = "all parameters (previous)" if decay == "all" else "standard groups (now)"
        out.append(
            f"| {kind} | {head} | {groups} | {len(rs)} | {ms([r['accuracy'] for r in rs])} | "
            f"{ms([r['aurc_own'] for r in rs])} | {ms([r['aurc_sr'] for r in rs])} | {ms([r['low_own'] for r in rs])} |"
        )
    return "\n".join(out)


def main() -> int:
    """Run the grid, appending one JSON line per model to OUT (finished lines are skipped)."""
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--kinds", default="SelectiveNet,SYNC-SMP")
    p.add_argument("--target", type=float, default=0.5)
    p.add_argument("--summary", action="store_true", help="print the Markdown summary of OUT and exit")
    args = p.parse_args()
    if args.summary:
        print(summarize(args.out))
        return 0
    torch.set_num_threads(1)
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["kind"], r["seed"], r["divide"], r["decay"]))
    for kind in args.kinds.split(","):  # kind-major: a cut-short grid still has every seed of the first kind
        for seed in (int(s) for s in args.seeds.split(",")):
            for divide in (True, False):
                for decay in ("standard", "all"):
                    if (kind, seed, divide, decay) in done:
                        continue
                    r = run_one(kind=kind, seed=seed, divide=divide, decay=decay, args=args)
                    with args.out.open("a") as f:
                        f.write(json.dumps(r) + "\n")
                    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
