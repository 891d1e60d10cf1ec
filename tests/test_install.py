"""The built wheel installs into a fresh virtual environment beside an already-installed torch,
without touching that torch.

The fresh venv sees an existing stack — this interpreter's torch (and, by default, the rest of its
site-packages) — through a ``.pth`` file pointing at a folder of symlinks. That folder lies outside
the venv, so pip could never uninstall or overwrite it (pip refuses to uninstall outside its
environment); any attempt to change torch would show up as a torch install in pip's report or as a
different ``torch.__file__``/version. With ``ENSEMBLIZE_INSTALL_TEST_FULL=1`` only torch and its own
dependencies are shared and every other dependency is installed into the venv from the index
(minutes instead of seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

#: torch's own runtime dependencies (shared with torch in the FULL variant).
TORCH_STACK = ("torch", "torchgen", "functorch", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
               "filelock", "fsspec", "typing_extensions", "setuptools", "pkg_resources", "_distutils_hack")  # fmt: skip


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, **kw)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _shared_entries(site: Path, *, full: bool) -> list[Path]:
    entries = []
    for p in sorted(site.iterdir()):
        low = p.name.lower()
        if (
            "ensemblize" in low
            or p.suffix == ".pth"
            or low.startswith(("__editable__", "pip", "__pycache__"))
        ):
            continue
        stem = low.removesuffix(".py")
        if full and not any(
            stem == n or low.startswith((n + "-", n.replace("_", "-") + "-")) for n in TORCH_STACK
        ):
            continue
        entries.append(p)
    return entries


def _torch_identity(python: Path) -> dict:
    code = (
        "import json, importlib.metadata as m, torch; d = m.distribution('torch'); "
        "print(json.dumps({'version': torch.__version__, 'file': torch.__file__, "
        "'record': str(d.locate_file(d._path.name + '/RECORD'))}))"
    )
    return json.loads(_run([str(python), "-c", code]).stdout)


def test_wheel_installs_beside_existing_torch(tmp_path):
    full = os.environ.get("ENSEMBLIZE_INSTALL_TEST_FULL") == "1"
    import torch

    # 1. build the wheel from the source tree
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ]
    )
    (wheel,) = (tmp_path / "dist").glob("ensemblize-*.whl")

    # 2. a fresh venv that already "has" torch: a .pth to a folder of symlinks outside the venv
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    shared = tmp_path / "existing-site-packages"
    shared.mkdir()
    for entry in _shared_entries(Path(sysconfig.get_paths()["purelib"]), full=full):
        (shared / entry.name).symlink_to(entry)
    venv_site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (venv_site / "existing_stack.pth").write_text(str(shared) + "\n")
    before = _torch_identity(python)
    assert before["version"] == torch.__version__
    assert Path(before["file"]).parent.parent == shared

    # 3. what pip would do: install ensemblize (and, FULL, the non-torch dependencies) — never torch
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    report = tmp_path / "report.json"
    _run([*pip, "install", "--dry-run", "--quiet", "--report", str(report), str(wheel)])
    planned = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "ensemblize" in planned
    assert not {n for n in planned if n == "torch" or n.startswith(("nvidia-", "triton"))}, planned
    if not full:
        assert planned == {"ensemblize"}, planned

    # 4. install for real; torch is the same distribution at the same place, untouched
    proc = _run([*pip, "install", str(wheel)])
    assert (
        "Uninstalling torch" not in proc.stdout and "Installing collected packages: torch" not in proc.stdout
    )
    after = _torch_identity(python)
    assert after == before
    assert Path(after["file"]).resolve() == Path(torch.__file__).resolve()

    # 5. the installed package works in that environment, from the venv (not from the source tree)
    code = (
        "import torch, ensemblize as ez; from torch import nn; "
        f"assert ez.__file__.startswith({str(venv)!r}), ez.__file__; "
        "m = ez.sigma_ensemble(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)), members=2); "
        "print(tuple(m(torch.randn(5, 3)).shape))"
    )
    assert _run([str(python), "-c", code], cwd=tmp_path).stdout.strip() == "(5, 2, 2)"
    assert "Usage" in _run([str(venv / "bin" / "ensemblize"), "--help"], cwd=tmp_path).stdout
