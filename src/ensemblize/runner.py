"""Train and evaluate one image method the same way everywhere (default job and every experiment).

A :class:`MethodSpec` names a method and its knobs; :func:`run_method` builds it with
:func:`ensemblize.models.registry.build_ensemble`, trains it with :func:`ensemblize.training.fit`
(σN-Ens adds the softmax-temperature regulariser), optionally writes the weights as a checkpoint
(safetensors + JSON, rebuildable by :func:`load_method`), evaluates it with
:func:`ensemblize.evaluation.evaluate_classifier` and returns a results :class:`~ensemblize.report.Record`.

Methods: ``single``, ``temp_scaled`` (single + temperature fitted on validation NLL), ``deep``,
``batchensemble``, ``packed``, ``sigma``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._checks import check_choice, check_positive
from .checkpoint import load_checkpoint, load_state_strict, save_checkpoint
from .data.images import ImageSplits
from .default_job import DEFAULT_GATE_LR_SCALE, DEFAULT_LAM, DEFAULT_SIGMA_NORMS, DEFAULT_TAU
from .evaluation import EvalSpec, Evaluation, evaluate_classifier
from .models.ensembles import count_parameters
from .models.registry import build_ensemble, build_model
from .models.temperature_scaling import TemperatureScaled, fit_temperature
from .report.results import Record
from .run_folder import model_stem
from .sigma.convert import DEFAULT_NOISE, NormSelection, sigma_ensemble
from .sigma.gate_sharing import sharing
from .sigma.regularizer import softmax_temperature_loss
from .training import distributed as D
from .training import fit, logits_of, predict_outputs
from .training.warm_up import warm_up

__all__ = [
    "MethodSpec",
    "TrainConfig",
    "RunOutcome",
    "METHODS",
    "SIGMA_NORMS",
    "sigma_norm_selection",
    "build_method",
    "train_method",
    "run_method",
    "load_method",
]

METHODS = ("single", "temp_scaled", "deep", "batchensemble", "packed", "sigma")

#: Which norm layers of the backbone σN-Ens converts (:func:`sigma_norm_selection`).
SIGMA_NORMS = ("all", "no_stem", "last_stage")


def sigma_norm_selection(norms: str, model: nn.Module) -> NormSelection:
    """The ``layers`` argument of :func:`ensemblize.sigma_ensemble` for the preset ``norms``.

    * ``"all"`` — every norm layer (``None``);
    * ``"no_stem"`` — every norm layer but the stem's: those inside the backbone's ``stem`` child
      (``stem.1`` of the ResNets; the wide ResNet's stem has none, so nothing is dropped); a model
      without a ``stem`` child drops its first norm layer in module order (``blocks.0.norm1`` of
      the transformers);
    * ``"last_stage"`` — the norm layers inside the last child (in registration order) of the
      backbone's ``stages`` (ResNets) or ``blocks`` (transformers) container that holds any.

    Raises ValueError naming the model's norm layers when the preset does not apply to ``model``
    (no ``stages``/``blocks`` container with norm layers, or nothing left to convert).
    """
    check_choice(norms, SIGMA_NORMS, name="norms")
    if norms == "all":
        return None
    from .sigma.convert import norm_layer_names

    names = norm_layer_names(model)
    if norms == "no_stem":
        stem = isinstance(getattr(model, "stem", None), nn.Module)
        chosen = [n for n in names if not n.startswith("stem.")] if stem else names[1:]
    else:
        chosen = []
        for container in ("stages", "blocks"):
            parent = getattr(model, container, None)
            if not isinstance(parent, nn.Module):
                continue
            prefix = f"{container}."
            holding = [
                child for child in parent._modules if any(n.startswith(f"{prefix}{child}.") for n in names)
            ]
            if holding:
                last = f"{prefix}{holding[-1]}."
                chosen = [n for n in names if n.startswith(last)]
                break
        if not chosen:
            raise ValueError(
                f"norms='last_stage' needs a 'stages' or 'blocks' container holding norm layers; "
                f"{type(model).__name__}'s norm layers: {names}"
            )
    if not chosen:
        raise ValueError(
            f"norms={norms!r} leaves no norm layer of {type(model).__name__} to convert; norm layers: {names}"
        )
    return chosen


@dataclass(frozen=True)
class MethodSpec:
    """One method to train. ``label`` names it in tables (defaults to ``method``).

    ``tau`` / ``lam``: σN-Ens regulariser; ``noise``: σN-Ens gate noise (``None``:
    :data:`ensemblize.sigma.convert.DEFAULT_NOISE`); ``gate_lr_scale``: the σN gate logits' learning
    rate as a multiple of ``lr`` (``fit(gate_lr_scale=)``); ``norms``: which norm layers become σNorm
    (:data:`SIGMA_NORMS`, :func:`sigma_norm_selection`); ``alpha`` / ``gamma``: Packed-Ensembles;
    ``model_kwargs``: passed to the backbone constructor (e.g. ``width``). The σN knobs are ignored
    by the other methods.
    """

    method: str
    model: str = "resnet_small"
    members: int = 4
    tau: float = DEFAULT_TAU
    lam: float = DEFAULT_LAM
    noise: float | None = None
    alpha: float = 2.0
    gamma: int = 1
    label: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    gate_lr_scale: float = DEFAULT_GATE_LR_SCALE
    norms: str = DEFAULT_SIGMA_NORMS

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {list(METHODS)}")
        check_positive(self.gate_lr_scale, name="gate_lr_scale")
        check_choice(self.norms, SIGMA_NORMS, name="norms")

    @property
    def name(self) -> str:
        return self.label or self.method

    @property
    def effective_members(self) -> int:
        return 1 if self.method in ("single", "temp_scaled") else self.members


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation shared by every method of a comparison (same budget for all)."""

    epochs: int = 20
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float = 0.05
    weight_decay: float = 5e-4
    schedule: str = "cosine"
    early_stopping_patience: int | None = None


@dataclass
class RunOutcome:
    """What :func:`run_method` produced."""

    record: Record
    evaluation: Evaluation
    model: nn.Module
    history: list[dict[str, Any]]


def _input_shape(splits: ImageSplits) -> dict[str, int]:
    return {
        "in_channels": splits.in_channels,
        "num_classes": splits.num_classes,
        "image_size": splits.image_size,
    }


def build_method(spec: MethodSpec, splits: ImageSplits) -> nn.Module:
    """The untrained module for ``spec`` on ``splits``' input shape: (B, C, H, W) -> (B, M, classes)."""
    kw: dict[str, Any] = dict(spec.model_kwargs)
    method = "single" if spec.method == "temp_scaled" else spec.method
    shape = _input_shape(splits)
    if method == "sigma":
        backbone = build_model(spec.model, **shape, **kw)
        noise = DEFAULT_NOISE if spec.noise is None else spec.noise
        layers = sigma_norm_selection(spec.norms, backbone)
        return sigma_ensemble(backbone, members=spec.members, noise=noise, layers=layers)
    if method == "packed":
        kw.update(alpha=spec.alpha, gamma=spec.gamma)
    return build_ensemble(method, spec.model, members=spec.effective_members, **shape, **kw)


def _regularizer(spec: MethodSpec):
    if spec.method != "sigma" or spec.lam == 0:
        return None
    return lambda module: softmax_temperature_loss(module, spec.tau, spec.lam)


def train_method(
    module: nn.Module,
    spec: MethodSpec,
    splits: ImageSplits,
    train: TrainConfig,
    *,
    seed: int,
    progress: bool | None = None,
    device: str | torch.device = "cpu",
):
    """Train ``module`` as ``spec`` on ``splits`` with ``train``'s recipe (σN-Ens adds its regulariser)."""
    return fit(
        module,
        (splits.x_train, splits.y_train),
        (splits.x_val, splits.y_val),
        epochs=train.epochs,
        batch_size=train.batch_size,
        optimizer=train.optimizer,
        lr=train.lr,
        weight_decay=train.weight_decay,
        schedule=train.schedule,
        regularizer=_regularizer(spec),
        gate_lr_scale=spec.gate_lr_scale if spec.method == "sigma" else 1.0,
        early_stopping_patience=train.early_stopping_patience,
        seed=seed,
        progress=progress,
        desc=f"{spec.name} {splits.name} seed={seed}",
        device=device,
    )


def run_method(
    spec: MethodSpec,
    splits: ImageSplits,
    *,
    train: TrainConfig,
    seed: int,
    eval_spec: EvalSpec | None = None,
    out: str | Path | None = None,
    extra_ood: dict[str, torch.Tensor] | None = None,
    model: nn.Module | None = None,
    progress: bool | None = None,
    device: str | torch.device = "cpu",
) -> RunOutcome:
    """Build (or take ``model``), train, checkpoint into ``out/models`` (if ``out``), evaluate; see module doc."""
    torch.manual_seed(seed)
    module = model if model is not None else build_method(spec, splits)
    warm_up()  # the process's one-time costs are not charged to the first method it trains
    start = time.perf_counter()
    result = train_method(module, spec, splits, train, seed=seed, progress=progress, device=device)
    extra: dict[str, Any] = {"setting": spec.name}
    if spec.method == "temp_scaled":
        logits = predict_outputs(module, splits.x_val, transform=logits_of, device=device)
        temperature = fit_temperature(logits, splits.y_val)
        module = TemperatureScaled(module, temperature)
        extra["temperature"] = temperature
    train_seconds = time.perf_counter() - start
    if out is not None and D.current().is_main:  # under torchrun only rank 0 writes
        save_method(module, spec, splits, seed=seed, path=Path(out) / "models" / model_stem(spec.name, seed))
    evaluation = evaluate_classifier(
        module, splits, spec=eval_spec, seed=seed, extra_ood=extra_ood, device=device
    )
    metrics = dict(evaluation.metrics)
    if spec.method == "sigma":
        stats = sharing(module)
        metrics["owners_per_feature"] = float(
            sum(s.mean_owners * s.features for s in stats) / sum(s.features for s in stats)
        )
    record = Record(
        method=spec.name,
        dataset=splits.name,
        seed=seed,
        members=spec.effective_members,
        params=count_parameters(module),
        train_seconds=train_seconds,
        metrics=metrics,
        extra={
            **extra,
            "epochs": result.epochs_run,
            "world_size": D.current().world_size,
            "eval_seconds": evaluation.seconds,
            "spec": asdict(spec),
        },
    )
    return RunOutcome(record=record, evaluation=evaluation, model=module, history=result.history)


def save_method(module: nn.Module, spec: MethodSpec, splits: ImageSplits, *, seed: int, path: Path) -> Path:
    """Write ``module``'s weights and what is needed to rebuild it (spec, data shape, seed)."""
    meta = {
        "format": "ensemblize.method/1",
        "spec": asdict(spec),
        "dataset": splits.name,
        "seed": seed,
        "in_channels": splits.in_channels,
        "num_classes": splits.num_classes,
        "image_size": splits.image_size,
        "class_names": list(splits.class_names),
        "temperature": float(module.temperature) if isinstance(module, TemperatureScaled) else None,
    }
    return save_checkpoint(path, {k: v.cpu() for k, v in module.state_dict().items()}, meta)


def _check_size_before_building(spec: MethodSpec, splits: ImageSplits, tensors: dict, path: Any) -> None:
    """ValueError when the checkpoint's settings describe a larger model than its tensor file holds.

    The JSON's settings (members, width, ...) decide what is allocated; an edited file (its hash can be
    recomputed) could ask for hundreds of GB. The model is first built on torch's ``meta`` device, which
    allocates nothing, and its size compared with the tensors actually loaded.
    """
    try:
        with torch.device("meta"):
            if spec.method == "sigma":  # conversion reads values; the backbone is a lower bound of its size
                probe = build_model(spec.model, **_input_shape(splits), **dict(spec.model_kwargs))
            else:
                probe = build_method(spec, splits)
    except (RuntimeError, NotImplementedError):  # a constructor that needs real values: no estimate
        return
    want = sum(t.numel() for t in probe.state_dict().values())
    have = sum(t.numel() for t in tensors.values())
    if want > have:
        raise ValueError(
            f"{path}: its settings describe a model of {want:,} values, but its tensor file holds {have:,}; "
            "the metadata does not belong to these weights"
        )


def load_method(path: str | Path, splits: ImageSplits) -> tuple[nn.Module, MethodSpec, dict[str, Any]]:
    """Rebuild a module written by :func:`run_method` (``path`` without suffix) and load its weights."""
    tensors, meta = load_checkpoint(path)
    if meta.get("format") != "ensemblize.method/1":
        raise ValueError(f"{path} is not an ensemblize method checkpoint (format {meta.get('format')!r})")
    # checkpoints written before the gate-lr / norm-selection knobs trained every norm at lr × 1
    spec = MethodSpec(**{"gate_lr_scale": 1.0, "norms": "all", **meta["spec"]})
    if (splits.in_channels, splits.num_classes) != (meta["in_channels"], meta["num_classes"]):
        raise ValueError(
            f"{path} was trained on {meta['in_channels']} channels / {meta['num_classes']} classes, "
            f"but the data has {splits.in_channels} / {splits.num_classes}"
        )
    built = replace(spec, noise=0.0) if spec.method == "sigma" else spec
    _check_size_before_building(built, splits, tensors, path)
    module = build_method(built, splits)
    if meta.get("temperature") is not None:
        module = TemperatureScaled(module, meta["temperature"])
    load_state_strict(module, tensors, what=str(path))
    return module, spec, meta
