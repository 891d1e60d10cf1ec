"""CIFAR-10-C style corruptions (Hendrycks & Dietterich, ICLR 2019) for images of any size.

``corrupt(images, kind, severity, seed)`` applies one of :data:`CORRUPTIONS` at severity 1..5 to
float images in the [0, 1] *pixel* range (not normalised), shaped ``(N, C, H, W)`` or ``(C, H, W)``
with ``C = 1`` (grayscale) or ``C = 3`` (RGB), as a NumPy array or a torch tensor. The result has the
same shape, type and dtype, clipped to [0, 1].

Only NumPy, SciPy and Pillow are used (no OpenCV, scikit-image or ImageMagick), so the four
corruptions that need those or external image files are left out: motion_blur, snow, frost, spatter.

**Constants.** Every constant is in :data:`SEVERITY_CONSTANTS`, copied from the CIFAR (32×32)
script ``make_cifar_c.py`` of github.com/hendrycks/robustness (``ImageNet-C/create_c/``,
checked against commit ca360085), *not* from the ImageNet-C script.

**Image size.** The CIFAR constants assume 32×32. Constants measured in pixels are scaled
proportionally per axis by ``H / reference_size`` and ``W / reference_size`` (default 32), which
makes a corruption of an 8×8 image the 8×8 version of the 32×32 corruption (scikit-learn's digits
are in fact 4×4 block sums of 32×32 bitmaps). Pass ``reference_size=H`` to use the constants in raw
pixels instead (stronger spatial corruptions on small images). Per kind:

* gaussian_blur σ, glass_blur σ, defocus_blur disk radius and anti-alias σ: × (H/ref, W/ref).
* glass_blur's local-shuffle distance: ``max(1, round(1 · H/ref))`` pixels (a pixel is the least a
  pixel can move, so glass blur is relatively stronger on images smaller than 32×32).
* elastic_transform: its constants are already ``32 · k``; they become ``H · k`` (rows) and ``W · k``
  (columns).
* pixelate: already relative (resize to ``int(c · H) × int(c · W)`` and back, at least 1×1). On
  small images neighbouring severities can give the same size: on 8×8 digits severities 1 and 2 both
  resize to 7×7 and 3 and 4 to 6×6, so only three of the five levels differ.
* zoom_blur: zoom factors are relative; implemented as a continuous zoom about the image centre.
* fog: the plasma fractal is generated at the next power of two ≥ max(H, W) and cropped, so its
  coarse octaves (which dominate; each finer octave is 1/decay² weaker) cover the image as at 32×32.
* Noise kinds, contrast, brightness, saturate: per pixel, size-free. jpeg_compression: JPEG's 8×8
  blocks are a fixed pixel size; nothing is scaled.

**Randomness.** Image ``i`` of a call draws from its own stream
``np.random.default_rng(SeedSequence(seed, spawn_key=(crc32(kind), i)))``: its result depends only on
``(seed, kind, i)`` and its pixels — not on N or on the other images — and every severity uses the
same random field (common random numbers), so a higher severity scales the *same* perturbation.

**Deviations from make_cifar_c.py** (all deliberate, for float images of any size): no uint8
quantisation between or after steps (except JPEG, which is uint8 by nature); zoom_blur uses a
continuous zoom instead of crop-and-``scipy.ndimage.zoom``; elastic_transform's affine step is solved
in (row, column) coordinates with NumPy instead of OpenCV. Kept on purpose: glass_blur's offsets are
drawn from ``{-d, ..., d-1}`` (``randint(-d, d)`` excludes ``d``), the plasma fractal's noise scale is
``wibble²``, and saturate tints gray pixels red at severities 4-5 (hue 0 with added saturation).
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from scipy import ndimage

from .._checks import check_choice, check_int, check_size, float64_copy
from ._names import parse_names

__all__ = [
    "CORRUPTIONS",
    "SEVERITY_CONSTANTS",
    "corrupt",
    "corrupt_dataset",
    "parse_corruptions",
]

# --- constants -------------------------------------------------------------------------------------
# Source: hendrycks/robustness, ImageNet-C/create_c/make_cifar_c.py (the CIFAR-10-C / CIFAR-100-C
# script; commit ca360085). One entry per severity 1..5. Units: [0, 1] pixels unless stated;
# "px" = pixels of a 32×32 image (scaled with the image size, see the module docstring).
SEVERITY_CONSTANTS: dict[str, tuple[Any, ...]] = {
    # noise std of x + c·z
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    # photon count scale of Poisson(c·x) / c
    "shot_noise": (500, 250, 100, 75, 50),
    # salt-and-pepper fraction of values (per channel value)
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
    # std of the multiplicative noise x + x·c·z
    "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),
    # Gaussian σ (px)
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
    # (σ px, max shuffle distance px, iterations)
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
    # (disk radius px, anti-alias Gaussian σ px)
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
    # zoom factors np.arange(1, stop, 0.01), given as stop
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
    # factor on the deviation from the per-channel mean
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
    # added to HSV value
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
    # HSV saturation s -> s·a + b, as (a, b)
    "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),
    # relative size of the intermediate image (Pillow BOX down, BOX up)
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    # Pillow JPEG quality
    "jpeg_compression": (80, 65, 58, 50, 40),
    # (alpha, sigma, affine jitter) as fractions of the image size (32·k in the source)
    "elastic_transform": (
        (0.0, 0.0, 0.08),
        (0.05, 0.2, 0.07),
        (0.08, 0.06, 0.06),
        (0.1, 0.04, 0.05),
        (0.1, 0.03, 0.03),
    ),
    # (fog strength added, plasma wibble decay)
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
}

CORRUPTIONS: tuple[str, ...] = tuple(SEVERITY_CONSTANTS)
"""Names of the supported corruption kinds (``saturate`` needs colour images)."""

_COLOUR_ONLY = frozenset({"saturate"})
_CHUNK = 512  # images per vectorised block (bounds memory; results do not depend on it)


# --- validation ------------------------------------------------------------------------------------


def _check_severity(severity: object) -> int:
    return check_size(severity, name="severity", minimum=1, maximum=5)


def _as_batch(images: object) -> tuple[np.ndarray, bool]:
    """Validated float64 copy ``(N, C, H, W)`` and whether the input was a single image."""
    arr = float64_copy(images, name="images")
    single = arr.ndim == 3
    if arr.ndim not in (3, 4):
        raise ValueError(f"images must be (N, C, H, W) or (C, H, W), got shape {tuple(arr.shape)}")
    if single:
        arr = arr[None]
    if arr.shape[1] not in (1, 3):
        raise ValueError(f"images must have 1 or 3 channels, got {arr.shape[1]} (shape {tuple(arr.shape)})")
    if arr.size:
        if not np.isfinite(arr).all():
            raise ValueError("images contain non-finite values (NaN or inf)")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0:
            raise ValueError(
                f"images must be [0, 1] pixels (not normalised inputs), got values in [{lo:.4g}, {hi:.4g}]"
            )
    return arr, single


def _restore(out: np.ndarray, like: np.ndarray | torch.Tensor, single: bool) -> np.ndarray | torch.Tensor:
    out = np.clip(out, 0.0, 1.0)
    if single:
        out = out[0]
    if isinstance(like, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(out)).to(dtype=like.dtype, device=like.device)
    return out.astype(like.dtype, copy=False)


def _streams(seed: int, kind: str, start: int, stop: int) -> list[np.random.Generator]:
    key = zlib.crc32(kind.encode())
    return [
        np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key, i))) for i in range(start, stop)
    ]


# --- helpers ---------------------------------------------------------------------------------------


def _gaussian_blur(x: np.ndarray, sigma_y: float, sigma_x: float, mode: str = "nearest") -> np.ndarray:
    """Separable Gaussian over the last two axes (kernel radius ≥ 1 so any σ > 0 acts)."""
    out = x
    for axis, sigma in ((-2, sigma_y), (-1, sigma_x)):
        if sigma > 0:
            truncate = max(4.0, 0.5 / sigma)
            out = ndimage.gaussian_filter1d(out, sigma, axis=axis, mode=mode, truncate=truncate)
    return out


def _disk_kernel(radius_y: float, radius_x: float, alias_sigma_y: float, alias_sigma_x: float) -> np.ndarray:
    """make_cifar_c's aliased disk (normalised), then blurred with a 3×3 (5×5 if r > 8) Gaussian."""
    r = max(radius_y, radius_x)
    half = 8 if r <= 8 else int(np.ceil(r))
    ksize = 3 if r <= 8 else 5
    grid = np.arange(-half, half + 1, dtype=np.float64)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    disk = ((yy / radius_y) ** 2 + (xx / radius_x) ** 2 <= 1.0).astype(np.float64)
    disk /= disk.sum()
    k = np.arange(ksize, dtype=np.float64) - ksize // 2

    def g(s: float) -> np.ndarray:
        w = np.exp(-(k**2) / (2 * s**2)) if s > 0 else (k == 0).astype(np.float64)
        return w / w.sum()

    kernel = ndimage.correlate1d(disk, g(alias_sigma_y), axis=0, mode="constant")
    kernel = ndimage.correlate1d(kernel, g(alias_sigma_x), axis=1, mode="constant")
    rows = np.flatnonzero(kernel.sum(axis=1) > 1e-12)
    cols = np.flatnonzero(kernel.sum(axis=0) > 1e-12)
    # keep the support symmetric about the centre so the kernel stays centred
    ry = max(half - rows.min(), rows.max() - half)
    rx = max(half - cols.min(), cols.max() - half)
    kernel = kernel[half - ry : half + ry + 1, half - rx : half + rx + 1]
    return kernel / kernel.sum()


def _box_resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` weights of Pillow's BOX resampling along one axis."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 0.5 * filterscale
    mat = np.zeros((n_out, n_in))
    for j in range(n_out):
        center = (j + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        pos = (np.arange(lo, hi) - center + 0.5) / filterscale
        w = ((pos > -0.5) & (pos <= 0.5)).astype(np.float64)
        if w.sum() > 0:
            mat[j, lo:hi] = w / w.sum()
    return mat


def _fold_coordinates(p: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Map coordinates into ``[0, n-1]`` as SciPy's boundary ``mode`` extends the signal."""
    if n == 1:
        return np.zeros_like(p)
    if mode == "nearest":
        return np.clip(p, 0, n - 1)
    if mode == "mirror":  # d c b | a b c d | c b a  (reflect about the edge pixels' centres)
        period = 2 * (n - 1)
        p = np.mod(p, period)
        return np.where(p > n - 1, period - p, p)
    if mode == "reflect":  # d c b a | a b c d | d c b a  (reflect about the edge pixels' borders)
        period = 2 * n
        p = np.mod(p + 0.5, period) - 0.5
        return np.clip(np.where(p > n - 0.5, period - 1 - p, p), 0, n - 1)
    raise ValueError(f"unknown boundary mode {mode!r}")


def _resample(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, mode: str) -> np.ndarray:
    """Bilinear ``out[n, c, i, j] = x[n, c, rows[n, i, j], cols[n, i, j]]`` (SciPy boundary ``mode``)."""
    n, c, h, w = x.shape
    r = _fold_coordinates(rows, h, mode)
    q = _fold_coordinates(cols, w, mode)
    r0 = np.minimum(np.floor(r).astype(np.intp), h - 1)
    q0 = np.minimum(np.floor(q).astype(np.intp), w - 1)
    r1, q1 = np.minimum(r0 + 1, h - 1), np.minimum(q0 + 1, w - 1)
    fr, fq = (r - r0)[:, None], (q - q0)[:, None]
    flat = x.reshape(n, c, h * w)

    def at(ri: np.ndarray, qi: np.ndarray) -> np.ndarray:
        idx = (ri * w + qi).reshape(n, 1, h * w)
        return np.take_along_axis(flat, np.broadcast_to(idx, (n, c, h * w)), axis=2).reshape(n, c, h, w)

    top = at(r0, q0) * (1 - fq) + at(r0, q1) * fq
    bottom = at(r1, q0) * (1 - fq) + at(r1, q1) * fq
    return top * (1 - fr) + bottom * fr


def _linear_matrix(coords: np.ndarray, n: int, mode: str) -> np.ndarray:
    """``(len(coords), n)`` matrix of 1-D linear interpolation at ``coords`` (SciPy boundary ``mode``)."""
    p = _fold_coordinates(coords, n, mode)
    i0 = np.minimum(np.floor(p).astype(np.intp), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    f = p - i0
    mat = np.zeros((len(coords), n))
    rows = np.arange(len(coords))
    np.add.at(mat, (rows, i0), 1 - f)
    np.add.at(mat, (rows, i1), f)
    return mat


def _plasma(rngs: list[np.random.Generator], size: int, decay: float) -> np.ndarray:
    """Diamond-square plasma fractals ``(N, size, size)`` in [0, 1]; ``size`` a power of two ≥ 2.

    Each map cell is filled once, with ``mean of its 4 neighbours + wibble² · U(-1, 1)`` (toroidal
    neighbours; wibble starts at 100 and is divided by ``decay`` per octave), as make_cifar_c.py does.
    Each image's uniforms come from its own stream: one draw of ``size²`` values per image.
    """
    u = np.stack([r.uniform(-1.0, 1.0, size=(size, size)) for r in rngs])
    m = np.zeros_like(u)
    step, wibble = size, 100.0
    while step >= 2:
        h = step // 2
        amp = wibble * wibble
        corners = m[:, 0::step, 0::step]
        acc = corners + np.roll(corners, -1, axis=1)
        acc = acc + np.roll(acc, -1, axis=2)
        m[:, h::step, h::step] = acc / 4 + amp * u[:, h::step, h::step]
        centres = m[:, h::step, h::step]
        corners = m[:, 0::step, 0::step]
        left = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        m[:, 0::step, h::step] = left / 4 + amp * u[:, 0::step, h::step]
        top = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        m[:, h::step, 0::step] = top / 4 + amp * u[:, h::step, 0::step]
        step //= 2
        wibble /= decay
    m -= m.min(axis=(1, 2), keepdims=True)
    top = m.max(axis=(1, 2), keepdims=True)
    return np.divide(m, top, out=np.zeros_like(m), where=top > 0)


# --- the corruptions -------------------------------------------------------------------------------
# Each takes x (N, C, H, W) float64 in [0, 1], the severity's constant, the per-image streams and the
# per-axis scale (H / ref, W / ref), and returns the unclipped result.


def _gaussian_noise(x, c, rngs, scale):
    z = np.stack([r.standard_normal(x.shape[1:]) for r in rngs])
    return x + c * z


def _shot_noise(x, c, rngs, scale):
    return np.stack([r.poisson(xi * c) for r, xi in zip(rngs, x, strict=True)]) / c


def _impulse_noise(x, c, rngs, scale):
    u = np.stack([r.random((2, *x.shape[1:])) for r in rngs])
    flipped, salt = u[:, 0] < c, u[:, 1] < 0.5
    return np.where(flipped, salt.astype(np.float64), x)


def _speckle_noise(x, c, rngs, scale):
    z = np.stack([r.standard_normal(x.shape[1:]) for r in rngs])
    return x + x * c * z


def _gaussian_blur_kind(x, c, rngs, scale):
    return _gaussian_blur(x, c * scale[0], c * scale[1])


def _glass_blur(x, c, rngs, scale):
    sigma, dist, iterations = c
    n, _, h, w = x.shape
    dy, dx = (max(1, round(dist * s)) for s in scale)
    x = _gaussian_blur(x, sigma * scale[0], sigma * scale[1])
    hs, ws = list(range(h - dy, dy, -1)), list(range(w - dx, dx, -1))
    if hs and ws:
        # offsets in {-d, ..., d-1}, one (dy, dx) pair per visited pixel, drawn per image up front
        offs = np.stack(
            [
                np.stack(
                    [
                        r.integers(-dy, dy, size=(iterations, len(hs), len(ws))),
                        r.integers(-dx, dx, size=(iterations, len(hs), len(ws))),
                    ],
                    axis=-1,
                )
                for r in rngs
            ]
        )
        idx = np.arange(n)
        x = np.ascontiguousarray(x)
        for it in range(iterations):
            for a, hh in enumerate(hs):
                for b, ww in enumerate(ws):  # sequential swaps over pixels; vectorised over images
                    h2, w2 = hh + offs[:, it, a, b, 0], ww + offs[:, it, a, b, 1]
                    here, there = x[idx, :, hh, ww], x[idx, :, h2, w2]
                    x[idx, :, hh, ww], x[idx, :, h2, w2] = there, here
    return _gaussian_blur(x, sigma * scale[0], sigma * scale[1])


def _defocus_blur(x, c, rngs, scale):
    radius, alias = c
    kernel = _disk_kernel(radius * scale[0], radius * scale[1], alias * scale[0], alias * scale[1])
    return ndimage.correlate(x, kernel[None, None], mode="mirror")


def _zoom_blur(x, c, rngs, scale):
    # mean of x and x zoomed about its centre by each factor (zoom is separable: one matrix per axis)
    _, _, h, w = x.shape
    factors = np.arange(1, c, 0.01)
    cy, cx = (h - 1) / 2, (w - 1) / 2
    out = x.copy()
    for z in factors:
        zy = _linear_matrix(cy + (np.arange(h) - cy) / z, h, "nearest")
        zx = _linear_matrix(cx + (np.arange(w) - cx) / z, w, "nearest")
        out += zy @ x @ zx.T
    return out / (len(factors) + 1)


def _contrast(x, c, rngs, scale):
    means = x.mean(axis=(2, 3), keepdims=True)
    return (x - means) * c + means


def _brightness(x, c, rngs, scale):
    # HSV value v = max over channels; with hue and saturation fixed, RGB is proportional to v,
    # so raising v to v' = min(v + c, 1) scales the pixel by v'/v (a black pixel becomes gray v').
    v = x.max(axis=1, keepdims=True)
    v_new = np.minimum(v + c, 1.0)
    ratio = np.divide(v_new, v, out=np.zeros_like(v), where=v > 0)
    return np.where(v > 0, x * ratio, v_new)


def _saturate(x, c, rngs, scale):
    # HSV: v = max, s = (max - min) / max. With h, v fixed each channel is v - s·v·k_c, so changing
    # s to s' maps x -> v - (s'/s)(v - x). Gray pixels (s = 0) have hue 0 (red): s' > 0 tints them red.
    a, b = c
    v = x.max(axis=1, keepdims=True)
    lo = x.min(axis=1, keepdims=True)
    s = np.divide(v - lo, v, out=np.zeros_like(v), where=v > 0)
    s_new = np.clip(s * a + b, 0.0, 1.0)
    ratio = np.divide(s_new, s, out=np.zeros_like(s), where=s > 0)
    coloured = v - ratio * (v - x)
    red = np.concatenate([v, v * (1 - s_new), v * (1 - s_new)], axis=1)
    return np.where(s > 0, coloured, red)


def _pixelate(x, c, rngs, scale):
    _, _, h, w = x.shape
    sh, sw = max(1, int(h * c)), max(1, int(w * c))
    down_h, down_w = _box_resize_matrix(h, sh), _box_resize_matrix(w, sw)
    up_h, up_w = _box_resize_matrix(sh, h), _box_resize_matrix(sw, w)
    small = down_h @ x @ down_w.T
    return up_h @ small @ up_w.T


def _jpeg_compression(x, c, rngs, scale):
    from PIL import Image

    out = np.empty_like(x)
    u8 = np.round(x * 255).astype(np.uint8)
    for i, img in enumerate(u8):  # Pillow encodes one image at a time
        arr = img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0)
        buf = io.BytesIO()
        Image.fromarray(arr, mode="L" if img.shape[0] == 1 else "RGB").save(buf, format="JPEG", quality=c)
        buf.seek(0)
        dec = np.asarray(Image.open(buf), dtype=np.float64) / 255.0
        out[i] = dec[None] if img.shape[0] == 1 else dec.transpose(2, 0, 1)
    return out


def _elastic_transform(x, c, rngs, scale):
    n, _, h, w = x.shape
    alpha_k, sigma_k, jitter_k = c
    alpha = np.array([alpha_k * h, alpha_k * w])
    sigma = (sigma_k * h, sigma_k * w)
    jitter = np.array([jitter_k * h, jitter_k * w])
    centre = np.array([h // 2, w // 2], dtype=np.float64)
    sq = min(h, w) // 3
    src = np.array([centre + sq, [centre[0] + sq, centre[1] - sq], centre - sq])  # (3, 2) (row, col)
    draws = [(r.uniform(-1, 1, size=(3, 2)), r.uniform(-1, 1, size=(2, h, w))) for r in rngs]
    dst = src[None] + np.stack([d[0] for d in draws]) * jitter  # (N, 3, 2)
    # affine p -> A p + t mapping src points to dst points; output pixel q samples A^{-1}(q - t)
    src_h = np.concatenate([src, np.ones((3, 1))], axis=1)  # (3, 3)
    if sq == 0:  # degenerate triangle (images under 3 pixels): no affine step
        mats = np.broadcast_to(np.array([[1.0, 0, 0], [0, 1.0, 0]]), (n, 2, 3))
    else:
        mats = np.linalg.solve(src_h[None], dst).transpose(0, 2, 1)  # (N, 2, 3): [A | t]
    inv_a = np.linalg.inv(mats[:, :, :2])
    rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    q = np.stack([rows, cols])[None] - mats[:, :, 2, None, None]  # (N, 2, H, W)
    p = np.einsum("nij,njhw->nihw", inv_a, q)
    warped = _resample(x, p[:, 0], p[:, 1], mode="mirror")
    field = np.stack([d[1] for d in draws])  # (N, 2, H, W) in [-1, 1]
    if alpha_k == 0:
        return warped
    disp = ndimage.gaussian_filter(field, sigma=(0, 0, *sigma), mode="reflect", truncate=3.0)
    disp = disp * alpha[None, :, None, None]
    return _resample(warped, rows[None] + disp[:, 0], cols[None] + disp[:, 1], mode="reflect")


def _fog(x, c, rngs, scale):
    strength, decay = c
    _, _, h, w = x.shape
    size = 1 << max(1, int(np.ceil(np.log2(max(h, w)))))
    plasma = _plasma(rngs, size, decay)[:, None, :h, :w]
    max_val = x.max(axis=(1, 2, 3), keepdims=True)
    return (x + strength * plasma) * max_val / (max_val + strength)


_FUNCTIONS = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "speckle_noise": _speckle_noise,
    "gaussian_blur": _gaussian_blur_kind,
    "glass_blur": _glass_blur,
    "defocus_blur": _defocus_blur,
    "zoom_blur": _zoom_blur,
    "contrast": _contrast,
    "brightness": _brightness,
    "saturate": _saturate,
    "pixelate": _pixelate,
    "jpeg_compression": _jpeg_compression,
    "elastic_transform": _elastic_transform,
    "fog": _fog,
}
assert set(_FUNCTIONS) == set(SEVERITY_CONSTANTS)


# --- public API ------------------------------------------------------------------------------------


def corrupt(
    images: np.ndarray | torch.Tensor,
    kind: str,
    severity: int,
    seed: int = 0,
    *,
    reference_size: int = 32,
) -> np.ndarray | torch.Tensor:
    """Apply the CIFAR-10-C corruption ``kind`` at ``severity`` (1..5) to [0, 1] pixel images.

    Args:
        images: float array or tensor ``(N, C, H, W)`` or ``(C, H, W)``, ``C`` in {1, 3}, values in
            [0, 1] (pixels, not normalised model inputs). Not modified.
        kind: one of :data:`CORRUPTIONS`; ``"saturate"`` needs ``C = 3``.
        severity: 1 (mild) .. 5 (strong); constants in :data:`SEVERITY_CONSTANTS`.
        seed: non-negative int; image ``i`` uses its own stream derived from ``(seed, kind, i)``.
        reference_size: the image side the pixel-valued constants refer to (32 for CIFAR); spatial
            constants are scaled by ``H / reference_size`` and ``W / reference_size``.

    Returns:
        Same shape, type (array / tensor), dtype and device as ``images``, clipped to [0, 1].

    Raises:
        ValueError: unknown kind (the message lists the valid ones), severity outside 1..5, values
            outside [0, 1], a bad shape, or ``saturate`` on grayscale images.
        TypeError: non-float input.
    """
    kind = check_choice(kind, CORRUPTIONS, name="corruption kind")
    severity = _check_severity(severity)
    seed = check_int(seed, name="seed", minimum=0)
    check_int(reference_size, name="reference_size")
    x, single = _as_batch(images)
    if kind in _COLOUR_ONLY and x.shape[1] != 3:
        raise ValueError(f"corruption {kind!r} needs colour images (C = 3), got C = {x.shape[1]}")
    n, _, h, w = x.shape
    scale = (h / reference_size, w / reference_size)
    const = SEVERITY_CONSTANTS[kind][severity - 1]
    fn = _FUNCTIONS[kind]
    out = np.empty_like(x)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        out[start:stop] = fn(x[start:stop], const, _streams(seed, kind, start, stop), scale)
    return _restore(out, images, single)


def parse_corruptions(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"gaussian_noise,fog"`` (or an iterable of names, or ``"all"``) -> validated tuple of kinds."""
    return parse_names(spec, CORRUPTIONS, what="corruption kind")


def corrupt_dataset(
    images: np.ndarray | torch.Tensor,
    *,
    kinds: Sequence[str] | None = None,
    severities: Sequence[int] = (1, 2, 3, 4, 5),
    seed: int = 0,
    reference_size: int = 32,
) -> Iterator[tuple[str, int, np.ndarray | torch.Tensor]]:
    """Yield ``(kind, severity, corrupted images)`` for every kind × severity, lazily.

    ``kinds=None`` means every kind that applies to the images' channel count (``saturate`` is skipped
    for grayscale); asking for ``saturate`` explicitly on grayscale raises. All arguments are
    validated before the first image is corrupted. Use ``dict(((k, s), x) for k, s, x in ...)`` for a
    dict.
    """
    channels = int(images.shape[-3]) if getattr(images, "ndim", 0) >= 3 else None
    if kinds is None:
        kinds = tuple(k for k in CORRUPTIONS if not (k in _COLOUR_ONLY and channels != 3))
    else:
        kinds = parse_corruptions(kinds)
        for k in kinds:
            if k in _COLOUR_ONLY and channels != 3:
                raise ValueError(f"corruption {k!r} needs colour images (C = 3), got C = {channels}")
    severities = tuple(_check_severity(s) for s in severities)
    check_int(seed, name="seed", minimum=0)
    _as_batch(images)  # validate once up front

    def generate() -> Iterator[tuple[str, int, np.ndarray | torch.Tensor]]:
        for k in kinds:
            for s in severities:
                yield k, s, corrupt(images, k, s, seed, reference_size=reference_size)

    return generate()
