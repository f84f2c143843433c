"""Population loss of the single-index denoiser by float64 quadrature, and its exponent.

For ||w|| = 1 the w-dependent part of E||x0 - D_w(x_t)||^2 depends on w only through the law
of s = w . x0 (spec §Method):

    L(m_u, m_v) = E[-2 phi(h)(s - a h) + phi(h)^2],   h = a s + b g,
    s = A lam + B nu + C zeta,   A = sqrt(beta_u) m_u,  B = alpha_v m_v,  C = sqrt(1 - B^2).

Given (lam, nu), (s, h) is Gaussian, so the loss is linear in E[s | h, lam, nu]
= mu + (a C^2 / V)(h - a mu), mu = A lam + B nu, V = a^2 C^2 + b^2, and

    L = E_{lam, nu} E_{h ~ N(a mu, V)} [-2 phi(h)(E[s | h, lam, nu] - a h) + phi(h)^2]:

Gauss-Hermite in h, a finite sum over the values of nu given lam, and piecewise
Gauss-Legendre in lam against the normal density, split at the jumps of nu(lam) (0 and +-t):
a single Gauss-Hermite rule over a discontinuous integrand converges slowly (spec §Pitfalls).
The diffusion information exponent is the lowest power k of the overlap in L(m) - L(0)
(:func:`fit_exponent`). All in NumPy float64 (host-side theory).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import special

from icml26_jax.simplicity_bias import denoisers, mcm

_N_HERMITE = 120  # tanh(kappa h) has poles ~1.3 from the real axis: error ~ e^-36
_N_LEGENDRE = 64  # per smooth piece in lam
_LAM_MAX = 10.0  # normal mass beyond: ~1e-23


def _lambda_rule(t: float):
    """Gauss-Legendre nodes/weights on [-_LAM_MAX, _LAM_MAX] against the normal density,
    split at 0, +-t (jumps of nu(lam)) and in the tails."""
    cuts = np.array([0.6, t, 2.0, 3.0, 4.5, 6.5, _LAM_MAX])
    cuts = np.unique(np.concatenate([-cuts, [0.0], cuts]))
    x, wt = np.polynomial.legendre.leggauss(_N_LEGENDRE)
    lo, hi = cuts[:-1, None], cuts[1:, None]
    lam = (0.5 * (hi - lo) * x + 0.5 * (hi + lo)).ravel()
    w = (0.5 * (hi - lo) * wt).ravel()
    return lam, w * np.exp(-0.5 * lam * lam) / math.sqrt(2 * math.pi)


def _nu_given_lambda(lam, cfg: mcm.MCMConfig):
    """Values nu_k [K] and conditional probabilities P(nu = nu_k | lam) [n_lam, K]."""
    n = lam.shape[0]
    if cfg.latent_corr == "nonlinear":
        plus = ((lam > 0) == (np.abs(lam) > mcm.T_NONLINEAR)).astype(np.float64)
    elif cfg.latent_corr == "sign":
        plus = (special.ndtr(lam / cfg.tau) if cfg.tau > 0
                else (lam > 0).astype(np.float64))
    elif cfg.nu == "rademacher":
        plus = np.full(n, 0.5)
    else:  # Tsodyks: value (1 - rho)/sqrt(rho - rho^2) with probability rho
        r = cfg.rho
        vals = np.array([1.0 - r, -r]) / math.sqrt(r - r * r)
        return vals, np.broadcast_to(np.array([r, 1.0 - r]), (n, 2))
    return np.array([1.0, -1.0]), np.stack([plus, 1.0 - plus], axis=1)


def population_loss(m_u: float, m_v: float, mcm_cfg: mcm.MCMConfig, link: str, a: float,
                    b: float) -> float:
    """w-dependent population loss E[-2 phi(h)(s - a h) + phi(h)^2] at overlaps (m_u, m_v).

    The full loss E||x0 - D_w(x_t)||^2 is this plus E||x0 - a x_t||^2, which does not depend
    on w.

    Args:
      m_u, m_v: overlaps of the unit w with u and v (m_u^2 + m_v^2 <= 1).
      mcm_cfg: :class:`mcm.MCMConfig` (d is not used: the loss is dimension-free).
      link: oracle link 'u' | 'v' | 'both' (built from mcm_cfg's betas and a, b).
      a, b: VP noise coefficients, a^2 + b^2 = 1.

    Returns:
      The loss as a Python float (float64 quadrature).
    """
    mcm_cfg.validate()
    c = denoisers.link_coefficients(link, mcm_cfg.beta_u, mcm_cfg.beta_v, a, b, mcm_cfg.nu,
                                    mcm_cfg.rho)
    m_u, m_v = float(m_u), float(m_v)
    if m_u * m_u + m_v * m_v > 1.0 + 1e-12:
        raise ValueError(f"overlaps need m_u^2 + m_v^2 <= 1, got m_u={m_u}, m_v={m_v}")
    A = math.sqrt(mcm_cfg.beta_u) * m_u
    B = mcm.alpha_v(mcm_cfg.beta_v) * m_v
    C2 = 1.0 - B * B
    V = a * a * C2 + b * b
    gain = a * C2 / V  # E[s | h, mu] = mu + gain (h - a mu)

    lam, w_lam = _lambda_rule(mcm.T_NONLINEAR)  # [L]
    nu_vals, p_nu = _nu_given_lambda(lam, mcm_cfg)  # [K], [L, K]
    x, w_h = np.polynomial.hermite.hermgauss(_N_HERMITE)  # [H]
    mu = A * lam[:, None] + B * nu_vals[None, :]  # [L, K]
    h = a * mu[..., None] + math.sqrt(2.0 * V) * x  # [L, K, H]
    f, _ = c(h, np)
    resid = mu[..., None] + gain * (h - a * mu[..., None]) - a * h  # E[s - a h | h, lam, nu]
    inner = np.sum((-2.0 * f * resid + f * f) * w_h, axis=-1) / math.sqrt(math.pi)  # [L, K]
    return float(np.sum(w_lam[:, None] * p_nu * inner))


def fit_exponent(delta_loss_fn: Callable[[float], float], m_grid) -> float:
    """Log-log slope k of |L(m) - L(0)| against m (least squares over ``m_grid``).

    Args:
      delta_loss_fn: m -> L(m) - L(0) (e.g. from :func:`population_loss`).
      m_grid: positive overlaps, e.g. ``np.geomspace(0.02, 0.2, 10)``.

    Returns:
      The fitted exponent (2 for the covariance spike, 4 for the cumulant spike, 1 along v
      with correlated latents at m_u = Theta(1)).
    """
    m = np.asarray(m_grid, np.float64)
    if m.ndim != 1 or m.size < 2 or np.any(m <= 0):
        raise ValueError(f"m_grid must hold >= 2 positive overlaps, got m_grid={m_grid!r}")
    dl = np.abs(np.array([float(delta_loss_fn(float(mi))) for mi in m]))
    if np.any(dl == 0):
        raise ValueError("delta_loss_fn vanishes on m_grid: no exponent to fit")
    return float(np.polyfit(np.log(m), np.log(dl), 1)[0])
