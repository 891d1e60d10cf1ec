"""Files a user may be handed (a run folder, a checkpoint, a saved estimator): nothing in them may make the
library write elsewhere, read elsewhere, hang, or allocate without bound."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from ensemblize.checkpoint import CheckpointError, _meta_hash, load_checkpoint, save_checkpoint
from ensemblize.report.html import render_report
from ensemblize.run_folder import RunFolder, RunFolderError
from report_fixtures import make_run_folder

CFG = {"experiment": "safety"}


def test_a_lock_planted_as_a_symlink_or_fifo_is_refused_and_its_target_untouched(tmp_path):
    """RunFolder opened .lock following links, then truncated it and wrote its pid: `ensemblize report`,
    `evaluate` or `run --resume` on a handed-over folder overwrote any file the user could write."""
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        pass
    victim = tmp_path / "precious.txt"
    victim.write_text("precious user data\n")
    (out / ".lock").unlink()
    (out / ".lock").symlink_to(victim)
    with pytest.raises(RunFolderError, match=r"\.lock is a symbolic link"):
        RunFolder(out, config=CFG, mode="resume").__enter__()
    assert victim.read_text() == "precious user data\n"
    (out / ".lock").unlink()
    os.mkfifo(out / ".lock")
    with pytest.raises(RunFolderError, match=r"\.lock is not a regular file"):
        RunFolder(out, config=CFG, mode="resume").__enter__()


def test_the_report_reads_only_the_folders_own_regular_files(tmp_path):
    """A notes.md symlink copied a file from outside the folder into report.html; a FIFO named *.png
    blocked `ensemblize report` forever."""
    folder = make_run_folder(tmp_path / "r", seeds=1, figures=False)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET=outside-the-run\n")
    (folder / "notes.md").symlink_to(secret)
    os.mkfifo(folder / "stall.png")
    page = render_report(folder)  # returns: the FIFO is not opened
    assert "SECRET" not in page
    (folder / "notes.md").unlink()
    (folder / "environment.json").symlink_to(secret)
    with pytest.raises(ValueError, match="environment.json is not a regular file"):
        render_report(folder)


def test_deeply_nested_checkpoint_json_is_a_checkpoint_error(tmp_path):
    stem = tmp_path / "m"
    save_checkpoint(stem, {"w": torch.zeros(2)}, {"kind": "x"})
    stem.with_suffix(".json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nests too deeply"):
        load_checkpoint(stem)


def _edit_meta(stem, change):
    path = stem.with_suffix(".json")
    meta = json.loads(path.read_text())
    change(meta)
    meta["meta_sha256"] = _meta_hash(meta)  # the hash detects corruption, not a deliberate edit
    path.write_text(json.dumps(meta))


def test_saved_settings_that_describe_more_than_the_file_holds_are_refused_before_allocating(tmp_path):
    """A 1 kB edit of a method checkpoint's width asked for 360 GB; a subarray classes_dtype made a saved
    estimator allocate without bound and load malformed classes."""
    from ensemblize.data.datasets import load_dataset
    from ensemblize.runner import MethodSpec, build_method, load_method, save_method
    from ensemblize.tabular import LoMETabClassifier

    splits = load_dataset("digits", seed=0).splits
    for method in ("single", "sigma"):
        spec = MethodSpec(method=method, model="resnet_small", members=2)
        save_method(build_method(spec, splits), spec, splits, seed=0, path=tmp_path / method)
        stem = tmp_path / method
        load_method(stem, splits)  # as written: loads
        _edit_meta(stem, lambda m: m["spec"].update(model_kwargs={"width": 100_000}))
        with pytest.raises(ValueError, match=r"describe a model of [\d,]+ values, but its tensor file holds"):
            load_method(stem, splits)
    rng = np.random.default_rng(0)
    est = LoMETabClassifier(members=2, max_epochs=1, n_networks=1, random_state=0)
    est.fit(rng.normal(size=(60, 3)), np.arange(60) % 2)
    stem = tmp_path / "est"
    est.save(stem)
    _edit_meta(stem, lambda m: m.update(classes_dtype="(300000000,)u1"))
    with pytest.raises(ValueError, match=r"classes_dtype '\(300000000,\)u1' is not a label dtype"):
        LoMETabClassifier.load(stem)


def test_a_lock_that_cannot_be_taken_is_a_named_error_and_leaks_no_descriptor(tmp_path, monkeypatch):
    import errno
    import fcntl

    from ensemblize.run_folder import acquire_lock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RunFolderError, match="cannot be locked: No locks available"):
        acquire_lock(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before
