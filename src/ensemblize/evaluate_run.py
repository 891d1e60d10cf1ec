"""``ensemblize evaluate RUN_DIR``: rebuild every checkpoint of a finished run and evaluate it again.

The run must be complete (its manifest, :func:`ensemblize.run_folder.read_manifest`, lists every
file with its hash): a folder from an interrupted run, or whose models changed afterwards, is
refused. Results go to ``evaluation.json`` and the figures into ``out`` (default: the run folder,
whose manifest is then rewritten under the folder's lock). Every file written is named, marked
"replaced" when it overwrote an earlier one.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from pathlib import Path
from typing import Any

from .run_folder import uncreatable

__all__ = ["evaluate_run"]


def _benchmark(meta: dict[str, Any], data_root: str | Path | None):
    """The checkpoint's test data (its dataset, seed and class hold-out) and its near-OOD sets.

    Only the test split is evaluated, so a run's ``--train-size`` does not matter here; CIFAR is read
    from ``data_root`` (the run folder does not record a machine's data location).
    """
    from .data.datasets import load_dataset

    name = meta["dataset"]
    heldout = name in ("digits", "mnist1d") and meta["num_classes"] < 10  # classes 0-5; 6-9 near-OOD
    bench = load_dataset(name, seed=meta["seed"], heldout=heldout, root=data_root)
    return bench, (bench.near_ood or None)


def _experiment_of(run_dir: Path) -> str | None:
    """The experiment a run folder's ``run.json`` names (``run``, ``tabular-bench``, …), or None."""
    try:
        config = json.loads((run_dir / "run.json").read_text()).get("config", {})
    except (OSError, ValueError, AttributeError):
        return None
    kind = config.get("experiment") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else None


def _recorded_far_ood(config: dict[str, Any], dataset: str) -> tuple[str, ...] | None:
    """The far-OOD sets a run was evaluated on: its ``far_ood`` (``ensemblize run``), the OOD sets of
    its evaluation preset (the image experiments), or None (all of the dataset's)."""
    if isinstance(config.get("far_ood"), list):
        return tuple(str(name) for name in config["far_ood"])
    preset = config.get("evaluation")
    if isinstance(preset, str):
        from .experiments.image import EVAL_PRESETS, eval_spec

        if preset in EVAL_PRESETS:
            ood = eval_spec(preset, dataset).ood
            return None if ood is None else tuple(ood)
    return None


def _recorded_spec(config: dict[str, Any], dataset: str, far: tuple[str, ...] | None):
    """The run's own evaluation (its preset's corruptions and sample count: ``reduced`` for tau-sweep,
    members and lambda by default) with far-OOD sets ``far``; the full suite when the run records no preset."""
    import dataclasses

    from .evaluation import EvalSpec

    preset = config.get("evaluation")
    if isinstance(preset, str):
        from .experiments.image import EVAL_PRESETS, eval_spec

        if preset in EVAL_PRESETS:
            return dataclasses.replace(eval_spec(preset, dataset), ood=far)
    return EvalSpec(ood=far)


def _check_out(run_dir: Path, out: Path) -> None:
    """ValueError when ``out`` is another run folder (its manifest would no longer match its files), a
    folder inside the run (the run's manifest would then miss the new files), not a folder, or a
    non-empty folder that holds no earlier evaluation (another command's output, a user's files)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file, not a folder")
    here, run = out.resolve(), run_dir.resolve()
    if here != run and run in here.parents:
        raise ValueError(
            f"--out {out} is inside the run folder {run_dir}, whose manifest would no longer match its "
            "files: write the evaluation into the run itself (no --out) or into a folder outside it"
        )
    why = uncreatable(out)
    if why:
        raise ValueError(f"--out {out} cannot be created: {why}")
    if here != run and (out / "manifest.json").is_file():
        raise ValueError(
            f"--out {out} is another run folder (it has a manifest.json): write the evaluation into the run "
            "itself (no --out) or into a folder of its own"
        )
    if here != run and out.is_dir() and any(out.iterdir()) and not (out / "evaluation.json").is_file():
        raise ValueError(
            f"--out {out} is not empty and holds no earlier evaluation (evaluation.json): its files (e.g. "
            "another command's report.html) would be replaced; choose a new or empty folder"
        )


def _output(run_dir: Path, out: Path) -> Any:
    """Into the run folder: :func:`~ensemblize.experiments.jobs.amend_run` (manifest rewritten);
    elsewhere: a plain folder."""
    from .experiments.jobs import amend_run

    if out.resolve() == run_dir.resolve():
        return amend_run(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    return contextlib.nullcontext(out)


def evaluate_run(
    run_dir: str | Path,
    *,
    out: str | Path | None = None,
    seed: int | None = None,
    ood: str | None = None,
    data_root: str | Path | None = None,
    quiet: bool = False,
    wide: bool = False,
) -> list[dict]:
    """Evaluate every ``models/*.json`` checkpoint under ``run_dir``; write ``evaluation.json``, figures, ``report.html``.

    Works for every dataset a run can use: digits and MNIST-1D are rebuilt from the checkpoint's
    seed, CIFAR is read from ``data_root``. The corruptions are the run's own evaluation preset's
    (``--eval`` of the image experiments; the full suite for ``ensemblize run``), so the numbers
    compare with its results. ``seed``: the corruption / OOD-set seed (default: each checkpoint's
    training seed); ``ood``: comma-separated far-OOD sets of the dataset's modality (default: the
    sets the run was evaluated on; all of the dataset's when the run does not record them; ``""``:
    none); ``quiet``: no progress and no table;
    ``wide``: one table.
    """
    from ._checks import check_int
    from .checkpoint import checkpoint_paths
    from .data._names import parse_names
    from .evaluation import HEADLINE_METRICS, evaluate_classifier
    from .models.ensembles import count_parameters
    from .report.figures import evaluation_figures
    from .report.html import write_report
    from .report.results import Record, console_tables, load_results, write_results
    from .run_folder import read_manifest
    from .runner import load_method
    from .training.progress import Progress

    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir
    if seed is not None:
        seed = check_int(seed, name="seed", minimum=0)
    _check_out(run_dir, out)  # before any work
    stems = sorted(p.with_name(p.name[: -len(".json")]) for p in (run_dir / "models").glob("*.json"))
    if not stems:
        kind = _experiment_of(run_dir)
        raise FileNotFoundError(
            f"no checkpoints under {run_dir / 'models'}"
            + (f": {run_dir} is a {kind!r} run, which saves no image-model checkpoints" if kind else "")
            + "; evaluate re-evaluates the models that `ensemblize run` and the image experiments save"
        )
    config = read_manifest(run_dir).get("config", {})  # a finished run, unchanged since
    trained = {(r["method"], r["seed"]): r for r in load_results(run_dir)}
    records, evals = [], {}
    start = time.perf_counter()
    bar = Progress(len(stems), desc=f"evaluate {run_dir.name}", unit="checkpoint", enabled=not quiet)
    for stem in stems:
        meta = json.loads(checkpoint_paths(stem)[1].read_text())
        bench, extra = _benchmark(meta, data_root)
        splits = bench.splits
        if ood is None:  # the sets the run itself was evaluated on, so the numbers compare
            far = _recorded_far_ood(config, splits.name)
        elif not ood.strip():  # --ood '': no far-OOD sets, as in `ensemblize run`
            far = ()
        else:
            far = parse_names(ood, bench.ood_kinds, what="OOD set")
        module, spec, _ = load_method(stem, splits)
        ev = evaluate_classifier(
            module,
            splits,
            spec=_recorded_spec(config, splits.name, far),
            seed=meta["seed"] if seed is None else seed,
            extra_ood=extra,
        )
        prev = trained.get((spec.name, meta["seed"]), {})
        record = Record(
            method=spec.name,
            dataset=splits.name,
            seed=meta["seed"],
            members=spec.effective_members,
            params=count_parameters(module),
            train_seconds=prev.get("train_seconds", float("nan")),
            metrics=ev.metrics,
            extra={"eval_seconds": ev.seconds},
        )
        records.append(record.to_dict())
        evals.setdefault(spec.name, []).append(ev)
        bar.update({"accuracy": ev.metrics["accuracy"], "ece": ev.metrics["ece"]})
    bar.close()
    # the run's own order (its results.json: e.g. single, deep ensemble, σN-Ens), not the files' names
    order = {key: i for i, key in enumerate(trained)}
    records.sort(key=lambda r: (order.get((r["method"], r["seed"]), len(order)), r["method"], r["seed"]))
    methods = list(dict.fromkeys(r["method"] for r in records))
    evals = {m: evals[m] for m in methods}
    datasets = sorted({r["dataset"] for r in records})
    if data_root is not None and not any(d.startswith("cifar") for d in datasets):
        warnings.warn(
            f"--data-root {data_root} was not used: the run's datasets ({', '.join(datasets)}) are built "
            "in, not read from disk",
            UserWarning,
            stacklevel=2,
        )
    targets = [out / "evaluation.json"]
    existed = {p for p in out.glob("*") if p.is_file()} if out.is_dir() else set()
    with _output(run_dir, out):
        write_results(out, records, name="evaluation.json")
        targets += evaluation_figures(evals, out)
        targets.append(write_report(out, finishing=out.resolve() == run_dir.resolve()))
    if not quiet:
        present = [m for m in HEADLINE_METRICS if m in records[0]["metrics"]]
        print(console_tables(records, metrics=present, by=("dataset", "method"), wide=wide))
        print(f"\nevaluated {len(records)} checkpoint(s) in {time.perf_counter() - start:.1f} s; wrote:")
        for path in targets:
            print(f"  {path}{' (replaced)' if path in existed else ''}")
    return records
