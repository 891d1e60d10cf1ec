"""Image experiments (σN-Ens paper): method comparison, τ sweep, ensemble size, fine-tuning, λ sweep.

Each experiment is a plain function (Python defaults, lists for grids) that expands into independent
jobs (:mod:`ensemblize.experiments.jobs`), one per trained model (method × seed × setting), runs them
in process, on local worker processes or on a Dask cluster (``execution``), and writes its tables
and figures from the merged records:

* :func:`compare` — single, temperature-scaled single, deep ensemble, BatchEnsemble,
  Packed-Ensembles and σN-Ens with the same backbone and epoch budget, every metric of the
  evaluation suite;
* :func:`tau_sweep` — σN-Ens over a log grid of τ at fixed λ: accuracy–ECE and NLL–ECE frontiers,
  diversity vs τ, owners-per-feature heatmap (layer × τ);
* :func:`members_sweep` — σN-Ens and Packed-Ensembles for M ∈ {2, 4, 8, 16} at a fixed backbone width;
* :func:`finetune` — a trained single model converted with :func:`ensemblize.sigma_ensemble` and
  fine-tuned with the regulariser, against the single model, σN-Ens from scratch and the deep ensemble;
* :func:`lambda_sweep` — σN-Ens over λ at fixed τ.

Every experiment takes ``setup=ImageSetup(...)`` — the data (``dataset="digits"`` by default;
``cifar10`` / ``cifar100`` with ``data_root``, the same code path), backbone, epochs, seeds,
evaluation preset and device (``"cuda"`` where available) — plus its own grid, ``out`` and
``execution`` (an :class:`~ensemblize.experiments.jobs.Execution`: in process, ``workers=N`` or a
Dask ``scheduler``; ``resume`` / ``overwrite``; ``quiet``), e.g.
``compare(setup=ImageSetup(epochs=1, seeds=(0,), evaluation="tiny"), methods=["single", "sigma"])``. Every model goes through :func:`method_job` →
:func:`ensemblize.runner.run_method` (training, checkpoint, evaluation); each record also carries
validation metrics (``val_accuracy``, ``val_nll``, ``val_ece``) so that any choice among settings is
made on validation, never test. Each experiment writes ``results.json``, ``table.md`` (mean ± std over
seeds), ``run.json`` and its figures into ``out``, prints the headline table and returns the records.

Evaluation presets (``evaluation``, see :func:`eval_spec`): ``full`` (every corruption kind on the
whole test set, every far-OOD set), ``reduced`` (:data:`REDUCED_CORRUPTIONS` on at most 200 test
images, all severities, every far-OOD set) and ``tiny`` (tests).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .._checks import check_instance
from ..default_job import DEFAULT_LAM, DEFAULT_TAU
from ..evaluation.names import HEADLINE_METRICS
from ..members import MAX_MEMBERS
from . import options as O
from .image_report import (
    SWEEP_METRICS,
    errorbar_panels,
    frontier_points,
    group_stats,
    layer_sharing,
    markdown_table,
    members_figure,
    owners_matrix,
    pareto_front,
    setting_label,
    severity_figure,
    sweep_figures,
)
from .jobs import Execution, Job, JobResult, OptionError, experiment_folder, merged_records, training_progress

__all__ = [
    "EXPERIMENTS",
    "ImageSetup",
    "evaluations_by_method",
    "REDUCED_CORRUPTIONS",
    "HEADLINE",
    "EVAL_PRESETS",
    "IMAGE_DATASETS",
    "compare",
    "tau_sweep",
    "lambda_sweep",
    "members_sweep",
    "finetune",
    "method_job",
    "finetune_job",
    "eval_spec",
    "group_stats",
    "frontier_points",
    "pareto_front",
    "owners_matrix",
    "layer_sharing",
    "setting_label",
    "markdown_table",
    "members_figure",
]

#: Corruption kinds of the ``reduced`` evaluation preset (one per CIFAR-10-C family + two more).
REDUCED_CORRUPTIONS = ("gaussian_noise", "gaussian_blur", "contrast", "pixelate", "elastic_transform")

#: Metrics printed by every command (all metrics are in results.json).
HEADLINE = list(HEADLINE_METRICS)

EVAL_PRESETS = ("full", "reduced", "tiny")
IMAGE_DATASETS = ("digits", "mnist1d", "cifar10", "cifar100")
METHOD_NAMES = ("single", "temp_scaled", "deep", "batchensemble", "packed", "sigma")


@dataclass(frozen=True)
class ImageSetup:
    """What every image experiment shares: the data, the backbone, the budget, the seeds, the
    evaluation preset and the device.

    ``dataset``: digits, mnist1d (generated offline), cifar10 or cifar100 (read from ``data_root``);
    ``train_size``: train on a stratified subset of that many examples (val / test unchanged);
    ``model``: a backbone name (``None``: ``resnet_small`` for images, ``resnet1d`` for mnist1d;
    ``width``: its base width, ``None``: the backbone's own); ``epochs``: training epochs per model
    (the same budget for every method); ``seeds``: data split, initialisation and batch order;
    ``evaluation``: full, reduced or tiny (:func:`eval_spec`); ``device``: a torch device.
    """

    dataset: str = "digits"
    data_root: str | None = None
    train_size: int | None = None
    model: str | None = None
    width: int | None = None
    epochs: int = 15
    seeds: tuple[int, ...] = (0, 1, 2)
    evaluation: str = "reduced"
    device: str = "cpu"


#: The default setup of :func:`compare` and :func:`finetune`: the whole evaluation suite.
FULL_EVALUATION = ImageSetup(evaluation="full")


def eval_spec(preset: str, dataset: str = "digits"):
    """The :class:`~ensemblize.evaluation.EvalSpec` of an evaluation preset on ``dataset``: full, reduced or tiny."""
    from ensemblize.data.datasets import MODALITY, REDUCED_SHIFTS, SHIFTS
    from ensemblize.evaluation import EvalSpec

    O.choice(preset, option="--eval", allowed=EVAL_PRESETS)
    if preset == "full":
        return EvalSpec(corruptions=SHIFTS[MODALITY[dataset]])
    if preset == "reduced":
        return EvalSpec(corruptions=REDUCED_SHIFTS[MODALITY[dataset]], corruption_samples=200)
    return EvalSpec(
        corruptions=("gaussian_noise",), severities=(1, 5), corruption_samples=40, ood=("gaussian",)
    )


# --- the job: one trained and evaluated model ---------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _load(dataset: str, seed: int, root: str | None, heldout: bool = False, train_size: int | None = None):
    """``(splits, extra_ood)`` for one seed; ``heldout`` (digits, mnist1d) trains on 0–5, 6–9 are near-OOD."""
    from ensemblize.data.datasets import load_dataset

    bench = load_dataset(dataset, seed=seed, root=root, heldout=heldout, train_size=train_size)
    return bench.splits, (bench.near_ood or None)


def _check_train_size(setup: ImageSetup, heldout: bool, *, seed: int) -> None:
    """``--train-size`` within ``[classes, training rows]`` of the first seed's data, before any work
    (the data is loaded once and cached for the jobs; CIFAR is read here too)."""
    root = None if setup.data_root is None else str(setup.data_root)
    try:
        splits, _ = _load(setup.dataset, seed, root, heldout, None)
    except (ValueError, FileNotFoundError) as exc:
        raise OptionError(
            "--data-root" if setup.dataset.startswith("cifar") else "--dataset", str(exc)
        ) from exc
    low, high = splits.num_classes, len(splits.y_train)
    if not low <= setup.train_size <= high:
        raise OptionError(
            "--train-size",
            f"must lie in [{low}, {high}] for {setup.dataset} (one example per class at least, at most "
            f"the {high} training examples), got {setup.train_size}",
        )


def _val_metrics(model, splits, *, device: str) -> dict[str, float]:
    """Accuracy, NLL and ECE on the validation split (for choices made on validation)."""
    from ensemblize import metrics as M
    from ensemblize.training import predict

    p = predict(model, splits.x_val, device=device).detach().cpu().double().numpy()
    y = splits.y_val.numpy()
    return {
        "val_accuracy": float(M.accuracy(p, y)),
        "val_nll": float(M.nll(p, y)),
        "val_ece": float(M.ece(p, y, n_bins=15)),
    }


def _train_and_record(
    spec, *, seed: int, data: Mapping, train: Mapping, evaluation: str, out: str, device: str, model=None
):
    """run_method + validation metrics + σNorm sharing; returns (record dict, RunOutcome)."""
    from ensemblize.runner import TrainConfig, run_method

    splits, extra = _load(
        data["dataset"], seed, data.get("data_root"), bool(data.get("heldout", False)), data.get("train_size")
    )
    outcome = run_method(
        spec,
        splits,
        train=TrainConfig(**train),
        seed=seed,
        eval_spec=eval_spec(evaluation, data["dataset"]),
        out=out,
        extra_ood=extra,
        model=model,
        progress=training_progress(),
        device=device,
    )
    outcome.record.metrics.update(_val_metrics(outcome.model, splits, device=device))
    rec = outcome.record.to_dict()
    if spec.method == "sigma":
        rec["sharing"] = layer_sharing(outcome.model)
    return rec, outcome


def method_job(
    *,
    spec: Mapping[str, Any],
    seed: int,
    data: Mapping[str, Any],
    train: Mapping[str, Any],
    evaluation: str,
    out: str,
    device: str = "cpu",
    details: bool = False,
    tags: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One job: train and evaluate ``MethodSpec(**spec)`` on ``data`` (``dataset``, ``data_root``,
    ``heldout``) for ``seed`` with ``TrainConfig(**train)``; checkpoint into ``out/models``.

    Returns ``{"records": [record], "extras": {"evaluation": ...}}`` (the evaluation details for the
    figures when ``details``); ``tags`` are extra record keys (e.g. the swept value).
    """
    from ensemblize.runner import MethodSpec

    rec, outcome = _train_and_record(
        MethodSpec(**spec), seed=seed, data=data, train=train, evaluation=evaluation, out=out, device=device
    )
    rec.update(tags or {})
    return {
        "records": [rec],
        "extras": {"evaluation": outcome.evaluation.to_json()} if details else {},
    }


def finetune_job(
    *,
    single: Mapping[str, Any],
    sigma: Mapping[str, Any],
    members: int,
    seed: int,
    data: Mapping[str, Any],
    train: Mapping[str, Any],
    finetune: Mapping[str, Any],
    evaluation: str,
    out: str,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """One job: train the ``single`` spec, convert it with :func:`ensemblize.sigma_ensemble` (M =
    ``members``; the ``sigma`` spec's gate noise and norm selection, as σN-Ens from scratch) and
    fine-tune it as the ``sigma`` spec with ``TrainConfig(**finetune)``; returns the single model's
    record and the fine-tuned one's (``train_seconds`` = pre-training + fine-tuning)."""
    from ensemblize import sigma_ensemble
    from ensemblize.runner import MethodSpec, sigma_norm_selection
    from ensemblize.sigma.convert import DEFAULT_NOISE

    run = functools.partial(
        _train_and_record, seed=seed, data=data, evaluation=evaluation, out=out, device=device
    )
    single_rec, single_outcome = run(MethodSpec(**single), train=train)
    sigma_spec = MethodSpec(**sigma)
    base = single_outcome.model.model.cpu()
    converted = sigma_ensemble(
        base,
        members=members,
        seed=seed,
        noise=DEFAULT_NOISE if sigma_spec.noise is None else sigma_spec.noise,
        layers=sigma_norm_selection(sigma_spec.norms, base),
    )
    ft_rec, _ = run(sigma_spec, train=finetune, model=converted)
    ft_rec["pretrain_seconds"] = single_rec["train_seconds"]
    ft_rec["finetune_seconds"] = ft_rec["train_seconds"]
    ft_rec["train_seconds"] = single_rec["train_seconds"] + ft_rec["finetune_seconds"]
    return [single_rec, ft_rec]


def _describe(records: Sequence[Mapping[str, Any]]) -> str:
    """The per-job progress summary: the job's last record, as the table shows it."""
    r = records[-1]
    m = r["metrics"]
    return f"acc {m['accuracy']:.4f} nll {m['nll']:.4f} ece {m['ece']:.4f}, train {r['train_seconds']:.1f} s"


# --- shared machinery ------------------------------------------------------------------------------

#: Setup fields that say where, not what: not part of the run's configuration.
_NOT_SETTINGS = ("data_root", "device")


def _common(args: Mapping[str, Any]) -> dict[str, Any]:
    """Check the experiment's arguments (its ``locals()`` at entry) before any work and return the
    jobs' shared keyword arguments plus ``settings`` (the run's configuration: the setup except
    :data:`_NOT_SETTINGS` and every other argument except ``out`` and ``execution``)."""
    from ensemblize.data.datasets import DEFAULT_MODEL, MODALITY
    from ensemblize.models import registry

    setup = args["setup"]
    check_instance(setup, ImageSetup, name="setup")
    O.choice(setup.dataset, option="--dataset", allowed=IMAGE_DATASETS)
    modality = MODALITY[setup.dataset]
    setup = replace(setup, model=setup.model or DEFAULT_MODEL[modality])
    models = registry.SIGNAL_MODELS if modality == "signal" else registry.IMAGE_MODELS
    O.choice(setup.model, option="--model", allowed=models)
    O.choice(setup.evaluation, option="--eval", allowed=EVAL_PRESETS)
    O.device(setup.device)
    heldout = bool(args.get("heldout", False))
    if heldout and setup.dataset not in ("digits", "mnist1d"):
        raise OptionError("--heldout", f"is only available for digits and mnist1d, not {setup.dataset!r}")
    if setup.data_root is not None and not setup.dataset.startswith("cifar"):
        raise OptionError("--data-root", f"is read only for cifar10 / cifar100, not for {setup.dataset!r}")
    if setup.dataset.startswith("cifar"):
        if setup.data_root is None:
            raise OptionError(
                "--data-root",
                f"--dataset {setup.dataset} is read from disk: pass --data-root DIR holding the extracted "
                "official archive (python or binary format)",
            )
        if not Path(setup.data_root).is_dir():
            raise OptionError("--data-root", f"{str(setup.data_root)!r} is not a folder")
    if setup.train_size is not None:
        O.ints([setup.train_size], option="--train-size", minimum=1)
    if setup.width is not None:
        O.ints([setup.width], option="--width", minimum=1)
    O.ints([setup.epochs], option="--epochs", minimum=1)
    for name in ("members", "finetune_epochs"):
        if name in args:
            most = MAX_MEMBERS if name == "members" else None
            O.ints([args[name]], option=f"--{name.replace('_', '-')}", minimum=2 if name == "members" else 1,
                   maximum=most)  # fmt: skip
    for name in ("tau", "alpha", "finetune_lr"):
        if name in args:
            O.floats([args[name]], option=f"--{name.replace('_', '-')}")
    if "lam" in args:
        O.floats([args["lam"]], option="--lam", low_open=False)
    seeds = O.ints(setup.seeds, option="--seeds")
    if setup.train_size is not None:
        _check_train_size(setup, heldout, seed=seeds[0])
    shared = {k: v for k, v in asdict(setup).items() if k not in _NOT_SETTINGS}
    others = {k: v for k, v in args.items() if k not in ("setup", "out", "execution")}
    root = setup.data_root
    return {
        "setup": replace(setup, seeds=tuple(seeds)),
        "seeds": seeds,
        "data": {
            "dataset": setup.dataset,
            # absolute: a job may run in another working directory (a resumed run, a Dask worker)
            "data_root": None if root is None else str(Path(root).resolve()),
            "heldout": heldout,
            "train_size": setup.train_size,
        },
        "train": asdict(_train_config(setup.epochs)),
        "evaluation": setup.evaluation,
        "device": setup.device,
        "model_kwargs": {} if setup.width is None else {"width": setup.width},
        "out": Path(args["out"]),
        "settings": {**shared, "seeds": seeds, **others},
    }


def _train_config(epochs: int):
    from ensemblize.runner import TrainConfig

    return TrainConfig(epochs=epochs)


def _spec(
    method: str, *, model: str, kw: Mapping[str, Any], label: str | None = None, **knobs: Any
) -> dict[str, Any]:
    from ensemblize.runner import MethodSpec

    return asdict(MethodSpec(method, model=model, label=label, model_kwargs=dict(kw), **knobs))


def _method_jobs(
    experiment: str, specs: Sequence[tuple[dict, dict]], c: Mapping[str, Any], *, details: bool = False
) -> list[Job]:
    """One :func:`method_job` per (seed, spec), seed-major; ``specs``: ``(spec dict, tags)``."""
    return [
        Job.make(
            experiment,
            method_job,
            f"{spec['label'] or spec['method']} {c['data']['dataset']} seed={seed}",
            spec=spec,
            seed=seed,
            data=c["data"],
            train=c["train"],
            evaluation=c["evaluation"],
            out=os.path.abspath(c["out"]),  # a Dask worker may run in another directory
            device=c["device"],
            details=details,
            tags=tags,
        )
        for seed in c["seeds"]
        for spec, tags in specs
    ]


def _run(
    experiment: str,
    jobs: Sequence[Job],
    c: Mapping[str, Any],
    execution: Execution | None,
    report: Callable[[list[JobResult]], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Open the run folder, run ``jobs`` into it, let ``report`` write tables and figures from the
    results and return its records; the manifest is written last."""
    with experiment_folder(c["out"], experiment=experiment, settings=c["settings"], execution=execution) as f:
        results = f.run(jobs, describe=_describe)
        return report(results) if f.is_main else merged_records(results)  # torchrun: rank 0 writes


def _finish(
    out: Path, records: list[dict], *, metrics: Sequence[str], execution: Execution | None
) -> list[dict[str, Any]]:
    """Write results.json (final order) and table.md; print the console tables; return ``records``."""
    from ensemblize.checkpoint import atomic_write_text
    from ensemblize.report.results import console_tables, write_results

    write_results(out, records)
    present = [m for m in metrics if any(m in r["metrics"] for r in records)]
    atomic_write_text(out / "table.md", markdown_table(records, metrics=present) + "\n")
    ex = execution or Execution()
    if not ex.quiet:
        print(console_tables(records, metrics=present, by=("method",), wide=ex.wide))
    return records


def evaluations_by_method(results: Sequence[JobResult]) -> dict[str, list[Any]]:
    """``{method: [Evaluation per seed]}`` from the jobs' extras, for :func:`evaluation_figures`."""
    from ensemblize.evaluation import Evaluation

    out: dict[str, list[Any]] = {}
    for res in results:
        ev = res.extras.get("evaluation")
        if ev is not None:
            out.setdefault(res.records[0]["method"], []).append(Evaluation.from_json(ev))
    return out


# --- compare ---------------------------------------------------------------------------------------


def compare(
    *,
    setup: ImageSetup = FULL_EVALUATION,
    members: int = 4,
    tau: float = DEFAULT_TAU,
    lam: float = DEFAULT_LAM,
    methods: Sequence[str] = METHOD_NAMES,
    out: str | Path = "runs/image-compare",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """Every method, same backbone and budget: the full evaluation suite, mean ± std over seeds.

    ``methods`` from single, temp_scaled, deep, batchensemble, packed, sigma; ``members``: M of every
    ensemble; ``tau`` / ``lam``: the σN-Ens regulariser (the default job's values). Also writes
    ``claims.json``: :data:`ensemblize.report.claims.SIGMA_CLAIMS` judged on the records (paired by
    seed). Returns the records.
    """
    c = _common(locals())
    chosen = O.choices(methods, option="--methods", allowed=METHOD_NAMES)
    c["settings"]["methods"] = chosen
    labels = {"deep": "deep_ensemble", "sigma": "sigma_ens"}
    specs = [
        (
            _spec(
                m,
                model=c["setup"].model,
                kw=c["model_kwargs"],
                label=labels.get(m),
                members=members if m not in ("single", "temp_scaled") else 1,
                tau=tau,
                lam=lam,
            ),
            {},
        )
        for m in chosen
    ]

    def report(results: list[JobResult]) -> list[dict[str, Any]]:
        from ensemblize.checkpoint import atomic_write_text
        from ensemblize.report.figures import evaluation_figures

        records = merged_records(results)
        evaluation_figures(evaluations_by_method(results), c["out"])
        severity_figure(records, c["out"] / "severity_ece.png")
        severities = [f"corr_ece_s{s}" for s in range(1, 6) if f"corr_ece_s{s}" in records[0]["metrics"]]
        atomic_write_text(
            c["out"] / "table_severity.md", markdown_table(records, metrics=["ece", *severities]) + "\n"
        )
        from ensemblize.report.claims import SIGMA_CLAIMS, format_claims, verdicts, write_claims

        claims = verdicts(records, SIGMA_CLAIMS)
        write_claims(c["out"], claims)
        _finish(c["out"], records, metrics=HEADLINE, execution=execution)
        if not (execution or Execution()).quiet:
            print("\n" + format_claims(claims))
        return records

    return _run("compare", _method_jobs("compare", specs, c, details=True), c, execution, report)


# --- tau / lambda sweeps ---------------------------------------------------------------------------


def _sweep(
    experiment: str,
    args: Mapping[str, Any],
    *,
    param: str,
    symbol: str,
    grid: str,
    fixed: str,
    figures: Callable[[list[dict[str, Any]], Path], Any] | None = None,
) -> list[dict]:
    """σN-Ens over ``param`` ∈ ``args[grid]`` at ``args[fixed]`` (the other knob), for the sweep
    experiment whose arguments (its ``locals()`` at entry) are ``args``: records ordered by the value,
    :func:`sweep_figures` with ``symbol`` for the parameter, then ``figures(records, out)`` if given."""
    c = _common(args)
    # λ = 0 (no regulariser) is a sweep's natural end point, as --lam 0 is; τ must stay positive
    values = c["settings"][grid] = O.floats(args[grid], option=f"--{grid}", low_open=grid != "lams")
    s = c["settings"]
    specs = [
        (
            _spec(
                "sigma",
                model=s["model"],
                kw=c["model_kwargs"],
                label=setting_label(param, v),
                members=s["members"],
                **{fixed: args[fixed], param: v},
            ),
            {param: v},
        )
        for v in values
    ]
    execution = args["execution"]

    def report(results: list[JobResult]) -> list[dict[str, Any]]:
        records = sorted(merged_records(results), key=lambda r: (float(r["spec"][param]), r["seed"]))
        sweep_figures(records, c["out"], param=param, symbol=symbol)
        if figures is not None:
            figures(records, c["out"])
        return _finish(c["out"], records, metrics=SWEEP_METRICS, execution=execution)

    return _run(experiment, _method_jobs(experiment, specs, c), c, execution, report)


def tau_sweep(
    *,
    setup: ImageSetup = ImageSetup(),
    members: int = 4,
    taus: Sequence[float] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
    lam: float = DEFAULT_LAM,
    out: str | Path = "runs/image-tau-sweep",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """σN-Ens over a grid of τ at fixed λ: frontiers, diversity and owners per feature per layer.

    The grid is ``taus`` (``--taus``), λ is ``lam`` (``--lam``)."""
    return _sweep("tau-sweep", locals(), param="tau", symbol="τ", grid="taus", fixed="lam")


def _metrics_vs_lambda(records: list[dict[str, Any]], out: Path) -> None:
    """``metrics_vs_lambda.png``: accuracy, NLL, ECE and OOD AUROC against λ (mean ± std over seeds)."""
    key = lambda r: float(r["spec"]["lam"])  # noqa: E731
    panels = []
    for metric in ("accuracy", "nll", "ece", "ood_maxprob_auroc"):
        st = group_stats(records, key, metric)
        panels.append((metric, {"σN-Ens": [(x, *st[x][:2]) for x in sorted(st)]}))
    logx = all(key(r) > 0 for r in records)  # λ = 0 (no regulariser) has no place on a log axis
    errorbar_panels(panels, out / "metrics_vs_lambda.png", xlabel="λ", logx=logx)


def lambda_sweep(
    *,
    setup: ImageSetup = ImageSetup(),
    members: int = 4,
    lams: Sequence[float] = (0.05, 0.2, 0.5, 2.0, 8.0),
    tau: float = DEFAULT_TAU,
    out: str | Path = "runs/image-lambda",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """σN-Ens over a grid of λ at fixed τ: final metrics, diversity and owners per feature.

    The grid is ``lams`` (``--lams``), τ is ``tau`` (``--tau``)."""
    return _sweep(
        "lambda", locals(), param="lam", symbol="λ", grid="lams", fixed="tau", figures=_metrics_vs_lambda
    )


# --- ensemble size -----------------------------------------------------------------------------------


def members_sweep(
    *,
    setup: ImageSetup = ImageSetup(),
    sizes: Sequence[int] = (2, 4, 8, 16),
    tau: float = DEFAULT_TAU,
    lam: float = DEFAULT_LAM,
    alpha: float = 2.0,
    out: str | Path = "runs/image-members",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """σN-Ens and Packed-Ensembles (fixed α, γ = 1, fixed backbone width) for every member count M.

    The member counts are ``sizes`` (``--sizes``)."""
    c = _common(locals())
    ms = c["settings"]["sizes"] = O.ints(sizes, option="--sizes", minimum=2, maximum=MAX_MEMBERS)
    kw = c["model_kwargs"]
    specs = [
        (spec, {})
        for m in ms
        for spec in (
            _spec("sigma", model=c["setup"].model, kw=kw, label=f"sigma_M={m}", members=m, tau=tau, lam=lam),
            _spec("packed", model=c["setup"].model, kw=kw, label=f"packed_M={m}", members=m, alpha=alpha),
        )
    ]

    def report(results: list[JobResult]) -> list[dict[str, Any]]:
        records = sorted(
            merged_records(results), key=lambda r: (r["spec"]["method"], r["members"], r["seed"])
        )
        members_figure(records, c["out"] / "metrics_vs_members.png", alpha=alpha)
        metrics = [*HEADLINE, "member_accuracy", "val_accuracy", "val_nll"]
        return _finish(c["out"], records, metrics=metrics, execution=execution)

    return _run("members", _method_jobs("members", specs, c), c, execution, report)


# --- fine-tune a pretrained single model ---------------------------------------------------------------


def finetune(
    *,
    setup: ImageSetup = FULL_EVALUATION,
    members: int = 4,
    finetune_epochs: int = 3,
    finetune_lr: float = 0.01,
    tau: float = DEFAULT_TAU,
    lam: float = DEFAULT_LAM,
    heldout: bool = False,
    out: str | Path = "runs/image-finetune",
    execution: Execution | None = None,
) -> list[dict[str, Any]]:
    """Convert a trained single model with ez.sigma_ensemble, fine-tune it briefly with the regulariser,
    and compare with the single model, σN-Ens from scratch and the deep ensemble.

    The fine-tune runs ``finetune_epochs`` (``--finetune-epochs``) at peak learning rate ``finetune_lr``
    (``--finetune-lr``), cosine. ``heldout`` (``--heldout``, digits): train on 0–5, 6–9 are near-OOD."""
    c = _common(locals())  # first: the arguments only
    kw = c["model_kwargs"]
    sigma = functools.partial(
        _spec, "sigma", model=c["setup"].model, kw=kw, members=members, tau=tau, lam=lam
    )
    ft_train = asdict(replace(_train_config(setup.epochs), epochs=finetune_epochs, lr=finetune_lr))
    scratch = (
        (sigma(label="sigma_scratch"), {}),
        (_spec("deep", model=c["setup"].model, kw=kw, label="deep_ensemble", members=members), {}),
    )
    jobs = []
    for seed in c["seeds"]:
        chain = Job.make(
            "finetune",
            finetune_job,
            f"single+sigma_finetuned {setup.dataset} seed={seed}",
            single=_spec("single", model=c["setup"].model, kw=kw, members=1),
            sigma=sigma(label="sigma_finetuned"),
            members=members,
            seed=seed,
            data=c["data"],
            train=c["train"],
            finetune=ft_train,
            evaluation=setup.evaluation,
            out=os.path.abspath(c["out"]),
            device=setup.device,
        )
        jobs += [chain, *_method_jobs("finetune", scratch, {**c, "seeds": [seed]})]

    def report(results: list[JobResult]) -> list[dict[str, Any]]:
        records = merged_records(results)
        key = lambda r: r["method"]  # noqa: E731
        panels = []
        for metric in ("accuracy", "nll", "ece", "ood_maxprob_auroc", "ood_mi_auroc"):
            st = group_stats(records, key, metric)
            panels.append((metric, {k: [(i, *st[k][:2])] for i, k in enumerate(st)}))
        errorbar_panels(panels, c["out"] / "finetune.png", xlabel="method (index)")
        metrics = [
            "accuracy",
            "nll",
            "ece",
            "corr_ece",
            "ood_maxprob_auroc",
            "ood_entropy_auroc",
            "ood_mi_auroc",
        ]
        if heldout:
            metrics += ["ood_heldout_maxprob_auroc", "ood_heldout_mi_auroc"]
        _finish(
            c["out"],
            records,
            metrics=[*metrics, "disagreement", "mutual_information", "val_nll"],
            execution=execution,
        )
        if not (execution and execution.quiet):
            ft = group_stats(records, key, "finetune_seconds")
            print(
                f"fine-tune seconds (mean): {ft.get('sigma_finetuned', (math.nan,))[0]:.1f}; "
                f"σN-Ens from scratch: {group_stats(records, key, 'train_seconds')['sigma_scratch'][0]:.1f}"
            )
        return records

    return _run("finetune", jobs, c, execution, report)


#: Experiment name (``ensemblize experiment NAME``) -> plain function.
EXPERIMENTS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "compare": compare,
    "tau-sweep": tau_sweep,
    "members": members_sweep,
    "finetune": finetune,
    "lambda": lambda_sweep,
}
