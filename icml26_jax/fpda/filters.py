"""Fixed forensic filters (spec §Method "Inputs"; no gradient flows into them).

* ``srm_residual``: three fixed 5x5 high-pass kernels of the SRM family (spatial rich model,
  Fridrich & Kodovsky 2012; the trio CLIP-IFDL / RGB-N use) applied to the grey image. They
  suppress content and keep the noise residual in which splicing and resampling leave traces.
* ``block_dct_energy``: per 8x8 block (the JPEG grid), the log1p energy of the orthonormal
  DCT-II coefficients with u + v >= 4. Double quantisation and grid misalignment change it.

Both take images in [0, 1]; grey = ITU-R 601 luma. Borders of the convolution use
half-sample symmetric padding (``scipy.ndimage`` mode ``"reflect"``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

LUMA = (0.299, 0.587, 0.114)
DCT_BLOCK = 8
DCT_MIN_FREQ = 4  # keep coefficients with u + v >= 4 (the high-frequency AC band)
DCT_PIXEL_SCALE = 255.0  # energies are measured on the 0..255 grey scale, as JPEG does

# [3, 5, 5]: KV (5x5 "square"), KB (3x3 "square" embedded), second-order horizontal edge.
SRM_KERNELS = np.stack([
    np.array([[-1, 2, -2, 2, -1],
              [2, -6, 8, -6, 2],
              [-2, 8, -12, 8, -2],
              [2, -6, 8, -6, 2],
              [-1, 2, -2, 2, -1]], np.float32) / 12.0,
    np.array([[0, 0, 0, 0, 0],
              [0, -1, 2, -1, 0],
              [0, 2, -4, 2, 0],
              [0, -1, 2, -1, 0],
              [0, 0, 0, 0, 0]], np.float32) / 4.0,
    np.array([[0, 0, 0, 0, 0],
              [0, 0, 0, 0, 0],
              [0, 1, -2, 1, 0],
              [0, 0, 0, 0, 0],
              [0, 0, 0, 0, 0]], np.float32) / 2.0,
]).astype(np.float32)


def grey(x: jax.Array) -> jax.Array:
    """[..., H, W, 3] in [0, 1] -> [..., H, W] luma."""
    w = jnp.asarray(LUMA, x.dtype)
    return x @ w


def srm_residual(x: jax.Array) -> jax.Array:
    """SRM noise residuals of the grey image.

    Args:
      x: images ``[B, H, W, 3]`` in [0, 1].

    Returns:
      ``[B, H, W, 3]``: channel c is the true convolution (kernel flipped) of the grey image
      with ``SRM_KERNELS[c]``, borders padded symmetrically; the result is stop-gradient.
    """
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"srm_residual expects images [B, H, W, 3], got shape {x.shape}")
    g = jnp.pad(grey(x), ((0, 0), (2, 2), (2, 2)), mode="symmetric")[..., None]  # [B,H+4,W+4,1]
    k = jnp.asarray(SRM_KERNELS[:, ::-1, ::-1].copy(), x.dtype)  # flip: convolution
    k = jnp.transpose(k, (1, 2, 0))[:, :, None, :]  # HWIO [5, 5, 1, 3]
    out = jax.lax.conv_general_dilated(g, k, (1, 1), "VALID",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.lax.stop_gradient(out)


def dct_matrix(n: int = DCT_BLOCK) -> np.ndarray:
    """Orthonormal DCT-II matrix D (rows = frequencies): ``dct(v) = D @ v``."""
    i = np.arange(n)
    d = np.cos(math.pi * (2 * i[None, :] + 1) * i[:, None] / (2 * n)) * math.sqrt(2.0 / n)
    d[0] /= math.sqrt(2.0)
    return d.astype(np.float32)


def block_dct_energy(x: jax.Array) -> jax.Array:
    """log1p of the high-frequency AC energy of every 8x8 block of the grey image.

    Args:
      x: images ``[B, H, W, 3]`` in [0, 1], H and W multiples of 8.

    Returns:
      ``[B, H / 8, W / 8]``: ``log1p(sum_{u + v >= 4} C_uv^2)`` with C the orthonormal 2D
      DCT-II of the block on the 0..255 grey scale; stop-gradient.
    """
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"block_dct_energy expects images [B, H, W, 3], got shape {x.shape}")
    b, h, w, _ = x.shape
    n = DCT_BLOCK
    if h % n or w % n:
        raise ValueError(f"block_dct_energy needs H and W divisible by {n}, got {h}x{w}")
    g = grey(x) * DCT_PIXEL_SCALE
    blocks = g.reshape(b, h // n, n, w // n, n)
    d = jnp.asarray(dct_matrix(n), x.dtype)
    c = jnp.einsum("ui,bpiqj,vj->bpquv", d, blocks, d)
    u = np.arange(n)
    band = jnp.asarray((u[:, None] + u[None, :]) >= DCT_MIN_FREQ, x.dtype)
    return jax.lax.stop_gradient(jnp.log1p(jnp.sum(c * c * band, axis=(-2, -1))))
