"""CIFAR-10-C corruptions: contract (shape/dtype/range/seeding) and values against closed forms."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from matplotlib.colors import hsv_to_rgb, rgb_to_hsv
from PIL import Image
from scipy import ndimage
from sklearn.datasets import load_digits

from ensemblize.data import corruptions as C
from ensemblize.data.corruptions import CORRUPTIONS, SEVERITY_CONSTANTS, corrupt, corrupt_dataset
from ensemblize.data.ood import photo_crops

GRAY = (load_digits().images[:6, None] / 16.0).astype(np.float64)  # (6, 1, 8, 8) real digits
COLOUR = photo_crops(4, shape=(3, 32, 32), seed=0).astype(np.float64)  # (4, 3, 32, 32) real photos
SEVERITIES = (1, 2, 3, 4, 5)


def _cases():
    for kind in CORRUPTIONS:
        for data in ("gray8", "colour32"):
            if kind == "saturate" and data == "gray8":
                continue
            yield pytest.param(kind, data, id=f"{kind}-{data}")


@pytest.mark.parametrize(("kind", "data"), list(_cases()))
def test_contract_every_kind_and_severity(kind, data):
    x = GRAY if data == "gray8" else COLOUR
    x32 = x.astype(np.float32)
    for s in SEVERITIES:
        y = corrupt(x32, kind, s, 7)
        assert y.shape == x.shape and y.dtype == np.float32
        assert np.isfinite(y).all() and y.min() >= 0.0 and y.max() <= 1.0
        np.testing.assert_array_equal(y, corrupt(x32, kind, s, 7))  # deterministic for a seed
        # image i depends only on (seed, i) and its pixels: a prefix batch gives the same images
        np.testing.assert_array_equal(corrupt(x32[:2], kind, s, 7), y[:2])
        # a single (C, H, W) image is image 0 of a batch
        np.testing.assert_array_equal(corrupt(x32[0], kind, s, 7), y[0])
    np.testing.assert_array_equal(x32, x.astype(np.float32))  # the input is never modified
    # the corruption changes something at the top severity
    assert np.abs(corrupt(x, kind, 5, 7) - x).max() > 1e-3 or kind in ("gaussian_blur", "defocus_blur")


def test_chunking_does_not_change_results(monkeypatch):
    x = COLOUR
    full = {k: corrupt(x, k, 3, 1) for k in ("gaussian_noise", "glass_blur", "fog", "elastic_transform")}
    monkeypatch.setattr(C, "_CHUNK", 3)
    for k, y in full.items():
        np.testing.assert_array_equal(corrupt(x, k, 3, 1), y)


def test_seed_and_kind_change_the_noise():
    x = np.full((2, 1, 8, 8), 0.5)
    a = corrupt(x, "gaussian_noise", 3, 0)
    assert not np.array_equal(a, corrupt(x, "gaussian_noise", 3, 1))
    assert not np.array_equal(a[0], a[1])  # each image has its own stream
    z_gauss = (a - x) / 0.08
    z_speckle = (corrupt(x, "speckle_noise", 3, 0) - x) / (0.5 * 0.12)
    assert np.abs(z_gauss - z_speckle).max() > 0.1  # kinds draw from different streams


def test_tensor_in_tensor_out():
    x = torch.tensor(COLOUR[:2], dtype=torch.float64)
    y = corrupt(x, "fog", 4, 3)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64 and y.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), corrupt(COLOUR[:2], "fog", 4, 3))
    y32 = corrupt(x.float(), "contrast", 2, 0)
    assert y32.dtype == torch.float32


MONOTONE = {
    "gray8": (
        "gaussian_noise",
        "shot_noise",
        "impulse_noise",
        "speckle_noise",
        "zoom_blur",
        "contrast",
        "brightness",
        "fog",
        "jpeg_compression",
    ),
    "colour32": (
        "gaussian_noise",
        "shot_noise",
        "impulse_noise",
        "speckle_noise",
        "gaussian_blur",
        "defocus_blur",
        "zoom_blur",
        "contrast",
        "brightness",
        "fog",
        "pixelate",
        "jpeg_compression",
    ),
}


@pytest.mark.parametrize("data", ["gray8", "colour32"])
def test_mean_change_grows_with_severity(data):
    x = GRAY if data == "gray8" else COLOUR
    for kind in MONOTONE[data]:
        change = [np.abs(corrupt(x, kind, s, 0) - x).mean() for s in SEVERITIES]
        assert np.all(np.diff(change) > 0), (kind, change)


def test_blurs_grow_with_severity_on_8x8_in_raw_pixels():
    for kind in ("gaussian_blur", "defocus_blur"):
        change = [np.abs(corrupt(GRAY, kind, s, 0, reference_size=8) - GRAY).mean() for s in SEVERITIES]
        assert np.all(np.diff(change) > 0) and change[0] > 0.01, (kind, change)


# --- closed forms and independent references -----------------------------------------------------


def test_constants_are_the_cifar_ones():
    assert SEVERITY_CONSTANTS["gaussian_noise"] == (0.04, 0.06, 0.08, 0.09, 0.10)
    assert SEVERITY_CONSTANTS["shot_noise"] == (500, 250, 100, 75, 50)
    assert SEVERITY_CONSTANTS["jpeg_compression"] == (80, 65, 58, 50, 40)
    assert len(CORRUPTIONS) == 15 and all(len(v) == 5 for v in SEVERITY_CONSTANTS.values())


def test_gaussian_noise_is_x_plus_c_z_with_common_random_numbers():
    x = np.full((3, 3, 32, 32), 0.5)
    z = [
        (corrupt(x, "gaussian_noise", s, 4) - x) / c
        for s, c in zip(SEVERITIES, (0.04, 0.06, 0.08, 0.09, 0.10), strict=True)
    ]
    for zi in z[1:]:
        np.testing.assert_allclose(zi, z[0], atol=1e-9)  # same field, scaled by the constant
    assert abs(z[0].std() - 1) < 0.03 and abs(z[0].mean()) < 0.03


def test_shot_noise_is_poisson_over_c():
    x = np.full((4, 1, 32, 32), 0.3)
    y = corrupt(x, "shot_noise", 3, 0)  # c = 100: y = Poisson(30) / 100
    np.testing.assert_allclose(y * 100, np.round(y * 100), atol=1e-9)
    assert abs(y.mean() - 0.3) < 0.01 and abs(y.var() - 0.3 / 100) < 0.0004


def test_impulse_noise_flips_a_fraction_c_to_0_or_1():
    x = np.full((4, 3, 32, 32), 0.5)
    y = corrupt(x, "impulse_noise", 5, 0)  # c = 0.07
    changed = y != 0.5
    assert set(np.unique(y[changed]).tolist()) <= {0.0, 1.0}
    assert abs(changed.mean() - 0.07) < 0.01


def test_contrast_and_brightness_on_constant_and_known_images():
    x = np.full((1, 1, 8, 8), 0.4)
    x[..., 0, 0] = 0.8  # channel mean m = 0.40625
    m = x.mean()
    for s, c in zip(SEVERITIES, SEVERITY_CONSTANTS["contrast"], strict=True):
        np.testing.assert_allclose(corrupt(x, "contrast", s, 0), (x - m) * c + m, atol=1e-12)
    for s, c in zip(SEVERITIES, SEVERITY_CONSTANTS["brightness"], strict=True):
        np.testing.assert_allclose(corrupt(x, "brightness", s, 0), np.minimum(x + c, 1.0), atol=1e-12)
    black = np.zeros((1, 3, 4, 4))
    np.testing.assert_allclose(corrupt(black, "brightness", 5, 0), 0.3)  # v' = 0.3, s = 0 -> gray


@pytest.mark.parametrize("kind", ["brightness", "saturate"])
def test_hsv_kinds_match_matplotlib_hsv_round_trip(kind):
    rng = np.random.default_rng(0)
    x = rng.random((3, 3, 8, 8))
    x[0, :, 0, 0] = 0.6  # a gray pixel: hue 0, so saturate tints it red at severities 4-5
    x[0, :, 0, 1] = 0.0  # a black pixel
    for s, c in zip(SEVERITIES, SEVERITY_CONSTANTS[kind], strict=True):
        hsv = rgb_to_hsv(x.transpose(0, 2, 3, 1))
        if kind == "brightness":
            hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
        else:
            hsv[..., 1] = np.clip(hsv[..., 1] * c[0] + c[1], 0, 1)
        ref = np.clip(hsv_to_rgb(hsv), 0, 1).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(corrupt(x, kind, s, 0), ref, atol=1e-9)


@pytest.mark.parametrize("ref", [8, 32])
def test_gaussian_blur_sigma_scales_with_size(ref):
    for s, c in zip(SEVERITIES, SEVERITY_CONSTANTS["gaussian_blur"], strict=True):
        sigma = c * 8 / ref
        expected = ndimage.gaussian_filter(
            GRAY, (0, 0, sigma, sigma), mode="nearest", truncate=max(4.0, 0.5 / sigma)
        )
        np.testing.assert_allclose(
            corrupt(GRAY, "gaussian_blur", s, 0, reference_size=ref), expected, atol=1e-12
        )


def test_pixelate_matches_pillow_box_resize():
    for s, c in zip(SEVERITIES, SEVERITY_CONSTANTS["pixelate"], strict=True):
        y = corrupt(COLOUR[:1], "pixelate", s, 0)
        side = int(32 * c)
        for ch in range(3):
            img = Image.fromarray(COLOUR[0, ch].astype(np.float32), mode="F")
            ref = np.asarray(img.resize((side, side), Image.BOX).resize((32, 32), Image.BOX))
            np.testing.assert_allclose(y[0, ch], np.clip(ref, 0, 1), atol=1e-5)


def test_jpeg_matches_pillow_at_the_quality_constant():
    y = corrupt(COLOUR[:1], "jpeg_compression", 5, 0)
    buf = io.BytesIO()
    Image.fromarray(np.round(COLOUR[0].transpose(1, 2, 0) * 255).astype(np.uint8)).save(
        buf, "JPEG", quality=40
    )
    ref = np.asarray(Image.open(io.BytesIO(buf.getvalue())), dtype=np.float64) / 255
    np.testing.assert_allclose(y[0], ref.transpose(2, 0, 1), atol=1e-12)


@pytest.mark.parametrize(
    "kind", ["gaussian_blur", "glass_blur", "defocus_blur", "zoom_blur", "pixelate", "elastic_transform"]
)
def test_spatial_kinds_keep_a_constant_image(kind):
    x = np.full((2, 3, 16, 12), 0.37)
    for s in SEVERITIES:
        np.testing.assert_allclose(corrupt(x, kind, s, 0), 0.37, atol=1e-12)


def test_fog_closed_form_and_plasma_range():
    rngs = C._streams(0, "fog", 0, 3)
    plasma = C._plasma(rngs, 16, 2.0)
    assert plasma.shape == (3, 16, 16)
    np.testing.assert_allclose(plasma.min(axis=(1, 2)), 0.0)
    np.testing.assert_allclose(plasma.max(axis=(1, 2)), 1.0)
    # (x + a·plasma) · max / (max + a) with the plasma cropped from the 8×8 map for an 8×8 image
    x = GRAY[:3]
    a, decay = SEVERITY_CONSTANTS["fog"][2]
    p = C._plasma(C._streams(0, "fog", 0, 3), 8, decay)[:, None]
    mx = x.max(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(
        corrupt(x, "fog", 3, 0), np.clip((x + a * p) * mx / (mx + a), 0, 1), atol=1e-12
    )


def test_defocus_kernel_is_the_cifar_disk():
    k = C._disk_kernel(1.0, 1.0, 0.2, 0.2)  # severity 4 at 32×32: a 5-pixel cross, then a 3×3 Gaussian
    assert k.shape == (5, 5) and abs(k.sum() - 1) < 1e-12
    np.testing.assert_allclose(k, k.T)
    np.testing.assert_allclose(k, k[::-1, ::-1])
    assert k[2, 2] == k.max() and k[0, 0] < 1e-20


def test_glass_blur_without_blur_only_permutes_pixels(monkeypatch):
    monkeypatch.setitem(SEVERITY_CONSTANTS, "glass_blur", ((0.0, 1, 2),) * 5)
    y = corrupt(COLOUR[:2], "glass_blur", 1, 0)
    for i in range(2):
        before, after = COLOUR[i].reshape(3, -1).T, y[i].reshape(3, -1).T  # (pixels, RGB)
        np.testing.assert_array_equal(before[np.lexsort(before.T)], after[np.lexsort(after.T)])
    assert not np.array_equal(y, COLOUR[:2])


# --- errors and the dataset helper ---------------------------------------------------------------


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="corruption kind must be one of .*gaussian_noise.*fog.*got 'rain'"):
        corrupt(GRAY, "rain", 1, 0)
    for bad in (0, 6):
        with pytest.raises(ValueError, match=f"severity must be .*, got {bad}"):
            corrupt(GRAY, "fog", bad, 0)
    for bad in (2.5, True):
        with pytest.raises(TypeError, match=f"severity must be an int >= 1, got {bad}"):
            corrupt(GRAY, "fog", bad, 0)
    with pytest.raises(TypeError, match="reference_size must be an int"):
        corrupt(GRAY, "fog", 1, 0, reference_size=32.0)
    with pytest.raises(ValueError, match="'saturate' needs colour"):
        corrupt(GRAY, "saturate", 1, 0)
    with pytest.raises(ValueError, match=r"\[0, 1\] pixels"):
        corrupt(GRAY * 2 - 0.5, "fog", 1, 0)
    with pytest.raises(TypeError, match="floating-point"):
        corrupt((GRAY * 255).astype(np.uint8), "fog", 1, 0)
    with pytest.raises(ValueError, match="1 or 3 channels"):
        corrupt(np.zeros((1, 2, 8, 8)), "fog", 1, 0)
    with pytest.raises(ValueError, match="seed"):
        corrupt(GRAY, "fog", 1, -1)
    with pytest.raises(TypeError, match="NumPy array or torch tensor"):
        corrupt(GRAY.tolist(), "fog", 1, 0)


def test_corrupt_dataset_covers_every_applicable_pair():
    got = {(k, s): y for k, s, y in corrupt_dataset(GRAY[:2], severities=(1, 5), seed=3)}
    assert set(got) == {(k, s) for k in CORRUPTIONS if k != "saturate" for s in (1, 5)}
    np.testing.assert_array_equal(got[("fog", 5)], corrupt(GRAY[:2], "fog", 5, 3))
    with pytest.raises(ValueError, match="saturate"):
        corrupt_dataset(GRAY[:2], kinds=["saturate"], seed=0)
    with pytest.raises(ValueError, match="severity"):
        corrupt_dataset(GRAY[:2], severities=(0,), seed=0)
    assert C.parse_corruptions("fog, contrast") == ("fog", "contrast")
    assert C.parse_corruptions("all") == CORRUPTIONS
