"""Checkpoint metadata is protected like the tensors (issue 12 item 4), and files respect the umask."""

import json
import os
import stat

import pytest
import torch

from ensemblize.checkpoint import (
    CheckpointError,
    atomic_write_json,
    checkpoint_paths,
    load_checkpoint,
    load_checkpoint_meta,
    save_checkpoint,
    settle_interrupted_save,
)

META = {
    "classes": ["cat", "dog"],
    "columns": {"age": 0, "income": 1},
    "preprocessing": {"scale": [1.5, 2.0], "nan": float("nan")},
    "stopped": False,
    "epoch": 7,
}


def _save(tmp_path, meta=META):
    save_checkpoint(tmp_path / "ck", {"w": torch.arange(4.0)}, meta)
    return checkpoint_paths(tmp_path / "ck")


def _edit(meta_path, fn):
    meta = json.loads(meta_path.read_text())
    fn(meta)
    meta_path.write_text(json.dumps(meta, indent=2))


def test_round_trip_keeps_every_key(tmp_path):
    _save(tmp_path)
    tensors, meta = load_checkpoint(tmp_path / "ck")
    assert torch.equal(tensors["w"], torch.arange(4.0))
    assert meta["classes"] == ["cat", "dog"] and meta["columns"] == {"age": 0, "income": 1}
    assert (
        meta["stopped"] is False
        and meta["epoch"] == 7
        and meta["preprocessing"]["nan"] != meta["preprocessing"]["nan"]
    )
    assert {"sha256", "fingerprint", "meta_sha256"} <= set(meta)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(classes=["dog", "cat"]),  # swapped labels: silently swapped predictions before
        lambda m: m["columns"].update(age=1, income=0),
        lambda m: m["preprocessing"]["scale"].__setitem__(0, 1.5000001),
        lambda m: m.update(stopped=True),
        lambda m: m.update(epoch=8),
        lambda m: m.update(extra="added"),
        lambda m: m.pop("epoch"),
        lambda m: m.update(sha256="0" * 64),  # re-pointing the tensor hash is an edit too
    ],
)
def test_editing_the_json_is_detected(tmp_path, edit):
    _, meta_path = _save(tmp_path)
    _edit(meta_path, edit)
    with pytest.raises(CheckpointError, match=r"ck\.json.*meta_sha256.*edited"):
        load_checkpoint(tmp_path / "ck")
    with pytest.raises(ValueError, match="meta_sha256"):  # a CheckpointError is a ValueError
        load_checkpoint_meta(tmp_path / "ck")


def test_reformatting_the_json_without_changing_values_is_not_an_edit(tmp_path):
    _, meta_path = _save(tmp_path)
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(dict(reversed(list(meta.items()))), separators=(",", ":")))
    load_checkpoint(tmp_path / "ck")


@pytest.mark.parametrize("key", ["sha256", "meta_sha256", "fingerprint"])
def test_a_missing_hash_is_an_error_not_a_skipped_check(tmp_path, key):
    _, meta_path = _save(tmp_path)
    meta = json.loads(meta_path.read_text())
    meta.pop(key)
    atomic_write_json(meta_path, meta)
    with pytest.raises(CheckpointError, match=f"key '{key}' is missing"):
        load_checkpoint(tmp_path / "ck")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"epoch": 3,', r"ck\.json: malformed JSON at line 1, column 13"),
        ("", r"ck\.json: malformed JSON at line 1, column 1"),
        ("[1, 2]", r"ck\.json: the metadata must be a JSON object, got list"),
        ('{"sha256": 5, "fingerprint": "x", "meta_sha256": "y"}', r"ck\.json: key 'sha256' must be a string"),
    ],
)
def test_malformed_json_names_the_file(tmp_path, text, match):
    _, meta_path = _save(tmp_path)
    meta_path.write_text(text)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(tmp_path / "ck")


def test_binary_garbage_is_named(tmp_path):
    _, meta_path = _save(tmp_path)
    meta_path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match=r"ck\.json: not UTF-8"):
        load_checkpoint(tmp_path / "ck")


def test_required_keys_are_named_when_missing_or_mistyped(tmp_path):
    _save(tmp_path)
    load_checkpoint(tmp_path / "ck", required={"epoch": int, "classes": list, "stopped": bool})
    with pytest.raises(CheckpointError, match=r"ck\.json: required key 'n_bins' is missing"):
        load_checkpoint(tmp_path / "ck", required={"n_bins": int})
    with pytest.raises(CheckpointError, match=r"key 'classes' must be dict, got list"):
        load_checkpoint_meta(tmp_path / "ck", required={"classes": dict})
    with pytest.raises(CheckpointError, match=r"key 'stopped' must be int"):  # a bool is not an int here
        load_checkpoint_meta(tmp_path / "ck", required={"stopped": int})


def test_tensor_file_swaps_and_truncation_still_detected(tmp_path):
    tensor_path, _ = _save(tmp_path)
    data = tensor_path.read_bytes()
    tensor_path.write_bytes(data[:-3])
    with pytest.raises(CheckpointError, match="key 'sha256'"):
        load_checkpoint(tmp_path / "ck")


def test_reserved_keys_cannot_be_passed_in(tmp_path):
    with pytest.raises(ValueError, match=r"meta may not set \['sha256'\]"):
        save_checkpoint(tmp_path / "ck", {"w": torch.ones(1)}, {"sha256": "mine"})
    with pytest.raises(TypeError, match="meta must be a mapping"):
        save_checkpoint(tmp_path / "ck", {"w": torch.ones(1)}, [("a", 1)])


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_files_respect_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        tensor_path, meta_path = _save(tmp_path)
        other = atomic_write_json(tmp_path / "results.json", [1])
    finally:
        os.umask(old)
    for p in (tensor_path, meta_path, other):
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p


def test_save_checkpoint_refuses_a_folder_and_unserialisable_meta_before_writing(tmp_path):
    import torch

    from ensemblize.checkpoint import save_checkpoint

    (tmp_path / "runs").mkdir()
    with pytest.raises(ValueError, match="is a folder; pass a file stem inside it"):
        save_checkpoint(tmp_path / "runs", {"w": torch.ones(2)}, {"a": 1})
    with pytest.raises(ValueError, match="not JSON-serialisable.*device"):
        save_checkpoint(tmp_path / "x", {"w": torch.ones(2)}, {"where": torch.device("cpu")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing half-written


def test_save_checkpoint_names_a_non_tensor_value_or_a_non_string_key(tmp_path):
    import torch

    from ensemblize.checkpoint import save_checkpoint

    with pytest.raises(TypeError, match="entry 'w' is a list"):
        save_checkpoint(tmp_path / "x", {"w": [1, 2]}, {})
    with pytest.raises(TypeError, match="meta keys must be strings.*got 1"):
        save_checkpoint(tmp_path / "x", {"w": torch.ones(2)}, {1: "a"})
    assert list(tmp_path.iterdir()) == []


def _pair(folder, value):
    """A complete pair ``folder/ck`` holding ``w = value`` and ``epoch = value``; its two files' bytes."""
    save_checkpoint(folder / "ck", {"w": torch.full((3,), float(value))}, {"epoch": value})
    tensors, meta = checkpoint_paths(folder / "ck")
    return tensors.read_bytes(), meta.read_bytes()


@pytest.mark.parametrize("old", [True, False])
@pytest.mark.parametrize("killed", ["before the tensors moved", "before the JSON moved"])
def test_a_save_killed_between_its_renames_leaves_a_loadable_checkpoint(tmp_path, old, killed):
    """Overwriting a pair renamed the tensors first and the JSON after: a kill in between left new
    tensors beside the old JSON, and neither checkpoint loaded. The JSON is now staged first
    (``ck.json.pending``), and loading reads whichever JSON matches the tensors."""
    a_tensors, a_meta = _pair(tmp_path / "a", 1)
    b_tensors, b_meta = _pair(tmp_path / "b", 2)
    tensor_path, meta_path = checkpoint_paths(tmp_path / "ck")
    # the files a kill leaves at each point of overwriting pair 1 (or of a first save) with pair 2
    if old:
        meta_path.write_bytes(a_meta)
    tensor_path.write_bytes(b_tensors if killed == "before the JSON moved" else a_tensors)
    (tmp_path / "ck.json.pending").write_bytes(b_meta)
    if not old and killed == "before the tensors moved":
        tensor_path.unlink()  # a first save killed there leaves no checkpoint at all
        with pytest.raises(FileNotFoundError):
            load_checkpoint(tmp_path / "ck")
        assert settle_interrupted_save(tmp_path / "ck") and not (tmp_path / "ck.json.pending").exists()
        return
    expect = 2 if killed == "before the JSON moved" else 1
    tensors, meta = load_checkpoint(tmp_path / "ck")
    assert meta["epoch"] == expect and tensors["w"].tolist() == [float(expect)] * 3
    assert load_checkpoint_meta(tmp_path / "ck")["epoch"] == expect
    # settling publishes the staged JSON or drops it; either way the same checkpoint loads after
    assert settle_interrupted_save(tmp_path / "ck")
    assert not (tmp_path / "ck.json.pending").exists()
    assert load_checkpoint(tmp_path / "ck")[1]["epoch"] == expect


def test_a_damaged_staging_file_is_never_trusted(tmp_path):
    _pair(tmp_path, 1)
    (tmp_path / "ck.json.pending").write_text("{not json")
    assert load_checkpoint(tmp_path / "ck")[1]["epoch"] == 1


def test_a_failed_save_leaves_the_old_pair_and_no_staging_files(tmp_path, monkeypatch):
    import ensemblize.checkpoint as ck

    _pair(tmp_path, 1)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ck, "_publish", fail)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "ck", {"w": torch.zeros(3)}, {"epoch": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.json", "ck.safetensors"]
    assert load_checkpoint(tmp_path / "ck")[1]["epoch"] == 1


def test_a_run_folder_settles_an_interrupted_save_on_entry(tmp_path):
    from ensemblize.run_folder import clean_interrupted

    _, b_meta = _pair(tmp_path / "b", 2)
    (tmp_path / "b" / "ck.json").rename(tmp_path / "b" / "ck.json.pending")  # killed before the JSON moved
    clean_interrupted(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["ck.json", "ck.safetensors"]
    assert load_checkpoint(tmp_path / "b" / "ck")[1]["epoch"] == 2
