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
    out: Path = typer.Option(Path("runs/default"), "--out", help="Run folder for results.json and figures."),
    seed: int = typer.Option(0, "--seed", help="Random seed (data split, initialisation, batch order)."),
    epochs: int = typer.Option(30, "--epochs", min=1, help="Training epochs per model."),
    members: int = typer.Option(4, "--members", min=1, help="Ensemble size M."),
    model: str = typer.Option("resnet_small", "--model", help="Backbone name (see ensemblize.models)."),
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Also run the shift / OOD / selective evaluation."),
) -> None:
    """The default job: single model, deep ensemble and σN-Ens on the embedded digits."""
    from .default_job import run_default

    run_default(out=out, seed=seed, epochs=epochs, members=members, model=model, evaluate=evaluate)


def _register_experiments() -> None:
    from .experiments import discover

    for name, fn in discover().items():
        experiment_app.command(name)(fn)


_register_experiments()


if __name__ == "__main__":  # pragma: no cover
    app()
