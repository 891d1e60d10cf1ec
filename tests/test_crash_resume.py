"""Issue 12 crash test: ``ensemblize run`` killed with SIGKILL at 10 seeded points, rerun with ``--resume``
each time, ends with the records of an uninterrupted run and a clean, complete run folder.

Kill points. There is no crash hook in the library, so the points are events of the run itself: each
attempt is killed a seeded random number (0–4) of *fresh* output lines after the run's header (lines
about work this attempt did itself, not the ``(resumed)`` lines of jobs already done), plus a seeded
random delay of 0–0.6 s. That spreads the kills over the whole run: data loading and ``run.json``,
each training epoch, the model checkpoint write and evaluation, the job file write, and the final
``results.json`` / figures / manifest phase. An attempt that finishes before its kill point counts as
no kill; the loop then keeps killing ``--resume`` reruns of the finished folder (which rewrite
``results.json``, the figures and the manifest) until 10 kills happened, and a last ``--resume`` runs
to completion.

The uninterrupted reference and the kill loop use the same tiny settings (2 epochs, M=2, no shift/OOD
evaluation, one thread each, so the reference runs beside the kill loop); the kill loop reuses one
``--out`` folder. Compared: the records apart from timing fields, the trained models' tensor files
(bitwise), the list of files, and the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ensemblize.run_folder import read_manifest

pytestmark = pytest.mark.slow

SETTINGS = ["--epochs", "2", "--members", "2", "--no-evaluate", "--threads", "1"]
TIMING = {"train_seconds", "eval_seconds", "seconds", "wall_seconds"}
KILLS = 10
SEED = 12


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _command(out: Path, *, resume: bool) -> list[str]:
    return [sys.executable, "-m", "ensemblize", "run", *SETTINGS, "--out", str(out)] + (
        ["--resume"] if resume else []
    )


def _fresh(line: str) -> bool:
    """A line about work this attempt did: not the header, not a job skipped as already done."""
    return bool(line.strip()) and not line.startswith("ensemblize run:") and "(resumed)" not in line


def _attempt(out: Path, *, resume: bool, lines: int | None, delay: float) -> tuple[bool, str]:
    """Run once; kill it ``delay`` s after its ``lines``-th fresh output line following the header
    (``lines=None``: never). Returns ``(killed, output)``."""
    proc = subprocess.Popen(
        _command(out, resume=resume), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: list[str] = []
    trigger = threading.Event()

    def read() -> None:
        header, fresh = False, 0
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            header = header or line.startswith("ensemblize run:")
            fresh += header and _fresh(line)
            if lines is not None and header and fresh >= lines:
                trigger.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    killed = False
    while proc.poll() is None:
        if trigger.wait(0.05):
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed = True
            break
    proc.wait(timeout=300)
    reader.join(timeout=10)
    output = "".join(seen)
    if not killed:
        assert proc.returncode == 0, f"attempt failed (rc {proc.returncode}):\n{output}"
    return killed, output


def _strip_timing(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(root: Path) -> list[str]:
    """Every file below ``root``; a job file's key hash (it covers ``--out``) replaced by ``*``."""
    files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(re.sub(r"^(jobs/.+)-[0-9a-f]{12}\.json$", r"\1-*.json", f) for f in files)


def test_kill_9_at_ten_points_then_resume_gives_the_uninterrupted_records(tmp_path: Path) -> None:
    start = time.perf_counter()
    ref = tmp_path / "reference"  # runs beside the kill loop (one thread each)
    reference = subprocess.Popen(
        _command(ref, resume=False), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    out = tmp_path / "crashed"
    rng = random.Random(SEED)
    kills: list[tuple[int, float]] = []
    attempts = 0
    while len(kills) < KILLS:
        lines, delay = rng.randint(0, 4), round(rng.uniform(0.0, 0.6), 3)
        killed, _ = _attempt(out, resume=attempts > 0, lines=lines, delay=delay)
        attempts += 1
        if killed:
            kills.append((lines, delay))
        assert attempts <= 3 * KILLS, f"only {len(kills)} kills in {attempts} attempts"
    killed, log = _attempt(out, resume=True, lines=None, delay=0.0)
    assert not killed and "wrote" in log
    ref_log, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, ref_log

    # the same records as the uninterrupted run, timing fields aside
    got = json.loads((out / "results.json").read_text())
    want = json.loads((ref / "results.json").read_text())
    assert [r["method"] for r in got] == ["single", "deep_ensemble", "sigma_ens"]
    assert _strip_timing(got) == _strip_timing(want)
    # bitwise the same trained models
    for path in sorted((ref / "models").glob("*.safetensors")):
        assert _sha(out / "models" / path.name) == _sha(path), path.name

    # no stray files: no temporaries, no orphan checkpoint halves, the same files as the uninterrupted
    # run, and a complete manifest that lists exactly what is there with matching hashes
    files = _listing(out)
    assert not [f for f in files if re.search(r"(^|/)\..+\.tmp$", f)], files
    halves = {f.rsplit(".", 1)[0] for f in files if f.endswith((".safetensors", ".json"))}
    models = {h for h in halves if h.startswith("models/")}
    assert all(f"{h}.json" in files and f"{h}.safetensors" in files for h in models), files
    assert files == _listing(ref)
    manifest = read_manifest(out)  # refuses an incomplete manifest or a file that does not match it
    assert manifest["complete"] is True
    assert len(manifest["files"]) == len(files) - 2  # everything but .lock and manifest.json
    assert manifest["config"] == read_manifest(ref)["config"]
    print(
        f"\n{time.perf_counter() - start:.1f} s; {attempts + 1} attempts in the kill loop; "
        f"kills (fresh lines, delay s): {kills}"
    )
