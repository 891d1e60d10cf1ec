"""1-D signal shifts: identity at severity 0, exact formulas on tiny inputs, monotone effect, seeding, errors."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from ensemblize.data.shifts1d import (
    SIGNAL_SHIFT_CONSTANTS,
    SIGNAL_SHIFTS,
    parse_signal_shifts,
    shift_signals,
)


def _stream(seed: int, kind: str, i: int) -> np.random.Generator:
    """The documented per-signal stream."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(kind.encode()), i)))


def _signals(n: int = 64, length: int = 40, seed: int = 0) -> np.ndarray:
    """Smooth random signals with unit scale, (n, 1, length)."""
    z = np.random.default_rng(seed).standard_normal((n, 1, length)).cumsum(axis=-1)
    return (z - z.mean(axis=-1, keepdims=True)) / z.std(axis=-1, keepdims=True)


def test_six_kinds_five_severities():
    assert SIGNAL_SHIFTS == (
        "gaussian_noise",
        "time_shift",
        "amplitude_scale",
        "blur",
        "dropout",
        "baseline_wander",
    )
    assert all(len(c) == 5 for c in SIGNAL_SHIFT_CONSTANTS.values())


@pytest.mark.parametrize("kind", SIGNAL_SHIFTS)
def test_severity_0_is_the_identity(kind):
    x = _signals(5)
    out = shift_signals(x, kind, 0, seed=3)
    np.testing.assert_array_equal(out, x)
    assert out is not x


def test_gaussian_noise_formula():
    x = _signals(3, length=7)
    out = shift_signals(x, "gaussian_noise", 4, seed=5)
    z = np.stack([_stream(5, "gaussian_noise", i).standard_normal((1, 7)) for i in range(3)])
    np.testing.assert_allclose(out, x + 0.45 * z, rtol=0, atol=1e-12)


def test_time_shift_formula_repeats_the_edge():
    x = np.arange(8, dtype=np.float64)[None, None].repeat(40, axis=0)  # 40 copies of 0..7
    out = shift_signals(x, "time_shift", 2, seed=0)  # 4 samples
    later = np.array([0, 0, 0, 0, 0, 1, 2, 3], dtype=float)
    earlier = np.array([4, 5, 6, 7, 7, 7, 7, 7], dtype=float)
    for i in range(40):
        sign = 1 if _stream(0, "time_shift", i).random() < 0.5 else -1
        np.testing.assert_array_equal(out[i, 0], later if sign == 1 else earlier)
    assert {tuple(r) for r in out[:, 0]} == {tuple(later), tuple(earlier)}  # both directions occur


def test_amplitude_scale_formula():
    x = _signals(20, length=5)
    out = shift_signals(x, "amplitude_scale", 3, seed=2)
    for i in range(20):
        sign = 1.0 if _stream(2, "amplitude_scale", i).random() < 0.5 else -1.0
        np.testing.assert_allclose(out[i], x[i] * np.exp(sign * 0.45), rtol=1e-12)


@pytest.mark.parametrize("severity", [1, 5])
def test_blur_of_an_impulse_is_the_normalised_gaussian_and_constants_stay(severity):
    x = np.zeros((1, 1, 21))
    x[0, 0, 10] = 1.0
    sigma = SIGNAL_SHIFT_CONSTANTS["blur"][severity - 1]
    out = shift_signals(x, "blur", severity)
    radius = int(4 * sigma + 0.5)
    k = np.arange(-radius, radius + 1)
    w = np.exp(-(k**2) / (2 * sigma**2))
    expected = np.zeros(21)
    expected[10 - radius : 11 + radius] = w / w.sum()
    np.testing.assert_allclose(out[0, 0], expected, atol=1e-12)
    np.testing.assert_allclose(shift_signals(np.full((2, 1, 9), 3.5), "blur", severity), 3.5, atol=1e-12)


def test_dropout_formula_and_nested_masks():
    x = _signals(4, length=30) + 10.0  # never 0 before the shift
    masks = []
    for sev in range(1, 6):
        out = shift_signals(x, "dropout", sev, seed=1)
        c = SIGNAL_SHIFT_CONSTANTS["dropout"][sev - 1]
        u = np.stack([_stream(1, "dropout", i).random(30) for i in range(4)])
        np.testing.assert_array_equal(out[:, 0], np.where(u < c, 0.0, x[:, 0]))
        masks.append(out[:, 0] == 0)
    for low, high in zip(masks, masks[1:], strict=False):
        assert np.all(high[low])  # a higher severity drops a superset


def test_baseline_wander_formula():
    x = _signals(3, length=40)
    out = shift_signals(x, "baseline_wander", 5, seed=9)
    t = np.arange(40)
    for i in range(3):
        phase = _stream(9, "baseline_wander", i).uniform(0.0, 2 * np.pi)
        np.testing.assert_allclose(out[i, 0], x[i, 0] + 2.0 * np.sin(2 * np.pi * t / 40 + phase), atol=1e-12)


@pytest.mark.parametrize("kind", SIGNAL_SHIFTS)
def test_effect_grows_with_severity(kind):
    x = _signals(64)
    dist = [float(np.abs(shift_signals(x, kind, s, seed=0) - x).mean()) for s in range(6)]
    assert dist[0] == 0.0
    assert all(b > a for a, b in zip(dist, dist[1:], strict=False)), dist


@pytest.mark.parametrize("kind", SIGNAL_SHIFTS)
def test_seeded_per_signal_and_types_kept(kind):
    x = _signals(6)
    a = shift_signals(x, kind, 3, seed=4)
    np.testing.assert_array_equal(a, shift_signals(x, kind, 3, seed=4))
    # signal i depends only on (seed, kind, i): appending signals changes nothing before them
    np.testing.assert_array_equal(shift_signals(x[:2], kind, 3, seed=4), a[:2])
    if kind != "blur":  # blur is deterministic
        assert not np.array_equal(a, shift_signals(x, kind, 3, seed=5))
    t = torch.tensor(x, dtype=torch.float32)
    before = t.clone()
    out = shift_signals(t, kind, 3, seed=4)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == t.shape
    assert torch.equal(t, before)  # input not modified
    np.testing.assert_allclose(out.numpy(), shift_signals(x.astype(np.float32), kind, 3, seed=4), atol=1e-6)
    single = shift_signals(x[0], kind, 3, seed=4)  # one (C, L) signal
    np.testing.assert_array_equal(single, a[0])


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (
            (np.zeros((2, 1, 5)), "fog", 1),
            ValueError,
            r"signal shift kind must be one of \('gaussian_noise', .*\), got 'fog'",
        ),
        ((np.zeros((2, 1, 5)), "blur", 6), ValueError, "severity must be <= 5, got 6"),
        ((np.zeros((2, 1, 5)), "blur", True), TypeError, "severity must be an int >= 0, got True"),
        ((np.zeros((2, 1, 5), dtype=np.int64), "blur", 1), TypeError, "floating-point"),
        ((np.zeros(5), "blur", 1), ValueError, r"\(N, C, L\) or \(C, L\)"),
        ((np.full((1, 1, 3), np.nan), "blur", 1), ValueError, "non-finite"),
        (([[0.0]], "blur", 1), TypeError, "NumPy array or torch tensor"),
    ],
)
def test_bad_input_is_named(args, exc, match):
    with pytest.raises(exc, match=match):
        shift_signals(*args)
    with pytest.raises(ValueError, match="seed"):
        shift_signals(np.zeros((1, 1, 4)), "blur", 1, seed=-1)


def test_parse_signal_shifts():
    assert parse_signal_shifts("blur, dropout") == ("blur", "dropout")
    assert parse_signal_shifts("all") == SIGNAL_SHIFTS
    with pytest.raises(ValueError, match=r"unknown signal shift\(s\) \['fog'\]"):
        parse_signal_shifts("blur,fog")
    with pytest.raises(ValueError, match="repeat"):
        parse_signal_shifts(["blur", "blur"])
