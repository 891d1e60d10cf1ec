"""A training run killed with SIGKILL and resumed ends with bitwise the same weights as an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ensemblize.checkpoint import load_tensors

SCRIPT = Path(__file__).parent / "training_scripts" / "resume_fit.py"
EPOCHS = 6


def _launch(ckpt: Path, out: Path, sleep: float) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), str(ckpt), str(out), str(EPOCHS), str(sleep)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"training script failed:\n{out}\n{err}"


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_identical(tmp_path: Path) -> None:
    reference = _launch(tmp_path / "ref_ckpt", tmp_path / "ref", sleep=0.0)
    victim = _launch(tmp_path / "ckpt", tmp_path / "killed", sleep=0.4)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ckpt" / "epoch_0002.json").exists():
        assert victim.poll() is None, "the run ended before its epoch-2 checkpoint appeared"
        assert time.monotonic() < deadline, "no epoch-2 checkpoint within 60 s"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed.safetensors").exists()
    done = sorted(int(p.stem.split("_")[1]) for p in (tmp_path / "ckpt").glob("epoch_*.json"))
    assert done and 2 <= done[-1] < EPOCHS, f"kill did not interrupt training mid-way: {done}"

    resumed = _launch(tmp_path / "ckpt", tmp_path / "resumed", sleep=0.0)
    _finish(resumed)
    _finish(reference)

    meta = json.loads((tmp_path / "resumed.json").read_text())
    assert meta["resumed_from"] == done[-1]
    ref_meta = json.loads((tmp_path / "ref.json").read_text())
    assert ref_meta["resumed_from"] is None
    strip = ("seconds",)
    assert [{k: v for k, v in h.items() if k not in strip} for h in meta["history"]] == [
        {k: v for k, v in h.items() if k not in strip} for h in ref_meta["history"]
    ]
    a, b = load_tensors(tmp_path / "resumed.safetensors"), load_tensors(tmp_path / "ref.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after resume"
