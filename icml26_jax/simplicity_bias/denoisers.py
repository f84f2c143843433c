"""Single-index denoiser at one VP noise level and its oracle links (spec §Method).

Noising x_t = a x0 + b xi, a^2 + b^2 = 1. The denoiser is

    D_w(x_t) = a x_t + w phi(w . x_t),   ||w|| = 1,

(a x_t is the optimum for isotropic Gaussian data, so all learning is in the correction).
With s = w . x0 and h = w . x_t = a s + b g the w-dependent part of the loss
E||x0 - D_w(x_t)||^2 is E[-2 phi(h)(s - a h) + phi(h)^2]. The oracle links are
phi = E[s | h] - a h at full overlap, with sigma_v^2 = 1/(1 + beta_v),
D_v = a^2 sigma_v^2 + b^2, kappa = a alpha_v / D_v:

    phi_u(h) = [a (1 + beta_u) / (a^2 (1 + beta_u) + b^2) - a] h,
    phi_v(h) = (a sigma_v^2 / D_v - a) h + alpha_v (b^2 / D_v) tanh(kappa h),
    phi_both = phi_u + phi_v.

Every link has the form phi(h) = lin h + amp tanh(kappa h) (:class:`LinkCoeffs`).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax.numpy as jnp

LINKS = ("u", "v", "both")


class LinkCoeffs(NamedTuple):
    """phi(h) = lin * h + amp * tanh(kappa * h)."""

    lin: float
    amp: float
    kappa: float


def check_ab(a: float, b: float) -> None:
    """``ValueError`` unless a, b >= 0 and a^2 + b^2 = 1 (VP noising)."""
    if not (float(a) >= 0 and float(b) >= 0 and abs(a * a + b * b - 1.0) <= 1e-6):
        raise ValueError(f"a and b must be >= 0 with a^2 + b^2 = 1, got a={a!r}, b={b!r} "
                         f"(a^2 + b^2 = {a * a + b * b!r})")


def check_link(name: str) -> None:
    """``ValueError`` unless ``name`` is one of :data:`LINKS`."""
    if name not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got link={name!r}")


def link_coefficients(name: str, beta_u: float, beta_v: float, a: float, b: float) -> LinkCoeffs:
    """Coefficients of the oracle link ``name`` ('u' | 'v' | 'both'), see the module doc."""
    check_link(name)
    check_ab(a, b)
    for arg, val in (("beta_u", beta_u), ("beta_v", beta_v)):
        if not float(val) >= 0:
            raise ValueError(f"{arg} must be >= 0, got {arg}={val!r}")
    lin = amp = kappa = 0.0
    if name in ("u", "both"):
        lin += a * (1.0 + beta_u) / (a * a * (1.0 + beta_u) + b * b) - a
    if name in ("v", "both"):
        s2 = 1.0 / (1.0 + beta_v)  # sigma_v^2
        dv = a * a * s2 + b * b  # D_v
        al = math.sqrt(beta_v / (1.0 + beta_v))  # alpha_v
        lin += a * s2 / dv - a
        amp = al * b * b / dv
        kappa = a * al / dv
    return LinkCoeffs(float(lin), float(amp), float(kappa))


def oracle_link(name: str, beta_u: float, beta_v: float, a: float,
                b: float) -> Callable:
    """The oracle link phi of spec §Method as a function h -> (phi(h), phi'(h)).

    Args:
      name: 'u' (linear, couples to Var(s)), 'v' (tanh, couples to kappa_4(s)) or 'both'.
      beta_u, beta_v: spike strengths (>= 0).
      a, b: VP noise coefficients, a^2 + b^2 = 1.

    Returns:
      ``phi(h [...]) -> (f [...], f' [...])``, elementwise and jit/vmap friendly.
    """
    c = link_coefficients(name, beta_u, beta_v, a, b)

    def phi(h):
        th = jnp.tanh(c.kappa * h)
        return c.lin * h + c.amp * th, c.lin + c.amp * c.kappa * (1.0 - th * th)

    return phi


def single_index_denoise(w, xt, phi: Callable, a: float):
    """D_w(x_t) = a x_t + w phi(w . x_t) for w [d], x_t [..., d] -> [..., d]."""
    f, _ = phi(xt @ w)  # [...]
    return a * xt + f[..., None] * w


def dsm_loss(x0, xt, w, phi: Callable, a: float):
    """Per-sample denoising loss ||x0 - D_w(x_t)||^2 for x0, x_t [..., d] -> [...]."""
    r = x0 - single_index_denoise(w, xt, phi, a)
    return jnp.sum(r * r, axis=-1)
