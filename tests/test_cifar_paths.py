"""The image commands run unchanged on CIFAR from disk (tiny files written in the official binary format)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner


def _write_cifar_bin(root, *, num_classes, n_train_files, rows_per_file, n_test):
    rng = np.random.default_rng(0)
    folder = root / ("cifar-10-batches-bin" if num_classes == 10 else "cifar-100-binary")
    folder.mkdir()
    label_bytes = 1 if num_classes == 10 else 2
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if num_classes == 10 else ["train.bin"]
    for name, n in [
        *((nm, rows_per_file) for nm in names[:n_train_files]),
        ("test_batch.bin" if num_classes == 10 else "test.bin", n_test),
    ]:
        rows = rng.integers(0, 256, size=(n, label_bytes + 3072), dtype=np.uint8)
        rows[:, label_bytes - 1] = np.arange(n) % num_classes
        rows.tofile(folder / name)


@pytest.mark.slow
def test_compare_runs_on_cifar10_from_disk(tmp_path, monkeypatch):
    from ensemblize.cli import app

    monkeypatch.chdir(tmp_path.parent)  # --data-root given relative to the working directory
    _write_cifar_bin(tmp_path, num_classes=10, n_train_files=5, rows_per_file=40, n_test=40)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "experiment",
            "compare",
            "--dataset",
            "cifar10",
            "--data-root",
            tmp_path.name,
            "--width",
            "4",
            "--epochs",
            "1",
            "--seeds",
            "0",
            "--methods",
            "single,sigma",
            "--eval",
            "tiny",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "results.json").read_text())
    assert {r["dataset"] for r in rows} == {"cifar10"} and {r["method"] for r in rows} >= {"single"}
    assert all(0 <= r["metrics"]["accuracy"] <= 1 for r in rows)
    # the jobs read the data from an absolute path (a resumed run or a Dask worker has another cwd)
    stored = json.loads(next((out / "jobs").glob("*.json")).read_text())["job"]["params"]
    assert stored["data"]["data_root"] == str(tmp_path.resolve())


def test_missing_cifar_names_the_expected_files(tmp_path):
    from ensemblize.cli import app

    res = CliRunner().invoke(
        app,
        [
            "experiment",
            "compare",
            "--dataset",
            "cifar100",
            "--data-root",
            str(tmp_path),
            "--epochs",
            "1",
            "--seeds",
            "0",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code != 0
    assert "cifar-100" in (str(res.exception) + res.output)


@pytest.mark.slow
def test_selective_runs_on_cifar100_from_disk(tmp_path):
    from ensemblize.cli import app

    _write_cifar_bin(tmp_path, num_classes=100, n_train_files=1, rows_per_file=1000, n_test=200)
    out = tmp_path / "sel"
    res = CliRunner().invoke(
        app,
        [
            "experiment",
            "selective",
            "--dataset",
            "cifar100",
            "--data-root",
            str(tmp_path),
            "--quick",
            "--seeds",
            "0",
            "--targets",
            "0.7",
            "--gammas",
            "2",
            "--rewards",
            "5",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "results.json").read_text())
    assert {r["dataset"] for r in rows} == {"cifar100"}
