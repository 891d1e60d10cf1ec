"""Run under ``torchrun --nproc_per_node=2``; used by tests/test_training_ddp.py.

usage: ddp_fit.py OUT_DIR
Every rank calls ``fit`` unchanged with ``checkpoint_dir=OUT_DIR/rank<r>/ckpt`` and ``progress=True``
(stderr redirected to OUT_DIR/rank<r>.stderr), so only rank 0's folder may appear and only rank 0's
stderr may hold a progress bar. Rank 0 writes OUT_DIR/result.json.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyEnsemble, make_data  # noqa: E402

from ensemblize.checkpoint import atomic_write_json  # noqa: E402
from ensemblize.training import fit, predict, seed_everything  # noqa: E402
from ensemblize.training.predict import sharded_predict  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    sys.stderr = open(out / f"rank{rank}.stderr", "w")  # noqa: SIM115 - lives until exit
    seed_everything(0)
    train, val = make_data(203, 101)  # odd sizes: padded train shards, uneven eval shards
    model = TinyEnsemble()
    res = fit(
        model,
        train,
        val,
        epochs=6,
        batch_size=16,
        optimizer="sgd",
        lr=0.1,
        checkpoint_dir=out / f"rank{rank}" / "ckpt",
        progress=True,
        seed=1,
    )
    assert dist.is_initialized(), "fit should have initialised the process group from torchrun's variables"
    indices, _ = sharded_predict(model, val[0], batch_size=8)
    probs = predict(model, val[0], batch_size=8)
    model.eval()
    with torch.no_grad():
        reference = torch.softmax(model(val[0]), dim=-1)
    checksum = float(sum(p.double().sum() for p in model.state_dict().values()))
    checksums = [None] * dist.get_world_size()
    dist.all_gather_object(checksums, checksum)
    # weight averaging: the average's BatchNorm statistics were each rank's own (they ended different)
    averaged = TinyEnsemble()
    fit(averaged, train, val, epochs=2, batch_size=16, lr=0.1, ema_decay=0.9, progress=False, seed=2)
    ema_checksum = [float(t.double().sum()) for t in averaged.state_dict().values()]
    ema_checksums = [None] * dist.get_world_size()
    dist.all_gather_object(ema_checksums, ema_checksum)
    if rank == 0:
        atomic_write_json(
            out / "result.json",
            {
                "world_size": dist.get_world_size(),
                "history": res.history,
                "indices": indices.tolist(),
                "predict_max_abs_diff": float((probs - reference).abs().max()),
                "checksums": checksums,
                "ema_checksums": ema_checksums,
            },
        )
    # Every rank finishes its communication, then leaves without running C++ static destructors:
    # torch 2.13's gloo teardown at interpreter exit intermittently aborts a worker after all work is
    # done ("terminate called without an active exception", ~1 run in 10 here).
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
