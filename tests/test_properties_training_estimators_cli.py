"""Adversarial property suite, part 2 (issue 12): training, estimators and the CLI.

Same classification as :mod:`tests.test_properties_public_api`: every call ends in a **clean error**
(a ``ValueError``/``TypeError`` raised by a ``raise`` inside ``ensemblize``), a **correct result**
(finite), or is **unhelpful** (any other exception, or a NaN result) and fails the test.
Unhelpful outcomes are counted and listed (``FINDINGS``, printed when the module's tests end) and fail the suite
(all five found when it was written are fixed); ``ENSEMBLIZE_PROPERTY_STRICT=0`` only counts them. Set ``ENSEMBLIZE_PROPERTY_REPORT=path.json`` to write the per-area counts and findings
(one file per module and xdist worker: :func:`property_outcomes.write_report`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from typer.testing import CliRunner

from ensemblize.cli import app
from ensemblize.training import fit, predict
from property_outcomes import all_finite, call_outcome, write_report

COUNTS: dict[str, Counter] = defaultdict(Counter)
FINDINGS: set[str] = set()
STRICT = (
    os.environ.get("ENSEMBLIZE_PROPERTY_STRICT", "1") == "1"
)  # every finding is fixed: fail on any new one
FEW = settings(
    max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
MANY = settings(
    max_examples=80, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


def _unhelpful(area: str, what: str, case: str) -> None:
    COUNTS[area]["unhelpful"] += 1
    FINDINGS.add(f"[{area}] {case}: {what}")
    if STRICT:
        raise AssertionError(f"{case}: {what}")


def attempt(area: str, call, case: str = ""):
    """Run ``call()``; classify and count the outcome (see module docstring)."""
    kind, out = call_outcome(call, COUNTS[area])
    if kind == "finding":
        _unhelpful(area, out, case)
    if kind != "result":
        return None
    if not all_finite(out):
        _unhelpful(area, "non-finite result", case)
        return None
    COUNTS[area]["correct result"] += 1
    return out


BAD = st.sampled_from(
    [0, -1, 1, 2, 0.5, -0.5, math.nan, math.inf, -math.inf, "x", "", True, False, None, np.int64(2), 1e30]
)
KNOBS = [
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "optimizer",
    "schedule",
    "grad_clip",
    "seed",
    "monitor",
    "task",
]


def _data(n=8, d=3, c=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, c, (n,), generator=g)


def _fit(model, train, **kw):
    kw.setdefault("epochs", 1)
    kw.setdefault("batch_size", 4)
    res = fit(model, train, progress=False, **kw)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), res


@MANY
@given(knob=st.sampled_from(KNOBS), value=BAD)
def test_fit_knobs(knob, value):
    torch.manual_seed(0)
    attempt("training", lambda: _fit(nn.Linear(3, 2), _data(), **{knob: value})[0], f"fit({knob}={value!r})")


BAD_DATA = [
    "nan_x",
    "inf_x",
    "float_y",
    "y_out_of_range",
    "negative_y",
    "len_mismatch",
    "empty",
    "dict_without_labels",
    "output_without_logits",
    "y_2d",
    "string_x",
]


class _NoLogits(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return {"features": self.lin(x)}


def _bad_data(kind: str):
    x, y = _data()
    model = nn.Linear(3, 2)
    train = {
        "nan_x": lambda: (x.masked_fill(x > 1, math.nan), y),
        "inf_x": lambda: (x.masked_fill(x > 1, math.inf), y),
        "float_y": lambda: (x, y.float() + 0.5),
        "y_out_of_range": lambda: (x, y + 5),
        "negative_y": lambda: (x, y - 3),
        "len_mismatch": lambda: (x, y[:-3]),
        "empty": lambda: (x[:0], y[:0]),
        "dict_without_labels": lambda: {"input": x},
        "output_without_logits": lambda: (x, y),
        "y_2d": lambda: (x, y[:, None].repeat(1, 3)),
        "string_x": lambda: (["a"] * 8, y),
    }[kind]()
    if kind == "output_without_logits":
        model = _NoLogits()
    return model, train


@FEW
@given(kind=st.sampled_from(BAD_DATA), seed=st.integers(0, 3))
def test_fit_and_predict_on_bad_data(kind, seed):
    torch.manual_seed(seed)
    model, train = _bad_data(kind)
    attempt("training", lambda: _fit(model, train)[0], f"fit on {kind}")
    model, train = _bad_data(kind)
    data = train[0] if isinstance(train, tuple) else train
    attempt("training", lambda: predict(model, data, batch_size=4), f"predict on {kind}")


@FEW
@given(knob=st.sampled_from(["batch_size", "task"]), value=BAD)
def test_predict_knobs(knob, value):
    x, _ = _data()
    attempt("training", lambda: predict(nn.Linear(3, 2), x, **{knob: value}), f"predict({knob}={value!r})")


# --- estimators --------------------------------------------------------------------------------


def _estimator(name: str, **kw):
    from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor, TabMClassifier

    cls = {"lome_c": LoMETabClassifier, "lome_r": LoMETabRegressor, "tabm_c": TabMClassifier}[name]
    base = dict(members=2, d_block=8, n_blocks=1, max_epochs=1)
    base.update(kw)
    return cls(**base)


def _tab_xy(name, bad: str, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(24, 3))
    y = rng.normal(size=24) if name == "lome_r" else rng.integers(0, 2, size=24)
    if bad == "nan_y":
        y = y.astype(float)
        y[3] = np.nan
    elif bad == "inf_x":
        X[2, 1] = np.inf
    elif bad == "nan_x_col":
        X[:, 0] = np.nan
    elif bad == "x_3d":
        X = X[:, :, None]
    elif bad == "y_2d":
        y = np.stack([y, y], 1)
    elif bad == "zero_rows":
        X, y = X[:0], y[:0]
    elif bad == "len_mismatch":
        y = y[:-2]
    elif bad == "object_junk":
        X = X.astype(object)
        X[0, 0] = {"a": 1}
    elif bad == "inf_y":
        y = y.astype(float)
        y[0] = np.inf
    return X, y


ESTIMATORS = st.sampled_from(["lome_c", "lome_r", "tabm_c"])
HP = ["members", "d_block", "n_blocks", "max_epochs", "lr", "weight_decay", "batch_size", "dropout"]


@FEW
@given(name=ESTIMATORS, knob=st.sampled_from(HP), value=BAD)
def test_estimator_hyper_parameters(name, knob, value):
    torch.set_num_threads(1)
    X, y = _tab_xy(name, "", 0)

    def call():
        est = _estimator(name, **{knob: value}).fit(X, y)
        return est.predict(X).astype(float)

    attempt("estimators", call, f"{name}({knob}={value!r}).fit")


@FEW
@given(
    name=ESTIMATORS,
    bad=st.sampled_from(
        ["nan_y", "inf_x", "nan_x_col", "x_3d", "y_2d", "zero_rows", "len_mismatch", "object_junk", "inf_y"]
    ),
    seed=st.integers(0, 3),
)
def test_estimator_bad_data(name, bad, seed):
    torch.set_num_threads(1)
    X, y = _tab_xy(name, bad, seed)
    attempt(
        "estimators", lambda: _estimator(name).fit(X, y).predict(X[:4]).astype(float), f"{name}.fit on {bad}"
    )


# --- CLI ----------------------------------------------------------------------------------------

CLI_BAD = {
    "--tau": ["0", "-1", "nan", "inf", "x"],
    "--lam": ["-1", "nan", "inf", "x"],
    "--seed": ["-1", "x", "1.5"],
    "--epochs": ["0", "-3", "x", "nan"],
    "--members": ["0", "-2", "x"],
    "--model": ["resnet50", "", "X"],
}


@MANY
@given(data=st.data())
def test_cli_run_rejects_bad_options_before_work(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("cli")
    kind = data.draw(st.sampled_from([*CLI_BAD, "--out"]))
    out = tmp / "run"
    if kind == "--out":
        out.write_text("a file")
        args = ["--out", str(out)]
    else:
        value = data.draw(st.sampled_from(CLI_BAD[kind]))
        args = ["--out", str(out), f"{kind}={value}"]
    start = time.perf_counter()
    res = CliRunner().invoke(app, ["run", *args])
    took = time.perf_counter() - start
    ok = (
        res.exit_code == 2
        and isinstance(res.exception, SystemExit)
        and "Traceback" not in res.output
        and kind in res.output
        and took < 1.5
        and (kind == "--out" or not out.exists())
    )
    COUNTS["CLI"]["clean error" if ok else "unhelpful"] += 1
    assert ok, (args, res.exit_code, took, res.output[-800:], repr(res.exception))


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    """After this worker's share of the module: print, and optionally write, its counts and findings.

    A module-scoped fixture rather than a last test: under pytest-xdist the module's tests are spread
    over worker processes, each with its own counts, and a last test can land in a worker that ran
    none of them.
    """
    yield
    total = {area: dict(c) for area, c in sorted(COUNTS.items())}
    print("adversarial cases per area:", json.dumps(total, indent=1))
    print("unhelpful findings:\n" + "\n".join(sorted(FINDINGS)))
    write_report("training_estimators_cli", {"counts": total, "findings": sorted(FINDINGS)})
