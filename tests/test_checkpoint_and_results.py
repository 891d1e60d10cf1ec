"""Atomic safetensors+JSON persistence and the results.json contract."""

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

from ensemblize.checkpoint import (
    atomic_write_json,
    load_checkpoint,
    load_state_strict,
    save_checkpoint,
    state_fingerprint,
)
from ensemblize.report.results import Record, format_table, load_results, summarize, write_results


def test_round_trip_and_metadata(tmp_path):
    tensors = {"a": torch.arange(6.0).view(2, 3), "b": torch.tensor([1, 2], dtype=torch.int64)}
    save_checkpoint(tmp_path / "ck", tensors, {"epoch": 3})
    got, meta = load_checkpoint(tmp_path / "ck")
    assert meta["epoch"] == 3 and meta["fingerprint"] == state_fingerprint(tensors)
    for k, v in tensors.items():
        assert torch.equal(got[k], v) and got[k].dtype == v.dtype


def test_mismatched_pair_is_detected(tmp_path):
    save_checkpoint(tmp_path / "a", {"w": torch.ones(3)}, {})
    save_checkpoint(
        tmp_path / "b", {"w": torch.zeros(3)}, {}
    )  # same names and shapes: fingerprint cannot tell
    os.replace(tmp_path / "b.safetensors", tmp_path / "a.safetensors")
    with pytest.raises(ValueError, match="content hash"):
        load_checkpoint(tmp_path / "a")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing")


def test_failed_write_leaves_the_old_file_and_no_temporaries(tmp_path, monkeypatch):
    atomic_write_json(tmp_path / "r.json", {"v": 1})

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_json(tmp_path / "r.json", {"v": 2})
    monkeypatch.undo()
    assert json.loads((tmp_path / "r.json").read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_load_state_strict_names_what_differs():
    a = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    b = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2), nn.ReLU())
    with pytest.raises(ValueError, match=r"shape mismatch.*0\.weight"):
        load_state_strict(b, a.state_dict())
    state = dict(a.state_dict())
    state["extra"] = torch.zeros(1)
    del state["1.bias"]
    with pytest.raises(ValueError, match=r"missing \['1.bias'\].*unexpected \['extra'\]"):
        load_state_strict(a, state)
    c = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    load_state_strict(c, a.state_dict())
    assert torch.equal(c[0].weight, a[0].weight)


def test_results_contract_and_mean_std_table(tmp_path):
    recs = [
        Record("sigma", "digits", s, 4, 100, 1.0 + s, {"accuracy": acc, "nll": nll})
        for s, (acc, nll) in enumerate([(0.9, 0.3), (0.8, 0.5), (1.0, 0.1)])
    ]
    path = write_results(tmp_path, recs)
    rows = load_results(tmp_path)
    assert path.name == "results.json" and len(rows) == 3 and rows[0]["metrics"]["accuracy"] == 0.9
    (summary,) = summarize(rows)
    mean, std, n = summary["stats"]["accuracy"]
    assert (mean, n) == (pytest.approx(0.9), 3) and std == pytest.approx(np.std([0.9, 0.8, 1.0], ddof=1))
    table = format_table(rows, metrics=["accuracy"])
    assert "0.9000 ± 0.1000" in table and "sigma" in table
    with pytest.raises(ValueError, match="missing"):
        write_results(tmp_path, [{"method": "x"}])


def test_dots_in_checkpoint_names_are_kept(tmp_path):
    save_checkpoint(tmp_path / "sigma_tau=0.05_seed0", {"w": torch.ones(1)}, {"tau": 0.05})
    save_checkpoint(tmp_path / "sigma_tau=0.1_seed0", {"w": torch.zeros(1)}, {"tau": 0.1})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sigma_tau=0.05_seed0.json",
        "sigma_tau=0.05_seed0.safetensors",
        "sigma_tau=0.1_seed0.json",
        "sigma_tau=0.1_seed0.safetensors",
    ]
    assert load_checkpoint(tmp_path / "sigma_tau=0.05_seed0")[1]["tau"] == 0.05
    # a path naming either file of the pair loads the pair
    assert load_checkpoint(tmp_path / "sigma_tau=0.1_seed0.json")[1]["tau"] == 0.1


def _records(methods=("single", "deep_ensemble", "sigma_ens"), seeds=(0, 1, 2)):
    from ensemblize.evaluation.names import HEADLINE_METRICS

    rng = np.random.default_rng(0)
    return [
        {
            "method": m,
            "dataset": "digits",
            "seed": s,
            "members": 4,
            "params": 4612 + 1000 * i,
            "train_seconds": 1.25 + s,
            "metrics": {k: float(rng.random()) for k in HEADLINE_METRICS},
        }
        for i, m in enumerate(methods)
        for s in seeds
    ]


def test_console_tables_fit_100_columns_and_keep_every_metric():
    from ensemblize.evaluation.names import HEADLINE_METRICS
    from ensemblize.report.results import console_tables

    recs = _records()
    text = console_tables(recs, metrics=list(HEADLINE_METRICS), by=("dataset", "method"))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    headers = [lines[0]] + [lines[i + 1] for i, line in enumerate(lines) if line == ""]
    shown = [c for h in headers for c in h.split()]
    assert all(m in shown for m in HEADLINE_METRICS)
    assert headers[0].split() == ["dataset", "method", "n", "accuracy", "nll", "ece", "params", "train_s"]
    # params are integers (no decimals), the same in every seed: no ± part
    assert "4,612 " in text and "4612.0" not in text and "4,612 ±" not in text
    wide = console_tables(recs, metrics=list(HEADLINE_METRICS), wide=True)
    assert len(wide.splitlines()) == 2 + 3 and max(len(line) for line in wide.splitlines()) > 100
    assert wide == format_table(recs, metrics=list(HEADLINE_METRICS))


def test_progress_line_and_table_show_the_same_train_time(capsys):
    from ensemblize.experiments.jobs import Job, run_jobs
    from ensemblize.report.results import console_tables

    recs = _records(methods=("single",), seeds=(0,))
    run_jobs([Job.make("t", "json:loads", "single", s=json.dumps(recs))], quiet=False)
    line = capsys.readouterr().err
    table = console_tables(recs, metrics=["accuracy"], by=("method",))
    assert "train 1.2 s" in line and table.splitlines()[-1].split()[-1] == "1.2"


def test_summarize_groups_by_unhashable_settings():
    recs = [
        Record("m", "d", s, 1, 10, 1.0, {"rmse": v}, extra={"setting": {"rank": r}})
        for s, (v, r) in enumerate([(1.0, 2), (3.0, 2), (5.0, 4)])
    ]
    out = summarize(recs, by=("method", "setting"))
    assert [o["setting"] for o in out] == [{"rank": 2}, {"rank": 4}]
    assert out[0]["stats"]["rmse"][:2] == (2.0, pytest.approx(np.std([1.0, 3.0], ddof=1)))
