"""How-to: run an experiment's jobs (a τ sweep) on a Dask cluster.

Needs the optional extra: ``pip install 'ensemblize[dask]'`` (Dask ``distributed``).

An experiment is a list of independent jobs (method × setting × seed). ``--workers N`` runs them on
N local processes; ``--scheduler ADDRESS`` sends them to a Dask cluster. Records are sent back to
the process that started the experiment, which writes the run folder, so the workers need no shared
file system for results. Each job uses one torch thread. An interrupted sweep resumes with
``--resume`` (finished jobs are not run again).

On real machines::

    dask scheduler                                   # on the head node; prints tcp://HOST:8786
    dask worker tcp://HOST:8786 --nthreads 1 --nworkers 8     # on every worker machine
    ensemblize experiment tau-sweep --scheduler tcp://HOST:8786 --out runs/tau --seeds 0,1,2

Every worker needs the same ensemblize (and data, for CIFAR) installed. This script does the same
on a throw-away local cluster: it starts the cluster in Python and runs the command line against it

    python docs/howto/dask_sweep.py --small      (what the test suite runs)

When the sweep ends the run folder holds ``results.json``, the tables, the figures and
``report.html`` (open it in a browser), exactly as for a sweep run in one process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = ("distributed.LocalCluster", "ensemblize.cli.app")


def main(small: bool = False, out: str | None = None) -> list[dict]:
    from distributed import LocalCluster

    folder = Path(out or tempfile.mkdtemp(prefix="ensemblize-dask-")) / "tau-sweep"
    workers = 1 if small else 2  # each worker is a process that imports torch: keep the small run light
    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        print(f"Dask scheduler at {cluster.scheduler_address} with {workers} worker(s)")
        size = (
            ["--taus", "1,5", "--seeds", "0", "--epochs", "1", "--eval", "tiny"]
            if small
            else ["--taus", "0.5,1,2,5"]
        )
        command = ["ensemblize", "experiment", "tau-sweep", "--scheduler", cluster.scheduler_address,
                   "--out", str(folder), *size]  # fmt: skip
        print("$ " + " ".join(command))
        # `python -m ensemblize.cli` is the `ensemblize` command of this interpreter's environment
        subprocess.run([sys.executable, "-m", "ensemblize.cli", *command[1:]], check=True)
    records = json.loads((folder / "results.json").read_text())
    print(f"{len(records)} records from the cluster; run folder {folder} (report.html inside)")
    for r in records:
        print(f"  {r['method']}: accuracy {r['metrics']['accuracy']:.3f}, ECE {r['metrics']['ece']:.3f}")
    return records


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of minutes")
    parser.add_argument("--out", default=None, help="parent folder of the run folder (default: a temp dir)")
    args = parser.parse_args()
    main(args.small, args.out)
