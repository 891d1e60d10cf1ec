"""OOD sets for the embedded digits: near-OOD class hold-out and far-OOD generators."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ensemblize.data.images import load_digits
from ensemblize.data.ood import (
    NAMES,
    gaussian_noise_images,
    held_out_classes,
    ood_sets,
    parse_ood_names,
    photo_crops,
    shuffled_pixels,
    uniform_noise_images,
)


@pytest.fixture(scope="module")
def splits():
    return load_digits(seed=0)


def test_held_out_classes_are_disjoint_and_relabelled(splits):
    near = held_out_classes(0, id_classes=(0, 2, 4, 6, 8))
    assert near.ood_classes == (1, 3, 5, 7, 9)
    assert set(near.y_ood.tolist()) == {1, 3, 5, 7, 9}
    s = near.splits
    assert s.num_classes == 5
    for y in (s.y_train, s.y_val, s.y_test):
        assert set(y.tolist()) == set(range(5))
    # OOD images are exactly the held-out digits of the full split's test set, in the ID normalised space
    keep = torch.isin(splits.y_test, torch.tensor([1, 3, 5, 7, 9]))
    torch.testing.assert_close(s.denormalize(near.x_ood), splits.denormalize(splits.x_test[keep]))
    # no OOD image appears among the ID images (pixel-exact comparison in [0, 1] space)
    id_pix = {
        tuple(np.round(v, 6))
        for v in s.denormalize(torch.cat([s.x_train, s.x_val, s.x_test])).flatten(1).numpy()
    }
    ood_pix = {tuple(np.round(v, 6)) for v in s.denormalize(near.x_ood).flatten(1).numpy()}
    assert not id_pix & ood_pix
    with pytest.raises(ValueError, match="id_classes"):
        held_out_classes(0, id_classes=tuple(range(10)))
    with pytest.raises(ValueError, match="id_classes"):
        held_out_classes(0, id_classes=(1, 1, 2))


def test_shuffled_pixels_keep_each_histogram():
    x = np.random.default_rng(0).random((5, 3, 6, 7))
    y = shuffled_pixels(x, seed=1)
    assert y.shape == x.shape and y.dtype == np.float32
    for i in range(5):
        a, b = x[i].reshape(3, -1).T.astype(np.float32), y[i].reshape(3, -1).T
        np.testing.assert_array_equal(
            a[np.lexsort(a.T)], b[np.lexsort(b.T)]
        )  # same pixels (RGB kept together)
        assert not np.array_equal(x[i].astype(np.float32), y[i])
    np.testing.assert_array_equal(y, shuffled_pixels(x, seed=1))


def test_generators_shape_range_and_statistics():
    g = gaussian_noise_images(400, shape=(1, 8, 8), seed=0)
    u = uniform_noise_images(400, shape=(3, 4, 5), seed=0)
    p = photo_crops(20, shape=(3, 12, 10), seed=0)
    pg = photo_crops(20, shape=(1, 8, 8), seed=0)
    for arr, shape in ((g, (400, 1, 8, 8)), (u, (400, 3, 4, 5)), (p, (20, 3, 12, 10)), (pg, (20, 1, 8, 8))):
        assert arr.shape == shape and arr.dtype == np.float32 and arr.min() >= 0 and arr.max() <= 1
    # N(0.5, 1) clipped: P(x <= 0) = P(x >= 1) = Φ(-0.5) ≈ 0.3085
    assert abs((g == 0).mean() - 0.3085) < 0.01 and abs((g == 1).mean() - 0.3085) < 0.01
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    assert p.std(axis=(1, 2, 3)).mean() > 0.02  # real texture, not flat
    # grayscale crops are the luma of the colour crops drawn with the same seed (same crop boxes)
    luma = photo_crops(20, shape=(3, 8, 8), seed=0)
    assert np.corrcoef(luma.mean(axis=1).ravel(), pg.ravel())[0, 1] > 0.95
    with pytest.raises(ValueError, match="shape"):
        uniform_noise_images(3, shape=(2, 8, 8))
    with pytest.raises(ValueError, match="n must be"):
        gaussian_noise_images(0, shape=(1, 8, 8))


def test_ood_sets_in_normalised_space(splits):
    sets = ood_sets(splits, n=50, seed=0)
    assert tuple(sets) == NAMES
    for x in sets.values():
        assert x.shape == (50, 1, 8, 8) and x.dtype == torch.float32
        pix = splits.denormalize(x)
        assert pix.min() >= -1e-5 and pix.max() <= 1 + 1e-5
    # adding or removing a kind does not change another kind's images
    torch.testing.assert_close(ood_sets(splits, kinds="photos", n=50, seed=0)["photos"], sets["photos"])
    assert not torch.equal(ood_sets(splits, kinds="photos", n=50, seed=1)["photos"], sets["photos"])
    # shuffled digits come from ID test images: same sorted pixel values as some test image
    test_sorted = {
        tuple(np.round(np.sort(v), 5)) for v in splits.denormalize(splits.x_test).flatten(1).numpy()
    }
    shuf = splits.denormalize(sets["shuffled"]).flatten(1).numpy()
    assert all(tuple(np.round(np.sort(v), 5)) in test_sorted for v in shuf)
    assert len(ood_sets(splits, kinds=["uniform"], seed=0)["uniform"]) == len(splits.x_test)


def test_parse_ood_names():
    assert parse_ood_names("gaussian, photos") == ("gaussian", "photos")
    assert parse_ood_names("all") == NAMES
    with pytest.raises(ValueError, match=r"unknown OOD set\(s\) \['svhn'\]; valid names: gaussian, uniform"):
        parse_ood_names("gaussian,svhn")
    with pytest.raises(ValueError, match="no OOD set"):
        parse_ood_names("")
