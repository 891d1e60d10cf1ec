"""The convert-and-fine-tune half of ``ensemblize experiment finetune``, without retraining its other rows.

``experiment finetune`` runs, per seed, :func:`ensemblize.experiments.image.finetune_job` (train the
single model, convert it with ``ez.sigma_ensemble`` and fine-tune it with the regulariser) plus σN-Ens
from scratch and the deep ensemble. The last two are the same jobs, with the same seeds and
configuration, as ``sigma_ens`` and ``deep_ensemble`` of ``experiment compare``, so on a loaded CPU
this script runs only ``finetune_job`` — the library function itself, with the arguments the
command passes — and the report takes σN-Ens-from-scratch and the deep ensemble from ``compare``.
The single model it trains is also ``compare``'s ``single`` job: its metrics double as a
reproducibility check.

Usage::

    .venv/bin/python docs/results/image/finetune_lite.py --dataset digits --epochs 15 \
        --out runs/image-regen/digits/finetune-lite
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ensemblize.data.datasets import DEFAULT_MODEL, MODALITY
from ensemblize.default_job import DEFAULT_LAM, DEFAULT_TAU
from ensemblize.experiments.image import finetune_job
from ensemblize.report.results import write_results
from ensemblize.runner import MethodSpec, TrainConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--train-size", type=int, default=None)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--tau", type=float, default=DEFAULT_TAU)
    p.add_argument("--lam", type=float, default=DEFAULT_LAM)
    p.add_argument("--eval", default="full")
    p.add_argument("--heldout", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    model = DEFAULT_MODEL[MODALITY[a.dataset]]
    train = TrainConfig(epochs=a.epochs)  # as experiments.image._train_config
    records = []
    for seed in (int(s) for s in a.seeds.split(",")):
        start = time.perf_counter()
        records += finetune_job(
            single=asdict(MethodSpec("single", model=model, members=1)),
            sigma=asdict(
                MethodSpec(
                    "sigma", model=model, members=a.members, tau=a.tau, lam=a.lam, label="sigma_finetuned"
                )
            ),
            members=a.members,
            seed=seed,
            data={"dataset": a.dataset, "data_root": None, "heldout": a.heldout, "train_size": a.train_size},
            train=asdict(train),
            finetune=asdict(replace(train, epochs=3, lr=0.01)),  # the command's defaults
            evaluation=a.eval,
            out=str(a.out),
        )
        write_results(a.out, records)
        print(f"seed {seed}: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
