"""RunFolder: one writer, runs that cannot mix, cleanup of interrupted writes, manifest written last."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ensemblize.run_folder import (
    MANIFEST,
    RunFolder,
    RunFolderBusy,
    RunFolderError,
    config_differences,
    read_manifest,
)

CFG = {"command": "run", "seed": 0, "epochs": 3}


def test_new_folder_writes_config_and_manifest(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG) as folder:
        (out / "results.json").write_text("[]")
        folder.complete()
    manifest = read_manifest(out)
    assert manifest["complete"] is True and manifest["config"] == CFG
    assert set(manifest["files"]) == {"results.json", "run.json"}
    assert json.loads((out / "run.json").read_text()) == {"config": CFG}


def test_non_empty_folder_refused_without_resume_or_overwrite(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        (out / "something").write_text("x")
    with pytest.raises(RunFolderError, match="--resume.*--overwrite"):
        RunFolder(out, config=CFG).check()


def test_a_folder_that_is_not_a_run_is_never_emptied(tmp_path):
    """``--overwrite`` on a user's own folder (a repository, ``--out .``) must not delete anything."""
    out = tmp_path / "project"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref")
    (out / "notes.txt").write_text("keep me")
    for mode in ("new", "resume", "overwrite"):
        with pytest.raises(
            RunFolderError, match="not empty and is not an ensemblize run folder.*nothing in it"
        ):
            with RunFolder(out, config=CFG, mode=mode):
                pass
    assert (out / ".git" / "HEAD").read_text() == "ref" and (out / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == [".git", "notes.txt"]


def test_existing_file_refused_in_every_mode(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    for mode in ("new", "resume", "overwrite"):
        with pytest.raises(RunFolderError, match="existing file"):
            RunFolder(path, config=CFG, mode=mode).check()


def test_resume_needs_same_config_and_names_differences(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        pass
    with RunFolder(out, config=CFG, mode="resume") as folder:
        assert folder.resumed
    other = {**CFG, "epochs": 5, "tau": 1.0}
    with pytest.raises(RunFolderError, match=r"epochs: stored 3, now 5.*tau: stored None, now 1.0"):
        RunFolder(out, config=other, mode="resume").check()


def test_overwrite_empties_folder(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        (out / "models").mkdir()
        (out / "models" / "a.json").write_text("{}")
    with RunFolder(out, config={**CFG, "seed": 1}, mode="overwrite"):
        assert not (out / "models").exists()
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 1


def test_second_writer_is_refused(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        with pytest.raises(RunFolderBusy, match="another process"):
            RunFolder(out, config=CFG, mode="resume").__enter__()
    with RunFolder(out, config=CFG, mode="resume"):  # released on exit
        pass


def test_lock_of_a_killed_process_is_released(tmp_path):
    out = tmp_path / "run"
    code = textwrap.dedent(
        f"""
        import os
        from ensemblize.run_folder import RunFolder
        f = RunFolder({str(out)!r}, config={CFG!r}).__enter__()
        os._exit(0)  # dies holding the lock, without __exit__
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with RunFolder(out, config=CFG, mode="resume"):
        pass


def test_interrupted_writes_and_orphans_are_cleaned(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        ckpt = out / "models" / "single"
        ckpt.mkdir(parents=True)
        (ckpt / ".results.json.abc123.tmp").write_text("partial")
        (ckpt / "epoch_0003.safetensors").write_bytes(b"x")  # its JSON was removed
        (ckpt / "epoch_0002.json").write_text("{}")  # its tensors were removed
        (ckpt / "epoch_0001.safetensors").write_bytes(b"x")
        (ckpt / "epoch_0001.json").write_text("{}")
    with RunFolder(out, config=CFG, mode="resume"):
        left = sorted(p.name for p in (out / "models" / "single").iterdir())
    assert left == ["epoch_0001.json", "epoch_0001.safetensors"]


def test_manifest_detects_changes(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG) as folder:
        (out / "results.json").write_text("[1]")
        folder.complete()
    (out / "results.json").write_text("[2]")
    with pytest.raises(RunFolderError, match="changed after the run finished"):
        read_manifest(out)
    (out / "results.json").write_text("[1]")
    (out / "extra.json").write_text("{}")
    with pytest.raises(RunFolderError, match=r"not listed \['extra.json'\]"):
        read_manifest(out)


def test_incomplete_run_has_no_manifest(tmp_path):
    out = tmp_path / "run"
    with RunFolder(out, config=CFG) as folder:
        folder.complete()
    with RunFolder(out, config=CFG, mode="resume"):  # a rerun that is killed before complete()
        pass
    assert not (out / MANIFEST).exists()
    with pytest.raises(RunFolderError, match="did not finish"):
        read_manifest(out)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode must be one of"):
        RunFolder("x", config=CFG, mode="append")
    with pytest.raises(TypeError, match="config must be a mapping"):
        RunFolder("x", config=[1])
    assert config_differences({"a": 1}, {"a": 1}) == []


def test_an_out_path_that_cannot_be_made_is_a_named_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunFolderError, match="cannot be created: .*afile is a file, not a folder"):
        RunFolder(tmp_path / "afile" / "sub", config=CFG).check()
    assert (tmp_path / "afile").read_text() == "x"


def test_resume_removes_a_damaged_model_and_reruns_the_job_that_wrote_it(tmp_path):
    """A truncated models/ checkpoint was kept on resume (its job's result was trusted on its own), the
    run was marked complete, and `ensemblize evaluate` failed on it later."""
    import torch

    from ensemblize.checkpoint import save_checkpoint
    from ensemblize.run_folder import drop_damaged_models

    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        (out / "jobs").mkdir()
        for job, method in (("a", "single"), ("b", "sigma_ens")):
            save_checkpoint(out / "models" / f"{method}_seed0", {"w": torch.ones(3)}, {"format": "x"})
            record = {"method": method, "seed": 0}
            (out / "jobs" / f"{job}.json").write_text(json.dumps({"job": {}, "records": [record]}))
    with open(out / "models" / "single_seed0.safetensors", "r+b") as f:
        f.truncate(20)
    with pytest.warns(UserWarning, match=r"checkpoint\(s\) \['single_seed0'\] failed their integrity check"):
        with RunFolder(out, config=CFG, mode="resume") as folder:
            assert folder.damaged == ["single_seed0"]
    assert sorted(p.name for p in (out / "models").iterdir()) == [
        "sigma_ens_seed0.json",
        "sigma_ens_seed0.safetensors",
    ]
    assert sorted(p.name for p in (out / "jobs").iterdir()) == ["b.json"]  # job a runs again
    assert drop_damaged_models(out) == []  # intact checkpoints are kept
    from ensemblize.run_folder import _MODEL_STEM, model_stem  # the runner's naming, read back

    assert _MODEL_STEM.match(model_stem("sigma_ens_seed", 12)).groupdict() == {
        "method": "sigma_ens_seed",
        "seed": "12",
    }
    # a damaged model that no finished job names: refused, nothing removed (resuming could not rebuild it)
    save_checkpoint(out / "models" / "other_seed3", {"w": torch.ones(2)}, {"format": "x"})
    with open(out / "models" / "other_seed3.safetensors", "r+b") as f:
        f.truncate(20)
    with pytest.raises(
        RunFolderError, match=r"checkpoint\(s\) \['other_seed3'\] .*no finished job names them"
    ):
        with RunFolder(out, config=CFG, mode="resume"):
            pass
    assert (out / "models" / "other_seed3.safetensors").exists() and (out / "jobs" / "b.json").exists()


def test_an_existing_folder_that_cannot_be_written_is_a_named_error(tmp_path, monkeypatch):
    """On a read-only file system the lock file's os.open raised a bare OSError traceback."""
    import errno
    import os

    import ensemblize.run_folder as rf

    out = tmp_path / "run"
    with RunFolder(out, config=CFG):
        pass

    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(rf.os, "open", read_only)
    with pytest.raises(RunFolderError, match=r"--out .*run is not writable: Read-only file system"):
        with RunFolder(out, config=CFG, mode="resume"):
            pass
