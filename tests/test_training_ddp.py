"""fit runs unchanged under torchrun (2 processes, gloo on CPU)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

SCRIPT = Path(__file__).parent / "training_scripts" / "ddp_fit.py"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_torchrun_two_processes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(SCRIPT),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["world_size"] == 2

    losses = [h["train_loss"] for h in result["history"]]
    assert losses[-1] < 0.8 * losses[0], losses
    # every validation sample evaluated exactly once, in fit and in predict
    assert all(h["val_count"] == 101 for h in result["history"])
    assert sorted(result["indices"]) == list(range(101))
    assert result["indices"][:3] == [0, 2, 4]  # gathered rank by rank: the shards really were split
    assert result["predict_max_abs_diff"] < 1e-6
    # DDP kept the replicas identical
    assert result["checksums"][0] == result["checksums"][1]
    # ... also with weight averaging, running statistics included
    assert result["ema_checksums"][0] == result["ema_checksums"][1]

    # only rank 0 wrote checkpoints and progress
    assert sorted(p.name for p in (tmp_path / "rank0" / "ckpt").iterdir()) == [
        "epoch_0006.json",
        "epoch_0006.safetensors",
    ]
    assert not (tmp_path / "rank1").exists()
    assert "fit" in (tmp_path / "rank0.stderr").read_text()
    assert (tmp_path / "rank1.stderr").read_text() == ""
