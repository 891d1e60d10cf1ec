"""1-D OOD sets: generator values, normalised sets for MNIST-1D splits, the class hold-out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ensemblize.data.mnist1d import generate_mnist1d, load_mnist1d
from ensemblize.data.ood1d import (
    SIGNAL_OOD_NAMES,
    gaussian_noise_signals,
    held_out_classes,
    parse_signal_ood_names,
    shuffled_samples,
    signal_ood_sets,
    sinusoid_signals,
    smooth_noise_signals,
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("mnist1d_cache")


@pytest.fixture(scope="module")
def splits(cache_dir):
    return load_mnist1d(seed=0, cache=cache_dir)


def test_gaussian_noise_signals_have_the_asked_scale():
    x = gaussian_noise_signals(2000, shape=(1, 40), seed=0, std=1.5)
    assert x.shape == (2000, 1, 40) and x.dtype == np.float32
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1.5) < 0.02
    np.testing.assert_array_equal(x, gaussian_noise_signals(2000, shape=(1, 40), seed=0, std=1.5))


def test_smooth_noise_is_standardised_per_signal_and_smooth():
    x = smooth_noise_signals(200, shape=(1, 40), seed=1, sigma=2.0, std=0.7).astype(np.float64)
    np.testing.assert_allclose(x.mean(axis=-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(x.std(axis=-1), 0.7, atol=1e-6)
    white = gaussian_noise_signals(200, shape=(1, 40), seed=1).astype(np.float64)

    def lag1(a):
        return float(np.mean(a[..., 1:] * a[..., :-1]) / np.mean(a * a))

    assert lag1(x) > 0.8 and abs(lag1(white)) < 0.1


def test_sinusoids_are_whole_periods_with_the_asked_std():
    x = sinusoid_signals(50, shape=(2, 40), seed=2, std=1.0).astype(np.float64)
    np.testing.assert_allclose(x.mean(axis=-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(x.std(axis=-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(x[:, 0], x[:, 1])  # channels alike
    spectrum = np.abs(np.fft.rfft(x[:, 0], axis=-1))
    assert set(spectrum.argmax(axis=-1).tolist()) <= {1, 2, 3, 4}


def test_shuffled_samples_keep_each_signals_values():
    x = np.random.default_rng(0).standard_normal((10, 2, 15))
    out = shuffled_samples(x, seed=3)
    np.testing.assert_allclose(np.sort(out, axis=-1), np.sort(x, axis=-1).astype(np.float32))
    # channels move together: the same permutation for both channels
    for i in range(10):
        perm = [int(np.flatnonzero(np.isclose(x[i, 0], v))[0]) for v in out[i, 0]]
        np.testing.assert_allclose(out[i, 1], x[i, 1, perm].astype(np.float32))
    assert not np.allclose(out, x)


def test_signal_ood_sets_for_mnist1d(splits):
    sets = signal_ood_sets(splits, seed=0)
    assert tuple(sets) == SIGNAL_OOD_NAMES
    for x in sets.values():
        assert x.shape == (1000, 1, 40) and x.dtype == torch.float32 and torch.isfinite(x).all()
    # normalised like the ID data: the raw shuffled signals are permutations of raw test signals
    raw = splits.denormalize(sets["shuffled"])[:, 0].numpy()
    test = {tuple(np.round(np.sort(r), 4)) for r in splits.denormalize(splits.x_test)[:, 0].numpy()}
    assert all(tuple(np.round(np.sort(r), 4)) in test for r in raw[:50])
    # each set has its own seed: asking for one alone gives the same values
    alone = signal_ood_sets(splits, kinds="sinusoids", n=1000, seed=0)
    torch.testing.assert_close(alone["sinusoids"], sets["sinusoids"], rtol=0, atol=0)
    assert signal_ood_sets(splits, kinds="gaussian", n=7, seed=1)["gaussian"].shape == (7, 1, 40)
    assert signal_ood_sets(splits, kinds="shuffled", n=2500, seed=1)["shuffled"].shape == (2500, 1, 40)


def test_signal_ood_sets_reject_images_and_bad_names(splits):
    from ensemblize.data.images import load_digits

    with pytest.raises(ValueError, match=r"needs \(N, C, L\) signals"):
        signal_ood_sets(load_digits(seed=0))
    with pytest.raises(ValueError, match=r"unknown signal OOD set\(s\) \['photos'\]"):
        parse_signal_ood_names("gaussian,photos")
    assert parse_signal_ood_names("all") == SIGNAL_OOD_NAMES


def test_held_out_classes_never_leak(cache_dir):
    arrays = generate_mnist1d(cache=cache_dir)
    near = held_out_classes(0, cache=cache_dir)
    assert near.id_classes == (0, 1, 2, 3, 4, 5) and near.ood_classes == (6, 7, 8, 9)
    s = near.splits
    assert s.num_classes == 6 and int(s.y_train.max()) == 5
    expected = arrays["x_test"][arrays["y_test"] >= 6]
    np.testing.assert_allclose(s.denormalize(near.x_ood)[:, 0].double(), expected, atol=1e-5)
    np.testing.assert_array_equal(near.y_ood.numpy(), arrays["y_test"][arrays["y_test"] >= 6])
    ood_rows = {tuple(np.round(r, 5)) for r in arrays["x_train"][arrays["y_train"] >= 6]}
    id_rows = torch.cat([s.x_train, s.x_val, s.x_test])
    assert not any(tuple(np.round(r, 5)) in ood_rows for r in s.denormalize(id_rows)[:, 0].double().numpy())
    with pytest.raises(ValueError, match="leave at least one digit out"):
        held_out_classes(0, id_classes=range(10), cache=cache_dir)
