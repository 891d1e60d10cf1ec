"""One evaluation for every image classifier in the project: clean, shifted, OOD, selective, diversity.

:func:`evaluate_classifier` takes any model whose forward returns member logits ``(B, M, C)``
(or ``(B, C)``: one member) and an :class:`~ensemblize.data.images.ImageSplits`, and measures on
the test split:

* clean — ``accuracy``, ``nll``, ``ece`` (15 equal-width bins on p̄), ``brier``, and the member
  average of accuracy / NLL (``member_accuracy``, ``member_nll``);
* shift — the CIFAR-10-C corruptions of :mod:`ensemblize.data.corruptions` at every severity:
  ``corr_accuracy`` / ``corr_nll`` / ``corr_ece`` averaged over kinds and severities, and
  ``corr_{metric}_s{1..5}`` per severity (averaged over kinds);
* OOD — for every far-OOD set (and any extra set passed in, e.g. held-out classes) and three
  confidence sources (``maxprob`` = max p̄, ``entropy`` = −H(p̄), ``mi`` = −mutual information):
  ``ood_{set}_{score}_{auroc|aupr|fpr95}``, plus ``ood_{score}_auroc`` averaged over the far-OOD
  sets only and ``ood_near_{score}_auroc`` over the extra (near-OOD) sets, so that a held-out-class
  set never moves the far-OOD headline;
* selective — ``aurc``, ``eaurc``, ``augrc`` with max-prob confidence and 0/1 losses;
* diversity — ``disagreement``, ``pairwise_kl``, ``mutual_information`` (all 0 for one member).

The arrays behind the figures (reliability bins, per-severity curves, OOD confidences, risk–coverage
curves) come back in :attr:`Evaluation.details`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .. import metrics as M
from ..data.datasets import Benchmark
from ..data.images import ImageSplits
from ..training import predict
from .names import CLEAN_METRICS, HEADLINE_METRICS, SCORES

__all__ = [
    "EvalSpec",
    "Evaluation",
    "evaluate_classifier",
    "evaluate_probs",
    "SCORES",
    "CLEAN_METRICS",
    "HEADLINE_METRICS",
]


@dataclass(frozen=True)
class EvalSpec:
    """What :func:`evaluate_classifier` measures.

    ``corruptions``: kinds (``saturate`` is skipped for grayscale); ``severities``: subset of 1..5;
    ``corruption_samples``: at most this many test images are corrupted (all when ``None``);
    ``ood``: far-OOD set names from :data:`ensemblize.data.ood.NAMES`; ``n_bins``: ECE bins.
    """

    corruptions: tuple[str, ...] | None = None
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    corruption_samples: int | None = None
    ood: tuple[str, ...] | None = None
    n_bins: int = 15
    batch_size: int = 512

    @classmethod
    def none(cls) -> EvalSpec:
        """Clean metrics only."""
        return cls(corruptions=(), severities=(), ood=())


@dataclass
class Evaluation:
    """Flat ``metrics`` (name -> float) and the ``details`` the figures draw from; ``seconds`` it took."""

    metrics: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """``{"metrics", "details", "seconds"}`` with arrays as lists (JSON-able)."""
        return {
            "metrics": dict(self.metrics),
            "details": _lists(self.details),
            "seconds": float(self.seconds),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evaluation:
        """The inverse of :meth:`to_json` (lists of numbers become float arrays)."""
        return cls(metrics=dict(data["metrics"]), details=_arrays(data["details"]), seconds=data["seconds"])


def _lists(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _lists(v) for k, v in x.items()}
    if isinstance(x, np.ndarray | np.generic):
        return x.tolist()
    return x


def _arrays(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _arrays(v) for k, v in x.items()}
    if isinstance(x, list) and all(isinstance(v, int | float) for v in x):
        return np.asarray(x, dtype=float)
    return x


def _np(x: Tensor) -> np.ndarray:
    return x.detach().cpu().double().numpy()


def _confidences(member_probs: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "maxprob": M.max_probability(member_probs),
        "entropy": M.negative_entropy(member_probs.mean(axis=1)),
        "mi": M.negative_mutual_information(member_probs),
    }


def evaluate_probs(member_probs: np.ndarray, labels: np.ndarray, *, n_bins: int = 15) -> dict[str, float]:
    """Clean, selective and diversity metrics of member probabilities ``(N, M, C)`` against ``labels``.

    ``member_probs`` and ``labels`` (N,) may be NumPy arrays or tensors; both are validated first
    (shapes, finite probabilities summing to 1, integer labels in range), each error naming the input.
    """
    from ensemblize.metrics import _validate as V

    member_probs = V.checked_probabilities(member_probs, name="member_probs", require_members=True)
    labels = V.labels(labels, member_probs.shape[0], member_probs.shape[-1], name="labels")
    pbar = member_probs.mean(axis=1)
    correct = pbar.argmax(axis=1) == labels
    conf = pbar.max(axis=1)
    out = {
        "accuracy": M.accuracy(member_probs, labels),
        "nll": M.nll(member_probs, labels),
        "ece": M.ece(member_probs, labels, n_bins=n_bins),
        "brier": M.brier(member_probs, labels),
        "member_accuracy": M.member_average(M.accuracy, member_probs, labels),
        "member_nll": M.member_average(M.nll, member_probs, labels),
        "aurc": M.aurc(conf, (~correct).astype(float)),
        "eaurc": M.eaurc(conf, (~correct).astype(float)),
        "augrc": M.augrc(conf, (~correct).astype(float)),
        "disagreement": M.disagreement(member_probs),
        "pairwise_kl": M.pairwise_kl(member_probs),
        "mutual_information": M.mutual_information(member_probs),
    }
    return {k: float(v) for k, v in out.items()}


def evaluate_classifier(
    model: nn.Module,
    splits: ImageSplits,
    *,
    spec: EvalSpec | None = None,
    seed: int = 0,
    extra_ood: Mapping[str, Tensor] | None = None,
    device: str | torch.device = "cpu",
) -> Evaluation:
    """Evaluate ``model`` on ``splits``' test set, its corrupted versions and the OOD sets (see module doc).

    ``extra_ood``: more OOD inputs (name -> normalised images), e.g. held-out classes.
    """
    spec = spec or EvalSpec()
    start = time.perf_counter()
    x_test, y_test = splits.x_test, splits.y_test.numpy()

    def probs(x: Tensor) -> np.ndarray:
        return _np(predict(model, x, batch_size=spec.batch_size, device=device))

    p = probs(x_test)
    metrics = evaluate_probs(p, y_test, n_bins=spec.n_bins)
    conf = p.mean(axis=1).max(axis=1)
    losses = (p.mean(axis=1).argmax(axis=1) != y_test).astype(float)
    rel = M.reliability(p, y_test, n_bins=spec.n_bins)
    curve = M.risk_coverage(conf, losses)
    details: dict[str, Any] = {
        "reliability": {"confidence": rel.confidence, "accuracy": rel.accuracy, "count": rel.count},
        "risk_coverage": {"coverage": np.asarray(curve[0]), "risk": np.asarray(curve[1])},
    }

    # --- shift ---------------------------------------------------------------------------------
    bench = Benchmark.for_splits(splits)
    kinds = bench.shift_kinds if spec.corruptions is None else spec.corruptions
    kinds = [
        k for k in kinds if not (k == "saturate" and bench.modality == "image" and splits.in_channels == 1)
    ]
    if kinds and spec.severities:
        n = len(y_test) if spec.corruption_samples is None else min(spec.corruption_samples, len(y_test))
        per_sev: dict[int, dict[str, list[float]]] = {
            s: {"accuracy": [], "nll": [], "ece": []} for s in spec.severities
        }
        for kind in kinds:
            for sev in spec.severities:
                pc = probs(bench.shift(x_test[:n], kind, sev, seed=seed))
                per_sev[sev]["accuracy"].append(M.accuracy(pc, y_test[:n]))
                per_sev[sev]["nll"].append(M.nll(pc, y_test[:n]))
                per_sev[sev]["ece"].append(M.ece(pc, y_test[:n], n_bins=spec.n_bins))
        for name in ("accuracy", "nll", "ece"):
            metrics[f"corr_{name}"] = float(np.mean([v for s in per_sev.values() for v in s[name]]))
            for sev, vals in per_sev.items():
                metrics[f"corr_{name}_s{sev}"] = float(np.mean(vals[name]))
        details["shift"] = {
            "severity": [0, *spec.severities],
            "accuracy": [metrics["accuracy"], *(metrics[f"corr_accuracy_s{s}"] for s in spec.severities)],
            "ece": [metrics["ece"], *(metrics[f"corr_ece_s{s}"] for s in spec.severities)],
            "nll": [metrics["nll"], *(metrics[f"corr_nll_s{s}"] for s in spec.severities)],
        }

    # --- OOD -------------------------------------------------------------------------------------
    ood_kinds = bench.ood_kinds if spec.ood is None else spec.ood
    sets: dict[str, Tensor] = dict(bench.ood_sets(kinds=ood_kinds, seed=seed)) if ood_kinds else {}
    near = set(extra_ood or {})
    sets.update(extra_ood or {})
    if sets:
        id_conf = _confidences(p)
        details["ood"] = {"id": id_conf["maxprob"]}
        by_kind: dict[str, dict[str, list[float]]] = {
            "far": {s: [] for s in SCORES},
            "near": {s: [] for s in SCORES},
        }
        for name, x_ood in sets.items():
            ood_conf = _confidences(probs(x_ood))
            details["ood"][name] = ood_conf["maxprob"]
            for score in SCORES:
                a, b = id_conf[score], ood_conf[score]
                auroc = M.ood_auroc(a, b)
                metrics[f"ood_{name}_{score}_auroc"] = auroc
                metrics[f"ood_{name}_{score}_aupr"] = M.ood_aupr(a, b)
                metrics[f"ood_{name}_{score}_fpr95"] = M.fpr_at_tpr(a, b, tpr=0.95)
                by_kind["near" if name in near else "far"][score].append(auroc)
        # headline: far-OOD sets only (synthetic / other-domain inputs); near-OOD (held-out classes) apart
        for score in SCORES:
            if by_kind["far"][score]:
                metrics[f"ood_{score}_auroc"] = float(np.mean(by_kind["far"][score]))
            if by_kind["near"][score]:
                metrics[f"ood_near_{score}_auroc"] = float(np.mean(by_kind["near"][score]))
    metrics = {k: (float(v) if v is not None else math.nan) for k, v in metrics.items()}
    return Evaluation(metrics=metrics, details=details, seconds=time.perf_counter() - start)
