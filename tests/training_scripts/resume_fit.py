"""Train the tiny ensemble with checkpoints; used by tests/test_training_resume.py.

usage: resume_fit.py CHECKPOINT_DIR OUT_STEM EPOCHS SLEEP_PER_EPOCH
Writes OUT_STEM.safetensors (final weights) and OUT_STEM.json (history) when training completes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyEnsemble, make_data  # noqa: E402

from ensemblize.checkpoint import atomic_write_json, save_tensors  # noqa: E402
from ensemblize.training import fit, seed_everything  # noqa: E402


def main() -> None:
    ckpt, out, epochs, sleep = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    torch.set_num_threads(1)
    seed_everything(0)
    train, val = make_data(96, 48)
    model = TinyEnsemble()
    res = fit(
        model,
        train,
        val,
        epochs=epochs,
        batch_size=16,
        optimizer="adamw",
        lr=0.01,
        schedule="cosine",
        checkpoint_dir=ckpt,
        seed=3,
        progress=False,
        callbacks=[lambda epoch, record, m: time.sleep(sleep)],
    )
    save_tensors(out.with_suffix(".safetensors"), model.state_dict())
    atomic_write_json(
        out.with_suffix(".json"), {"history": res.history, "resumed_from": res.resumed_from_epoch}
    )


if __name__ == "__main__":
    main()
