"""load_dataset: one entry point for digits / MNIST-1D / CIFAR, with each dataset's shifts and OOD sets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ensemblize.data.corruptions import CORRUPTIONS, corrupt
from ensemblize.data.datasets import (
    DATASETS,
    DEFAULT_MODEL,
    MODALITY,
    REDUCED_SHIFTS,
    SHIFTS,
    Benchmark,
    load_dataset,
)
from ensemblize.data.images import load_digits
from ensemblize.data.ood import NAMES, ood_sets
from ensemblize.data.ood1d import SIGNAL_OOD_NAMES, signal_ood_sets
from ensemblize.data.shifts1d import SIGNAL_SHIFTS, shift_signals


@pytest.fixture(scope="module", autouse=True)
def _mnist1d_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENSEMBLIZE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def mnist1d() -> Benchmark:
    return load_dataset("mnist1d", seed=0)


@pytest.fixture(scope="module")
def digits() -> Benchmark:
    return load_dataset("digits", seed=0)


def test_digits_is_load_digits_with_the_image_shifts_and_ood_sets(digits):
    ref = load_digits(seed=0)
    assert digits.name == "digits" and digits.modality == "image" and digits.default_model == "resnet_small"
    for k in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "mean", "std"):
        assert torch.equal(getattr(digits.splits, k), getattr(ref, k)), k
    assert digits.shift_kinds == tuple(k for k in CORRUPTIONS if k != "saturate")
    assert set(digits.reduced_shift_kinds) <= set(digits.shift_kinds)
    assert digits.ood_kinds == NAMES and digits.near_ood == {}
    x = ref.x_test[:20]
    x01 = ref.denormalize(x).clamp(0, 1).numpy().astype(np.float64)
    expected = ref.normalize(corrupt(x01, "gaussian_blur", 3, 2, reference_size=8))
    torch.testing.assert_close(digits.shift(x, "gaussian_blur", 3, seed=2), expected, rtol=0, atol=0)
    torch.testing.assert_close(digits.shift(x, "contrast", 0), x, rtol=0, atol=0)
    sets = digits.ood_sets(kinds="gaussian,shuffled", n=30, seed=1)
    ref_sets = ood_sets(ref, kinds="gaussian,shuffled", n=30, seed=1)
    for name in ("gaussian", "shuffled"):
        torch.testing.assert_close(sets[name], ref_sets[name], rtol=0, atol=0)


def test_mnist1d_has_signal_shifts_and_signal_ood_sets(mnist1d):
    s = mnist1d.splits
    assert mnist1d.name == "mnist1d" and mnist1d.modality == "signal" and mnist1d.default_model == "resnet1d"
    assert s.input_shape == (1, 40) and (len(s.y_train), len(s.y_val), len(s.y_test)) == (3600, 400, 1000)
    assert mnist1d.shift_kinds == SIGNAL_SHIFTS and mnist1d.reduced_shift_kinds == SIGNAL_SHIFTS
    assert mnist1d.ood_kinds == SIGNAL_OOD_NAMES
    x = s.x_test[:25]
    for kind in SIGNAL_SHIFTS:
        raw = s.denormalize(x).double()
        expected = s.normalize(shift_signals(raw, kind, 4, 3))
        torch.testing.assert_close(mnist1d.shift(x, kind, 4, seed=3), expected, rtol=0, atol=0)
    torch.testing.assert_close(mnist1d.shift(x, "blur", 0), x, atol=1e-6, rtol=0)
    sets = mnist1d.ood_sets(seed=4)
    ref = signal_ood_sets(s, seed=4)
    assert tuple(sets) == SIGNAL_OOD_NAMES
    for name in SIGNAL_OOD_NAMES:
        torch.testing.assert_close(sets[name], ref[name], rtol=0, atol=0)


def test_for_splits_infers_the_modality(digits, mnist1d):
    for bench in (digits, mnist1d):
        again = Benchmark.for_splits(bench.splits)
        assert again.modality == bench.modality and again.splits is bench.splits and again.near_ood == {}
    with pytest.raises(ValueError, match=r"\(N, C, L\) signals or \(N, C, H, W\) images"):
        Benchmark.for_splits(dataclasses.replace(digits.splits, x_test=torch.zeros(2, 3)))


def test_the_tiny_preset_names_exist_for_every_modality(digits, mnist1d):
    for bench in (digits, mnist1d):
        assert "gaussian_noise" in bench.shift_kinds and "gaussian" in bench.ood_kinds


def test_a_shift_of_the_other_modality_is_refused(digits, mnist1d):
    with pytest.raises(
        ValueError, match="unknown shift 'time_shift' for digits; valid kinds: gaussian_noise"
    ):
        digits.shift(digits.splits.x_test[:2], "time_shift", 1)
    with pytest.raises(ValueError, match="unknown shift 'saturate' for digits"):
        digits.shift(digits.splits.x_test[:2], "saturate", 1)
    with pytest.raises(ValueError, match="unknown shift 'fog' for mnist1d"):
        mnist1d.shift(mnist1d.splits.x_test[:2], "fog", 1)
    with pytest.raises(ValueError, match="unknown signal OOD set"):
        mnist1d.ood_sets(kinds="photos")


@pytest.mark.parametrize("name", ["digits", "mnist1d"])
def test_train_size_and_heldout(name):
    small = load_dataset(name, seed=1, train_size=100)
    full = load_dataset(name, seed=1)
    assert len(small.splits.y_train) == 100
    assert torch.equal(small.splits.x_test, full.splits.x_test)
    assert torch.equal(small.splits.x_val, full.splits.x_val)
    near = load_dataset(name, seed=1, heldout=True)
    assert near.splits.num_classes == 6 and set(near.near_ood) == {"heldout"}
    assert near.near_ood["heldout"].shape[1:] == near.splits.x_test.shape[1:]
    both = load_dataset(name, seed=1, heldout=True, train_size=60)
    assert len(both.splits.y_train) == 60 and int(both.splits.y_train.max()) == 5


def test_bad_arguments_are_named(tmp_path):
    assert DATASETS == ("digits", "mnist1d", "cifar10", "cifar100")
    assert tuple(MODALITY) == DATASETS and set(MODALITY.values()) == set(DEFAULT_MODEL) == set(REDUCED_SHIFTS)
    assert SHIFTS == {"image": CORRUPTIONS, "signal": SIGNAL_SHIFTS}
    assert all(set(REDUCED_SHIFTS[m]) <= set(SHIFTS[m]) for m in SHIFTS)
    with pytest.raises(ValueError, match=r"dataset must be one of \('digits', 'mnist1d', .*\), got 'mnist'"):
        load_dataset("mnist", seed=0)
    with pytest.raises(ValueError, match="root="):
        load_dataset("cifar10", seed=0)
    with pytest.raises(ValueError, match="supports digits and mnist1d, not 'cifar10'"):
        load_dataset("cifar10", seed=0, heldout=True, root=tmp_path)
    with pytest.raises(TypeError, match="heldout must be a bool"):
        load_dataset("digits", seed=0, heldout=1)
    with pytest.raises(ValueError, match="train_size=5000 exceeds"):
        load_dataset("digits", seed=0, train_size=5000)
    with pytest.raises(ValueError, match="modality"):
        Benchmark(splits=load_digits(seed=0), modality="audio")
