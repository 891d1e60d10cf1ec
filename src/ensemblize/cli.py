"""The ``ensemblize`` command line.

``ensemblize run`` is the default job on embedded data; ``ensemblize experiment NAME`` runs one of
the papers' experiments; ``ensemblize evaluate RUN_DIR`` re-evaluates a finished run. Every command
takes ``--out DIR`` and ``--seed N``, writes ``results.json`` plus figures into DIR and prints a table.
"""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    name="ensemblize",
    help="Uncertainty-aware deep learning: σN-Ens, LoMETab and SYNC, measured.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
experiment_app = typer.Typer(help="Run one of the papers' experiments.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")


@app.command()
def run(
    out: Path = typer.Option(
        Path("runs/default"), "--out", help="Run folder for results.json, checkpoints and figures."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed (data split, initialisation, batch order)."),
    epochs: int = typer.Option(
        15, "--epochs", min=1, help="Training epochs per model (same budget for every method)."
    ),
    members: int = typer.Option(
        4, "--members", min=2, help="Ensemble size M for the deep ensemble and σN-Ens."
    ),
    model: str = typer.Option(
        "resnet_small", "--model", help="Backbone: resnet_small, resnet18, wrn28, vit_small."
    ),
    ood: str = typer.Option(
        "gaussian,uniform,shuffled,photos",
        "--ood",
        help="OOD sets: any of gaussian, uniform, shuffled, photos (far-OOD), heldout (train on digits 0-5, 6-9 are near-OOD).",
    ),
    tau: float = typer.Option(5.0, "--tau", help="σN-Ens softmax temperature τ (> 0)."),
    lam: float = typer.Option(0.5, "--lam", help="σN-Ens regulariser strength λ (≥ 0)."),
    evaluate: bool = typer.Option(
        True, "--evaluate/--no-evaluate", help="Also run the shift / OOD evaluation."
    ),
    threads: int = typer.Option(
        1, "--threads", min=1, help="torch intra-op threads (1 is fastest for these small models)."
    ),
) -> None:
    """The default job: single model, deep ensemble and σN-Ens on the embedded digits."""
    import torch

    from .default_job import run_default

    torch.set_num_threads(threads)
    run_default(
        out=out,
        seed=seed,
        epochs=epochs,
        members=members,
        model=model,
        evaluate=evaluate,
        ood=ood,
        tau=tau,
        lam=lam,
    )


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(
        ..., help="A run folder written by `ensemblize run` or an image experiment."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Where to write evaluation.json and figures (default: RUN_DIR)."
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="Evaluation seed for corruptions / OOD sets (default: the run's)."
    ),
    ood: str = typer.Option("gaussian,uniform,shuffled,photos", "--ood", help="Far-OOD sets to evaluate."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch intra-op threads."),
) -> None:
    """Re-evaluate every checkpoint in RUN_DIR/models: clean, corrupted, OOD, selective, diversity."""
    import torch

    from .evaluate_run import evaluate_run

    torch.set_num_threads(threads)
    evaluate_run(run_dir, out=out, seed=seed, ood=ood)


def _register_experiments() -> None:
    from .experiments import discover

    for name, fn in discover().items():
        experiment_app.command(name)(fn)


_register_experiments()


if __name__ == "__main__":  # pragma: no cover
    app()
