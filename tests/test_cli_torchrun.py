"""`python -m ensemblize` and `torchrun -m ensemblize run`: DDP training, rank 0 alone prints and writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_python_m_ensemblize_rejects_a_bad_option_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "never"
    proc = subprocess.run(
        [sys.executable, "-m", "ensemblize", "run", "--tau", "0", "--out", str(out)],
        env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Invalid value for '--tau': must be a finite number > 0, got 0.0" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_torchrun_run_trains_with_ddp_and_only_rank0_prints_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}", "-m", "ensemblize", "run", "--epochs", "1", "--members", "2",
        "--no-evaluate", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout}\n{proc.stderr}"
    rows = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in rows] == ["single", "deep_ensemble", "sigma_ens"]
    assert all(r["world_size"] == 2 for r in rows)  # trained across the two processes
    # one header, one table, one progress line per job: rank 1 printed nothing
    assert proc.stdout.count("ensemblize run:") == 1 and proc.stdout.count("sigma_ens") == 2
    assert proc.stderr.count("run [3/3 jobs] sigma_ens") == 1
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(
        f"{m}_seed0.{ext}"
        for m in ("single", "deep_ensemble", "sigma_ens")
        for ext in ("json", "safetensors")
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is True and "results.json" in manifest["files"]
