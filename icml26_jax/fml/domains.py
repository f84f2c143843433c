"""The four image domains of FML's digits-like suite [R] (spec §Data).

The four domains (:data:`DOMAINS`), each a deterministic function of
``(image, rng)`` that maps a grey stroke image ``a`` in [0, 1] (``a`` is used as the stroke's
alpha) to RGB in [0, 1]:

* ``clean`` (MNIST role): white on black, grey copied to RGB.
* ``thick_noisy`` (USPS role): 3 x 3 grey dilation, Gaussian blur sigma = 0.8 px,
  ``0.15 + 0.7 a``, grey N(0, 0.1^2) noise, clipped.
* ``colour_texture`` (SVHN / MNIST-M role): random foreground / background RGB whose channel
  means differ by >= 0.3; the background is modulated by ``0.6 + 0.4 texture``, the texture a
  plaid of 2-4 random sinusoids or Gaussian-smoothed noise (sigma = 2), each with probability
  0.5, normalised to [0, 1]; polarity (``1 - image``) is inverted with probability 0.5.
* ``synthetic_affine`` (SYN role): rotation U(-35, 35) deg, scale U(0.8, 1.2), shift
  U(-2, 2) px (one affine map, bilinear); a 1-px drop shadow at offset (1, 1) in
  0.4 x background; solid colours whose channel means differ by >= 0.4.

:func:`apply_domain` maps a stack of grey images through one domain with one shared generator;
``icml26_jax.fml.data`` draws the generators and builds the clients.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import ndimage


def _grey_rgb(a: np.ndarray) -> np.ndarray:
    """[H, W] -> [H, W, 3] float32."""
    return np.repeat(a[..., None], 3, axis=-1).astype(np.float32)


def _colour_pair(rng: np.random.Generator, min_diff: float) -> tuple[np.ndarray, np.ndarray]:
    """Foreground and background RGB in [0, 1]^3 whose channel means differ by >= min_diff.

    Rejection sampling, 32 candidate pairs per draw (the first valid pair is kept).
    """
    while True:
        pairs = rng.uniform(0.0, 1.0, size=(32, 2, 3))  # [32, fg/bg, 3]
        ok = np.abs(pairs[:, 0].mean(-1) - pairs[:, 1].mean(-1)) >= min_diff
        if ok.any():
            fg, bg = pairs[int(np.argmax(ok))]
            return fg, bg


def _texture(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """A [H, W] texture in [0, 1]: a plaid of 2-4 random sinusoids or Gaussian-smoothed noise
    (sigma = 2), each with probability 0.5, min-max normalised.

    Each sinusoid has U(1, 4) cycles per image side, a U(0, pi) orientation and a U(0, 2 pi)
    phase (choices of this reconstruction)."""
    h, w = shape
    if rng.uniform() < 0.5:
        k = int(rng.integers(2, 5))
        freq = rng.uniform(1.0, 4.0, size=k)  # cycles per image side
        theta = rng.uniform(0.0, np.pi, size=k)  # orientation
        phase = rng.uniform(0.0, 2 * np.pi, size=k)
        r, c = np.meshgrid(np.arange(h) / h, np.arange(w) / w, indexing="ij")  # [H, W] each
        arg = 2 * np.pi * freq[:, None, None] * (np.cos(theta)[:, None, None] * r
                                                 + np.sin(theta)[:, None, None] * c)
        t = np.sin(arg + phase[:, None, None]).sum(0)  # [H, W]
    else:
        t = ndimage.gaussian_filter(rng.standard_normal((h, w)), sigma=2.0)
    lo, hi = t.min(), t.max()
    return (t - lo) / (hi - lo) if hi - lo > 1e-8 else np.zeros_like(t)


def clean(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``clean`` (MNIST role): white stroke on black, grey to RGB.

    Args:
      img: [H, W] grey stroke image in [0, 1].
      rng: unused (kept for the common transform signature).

    Returns:
      [H, W, 3] float32 in [0, 1].
    """
    del rng
    return _grey_rgb(np.clip(img, 0.0, 1.0))


def thick_noisy(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``thick_noisy`` (USPS role): dilate 3 x 3, blur sigma 0.8, ``0.15 + 0.7 a``, noise 0.1.

    Args:
      img: [H, W] grey stroke image in [0, 1].
      rng: per-image generator (draws the grey noise).

    Returns:
      [H, W, 3] float32 in [0, 1].
    """
    a = ndimage.grey_dilation(img, size=(3, 3))
    a = ndimage.gaussian_filter(a, sigma=0.8)
    a = 0.15 + 0.7 * a + rng.normal(0.0, 0.1, size=a.shape)
    return _grey_rgb(np.clip(a, 0.0, 1.0))


def colour_texture(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``colour_texture`` (SVHN / MNIST-M role): colours, textured background, polarity.

    Draw order: the colour pair (mean difference >= 0.3), the texture, the polarity coin.

    Args:
      img: [H, W] grey stroke image in [0, 1], used as the stroke's alpha.
      rng: per-image generator.

    Returns:
      [H, W, 3] float32 in [0, 1].
    """
    a = np.clip(img, 0.0, 1.0)[..., None]  # [H, W, 1]
    fg, bg = _colour_pair(rng, 0.3)
    tex = _texture(rng, img.shape)  # [H, W]
    background = bg * (0.6 + 0.4 * tex)[..., None]  # [H, W, 3]
    out = a * fg + (1.0 - a) * background
    if rng.uniform() < 0.5:
        out = 1.0 - out
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def synthetic_affine(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``synthetic_affine`` (SYN role): random affine map, drop shadow, solid colours.

    Rotation U(-35, 35) deg, scale U(0.8, 1.2) and shift U(-2, 2) px about the image centre,
    one bilinear ``affine_transform`` (zero outside). The shadow is the warped stroke shifted
    by (1, 1) px, drawn in 0.4 x background under the stroke. Draw order: angle, scale,
    shift, colour pair (mean difference >= 0.4).

    Args:
      img: [H, W] grey stroke image in [0, 1].
      rng: per-image generator.

    Returns:
      [H, W, 3] float32 in [0, 1].
    """
    angle = np.deg2rad(rng.uniform(-35.0, 35.0))
    scale = rng.uniform(0.8, 1.2)
    shift = rng.uniform(-2.0, 2.0, size=2)  # (row, col) px
    fg, bg = _colour_pair(rng, 0.4)
    centre = (np.array(img.shape, np.float64) - 1.0) / 2.0
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    # affine_transform maps output coords o to input coords M o + offset; the forward map is
    # o = scale R^T (i - centre) + centre + shift, hence M = R / scale.
    mat = rot / scale
    offset = centre - mat @ (centre + shift)
    a = ndimage.affine_transform(img, mat, offset=offset, order=1, mode="constant", cval=0.0)
    a = np.clip(a, 0.0, 1.0)  # [H, W]
    shadow = np.zeros_like(a)
    shadow[1:, 1:] = a[:-1, :-1]
    out = bg * (1.0 - 0.6 * shadow[..., None])  # shadow colour 0.4 * bg
    out = a[..., None] * fg + (1.0 - a[..., None]) * out
    return np.clip(out, 0.0, 1.0).astype(np.float32)


Transform = Callable[[np.ndarray, np.random.Generator], np.ndarray]

DOMAINS: dict[str, Transform] = {
    "clean": clean,
    "thick_noisy": thick_noisy,
    "colour_texture": colour_texture,
    "synthetic_affine": synthetic_affine,
}


def apply_domain(name: str, images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Applies domain ``name`` to each image in turn with one shared generator.

    Args:
      name: a key of :data:`DOMAINS`.
      images: [M, H, W] grey images in [0, 1].
      rng: generator consumed image by image, in order.

    Returns:
      [M, H, W, 3] float32 in [0, 1] (not normalised).
    """
    if name not in DOMAINS:
        raise ValueError(f"domain must be one of {tuple(DOMAINS)}, got domain={name!r}")
    fn = DOMAINS[name]
    out = np.empty(images.shape + (3,), np.float32)
    for k, img in enumerate(images):
        out[k] = fn(img, rng)
    return out
