"""``ensemblize experiment selective``: SYNC vs SelectiveNet vs Deep Gamblers vs softmax response.

Methods, all on the same backbone (``resnet_small`` by default) and budget:

* ``SR`` — a plain cross-entropy classifier, ranked by its softmax response ``max_c p_c``;
* ``SelectiveNet`` — :class:`~ensemblize.selective.SelectiveNetLoss`, one model per target coverage;
* ``SYNC-SMP(γ=g)`` — :class:`~ensemblize.selective.SyncLoss` with the softmax-power target
  ``(max p)^γ`` for every ``γ`` in ``gammas`` (``γ = 1`` *is* SR as the sync target);
* ``SYNC-entropy`` — the score ablation: normalised negative entropy as the sync target (compare
  with ``SYNC-SMP(γ=2)`` and ``SYNC-SMP(γ=1)``, the SR target, trained with the same ``μ``);
* ``DeepGamblers`` — :class:`~ensemblize.selective.DeepGamblersLoss`, reward ``o`` chosen from
  ``rewards`` by the validation AURC of its own score;
* ``σN-SYNC-SMP(γ=g)`` — SYNC on a σN ensemble: the feature extractor is
  ``sigma_ensemble(headless backbone, members=M)`` producing ``(B, M, D)`` features, and the sync
  target is ``(max p̄)^γ`` of the ensemble's mean probability ``p̄`` (``SyncLoss(prior=p̄)``).

Every model is scored twice (:func:`ensemblize.evaluation.selective.score_model`): by its own
selection score (``"w/o SR"``: ``g``, or ``1 − p_abstain`` for Deep Gamblers) and by the softmax
response of its prediction head (``"w/ SR"``); the SR baseline has only the latter. For each scoring
the full risk–coverage curve is evaluated on test (selective risk at 10 %, …, 100 %, AURC, E-AURC,
AUGRC) and, for every coverage, a threshold fitted on the *validation* split is applied to test and
reported with the test coverage it actually achieves. Validation data are used for nothing else
except choosing Deep Gamblers' reward; no model sees them in training.

:func:`selective` is a plain function; each trained model (method × target × seed; Deep Gamblers:
its reward search per seed) is one job (:func:`selective_job`) run through
:mod:`ensemblize.experiments.jobs` (in process, local processes or Dask; resumable).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..members import MAX_MEMBERS
from . import options as O
from .jobs import Execution, Job, OptionError, experiment_folder, merged_records, training_progress

if TYPE_CHECKING:  # torch / numpy are imported inside the functions: `ensemblize --help` stays fast
    import numpy as np
    from torch import nn

__all__ = [
    "EXPERIMENTS",
    "selective",
    "selective_job",
    "method_records",
    "format_markdown",
    "risk_coverage_figure",
    "curve_grid",
]

TARGETS: tuple[float, ...] = (0.5, 0.7, 0.9)
GAMMAS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
REWARDS: tuple[float, ...] = (2.2, 3.0, 5.0)
DEFAULT_MU = 1.0  # SYNC weight; a fixed default, NOT tuned (not on validation, not on test)
DEFAULT_EPOCHS = 40
TABLE_COVERAGES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
CURVE_POINTS = 100  # risk–coverage curves are resampled at coverages 0.01, 0.02, ..., 1.0
#: Datasets and their number of classes (Deep Gamblers' reward must lie in (1, K]).
DATASETS = {"digits": 10, "mnist1d": 10, "cifar100": 100}
#: What :func:`selective_job` trains: ``kind`` -> how the model is scored.
KINDS = ("SR", "SelectiveNet", "SYNC-SMP", "SYNC-entropy", "σN-SYNC-SMP", "DeepGamblers")


def method_records(
    *,
    method: str,
    dataset: str,
    seed: int,
    members: int,
    params: int,
    train_seconds: float,
    target: float | None,
    test: Any,
    val: Any,
    y_test: np.ndarray,
    extra: dict[str, Any] | None = None,
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Evaluate both scorings of one trained model; return ``(records, {scoring: risk curve})``.

    Each record's metrics are :meth:`SelectiveReport.as_metrics` (``risk@c``, ``aurc``,
    ``eaurc``, ``augrc``, and per coverage ``c`` the validation-threshold test risk
    ``thr_risk@c`` and achieved test coverage ``thr_coverage@c``), plus ``accuracy`` and, for a
    model trained for a target coverage, ``target_coverage``, ``achieved_coverage`` and
    ``risk_at_target`` (the validation-threshold results at that target).
    """
    import numpy as np

    from .. import metrics
    from ..evaluation.selective import selective_report
    from ..report.results import Record

    errors = (test.pred != y_test).astype(np.float64)
    scorings = {"w/ SR": (test.sr, val.sr)}
    if test.own is not None:
        scorings = {"w/o SR": (test.own, val.own), **scorings}
    records, curves = [], {}
    for scoring, (conf, val_conf) in scorings.items():
        rep = selective_report(conf, errors, coverages=TABLE_COVERAGES, val_confidence=val_conf)
        m = rep.as_metrics()
        m["accuracy"] = float(1.0 - errors.mean())
        if target is not None:
            i = TABLE_COVERAGES.index(target) if target in TABLE_COVERAGES else None
            if i is None:  # a target off the table grid: evaluate it directly
                extra_rep = selective_report(conf, errors, coverages=(target,), val_confidence=val_conf)
                # risk@target too, as on the grid (the claims compare methods on it)
                m.update({k: v for k, v in extra_rep.as_metrics().items() if k.startswith("risk@")})
                m["achieved_coverage"] = extra_rep.threshold_coverage[0]
                m["risk_at_target"] = extra_rep.threshold_risk[0]
            else:
                m["achieved_coverage"] = rep.threshold_coverage[i]
                m["risk_at_target"] = rep.threshold_risk[i]
            m["target_coverage"] = float(target)
        rc = metrics.risk_coverage(conf, errors)
        curves[scoring] = np.interp(curve_grid(), rc.coverage, rc.risk)
        records.append(
            Record(
                method=method,
                dataset=dataset,
                seed=seed,
                members=members,
                params=params,
                train_seconds=train_seconds,
                metrics=m,
                extra={"target": target, "scoring": scoring, **(extra or {})},
            )
        )
    return records, curves


# ------------------------------------------------------------------------------------------ models


def curve_grid() -> np.ndarray:
    """The coverages at which risk–coverage curves are resampled for the figure."""
    import numpy as np

    return np.linspace(1.0 / CURVE_POINTS, 1.0, CURVE_POINTS)


def _headless(name: str, splits: Any, *, num_classes: int | None = None) -> tuple[nn.Module, int]:
    """The backbone with its classifier replaced by ``nn.Identity``: ``(B, C, H, W) -> (B, D)``."""
    from torch import nn

    from ..models import build_model

    model = build_model(
        name,
        in_channels=splits.in_channels,
        num_classes=num_classes or splits.num_classes,
        image_size=splits.image_size,
    )
    if not isinstance(getattr(model, "head", None), nn.Module) or not isinstance(
        getattr(model, "feature_dim", None), int
    ):
        raise ValueError(f"model {name!r} has no .head / .feature_dim to build a feature extractor from")
    model.head = nn.Identity()
    return model, model.feature_dim


def _params(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _load(dataset: str, data_root: str | None, seed: int, train_size: int | None = None) -> Any:
    from ..data.datasets import load_dataset

    return load_dataset(dataset, seed=seed, root=data_root, train_size=train_size).splits


def _subsample(x: Any, y: Any, n: int | None, seed: int) -> tuple[Any, Any]:
    import torch

    if n is None or n >= len(y):
        return x, y
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx], y[idx]


def _method_name(kind: str, gamma: float | None) -> str:
    return f"{kind}(γ={gamma:g})" if kind in ("SYNC-SMP", "σN-SYNC-SMP") else kind


def _build(kind: str, splits: Any, *, model: str, seed: int, members: int, classes: int) -> nn.Module:
    """The untrained network of ``kind``: a plain backbone (SR; Deep Gamblers with K + 1 outputs) or
    a SelectiveNet on the headless backbone (σN: on ``sigma_ensemble`` of it)."""
    import torch

    from .. import sigma_ensemble
    from ..models import build_model
    from ..selective import SelectiveNet

    torch.manual_seed(seed)
    if kind in ("SR", "DeepGamblers"):
        return build_model(
            model, in_channels=splits.in_channels, num_classes=classes, image_size=splits.image_size
        )
    feats, dim = _headless(model, splits)
    if kind == "σN-SYNC-SMP":
        feats = sigma_ensemble(feats, members=members, seed=seed)
    return SelectiveNet(feats, dim, splits.num_classes)


def _loss(kind: str, *, target: float | None, gamma: float | None, mu: float) -> Any:
    from ..selective import SelectiveNetLoss, SyncLoss

    if kind == "SelectiveNet":
        return SelectiveNetLoss(target)
    if kind == "SYNC-SMP":
        return SyncLoss(target, mu=mu, score="smp", gamma=gamma)
    if kind == "SYNC-entropy":
        return SyncLoss(target, mu=mu, score="entropy")
    if kind == "σN-SYNC-SMP":
        sync = SyncLoss(target, mu=mu, score="smp", gamma=gamma)
        return _PriorSync(sync)
    return None


class _PriorSync:
    """SYNC on a σN ensemble: the sync target is computed from the ensemble's mean probability p̄."""

    def __init__(self, sync: Any) -> None:
        self.sync = sync

    def __call__(self, output: Any, labels: Any) -> Any:
        return self.sync(output, labels, prior=output.logits.softmax(-1).mean(1))


def _gamblers(splits: Any, train: Any, *, model: str, seed: int, rewards: Sequence[float], epochs: int):
    """Train Deep Gamblers for every reward; keep the best validation AURC of its own score."""
    import numpy as np

    from .. import metrics
    from ..evaluation.selective import score_model
    from ..selective import DeepGamblersLoss

    best, val_aurcs = None, {}
    k = splits.num_classes
    for o in rewards:
        net = _build("DeepGamblers", splits, model=model, seed=seed, members=1, classes=k + 1)
        loss = DeepGamblersLoss(o, warmup_epochs=epochs // 4, num_classes=k)
        secs = train(net, loss, callbacks=[lambda e, r, m, _l=loss: _l.set_epoch(e)])
        v = score_model(net, splits.x_val, kind="gamblers")
        val_aurc = float(metrics.aurc(v.own, (v.pred != splits.y_val.numpy()).astype(np.float64)))
        val_aurcs[f"{o:g}"] = val_aurc
        if best is None or val_aurc < best[0]:
            best = (val_aurc, o, net, secs)
    val_aurc, o, net, secs = best
    return net, secs, {"reward": o, "val_aurc": val_aurc, "val_aurc_by_reward": val_aurcs}


def selective_job(
    *,
    kind: str,
    target: float | None,
    gamma: float | None,
    seed: int,
    dataset: str,
    data_root: str | None,
    max_train: int | None,
    model: str,
    epochs: int,
    lr: float,
    batch_size: int,
    mu: float,
    members: int,
    rewards: Sequence[float],
    train_size: int | None = None,
) -> dict[str, Any]:
    """One job: train one model of ``kind`` (see :data:`KINDS`; ``target`` coverage and SMP ``gamma``
    where they apply) for ``seed`` and evaluate both scorings. Returns the records (one per scoring)
    and, in ``extras["curves"]``, the test risk–coverage curve per scoring on :func:`curve_grid`."""
    from ..evaluation.selective import score_model
    from ..training import fit
    from ..training.warm_up import warm_up

    splits = _load(dataset, data_root, seed, train_size)
    x_tr, y_tr = _subsample(splits.x_train, splits.y_train, max_train, seed)
    hp = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "optimizer": "sgd", "schedule": "cosine"}
    name = _method_name(kind, gamma)

    def train(net: nn.Module, loss_fn: Any = None, **kw: Any) -> float:
        warm_up()  # the process's one-time costs are not charged to its first job
        t0 = time.perf_counter()
        fit(net, (x_tr, y_tr), loss_fn=loss_fn, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed,
            progress=training_progress(), desc=f"{name} {dataset} seed={seed}", **kw)  # fmt: skip
        return time.perf_counter() - t0

    extra: dict[str, Any] = {"hparams": hp, "training_samples": int(len(y_tr))}
    if kind == "DeepGamblers":
        net, secs, found = _gamblers(splits, train, model=model, seed=seed, rewards=rewards, epochs=epochs)
        extra.update(found)
    else:
        net = _build(kind, splits, model=model, seed=seed, members=members, classes=splits.num_classes)
        secs = train(net, _loss(kind, target=target, gamma=gamma, mu=mu))
    if kind.startswith(("SYNC", "σN")):
        extra["mu"] = mu
    if kind == "σN-SYNC-SMP":
        extra["prior"] = "mean member probability p̄"
    score = {"SR": "plain", "DeepGamblers": "gamblers"}.get(kind, "selective")
    recs, curves = method_records(
        method=name,
        dataset=splits.name,
        seed=seed,
        members=members if kind == "σN-SYNC-SMP" else 1,
        params=_params(net),
        train_seconds=secs,
        target=target,
        test=score_model(net, splits.x_test, kind=score),
        val=score_model(net, splits.x_val, kind=score),
        y_test=splits.y_test.numpy(),
        extra=extra,
    )
    return {"records": recs, "extras": {"curves": {k: v.tolist() for k, v in curves.items()}}}


def _describe(records: Sequence[dict[str, Any]]) -> str:
    aurcs = "  ".join(f"{r['scoring']}: AURC {r['metrics']['aurc']:.4f}" for r in records)
    return f"acc {records[0]['metrics']['accuracy']:.4f}  {aurcs}, train {records[0]['train_seconds']:.1f} s"


# ------------------------------------------------------------------------------------------- driver


def _jobs(settings: dict[str, Any]) -> list[Job]:
    """Seed-major: SR; per target SelectiveNet, SYNC-SMP per γ, SYNC-entropy, σN-SYNC-SMP; Deep Gamblers."""
    s = settings
    plan: list[tuple[str, float | None, float | None]] = [("SR", None, None)]
    for c in s["targets"]:
        plan += [("SelectiveNet", c, None), *(("SYNC-SMP", c, g) for g in s["gammas"])]
        plan += [("SYNC-entropy", c, None), ("σN-SYNC-SMP", c, s["sigma_gamma"])]
    plan.append(("DeepGamblers", None, None))
    common = {
        k: s[k]
        for k in (
            "dataset",
            "data_root",
            "max_train",
            "train_size",
            "model",
            "epochs",
            "lr",
            "batch_size",
            "mu",
            "members",
            "rewards",
        )
    }
    if common["data_root"] is not None:  # absolute for the jobs (one may run in another working
        common["data_root"] = str(
            Path(common["data_root"]).resolve()
        )  # directory); settings keep the spelling
    return [
        Job.make(
            "selective",
            selective_job,
            f"{_method_name(kind, g)} c={c} {s['dataset']} seed={seed}",
            kind=kind,
            target=c,
            gamma=g,
            seed=seed,
            **common,
        )
        for seed in s["seeds"]
        for kind, c, g in plan
    ]


def _model(dataset: str, model: str | None) -> str:
    """The backbone: ``model`` if it fits the dataset's modality, else that modality's default."""
    from ..data.datasets import DEFAULT_MODEL, MODALITY
    from ..models import registry

    modality = MODALITY[dataset]
    model = model or DEFAULT_MODEL[modality]
    models = registry.SIGNAL_MODELS if modality == "signal" else registry.IMAGE_MODELS
    return O.choice(model, option="--model", allowed=models)


def _check(args: dict[str, Any]) -> dict[str, Any]:
    """Every argument, before any work -> the run's settings (lists, the ``quick`` preset applied)."""
    dataset = O.choice(args["dataset"], option="--dataset", allowed=tuple(DATASETS))
    if dataset == "cifar100" and args["data_root"] is None:
        raise OptionError(
            "--data-root",
            "--dataset cifar100 is read from disk: pass --data-root DIR containing "
            "cifar-100-python/{train,test} or cifar-100-binary/{train.bin,test.bin}",
        )
    epochs, max_train = args["epochs"], args["max_train"]
    if args["quick"]:
        if epochs != DEFAULT_EPOCHS:
            raise OptionError("--quick", f"sets 1 epoch, so it cannot be combined with --epochs {epochs}")
        epochs, max_train = 1, 256 if max_train is None else max_train
    O.ints([epochs], option="--epochs", minimum=1)
    if max_train is not None:
        O.ints([max_train], option="--max-train", minimum=2)
    train_size = args["train_size"]
    if train_size is not None:
        O.ints([train_size], option="--train-size", minimum=1)
        if args["max_train"] is not None:
            raise OptionError(
                "--train-size", "give --train-size (stratified) or --max-train (random), not both"
            )
    O.ints([args["members"]], option="--members", minimum=1, maximum=MAX_MEMBERS)
    O.floats([args["mu"]], option="--mu", low_open=False)
    O.floats([args["sigma_gamma"]], option="--sigma-gamma")
    return {
        "seeds": O.ints(args["seeds"], option="--seeds"),
        "dataset": dataset,
        "data_root": None if args["data_root"] is None else str(args["data_root"]),
        "model": _model(dataset, args["model"]),
        "epochs": epochs,
        "max_train": None if train_size is not None else max_train,
        "train_size": train_size,
        "targets": O.floats(args["targets"], option="--targets", high=1.0),
        "gammas": O.floats(args["gammas"], option="--gammas"),
        "rewards": O.floats(args["rewards"], option="--rewards", low=1.0, high=float(DATASETS[dataset])),
        "mu": args["mu"],
        "members": args["members"],
        "sigma_gamma": args["sigma_gamma"],
        "lr": args["lr"],
        "batch_size": args["batch_size"],
    }


def selective(
    *,
    out: str | Path = "runs/selective",
    seeds: Sequence[int] = (0, 1, 2),
    dataset: str = "digits",
    data_root: str | Path | None = None,
    model: str | None = None,
    epochs: int = DEFAULT_EPOCHS,
    targets: Sequence[float] = TARGETS,
    gammas: Sequence[float] = GAMMAS,
    rewards: Sequence[float] = REWARDS,
    mu: float = DEFAULT_MU,
    members: int = 4,
    sigma_gamma: float = 2.0,
    lr: float = 0.05,
    batch_size: int = 128,
    max_train: int | None = None,
    train_size: int | None = None,
    quick: bool = False,
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """SYNC vs SelectiveNet vs Deep Gamblers vs softmax response at every coverage: risk–coverage
    curves, AURC / AUGRC, and thresholds chosen on validation for each target coverage.

    See the module docstring. Writes ``results.json``, ``results.md``, ``risk_coverage.png`` and
    ``claims.json`` (SYNC's claims judged on these records: :func:`ensemblize.report.claims.selective_verdicts`)
    into ``out``; returns the records. ``quick`` (``--quick``): 1 epoch, 256 training samples.
    ``train_size`` (``--train-size``): a seeded, *stratified* subset of the training split (as in the
    image experiments); ``max_train`` (``--max-train``): a seeded *random* subset (kept for the runs in
    docs/results); not both."""
    settings = _check(dict(locals()))
    ex = execution or Execution()
    with experiment_folder(out, experiment="selective", settings=settings, execution=ex) as folder:
        results = folder.run(_jobs(settings), describe=_describe)
        records = merged_records(results)
        if not folder.is_main:  # under torchrun only rank 0 writes
            return records
        curves: dict[tuple[str, Any, str], list[Any]] = {}
        for res in results:
            r0 = res.records[0]
            for scoring, c in res.extras["curves"].items():
                curves.setdefault((r0["method"], r0["target"], scoring), []).append(c)
        md = format_markdown(records, seeds=settings["seeds"])
        from ..checkpoint import atomic_write_text

        atomic_write_text(Path(out) / "results.md", md)
        risk_coverage_figure(curves, Path(out) / "risk_coverage.png", targets=settings["targets"])
        from ..report.claims import format_claims, selective_verdicts, write_claims

        claims = selective_verdicts(records)
        write_claims(out, claims)  # before the block ends: report.html renders it
    if not folder.execution.quiet:
        from ..report.console import fit_markdown_tables

        print(md if folder.execution.wide else fit_markdown_tables(md))  # results.md keeps them whole
        print("\n" + format_claims(claims))
    return records


# ------------------------------------------------------------------------------------------ reports


def _group(records: Sequence[Any]) -> list[tuple[tuple, list[dict]]]:
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        d = r.to_dict() if hasattr(r, "to_dict") else dict(r)
        groups.setdefault((d["method"], d.get("target"), d.get("scoring")), []).append(d)
    return list(groups.items())


def _ms(values: Sequence[float], digits: int = 3, scale: float = 100.0) -> str:
    import numpy as np

    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float) * scale
    if v.size == 0:
        return "—"
    if v.size == 1:
        return f"{v[0]:.{digits - 2}f}"
    return f"{v.mean():.{digits - 2}f} ± {v.std(ddof=1):.{digits - 2}f}"


def format_markdown(records: Sequence[Any], *, seeds: Sequence[int]) -> str:
    """Markdown tables (mean ± std over seeds): selective risk at each coverage with AURC / E-AURC /
    AUGRC, and the validation-threshold deployment view (achieved test coverage, risk)."""
    groups = _group(records)
    covs = [f"{c:g}" for c in TABLE_COVERAGES]
    lines = [
        f"Selective risk (test error among accepted, %) at each coverage, ranking by test confidence; "
        f"AURC / E-AURC / AUGRC ×100. Mean ± std over seeds {list(seeds)}.",
        "",
        "| method | target c | scoring | n | "
        + " | ".join(f"{float(c) * 100:.0f}%" for c in covs)
        + " | AURC | E-AURC | AUGRC | acc % |",
        "|" + "---|" * (8 + len(covs)),
    ]
    for (method, target, scoring), rows in groups:
        cells = [_ms([r["metrics"][f"risk@{c}"] for r in rows], 3) for c in covs]
        cells += [_ms([r["metrics"][m] for r in rows], 4) for m in ("aurc", "eaurc", "augrc")]
        cells.append(_ms([r["metrics"]["accuracy"] for r in rows], 3))
        tgt = "—" if target is None else f"{target:g}"
        lines.append(f"| {method} | {tgt} | {scoring} | {len(rows)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Deployment: thresholds fitted on the VALIDATION split for each target coverage, applied to "
        "test. Cell = achieved test coverage % / test selective risk % (mean ± std over seeds). "
        "Trained-target methods use the model trained for that target.",
        "",
    ]
    targets = sorted(
        {
            r["metrics"]["target_coverage"]
            for _, rows in groups
            for r in rows
            if "target_coverage" in r["metrics"]
        }
    )
    lines.append("| method | scoring | " + " | ".join(f"c = {t:g}" for t in targets) + " |")
    lines.append("|" + "---|" * (2 + len(targets)))
    by_ms: dict[tuple[str, str], dict[Any, list[dict]]] = {}
    for (method, target, scoring), rows in groups:
        by_ms.setdefault((method, scoring), {})[target] = rows
    for (method, scoring), per_target in by_ms.items():
        cells = []
        for t in targets:
            rows = per_target.get(t, per_target.get(None))
            if rows is None:
                cells.append("—")
                continue
            covs = [_at_target(r, t, "thr_coverage", "achieved_coverage") for r in rows]
            if all(math.isnan(c) for c in covs):
                cells.append("n/a (off the grid)")
                continue
            cov = _ms(covs, 3)
            risk = _ms([_at_target(r, t, "thr_risk", "risk_at_target") for r in rows], 3)
            cells.append(f"{cov} / {risk}")
        lines.append(f"| {method} | {scoring} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _at_target(record: dict, t: float, key: str, own: str) -> float:
    """A record's validation-threshold result ``key`` at coverage ``t``: from the table grid, or — for a
    model trained for ``t`` off that grid — its ``own`` entry (``achieved_coverage`` / ``risk_at_target``);
    NaN for a model trained for no target (softmax response), which has results on the grid only."""
    m = record["metrics"]
    if f"{key}@{t:g}" in m:
        return m[f"{key}@{t:g}"]
    return m[own] if m.get("target_coverage") == t and own in m else math.nan


def risk_coverage_figure(
    curves: dict[tuple[str, Any, str], list[Any]], path: Path, *, targets: Sequence[float]
) -> Path:
    """Mean (over seeds) test risk–coverage curves of every method: one row per scoring, one column
    per target coverage (methods without a target appear in every column);
    :func:`ensemblize.report.figures.selective_risk_coverage_figure` on :func:`curve_grid`."""
    from ..report.figures import save_figure, selective_risk_coverage_figure

    return save_figure(selective_risk_coverage_figure(curves, curve_grid(), targets=targets), path)


#: Experiment name (``ensemblize experiment NAME``) -> plain function.
EXPERIMENTS = {"selective": selective}
