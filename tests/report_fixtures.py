"""Synthetic evaluations and run folders for the report tests (no training: fast and deterministic)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ensemblize import metrics as M


@dataclass
class FakeEvaluation:
    """Duck-typed stand-in for ``ensemblize.evaluation.Evaluation`` (``metrics``, ``details``)."""

    metrics: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


OOD_SETS = ("gaussian", "photos")


def make_evaluation(seed: int, *, sharp: float = 3.0, n: int = 300, classes: int = 10, members: int = 4,
                    shift: bool = True, ood: bool = True) -> FakeEvaluation:  # fmt: skip
    """Member probabilities from noisy logits; metrics and details computed with ensemblize.metrics."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, members, classes))
    logits[np.arange(n), :, y] += sharp
    p = np.exp(logits)
    p /= p.sum(-1, keepdims=True)
    pbar = p.mean(1)
    conf = pbar.max(1)
    loss = (pbar.argmax(1) != y).astype(float)
    rel = M.reliability(p, y, n_bins=15)
    cov, risk = M.risk_coverage(conf, loss)
    metrics = {
        "accuracy": M.accuracy(p, y),
        "ece": M.ece(p, y, n_bins=15),
        "nll": M.nll(p, y),
        "aurc": M.aurc(conf, loss),
    }
    details: dict[str, Any] = {
        "reliability": {"confidence": rel.confidence, "accuracy": rel.accuracy, "count": rel.count},
        "risk_coverage": {"coverage": np.asarray(cov), "risk": np.asarray(risk)},
    }
    if shift:
        sev = np.arange(6)
        details["shift"] = {
            "severity": sev.tolist(),
            "accuracy": list(metrics["accuracy"] - 0.05 * sev),
            "ece": list(metrics["ece"] + 0.02 * sev),
            "nll": list(metrics["nll"] + 0.1 * sev),
        }
    if ood:
        details["ood"] = {"id": conf}
        aurocs = []
        for k, name in enumerate(OOD_SETS):
            scores = rng.beta(2 + k, 3, size=200)
            details["ood"][name] = scores
            metrics[f"ood_{name}_maxprob_auroc"] = M.ood_auroc(conf, scores)
            aurocs.append(metrics[f"ood_{name}_maxprob_auroc"])
        metrics["ood_maxprob_auroc"] = float(np.mean(aurocs))
    return FakeEvaluation({k: float(v) for k, v in metrics.items()}, details)


def make_evals(seeds: int = 2) -> dict[str, list[FakeEvaluation]]:
    """Three methods × ``seeds`` seeds."""
    return {
        method: [make_evaluation(10 * i + s, sharp=sharp) for s in range(seeds)]
        for i, (method, sharp) in enumerate((("single", 2.0), ("deep_ensemble", 3.0), ("sigma_ens", 4.0)))
    }


def make_run_folder(out: Path, *, seeds: int = 2, experiment: bool = False, figures: bool = True) -> Path:
    """A run folder like ``ensemblize run`` writes: results.json, run.json and the evaluation figures."""
    from ensemblize.report.figures import evaluation_figures

    out.mkdir(parents=True, exist_ok=True)
    evals = make_evals(seeds)
    records = []
    for i, (method, runs) in enumerate(evals.items()):
        for s, ev in enumerate(runs):
            records.append({
                "method": method, "dataset": "digits", "seed": s, "members": 1 if i == 0 else 4,
                "params": 77754 * (1 if i == 0 else 4), "train_seconds": 1.5 + i + 0.1 * s,
                "metrics": ev.metrics,
            })  # fmt: skip
    (out / "results.json").write_text(json.dumps(records))
    run = {
        "command": "run",
        "seed": 0,
        "epochs": 1,
        "members": 4,
        "model": "resnet_small",
        "torch_threads": 1,
    }
    if experiment:
        run["command"] = "compare"
        (out / "claims.json").write_text(
            json.dumps(
                [
                    {
                        "claim": "σN-Ens is better calibrated than the single model",
                        "verdict": "supported",
                        "evidence": "ECE 0.24 vs 0.58 (2 seeds)",
                    },
                    {
                        "claim": "σN-Ens matches the deep ensemble's accuracy",
                        "verdict": "not supported",
                        "evidence": "accuracy 0.95 vs 0.97",
                    },
                ]
            )  # fmt: skip
        )
        (out / "table.md").write_text("| method | accuracy |\n|---|---|\n| single | 0.9 |\n")
    (out / "run.json").write_text(json.dumps(run))
    if figures:
        evaluation_figures(evals, out)
    return out
