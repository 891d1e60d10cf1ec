"""MNIST-1D: the package's generator with its defaults, offline, seeded splits, npz cache, train_size."""
# ruff: noqa: NPY002  (the mnist1d generator uses, and must leave intact, the legacy global NumPy state)

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ensemblize.data import mnist1d as m1
from ensemblize.data.mnist1d import generate_mnist1d, load_mnist1d


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("mnist1d_cache")


@pytest.fixture(scope="module")
def package_data():
    """The package's own generator called directly with its default arguments."""
    from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()
    data = make_dataset(get_dataset_args())
    np.random.set_state(state)
    return data


@pytest.fixture(scope="module")
def arrays(cache_dir):
    return generate_mnist1d(cache=cache_dir)


def test_generation_is_the_package_default_dataset(arrays, package_data):
    assert arrays["x_train"].shape == (4000, 40) and arrays["x_test"].shape == (1000, 40)
    np.testing.assert_array_equal(arrays["x_train"], package_data["x"])
    np.testing.assert_array_equal(arrays["y_train"], package_data["y"])
    np.testing.assert_array_equal(arrays["x_test"], package_data["x_test"])
    np.testing.assert_array_equal(arrays["y_test"], package_data["y_test"])
    assert set(np.unique(arrays["y_train"])) == set(range(10))


def test_generation_never_downloads_reads_pickles_or_moves_global_rng(tmp_path, monkeypatch, package_data):
    import pickle

    import requests

    def forbidden(*args, **kwargs):
        raise AssertionError("network or pickle access during MNIST-1D generation")

    monkeypatch.setattr(requests, "get", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "dump", forbidden)
    monkeypatch.chdir(tmp_path)
    np.random.seed(123)
    random.seed(7)
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()
    out = generate_mnist1d(cache=False)
    np.testing.assert_array_equal(np.random.get_state()[1], np_before)
    assert random.getstate() == py_before
    np.testing.assert_array_equal(out["x_test"], package_data["x_test"])
    assert list(tmp_path.iterdir()) == []  # no mnist1d_data.pkl left behind


def test_cache_is_a_pickle_free_npz_that_is_read_back(cache_dir, arrays, monkeypatch):
    files = list(cache_dir.glob("*.npz"))
    assert len(files) == 1
    with np.load(files[0], allow_pickle=False) as npz:
        assert sorted(npz.files) == ["x_test", "x_train", "y_test", "y_train"]
    monkeypatch.setattr(m1, "_make", lambda seed: pytest.fail("regenerated although cached"))
    again = generate_mnist1d(cache=cache_dir)
    for k in arrays:
        np.testing.assert_array_equal(again[k], arrays[k])
    again["x_train"][0, 0] = 99.0  # a fresh copy each call
    assert generate_mnist1d(cache=cache_dir)["x_train"][0, 0] != 99.0


@pytest.mark.parametrize("bad", ["garbage", "object_array", "wrong_shape", "truncated", "empty"])
def test_a_bad_cache_file_is_regenerated(tmp_path, arrays, bad, monkeypatch):
    path = m1._cache_file(tmp_path, 42)
    if bad == "garbage":
        path.write_bytes(b"not an npz")
    elif bad in ("truncated", "empty"):  # BadZipFile / EOFError escaped the reader
        np.savez(path, **arrays)
        path.write_bytes(path.read_bytes()[: 1000 if bad == "truncated" else 0])
    elif bad == "object_array":
        np.savez(path, x_train=np.array([{"a": 1}], dtype=object), y_train=arrays["y_train"])
    else:
        np.savez(path, **{**arrays, "x_train": arrays["x_train"][:10]})
    monkeypatch.setattr(m1, "_make", lambda seed: {k: v.copy() for k, v in arrays.items()})
    out = generate_mnist1d(cache=tmp_path)
    np.testing.assert_array_equal(out["x_train"], arrays["x_train"])
    with np.load(path, allow_pickle=False) as npz:  # rewritten with the right arrays
        np.testing.assert_array_equal(npz["x_train"], arrays["x_train"])


def test_splits_partition_the_package_train_set_and_keep_its_test_set(cache_dir, arrays):
    s = load_mnist1d(seed=0, cache=cache_dir)
    assert s.name == "mnist1d" and s.num_classes == 10 and s.input_shape == (1, 40)
    assert (len(s.y_train), len(s.y_val), len(s.y_test)) == (3600, 400, 1000)
    assert s.x_train.dtype == torch.float32 and s.y_train.dtype == torch.int64
    # stratified validation split: 10 % of each class (±1)
    per_class = np.bincount(arrays["y_train"], minlength=10)
    assert np.all(np.abs(np.bincount(s.y_val.numpy(), minlength=10) - per_class * 0.1) <= 1)
    # train ∪ val is exactly the package's train set; test is the package's test set, in order
    raw = torch.cat([s.denormalize(s.x_train), s.denormalize(s.x_val)])[:, 0].double().numpy()
    rows = np.lexsort(raw.T[::-1])
    ref_rows = np.lexsort(arrays["x_train"].T[::-1])
    np.testing.assert_allclose(raw[rows], arrays["x_train"][ref_rows], atol=1e-5)
    np.testing.assert_allclose(s.denormalize(s.x_test)[:, 0].double(), arrays["x_test"], atol=1e-5)
    np.testing.assert_array_equal(s.y_test.numpy(), arrays["y_test"])
    # normalised with the train split's own mean and standard deviation
    assert abs(float(s.x_train.mean())) < 1e-5 and abs(float(s.x_train.std(unbiased=False)) - 1) < 1e-4


def test_splits_are_seeded(cache_dir):
    a, b, c = (load_mnist1d(seed=k, cache=cache_dir) for k in (0, 0, 1))
    torch.testing.assert_close(a.x_val, b.x_val, rtol=0, atol=0)
    assert not torch.equal(a.y_val, c.y_val)


def test_train_size_keeps_a_stratified_subset_and_everything_else(cache_dir):
    full = load_mnist1d(seed=3, cache=cache_dir)
    low = load_mnist1d(seed=3, train_size=500, cache=cache_dir)
    assert len(low.y_train) == 500
    assert np.all(np.abs(np.bincount(low.y_train.numpy(), minlength=10) - 50) <= 1)
    full_rows = {tuple(r) for r in full.x_train[:, 0].numpy().tolist()}
    assert all(tuple(r) in full_rows for r in low.x_train[:, 0].numpy().tolist())
    for name in ("x_val", "y_val", "x_test", "y_test", "mean", "std"):
        assert torch.equal(getattr(low, name), getattr(full, name)), name
    assert load_mnist1d(seed=3, train_size=3600, cache=cache_dir).x_train.shape == full.x_train.shape


def test_classes_keep_and_relabel(cache_dir, arrays):
    s = load_mnist1d(seed=0, classes=(7, 2), cache=cache_dir)
    assert s.num_classes == 2 and s.class_names == ("7", "2")
    assert len(s.y_test) == int(np.isin(arrays["y_test"], (7, 2)).sum())
    np.testing.assert_allclose(
        s.denormalize(s.x_test[s.y_test == 0])[:, 0].double(),
        arrays["x_test"][arrays["y_test"] == 7],
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"train_size": 5}, ValueError, "train_size"),
        ({"train_size": 3601}, ValueError, "train_size=3601 exceeds"),
        ({"train_size": 100.0}, TypeError, "train_size"),
        ({"val_fraction": 0.0}, ValueError, "val_fraction"),
        ({"val_fraction": 1.0}, ValueError, "val_fraction"),
        ({"classes": (1, 1)}, ValueError, "classes"),
        ({"classes": (3, 10)}, ValueError, "classes"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_bad_arguments_are_named(cache_dir, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        load_mnist1d(cache=cache_dir, **kwargs)


def test_bad_cache_argument():
    with pytest.raises(TypeError, match="cache"):
        generate_mnist1d(cache=3)


def test_a_file_given_as_cache_folder_is_named(tmp_path):
    from ensemblize.data.mnist1d import generate_mnist1d

    f = tmp_path / "not_a_folder"
    f.write_text("x")
    with pytest.raises(ValueError, match="cache must be a folder.*is a file"):
        generate_mnist1d(cache=f)
