"""The mixed cumulant model (MCM): pair-wise structure along u, a fourth cumulant along v.

Generative (class-free) variant of the MCM of Bardone & Goldt (2024), spec §Method:

    x = sqrt(beta_u) lam u + S (sqrt(beta_v) nu v + z),   z ~ N(0, I_d),
    S = I - (1 - 1 / sqrt(1 + beta_v)) v v^T,

with orthonormal spikes u, v, lam ~ N(0, 1) and nu of zero mean and unit variance (Rademacher
by default, kappa_4(nu) = -2). S whitens the v direction *including the noise*, so

    Cov(x) = I + beta_u u u^T + c (u v^T + v u^T),   c = sqrt(beta_u) alpha_v E[lam nu],
    Var(x . v) = 1,   kappa_4(x . v) = kappa_4(nu) alpha_v^4,   alpha_v^2 = beta_v / (1 + beta_v).

Latent correlations (lam stays exactly N(0, 1), nu exactly Rademacher):
  * ``independent``: nu independent of lam (c = 0);
  * ``sign``: nu = sign(lam + tau g), E[lam nu] = sqrt(2/pi) / sqrt(1 + tau^2) (c != 0: v leaks
    into the covariance, see :func:`pca_overlap_v`);
  * ``nonlinear``: nu = sign(lam) sign(|lam| - t), t = sqrt(2 ln 2): E[lam nu] = 0 but
    E[lam^3 nu] = 2 t^2 phi(0) ~ 1.106, so v is tied to u only at fourth order.

The optional Tsodyks latent nu in {-rho, 1 - rho} / sqrt(rho - rho^2) (P(1 - rho) = rho) has a
non-zero third cumulant; it is only defined with independent latents.

References:
  L. Merger, L. Bardone, S. Goldt. A theory of learning data statistics in diffusion models,
  from easy to hard. ICML 2026. https://arxiv.org/abs/2603.12901
  L. Bardone, S. Goldt. Sliding down the stairs: how correlated latent variables accelerate
  learning with neural networks. ICML 2024. https://arxiv.org/abs/2404.08602
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

LATENT_CORRS = ("independent", "sign", "nonlinear")
NUS = ("rademacher", "tsodyks")
# Threshold of the `nonlinear` latent: phi(t) = phi(0) / 2 makes E[lam nu] vanish.
T_NONLINEAR = math.sqrt(2.0 * math.log(2.0))


class MCMConfig(NamedTuple):
    """Static parameters of the mixed cumulant model (hashable: a jit static argument).

    Attributes:
      d: input dimension (>= 2).
      beta_u: covariance spike strength along u (>= 0).
      beta_v: cumulant spike strength along v (>= 0).
      latent_corr: 'independent' | 'sign' | 'nonlinear'.
      tau: noise of the `sign` correlation, nu = sign(lam + tau g) (>= 0).
      nu: law of the non-Gaussian latent, 'rademacher' | 'tsodyks'.
      rho: Tsodyks sparsity, in (0, 1).
    """

    d: int
    beta_u: float = 4.0
    beta_v: float = 4.0
    latent_corr: str = "independent"
    tau: float = 0.0
    nu: str = "rademacher"
    rho: float = 0.7

    def validate(self) -> "MCMConfig":
        """Raises ``ValueError`` naming the offending field; returns ``self``."""
        check_dim(self.d)
        for name in ("beta_u", "beta_v"):
            val = getattr(self, name)
            if not float(val) >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {name}={val!r}")
        if self.latent_corr not in LATENT_CORRS:
            raise ValueError(
                f"latent_corr must be one of {LATENT_CORRS}, got latent_corr={self.latent_corr!r}")
        if self.nu not in NUS:
            raise ValueError(f"nu must be one of {NUS}, got nu={self.nu!r}")
        if not float(self.tau) >= 0.0:
            raise ValueError(f"tau must be >= 0, got tau={self.tau!r}")
        if not 0.0 < float(self.rho) < 1.0:
            raise ValueError(f"rho must be in (0, 1), got rho={self.rho!r}")
        if self.nu != "rademacher" and self.latent_corr != "independent":
            raise ValueError(
                f"latent_corr={self.latent_corr!r} is defined for nu='rademacher' only, "
                f"got nu={self.nu!r}")
        return self


def check_dim(d) -> int:
    """``d`` as an int; ``ValueError`` unless it is an integer >= 2."""
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got d={d!r}")
    return int(d)


def alpha_v(beta_v: float) -> float:
    """alpha_v = sqrt(beta_v / (1 + beta_v)): the weight of nu in x . v."""
    return math.sqrt(beta_v / (1.0 + beta_v))


def lam_nu_corr(cfg: MCMConfig) -> float:
    """E[lam nu] of the latent pair: sqrt(2/pi) / sqrt(1 + tau^2) for `sign`, else 0."""
    if cfg.latent_corr == "sign":
        return math.sqrt(2.0 / math.pi) / math.sqrt(1.0 + cfg.tau ** 2)
    return 0.0


def kappa4_nu(cfg: MCMConfig) -> float:
    """Fourth cumulant of the standardised latent nu: -2 (Rademacher) or
    (1 - 6 rho (1 - rho)) / (rho (1 - rho)) (standardised Bernoulli(rho), Tsodyks)."""
    if cfg.nu == "rademacher":
        return -2.0
    p = cfg.rho * (1.0 - cfg.rho)
    return (1.0 - 6.0 * p) / p


def spikes(key: jax.Array, d: int):
    """Orthonormal spikes (u [d], v [d]): the Q factor of a Gaussian d x 2 matrix, columns
    sign-fixed by the diagonal of R (Haar-distributed pair)."""
    d = check_dim(d)
    g = jax.random.normal(key, (d, 2))
    q, r = jnp.linalg.qr(g)  # q: [d, 2]
    q = q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0)
    return q[:, 0], q[:, 1]


def sample_latents(key: jax.Array, n: int, cfg: MCMConfig):
    """Draws the latent pair (lam [n], nu [n]) with the correlation of ``cfg.latent_corr``.

    lam ~ N(0, 1) always; nu has zero mean and unit variance (spec §Method):
    independent Rademacher / Tsodyks, nu = sign(lam + tau g) (`sign`), or
    nu = sign(lam) sign(|lam| - t), t = sqrt(2 ln 2) (`nonlinear`).
    """
    cfg.validate()
    return sample_latents_indexed(key, n, cfg, LATENT_CORRS.index(cfg.latent_corr))


def sample_latents_indexed(key: jax.Array, n: int, cfg: MCMConfig, corr):
    """:func:`sample_latents` with the correlation chosen by a (possibly traced) index
    ``corr`` into :data:`LATENT_CORRS` (``cfg.latent_corr`` is ignored), so replicas with
    different correlations share one program; nu is selected from all three constructions
    (Rademacher / Tsodyks for 'independent')."""
    k_lam, k_nu = jax.random.split(key)
    k_ind, k_g = jax.random.split(k_nu)
    lam = jax.random.normal(k_lam, (n,))
    if cfg.nu == "rademacher":
        ind = jax.random.rademacher(k_ind, (n,), dtype=lam.dtype)
    else:
        rho = cfg.rho
        ind = (jnp.where(jax.random.bernoulli(k_ind, rho, (n,)), 1.0, 0.0) - rho) / math.sqrt(
            rho - rho * rho)
    g = jax.random.normal(k_g, (n,))
    sign = jnp.where(lam + cfg.tau * g >= 0, 1.0, -1.0)
    nonlin = jnp.where((lam > 0) == (jnp.abs(lam) > T_NONLINEAR), 1.0, -1.0)
    corr = jnp.asarray(corr)
    nu = jnp.select([corr == LATENT_CORRS.index("sign"), corr == LATENT_CORRS.index("nonlinear")],
                    [sign, nonlin], ind)
    return lam, nu.astype(lam.dtype)


def whiten(y, v, beta_v: float):
    """S y = y - (1 - 1/sqrt(1 + beta_v)) (y . v) v for y [..., d], in O(d) per row."""
    c = 1.0 - 1.0 / math.sqrt(1.0 + beta_v)
    return y - c * (y @ v)[..., None] * v


def assemble(lam, nu, z, cfg: MCMConfig, u, v):
    """x0 = sqrt(beta_u) lam u + S(sqrt(beta_v) nu v + z) from latents lam, nu [...] and
    noise z [..., d]: the deterministic part of :func:`sample`."""
    y = math.sqrt(cfg.beta_v) * nu[..., None] * v + z  # [..., d]
    return math.sqrt(cfg.beta_u) * lam[..., None] * u + whiten(y, v, cfg.beta_v)


def sample(key: jax.Array, n: int, cfg: MCMConfig, u, v):
    """``n`` MCM samples x0 [n, d] for spikes u, v [d] (S applied in O(n d))."""
    cfg.validate()
    if u.shape != (cfg.d,) or v.shape != (cfg.d,):
        raise ValueError(f"u and v must have shape ({cfg.d},), got u {u.shape}, v {v.shape}")
    k_lat, k_z = jax.random.split(key)
    lam, nu = sample_latents(k_lat, n, cfg)
    z = jax.random.normal(k_z, (n, cfg.d), lam.dtype)
    return assemble(lam, nu, z, cfg, u, v)


def covariance(cfg: MCMConfig, u, v):
    """Population covariance [d, d]: I + beta_u u u^T + c (u v^T + v u^T) with
    c = sqrt(beta_u) alpha_v E[lam nu] (zero unless latent_corr='sign')."""
    cfg.validate()
    c = math.sqrt(cfg.beta_u) * alpha_v(cfg.beta_v) * lam_nu_corr(cfg)
    return (jnp.eye(cfg.d, dtype=u.dtype) + cfg.beta_u * jnp.outer(u, u)
            + c * (jnp.outer(u, v) + jnp.outer(v, u)))


def pca_overlap_v(cfg: MCMConfig) -> float:
    """|v . e_1| for the top eigenvector e_1 of :func:`covariance` (analytic leakage of v into
    PCA). In the (u, v) plane the covariance is [[1 + beta_u, c], [c, 1]]; 0 without
    cross-covariance (~0.305 for `sign`, tau = 0, beta_u = beta_v = 4)."""
    cfg.validate()
    c = math.sqrt(cfg.beta_u) * alpha_v(cfg.beta_v) * lam_nu_corr(cfg)
    if c == 0.0:
        return 0.0
    top = 1.0 + 0.5 * cfg.beta_u + math.sqrt(0.25 * cfg.beta_u ** 2 + c * c)
    vec = np.array([c, top - 1.0 - cfg.beta_u])  # (u, v) coordinates
    return float(abs(vec[1]) / np.linalg.norm(vec))


def kappa4_along(cfg: MCMConfig, m_v: float) -> float:
    """kappa_4(x . w) for a unit w with v-overlap m_v and no u-overlap:
    kappa_4(nu) alpha_v^4 m_v^4 (the Gaussian noise adds nothing)."""
    cfg.validate()
    return kappa4_nu(cfg) * alpha_v(cfg.beta_v) ** 4 * float(m_v) ** 4


def gaussian_clone(key: jax.Array, x, m: int):
    """``m`` draws [m, d] from N(mean(x), Cov(x)) of the data x [n, d] (Refinetti et al. 2023):
    the Gaussian with the same first two moments. The covariance factor is taken by eigh (a
    rank-deficient sample covariance is fine)."""
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must have shape [n, d], got x.shape={x.shape}")
    mean = jnp.mean(x, axis=0)
    xc = x - mean
    cov = xc.T @ xc / x.shape[0]  # [d, d]
    evals, evecs = jnp.linalg.eigh(cov)
    factor = evecs * jnp.sqrt(jnp.maximum(evals, 0.0))  # cov = factor factor^T
    g = jax.random.normal(key, (m, x.shape[1]), x.dtype)
    return mean + g @ factor.T
