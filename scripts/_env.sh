# Sourced by the scripts: create or reuse .venv and install ensemblize with what the command needs.
# torch is installed first and pinned (2.13.0, the CPU wheel on this machine's disk) so that no
# dependency can pull a multi-GB CUDA build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
extras="${1:-}"
stamp="$venv/.ensemblize-installed${extras:+-$extras}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip_install() {
  # this machine's pip config names local package folders that may be absent: drop those warnings only
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "setting up $venv (first run only) ..." >&2
  pip_install "torch==2.13.0"
  pip_install -e "$root${extras:+[$extras]}"
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
