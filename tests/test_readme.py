"""The README's Python example runs as written (with one epoch), and its set-up commands exist."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_readme_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len([line for line in code.strip().splitlines() if line.strip()]) <= 12
    exec(compile(code.replace("epochs=15", "epochs=1"), "README", "exec"), {})
    acc, ece = map(float, capsys.readouterr().out.split())
    assert 0 <= acc <= 1 and 0 <= ece <= 1


def test_setup_commands_match_ci():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/run" in readme and "scripts/test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test" in ci
    for script in ("scripts/run", "scripts/test", ".ci/run"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} must be executable"
    # the scripts install the CPU wheel first; the package declares a tested range that admits it
    assert 'pip_install "torch==2.13.0"' in (ROOT / "scripts" / "_env.sh").read_text()
    from packaging.specifiers import SpecifierSet

    (spec,) = re.findall(r'"torch([<>=!~][^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert "2.13.0" in SpecifierSet(spec)
