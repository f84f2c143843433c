"""Baselines and peers of spec §Baselines: what pair-wise statistics alone give, and a batch
method for the non-Gaussian direction.

* :func:`isotropic_denoise` -- a x_t, the optimal denoiser for isotropic Gaussian data.
* :func:`wiener` / :func:`wiener_loss` -- the best *linear* denoiser a C (a^2 C + b^2 I)^-1,
  Bayes-optimal for a Gaussian with covariance C (the clone), and its closed-form loss.
* :func:`gaussian_clone` -- samples with the data's mean and covariance (from :mod:`mcm`).
* :func:`pca_overlap` -- |overlap| of the top sample-covariance eigenvector with a spike: the
  PCA estimate of u (BBP threshold n/d ~ 1/beta_u^2); blind to v by construction.
* :func:`fastica_overlaps` -- scikit-learn ``FastICA`` on n samples (the peer for finding v).
* :func:`online_numpy` -- the online-SGD step of :mod:`online` in NumPy, vectorised over
  replicas: the speed reference of the benchmark.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from icml26_jax.simplicity_bias import denoisers, mcm


ICA_FUNS = ("cube", "logcosh")
gaussian_clone = mcm.gaussian_clone  # the clone sampler (spec §Baselines)


def isotropic_denoise(xt, a: float):
    """a x_t: the optimum for isotropic Gaussian data (x [..., d] -> [..., d])."""
    return a * xt


def wiener(C, a: float, b: float):
    """The Wiener filter W = a C (a^2 C + b^2 I)^-1 [d, d]: D_W(x_t) = x_t W^T = W x_t
    (W is symmetric for symmetric C), the best linear denoiser of data with second moment C.
    """
    denoisers.check_ab(a, b)
    C = jnp.asarray(C)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"C must be a square [d, d] matrix, got C.shape={C.shape}")
    eye = jnp.eye(C.shape[0], dtype=C.dtype)
    # Solve instead of invert; (a^2 C + b^2 I) and C commute, so W = a (a^2 C + b^2 I)^-1 C.
    return a * jnp.linalg.solve(a * a * C + b * b * eye, C)


def wiener_loss(C, a: float, b: float):
    """E||x0 - D_W(x_t)||^2 = tr(C) - a^2 tr(C (a^2 C + b^2 I)^-1 C) for x0 ~ N(0, C)."""
    C = jnp.asarray(C)
    W = wiener(C, a, b)  # a (a^2 C + b^2 I)^-1 C
    return jnp.trace(C) - a * jnp.trace(C @ W)


def pca_top(x) -> np.ndarray:
    """Top eigenvector [d] of the sample covariance of x [n, d] (centred)."""
    x = np.asarray(x, np.float64)
    xc = x - x.mean(0)
    _, vecs = np.linalg.eigh(xc.T @ xc / x.shape[0])
    return vecs[:, -1]


def pca_overlap(x, spike) -> float:
    """|e_1 . spike| for the top sample-covariance eigenvector e_1 of x [n, d]."""
    return float(abs(pca_top(x) @ np.asarray(spike, np.float64)))


def fastica_overlaps(x, v, fun: str = "logcosh", seed: int = 0, max_iter: int = 400) -> dict:
    """scikit-learn ``FastICA`` (whitened, all d components) on x [n, d]: overlaps with v.

    Each unmixing row w_k (in input coordinates) extracts s_k = w_k . x; since Cov(x) v = v,
    the row that extracts nu is parallel to v.

    Returns:
      ``{"best": max_k |w_k . v| / ||w_k||`` (the spec's "best component", chosen with
      knowledge of v), ``"blind": |w_k* . v|`` for the component k* with the most negative
      excess kurtosis (the Rademacher signature, chosen without v), ``"chance":
      sqrt(2 ln d / d)`` (the typical best overlap of d random directions)}.
    """
    if fun not in ICA_FUNS:
        raise ValueError(f"fun must be one of {ICA_FUNS}, got fun={fun!r}")
    import warnings

    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    x = np.asarray(x, np.float64)
    d = x.shape[1]
    ica = FastICA(n_components=d, whiten="unit-variance", fun=fun, random_state=seed,
                  max_iter=max_iter, tol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        s = ica.fit_transform(x)  # [n, d]
    rows = ica.components_ / np.linalg.norm(ica.components_, axis=1, keepdims=True)
    ov = np.abs(rows @ np.asarray(v, np.float64))
    sc = (s - s.mean(0)) / s.std(0)
    kurt = np.mean(sc ** 4, axis=0) - 3.0
    return {"best": float(ov.max()), "blind": float(ov[np.argmin(kurt)]),
            "chance": math.sqrt(2.0 * math.log(d) / d)}


def numpy_sgd_step(w, x0, xt, coeffs: denoisers.LinkCoeffs, a: float, delta: float):
    """One spherical SGD step of :func:`online.sgd_step`, NumPy, vectorised over replicas:
    w, x0, xt [R, d] -> [R, d]."""
    f, fp = coeffs(np.einsum("rd,rd->r", w, xt), np)
    r = x0 - a * xt - w * f[:, None]
    g = -2.0 * (f[:, None] * r + (np.einsum("rd,rd->r", w, r) * fp)[:, None] * xt)
    g -= np.einsum("rd,rd->r", g, w)[:, None] * w
    w = w - delta * g
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def online_numpy(rng: np.random.Generator, mcm_cfg: mcm.MCMConfig, delta: float,
                 n_steps: int, replicas: int, link: str = "both",
                 a: float = 1.0 / math.sqrt(2.0), chunk: int = 256):
    """Online SGD of the single-index denoiser in NumPy (float32), all replicas per step;
    noise drawn per chunk as in :mod:`online`. The benchmark's reference.

    Returns:
      ``(m_u [R], m_v [R])`` after ``n_steps`` steps.
    """
    cfg = mcm_cfg.validate()
    if cfg.latent_corr != "independent" or cfg.nu != "rademacher":
        raise ValueError("online_numpy implements independent Rademacher latents only, got "
                         f"latent_corr={cfg.latent_corr!r}, nu={cfg.nu!r}")
    d, R, b = cfg.d, int(replicas), math.sqrt(1.0 - a * a)
    coeffs = denoisers.link_coefficients(link, cfg.beta_u, cfg.beta_v, a, b)
    f32 = np.float32
    q, _ = np.linalg.qr(rng.standard_normal((R, d, 2)))  # [R, d, 2]
    u, v = q[..., 0].astype(f32), q[..., 1].astype(f32)
    w = rng.standard_normal((R, d)).astype(f32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    c_s = f32(1.0 - 1.0 / math.sqrt(1.0 + cfg.beta_v))
    for s0 in range(0, n_steps, chunk):
        n = min(chunk, n_steps - s0)
        lam = rng.standard_normal((n, R, 1), dtype=f32)
        nu = rng.choice(np.array([-1.0, 1.0], f32), size=(n, R, 1))
        z = rng.standard_normal((n, R, d), dtype=f32)
        xi = rng.standard_normal((n, R, d), dtype=f32)
        y = f32(math.sqrt(cfg.beta_v)) * nu * v + z
        y -= c_s * np.einsum("nrd,rd->nr", y, v)[..., None] * v
        x0 = f32(math.sqrt(cfg.beta_u)) * lam * u + y
        xt = f32(a) * x0 + f32(b) * xi
        for t in range(n):
            w = numpy_sgd_step(w, x0[t], xt[t], coeffs, f32(a), f32(delta))
    return np.einsum("rd,rd->r", w, u), np.einsum("rd,rd->r", w, v)
