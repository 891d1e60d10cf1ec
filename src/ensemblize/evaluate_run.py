"""``ensemblize evaluate RUN_DIR``: rebuild every checkpoint of a run and evaluate it again."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .checkpoint import checkpoint_paths
from .data.images import load_digits
from .data.ood import held_out_classes, parse_ood_names
from .evaluation import HEADLINE_METRICS, EvalSpec, evaluate_classifier
from .models.ensembles import count_parameters
from .report.figures import evaluation_figures
from .report.results import Record, format_table, load_results, write_results
from .runner import load_method

__all__ = ["evaluate_run"]


def evaluate_run(
    run_dir: str | Path,
    *,
    out: str | Path | None = None,
    seed: int | None = None,
    ood: str = "gaussian,uniform,shuffled,photos",
) -> list[dict]:
    """Evaluate every ``models/*.json`` checkpoint under ``run_dir``; write ``evaluation.json`` + figures."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir
    stems = sorted(p.with_name(p.name[: -len(".json")]) for p in (run_dir / "models").glob("*.json"))
    if not stems:
        raise FileNotFoundError(
            f"no checkpoints under {run_dir / 'models'}; run `ensemblize run --out {run_dir}` first"
        )
    trained = (
        {(r["method"], r["seed"]): r for r in load_results(run_dir)}
        if (run_dir / "results.json").is_file()
        else {}
    )
    records, evals = [], {}
    start = time.perf_counter()
    for stem in stems:
        meta = json.loads(checkpoint_paths(stem)[1].read_text())
        run_seed = meta["seed"]
        if meta["dataset"] != "digits":
            raise ValueError(
                f"{stem}: evaluate supports digits runs here; dataset {meta['dataset']!r} needs its data root"
            )
        heldout = meta["num_classes"] < 10
        if heldout:
            near = held_out_classes(run_seed)
            splits, extra = near.splits, {"heldout": near.x_ood}
        else:
            splits, extra = load_digits(seed=run_seed), None
        module, spec, _ = load_method(stem, splits)
        ev = evaluate_classifier(
            module,
            splits,
            spec=EvalSpec(ood=parse_ood_names(ood)),
            seed=run_seed if seed is None else seed,
            extra_ood=extra,
        )
        prev = trained.get((spec.name, run_seed), {})
        records.append(
            Record(
                method=spec.name,
                dataset=splits.name,
                seed=run_seed,
                members=spec.effective_members,
                params=count_parameters(module),
                train_seconds=prev.get("train_seconds", float("nan")),
                metrics=ev.metrics,
                extra={"eval_seconds": ev.seconds},
            ).to_dict()
        )
        evals[f"{spec.name} s{run_seed}"] = ev
    write_results(out, records, name="evaluation.json")
    evaluation_figures(evals, out)
    print(
        format_table(
            records,
            metrics=list(HEADLINE_METRICS),
        )
    )
    print(
        f"\nevaluated {len(records)} checkpoint(s) in {time.perf_counter() - start:.0f}s -> {out / 'evaluation.json'}"
    )
    return records
