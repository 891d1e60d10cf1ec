"""The default job: single model, deep ensemble and σN-Ens on the embedded digits, evaluated fully.

``ensemblize run`` (:func:`run_default`) checks every argument first, then trains the three methods
with the same backbone and budget — three independent jobs (:mod:`ensemblize.experiments.jobs`),
in process by default — prints the headline table (accuracy, NLL, ECE with 15 equal-width bins on
p̄, Brier, parameters, train seconds) and the shift / OOD / selective / diversity metrics in tables
at most 100 characters wide and σN-Ens's claims judged on the run (:data:`ensemblize.report.claims.SIGMA_CLAIMS`),
and writes ``results.json``, ``claims.json``, the checkpoints (``models/``), the figures and the manifest
into the run folder.

Under ``torchrun --nproc-per-node N`` each model trains with DistributedDataParallel
(:mod:`ensemblize.training.distributed`); only rank 0 prints and writes files.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from numbers import Integral, Real
from pathlib import Path
from typing import Any

__all__ = [
    "run_default",
    "default_method_job",
    "DEFAULT_TAU",
    "DEFAULT_LAM",
    "DEFAULT_GATE_LR_SCALE",
    "DEFAULT_SIGMA_NORMS",
]

#: The σN-Ens configuration of the default job and every image/signal experiment (with
#: ``ensemblize.sigma.convert.DEFAULT_NOISE``): the lowest mean MNIST-1D validation NLL (train-size 1000,
#: 20 epochs, resnet1d, M = 4, seeds 0-2) among the Optuna-TPE candidates whose gates leave their
#: initial distribution (docs/results/sigma_search_mnist1d.md), rounded to two digits. It replaces the
#: digits-chosen τ = 1, λ = 5 with every norm converted and the gates at lr × 1.
DEFAULT_TAU = 0.32
#: λ of the softmax-temperature regulariser (see :data:`DEFAULT_TAU`).
DEFAULT_LAM = 0.35
#: σN gate logits' learning rate as a multiple of the training lr (``fit(gate_lr_scale=)``), used by
#: :class:`ensemblize.runner.MethodSpec` (see :data:`DEFAULT_TAU`).
DEFAULT_GATE_LR_SCALE = 0.4
#: Which norm layers σN-Ens converts (``runner.SIGMA_NORMS``): those of the backbone's last stage.
DEFAULT_SIGMA_NORMS = "last_stage"


def _splits(seed: int, heldout: bool):
    from .data.images import load_digits
    from .data.ood import held_out_classes

    if heldout:
        split = held_out_classes(seed)
        return split.splits, {"heldout": split.x_ood}
    return load_digits(seed=seed), None


def default_method_job(
    *,
    spec: dict[str, Any],
    seed: int,
    epochs: int,
    far_ood: list[str],
    heldout: bool,
    evaluate: bool,
    out: str,
) -> dict[str, Any]:
    """One job of the default job: train and evaluate ``MethodSpec(**spec)``; returns the record and
    the evaluation (metrics, details, seconds) for the figures."""
    from .evaluation import EvalSpec
    from .experiments.jobs import training_progress
    from .runner import MethodSpec, TrainConfig, run_method

    splits, extra_ood = _splits(seed, heldout)
    eval_spec = EvalSpec(ood=tuple(far_ood)) if evaluate else EvalSpec.none()
    outcome = run_method(
        MethodSpec(**spec),
        splits,
        train=TrainConfig(epochs=epochs),
        seed=seed,
        eval_spec=eval_spec,
        out=out,
        extra_ood=extra_ood,
        progress=training_progress(),
    )
    return {"records": [outcome.record.to_dict()], "extras": {"evaluation": outcome.evaluation.to_json()}}


def _describe(records: list[dict[str, Any]]) -> str:
    r = records[0]
    return f"trained in {r['train_seconds']:.1f} s, evaluated in {r['eval_seconds']:.1f} s"


def _check(*, seed: Any, epochs: Any, members: Any, model: Any, tau: Any, lam: Any, ood: Any) -> list[str]:
    """Every argument, before any work; returns the OOD names. OptionError names the option."""
    from .data.ood import NAMES
    from .experiments.options import OptionError, choice, split_list
    from .members import MAX_MEMBERS
    from .models import registry

    for option, value, low in (("--seed", seed, 0), ("--epochs", epochs, 1), ("--members", members, 2)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
            raise OptionError(option, f"must be an integer ≥ {low}, got {value!r}")
    if members > MAX_MEMBERS:
        raise OptionError("--members", f"must be at most {MAX_MEMBERS}, got {members!r}")
    choice(model, option="--model", allowed=getattr(registry, "IMAGE_MODELS", registry.MODEL_NAMES))
    for option, value, strict in (("--tau", tau, True), ("--lam", lam, False)):
        ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (strict and value == 0):
            raise OptionError(option, f"must be a finite number {'>' if strict else '≥'} 0, got {value!r}")
    names = split_list(ood, option="--ood")
    allowed = (*NAMES, "heldout")
    bad = [n for n in names if n not in allowed]
    if bad:
        raise OptionError("--ood", f"unknown {bad}; choose from {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise OptionError("--ood", f"has repeated values: {names}")
    return names


def run_default(
    *,
    out: str | Path = "runs/default",
    seed: int = 0,
    epochs: int = 15,
    members: int = 4,
    model: str = "resnet_small",
    evaluate: bool = True,
    ood: str = "gaussian,uniform,shuffled,photos",
    tau: float = DEFAULT_TAU,
    lam: float = DEFAULT_LAM,
    execution: Any = None,
) -> list[dict]:
    """The default job: single model, deep ensemble and σN-Ens on the embedded digits, evaluated fully.

    Writes ``results.json``, the checkpoints, the figures and the manifest into ``out``, prints the
    tables and returns the records (see the module docstring). ``ood``: comma-separated far-OOD sets, plus ``heldout`` to train on digits 0–5 and use 6–9 as
    near-OOD (the task then has 6 classes). ``execution``: an
    :class:`~ensemblize.experiments.jobs.Execution` (workers, resume / overwrite, quiet, ...).
    """
    from .evaluation.names import HEADLINE_METRICS
    from .experiments.jobs import Execution, Job, experiment_folder, merged_records
    from .report.claims import SIGMA_CLAIMS, format_claims, verdicts, write_claims
    from .report.results import console_tables
    from .runner import MethodSpec

    names = _check(seed=seed, epochs=epochs, members=members, model=model, tau=tau, lam=lam, ood=ood)
    ex = execution or Execution()
    heldout = "heldout" in names
    far = [n for n in names if n != "heldout"]
    specs = [
        MethodSpec("single", model=model),
        MethodSpec("deep", model=model, members=members, label="deep_ensemble"),
        MethodSpec("sigma", model=model, members=members, tau=tau, lam=lam, label="sigma_ens"),
    ]
    common = {"seed": seed, "epochs": epochs, "far_ood": far, "heldout": heldout, "evaluate": evaluate}
    jobs = [
        Job.make("run", default_method_job, f"{s.name}", spec=asdict(s), out=os.path.abspath(out), **common)
        for s in specs
    ]
    settings = {**common, "members": members, "model": model, "tau": tau, "lam": lam}
    with experiment_folder(out, experiment="run", settings=settings, execution=ex) as folder:
        quiet = folder.execution.quiet  # quiet on the ranks other than 0 under torchrun
        if not quiet:
            describe = _splits(seed, heldout)[0].describe()
            print(
                f"ensemblize run: {describe}; backbone {model}, {epochs} epochs, M={members}, seed {seed}",
                flush=True,
            )
        results = folder.run(jobs, describe=_describe)
        records = merged_records(results)
        figures = _figures(results, Path(out)) if folder.is_main else []
        claims = verdicts(records, SIGMA_CLAIMS)
        if folder.is_main:
            write_claims(out, claims)  # before the block ends: report.html renders it
        if not quiet:
            present = [k for k in HEADLINE_METRICS if k in records[0]["metrics"]]
            print("\n" + console_tables(records, metrics=present, by=("dataset", "method"), wide=ex.wide))
            print("\n" + format_claims(claims))
            written = [p.name for p in figures] + ["claims.json", "report.html", "models/ (checkpoints)"]
            print(f"\nwrote {Path(out) / 'results.json'} and {', '.join(written)}")
    return records


def _figures(results: list, out: Path) -> list[Path]:
    from .experiments.image import evaluations_by_method
    from .report.figures import evaluation_figures

    return evaluation_figures(evaluations_by_method(results), out)
