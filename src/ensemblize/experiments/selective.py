"""``ensemblize experiment selective``: SYNC vs SelectiveNet vs Deep Gamblers vs softmax response.

Methods, all on the same backbone (``resnet_small`` by default) and budget:

* ``SR`` — a plain cross-entropy classifier, ranked by its softmax response ``max_c p_c``;
* ``SelectiveNet`` — :class:`~ensemblize.selective.SelectiveNetLoss`, one model per target coverage;
* ``SYNC-SMP(γ=g)`` — :class:`~ensemblize.selective.SyncLoss` with the softmax-power target
  ``(max p)^γ`` for every ``γ`` in ``--gammas`` (``γ = 1`` *is* SR as the sync target);
* ``SYNC-entropy`` — the score ablation: normalised negative entropy as the sync target (compare
  with ``SYNC-SMP(γ=2)`` and ``SYNC-SMP(γ=1)``, the SR target, trained with the same ``μ``);
* ``DeepGamblers`` — :class:`~ensemblize.selective.DeepGamblersLoss`, reward ``o`` chosen from
  ``--rewards`` by the validation AURC of its own score;
* ``σN-SYNC-SMP(γ=g)`` — SYNC on a σN ensemble: the feature extractor is
  ``sigma_ensemble(headless backbone, members=M)`` producing ``(B, M, D)`` features, and the sync
  target is ``(max p̄)^γ`` of the ensemble's mean probability ``p̄`` (``SyncLoss(prior=p̄)``).

Every model is scored twice: by its own selection score (``"w/o SR"``: ``g``, or
``1 − p_abstain`` for Deep Gamblers) and by the softmax response of its prediction head
(``"w/ SR"``); the SR baseline has only the latter. For each scoring the full risk–coverage curve
is evaluated on test (selective risk at 10 %, …, 100 %, AURC, E-AURC, AUGRC) and, for every
coverage, a threshold fitted on the *validation* split is applied to test and reported with the
test coverage it actually achieves. Validation data are used for nothing else except choosing
Deep Gamblers' reward; no model sees them in training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # torch / numpy are imported inside the functions: `ensemblize --help` stays fast
    import numpy as np
    from torch import Tensor, nn

__all__ = [
    "COMMANDS",
    "Scores",
    "selective",
    "run_selective",
    "score_model",
    "method_records",
    "format_markdown",
]

TARGETS: tuple[float, ...] = (0.5, 0.7, 0.9)
GAMMAS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
REWARDS: tuple[float, ...] = (2.2, 3.0, 5.0)
DEFAULT_MU = 1.0  # SYNC weight; a fixed default, NOT tuned (not on validation, not on test)
DEFAULT_EPOCHS = 40
TABLE_COVERAGES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
CURVE_POINTS = 100  # risk–coverage curves are resampled at coverages 0.01, 0.02, ..., 1.0


@dataclass(frozen=True)
class Scores:
    """One model's predictions on one split.

    Attributes:
        pred: ``(N,)`` predicted labels (argmax of the prediction head; for Deep Gamblers over the
            first ``K`` logits).
        own: ``(N,)`` the model's own selection score ("w/o SR"): ``g`` for SelectiveNet/SYNC,
            ``1 − p_abstain`` for Deep Gamblers, ``None`` for a plain classifier.
        sr: ``(N,)`` softmax response ``max_c p_c`` of the prediction head ("w/ SR"); for member
            outputs of the mean probability ``p̄``; for Deep Gamblers of the softmax over the first
            ``K`` logits.
    """

    pred: np.ndarray
    own: np.ndarray | None
    sr: np.ndarray


def score_model(model: nn.Module, x: Tensor, *, kind: str, batch_size: int = 512) -> Scores:
    """Predict ``x (N, ...)`` with ``model`` in eval mode and return its :class:`Scores`.

    ``kind``: ``"plain"`` (logits ``(B, C)``), ``"selective"`` (a
    :class:`~ensemblize.selective.SelectiveNet`, member outputs aggregated as in
    :func:`~ensemblize.selective.predict_selective`) or ``"gamblers"`` (logits ``(B, K+1)``, last
    = abstain).
    """
    import torch

    from ..selective import predict_selective

    if kind == "selective":
        p = predict_selective(model, x, batch_size=batch_size)
        return Scores(
            pred=p.probs.argmax(-1).numpy(),
            own=p.selection.double().numpy(),
            sr=p.probs.amax(-1).double().numpy(),
        )
    if kind not in ("plain", "gamblers"):
        raise ValueError(f"kind must be 'plain', 'selective' or 'gamblers', got {kind!r}")
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = torch.cat([model(x[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)])
    finally:
        model.train(was)
    if kind == "plain":
        probs = logits.softmax(-1)
        return Scores(pred=probs.argmax(-1).numpy(), own=None, sr=probs.amax(-1).double().numpy())
    full = logits.softmax(-1)
    cls = logits[:, :-1].softmax(-1)
    return Scores(
        pred=cls.argmax(-1).numpy(),
        own=(1.0 - full[:, -1]).double().numpy(),
        sr=cls.amax(-1).double().numpy(),
    )


def method_records(
    *,
    method: str,
    dataset: str,
    seed: int,
    members: int,
    params: int,
    train_seconds: float,
    target: float | None,
    test: Scores,
    val: Scores,
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
    from ..report.results import Record
    from ..selective import selective_report

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


def _load(dataset: str, data_root: Path | None, seed: int) -> Any:
    from ..data.images import load_cifar, load_digits

    if dataset == "digits":
        return load_digits(seed=seed)
    if dataset == "cifar100":
        if data_root is None:
            raise ValueError(
                "--dataset cifar100 is read from disk: pass --data-root DIR containing "
                "cifar-100-python/{train,test} or cifar-100-binary/{train.bin,test.bin}"
            )
        return load_cifar(data_root, num_classes=100, seed=seed)
    raise ValueError(f"--dataset must be 'digits' or 'cifar100', got {dataset!r}")


def _subsample(x: Tensor, y: Tensor, n: int | None, seed: int) -> tuple[Tensor, Tensor]:
    import torch

    if n is None or n >= len(y):
        return x, y
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx], y[idx]


def _check_floats(values: Sequence[float], *, name: str, low: float, high: float, low_open: bool) -> None:
    if not values:
        raise ValueError(f"{name} is empty")
    for v in values:
        ok = (v > low if low_open else v >= low) and v <= high and math.isfinite(v)
        if not ok:
            lo = "(" if low_open else "["
            raise ValueError(f"{name} must lie in {lo}{low:g}, {high:g}], got {v!r}")


def _parse_list(text: str, *, name: str, cast: Callable[[str], Any] = float) -> list[Any]:
    try:
        return [cast(t) for t in text.split(",") if t.strip()]
    except ValueError as err:
        raise ValueError(f"{name} must be a comma-separated list, got {text!r}") from err


# ------------------------------------------------------------------------------------------- driver


def run_selective(
    *,
    out: Path,
    seeds: Sequence[int] = (0, 1, 2),
    dataset: str = "digits",
    data_root: Path | None = None,
    model: str = "resnet_small",
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
    log: Callable[[str], None] = print,
) -> list[Any]:
    """Run the experiment (see the module docstring); write ``out/results.json`` after every model,
    ``out/results.md`` and ``out/risk_coverage.png`` at the end; return the records."""
    import numpy as np
    import torch

    from .. import metrics, sigma_ensemble
    from ..checkpoint import atomic_write_text
    from ..models import build_model
    from ..report.results import write_results
    from ..selective import DeepGamblersLoss, SelectiveNet, SelectiveNetLoss, SyncLoss
    from ..training import fit

    _check_floats(targets, name="targets", low=0.0, high=1.0, low_open=True)
    _check_floats(gammas, name="gammas", low=0.0, high=math.inf, low_open=True)
    if not seeds:
        raise ValueError("seeds is empty")
    out = Path(out)
    records: list[Any] = []
    curves: dict[tuple[str, Any, str], list[np.ndarray]] = {}
    hp = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "optimizer": "sgd", "schedule": "cosine"}

    def add(recs: list[Any], crv: dict[str, np.ndarray], method: str, target: float | None) -> None:
        records.extend(recs)
        for scoring, c in crv.items():
            curves.setdefault((method, target, scoring), []).append(c)
        write_results(out, records)
        r0 = recs[0].metrics
        log(
            f"  {method:<26} target={target!s:<4} acc={r0['accuracy']:.4f} "
            + "  ".join(f"{r.extra['scoring']}: AURC={r.metrics['aurc']:.4f}" for r in recs)
        )

    def one_seed(seed: int) -> None:
        splits = _load(dataset, data_root, seed)
        k = splits.num_classes
        _check_floats(rewards, name="rewards (Deep Gamblers o)", low=1.0, high=float(k), low_open=True)
        x_tr, y_tr = _subsample(splits.x_train, splits.y_train, max_train, seed)
        x_val, x_te = splits.x_val, splits.x_test
        y_te = splits.y_test.numpy()
        log(f"seed {seed}: {splits.describe()}, training on {len(y_tr)}")
        common = dict(epochs=epochs, lr=lr, batch_size=batch_size, seed=seed, progress=False)
        meta = {"dataset": splits.name, "seed": seed}

        def train(net: nn.Module, loss_fn: Any = None, **kw: Any) -> float:
            t0 = time.perf_counter()
            fit(net, (x_tr, y_tr), loss_fn=loss_fn, **common, **kw)
            return time.perf_counter() - t0

        def evaluate(net, kind, method, target, members_=1, secs=0.0, extra=None):
            recs, crv = method_records(
                method=method,
                members=members_,
                params=_params(net),
                train_seconds=secs,
                target=target,
                test=score_model(net, x_te, kind=kind),
                val=score_model(net, x_val, kind=kind),
                y_test=y_te,
                extra={"hparams": hp, **(extra or {})},
                **meta,
            )
            add(recs, crv, method, target)

        # Softmax response: a plain cross-entropy classifier.
        torch.manual_seed(seed)
        plain = build_model(
            model, in_channels=splits.in_channels, num_classes=k, image_size=splits.image_size
        )
        evaluate(plain, "plain", "SR", None, secs=train(plain))

        def selective_net(sigma: bool = False) -> SelectiveNet:
            torch.manual_seed(seed)
            feats, dim = _headless(model, splits)
            if sigma:
                feats = sigma_ensemble(feats, members=members, seed=seed)
            return SelectiveNet(feats, dim, k)

        for c in targets:
            net = selective_net()
            evaluate(net, "selective", "SelectiveNet", c, secs=train(net, SelectiveNetLoss(c)))
            for g in gammas:
                net = selective_net()
                loss = SyncLoss(c, mu=mu, score="smp", gamma=g)
                evaluate(net, "selective", f"SYNC-SMP(γ={g:g})", c, secs=train(net, loss), extra={"mu": mu})
            net = selective_net()
            loss = SyncLoss(c, mu=mu, score="entropy")
            evaluate(net, "selective", "SYNC-entropy", c, secs=train(net, loss), extra={"mu": mu})
            # SYNC on a σN ensemble: (B, M, D) features, sync target from the ensemble's p̄.
            net = selective_net(sigma=True)
            sync = SyncLoss(c, mu=mu, score="smp", gamma=sigma_gamma)

            def sigma_loss(output, labels, _sync=sync):
                return _sync(output, labels, prior=output.logits.softmax(-1).mean(1))

            evaluate(
                net,
                "selective",
                f"σN-SYNC-SMP(γ={sigma_gamma:g})",
                c,
                members_=members,
                secs=train(net, sigma_loss),
                extra={"mu": mu, "prior": "mean member probability p̄"},
            )

        # Deep Gamblers: reward o chosen on validation AURC of its own score.
        best = None
        val_err = splits.y_val.numpy()
        for o in rewards:
            torch.manual_seed(seed)
            net = build_model(
                model, in_channels=splits.in_channels, num_classes=k + 1, image_size=splits.image_size
            )
            loss = DeepGamblersLoss(o, warmup_epochs=epochs // 4, num_classes=k)
            secs = train(net, loss, callbacks=[lambda e, r, m, _l=loss: _l.set_epoch(e)])
            v = score_model(net, x_val, kind="gamblers")
            val_aurc = float(metrics.aurc(v.own, (v.pred != val_err).astype(np.float64)))
            log(f"  DeepGamblers o={o:g}: validation AURC {val_aurc:.4f}")
            if best is None or val_aurc < best[0]:
                best = (val_aurc, o, net, secs)
        val_aurc, o, net, secs = best
        evaluate(net, "gamblers", "DeepGamblers", None, secs=secs, extra={"reward": o, "val_aurc": val_aurc})

    for seed in seeds:
        one_seed(seed)

    write_results(out, records)
    md = format_markdown(records, seeds=seeds)
    atomic_write_text(out / "results.md", md)
    risk_coverage_figure(curves, out / "risk_coverage.png", targets=targets)
    log(md)
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
            cov = _ms([r["metrics"].get(f"thr_coverage@{t:g}", math.nan) for r in rows], 3)
            risk = _ms([r["metrics"].get(f"thr_risk@{t:g}", math.nan) for r in rows], 3)
            cells.append(f"{cov} / {risk}")
        lines.append(f"| {method} | {scoring} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def risk_coverage_figure(
    curves: dict[tuple[str, Any, str], list[np.ndarray]], path: Path, *, targets: Sequence[float]
) -> Path:
    """Mean (over seeds) test risk–coverage curves of every method: one row per scoring, one column
    per target coverage (methods without a target appear in every column)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..report.figures import save_figure

    scorings = ("w/o SR", "w/ SR")
    fig, axes = plt.subplots(
        len(scorings),
        len(targets),
        figsize=(4.2 * len(targets), 3.6 * len(scorings)),
        squeeze=False,
        sharey=True,
    )
    for i, scoring in enumerate(scorings):
        for j, t in enumerate(targets):
            ax = axes[i][j]
            for (method, target, sc), cs in curves.items():
                if target not in (t, None):
                    continue
                if sc != scoring and not (method == "SR" and sc == "w/ SR"):
                    continue
                ax.plot(
                    curve_grid(),
                    np.mean(cs, axis=0),
                    label=method,
                    lw=1.2,
                    ls="--" if method in ("SR", "DeepGamblers") else "-",
                )
            ax.set_title(f"target c = {t:g}, scoring {scoring}", fontsize=9)
            if i == len(scorings) - 1:
                ax.set_xlabel("coverage")
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("selective risk (test)")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, path)


# ------------------------------------------------------------------------------------------ command


def selective(
    out: Path = typer.Option(
        Path("runs/selective"), "--out", help="Run folder for results.json, results.md, figure."
    ),
    seed: int = typer.Option(0, "--seed", help="Single seed (ignored when --seeds is given)."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds; empty string: use --seed."),
    dataset: str = typer.Option(
        "digits", "--dataset", help="'digits' (embedded) or 'cifar100' (from --data-root)."
    ),
    data_root: Path = typer.Option(
        None, "--data-root", help="Folder holding the extracted CIFAR-100 archive."
    ),
    model: str = typer.Option(
        "resnet_small", "--model", help="Backbone (its .head is replaced by Identity)."
    ),
    epochs: int = typer.Option(DEFAULT_EPOCHS, "--epochs", min=1, help="Training epochs per model."),
    targets: str = typer.Option(
        "0.5,0.7,0.9", "--targets", help="Target coverages SelectiveNet/SYNC train for."
    ),
    gammas: str = typer.Option("1,2,4,8", "--gammas", help="SMP exponents γ for SYNC (γ=1 is SR)."),
    rewards: str = typer.Option(
        "2.2,3,5", "--rewards", help="Deep Gamblers rewards o in (1, K], chosen on val."
    ),
    mu: float = typer.Option(DEFAULT_MU, "--mu", min=0.0, help="SYNC weight μ (fixed default, not tuned)."),
    members: int = typer.Option(4, "--members", min=1, help="σN ensemble size for σN-SYNC."),
    max_train: int = typer.Option(None, "--max-train", min=2, help="Use at most this many training samples."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch intra-op threads."),
    quick: bool = typer.Option(False, "--quick", help="Smoke-test preset: 1 epoch, 256 training samples."),
) -> None:
    """SYNC vs SelectiveNet vs Deep Gamblers vs softmax response (risk–coverage, AURC, val thresholds)."""
    import torch

    seed_list = _parse_list(seeds, name="--seeds", cast=int) if seeds.strip() else [seed]
    if quick:
        epochs, max_train = 1, 256 if max_train is None else max_train
    torch.set_num_threads(threads)
    run_selective(
        out=out,
        seeds=seed_list,
        dataset=dataset,
        data_root=data_root,
        model=model,
        epochs=epochs,
        targets=_parse_list(targets, name="--targets"),
        gammas=_parse_list(gammas, name="--gammas"),
        rewards=_parse_list(rewards, name="--rewards"),
        mu=mu,
        members=members,
        max_train=max_train,
    )


COMMANDS = {"selective": selective}
