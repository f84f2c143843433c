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

For a general two-point latent nu in {nu_+, nu_-} with P(nu_+) = p (the optional Tsodyks
latent), E[nu | h] = (nu_+ + nu_-)/2 + (Delta/2) tanh(kappa h + shift) with Delta = nu_+ - nu_-,
kappa = a alpha_v Delta / (2 D_v), shift = [ln(p/(1-p)) - a^2 alpha_v^2 (nu_+^2 - nu_-^2)
/ (2 D_v)] / 2, and phi_v = (a sigma_v^2/D_v - a) h + alpha_v (b^2/D_v) E[nu | h]: the
Rademacher case above has Delta = 2 and no shift. Its even part is what couples to the third
cumulant (an odd link only sees even cumulants).

Every link has the form phi(h) = lin h + amp tanh(kappa h + shift) + const
(:class:`LinkCoeffs`).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax.numpy as jnp

LINKS = ("u", "v", "both")


class LinkCoeffs(NamedTuple):
    """phi(h) = lin * h + amp * tanh(kappa * h + shift) + const."""

    lin: float
    amp: float
    kappa: float
    shift: float = 0.0
    const: float = 0.0

    def __call__(self, h, xp=jnp):
        """(phi(h), phi'(h)) elementwise, with array module ``xp`` (jnp or np)."""
        th = xp.tanh(self.kappa * h + self.shift)
        return (self.lin * h + self.amp * th + self.const,
                self.lin + self.amp * self.kappa * (1.0 - th * th))


def check_ab(a: float, b: float) -> None:
    """``ValueError`` unless a, b >= 0 and a^2 + b^2 = 1 (VP noising)."""
    if not (float(a) >= 0 and float(b) >= 0 and abs(a * a + b * b - 1.0) <= 1e-6):
        raise ValueError(f"a and b must be >= 0 with a^2 + b^2 = 1, got a={a!r}, b={b!r} "
                         f"(a^2 + b^2 = {a * a + b * b!r})")


def check_link(name: str) -> None:
    """``ValueError`` unless ``name`` is one of :data:`LINKS`."""
    if name not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got link={name!r}")


def link_coefficients(name: str, beta_u: float, beta_v: float, a: float, b: float,
                      nu: str = "rademacher", rho: float = 0.7) -> LinkCoeffs:
    """Coefficients of the oracle link ``name`` ('u' | 'v' | 'both'), see the module doc;
    ``nu`` ('rademacher' | 'tsodyks') and ``rho`` give the law of the latent on v."""
    check_link(name)
    if nu not in ("rademacher", "tsodyks"):
        raise ValueError(f"nu must be 'rademacher' or 'tsodyks', got nu={nu!r}")
    check_ab(a, b)
    for arg, val in (("beta_u", beta_u), ("beta_v", beta_v)):
        if not float(val) >= 0:
            raise ValueError(f"{arg} must be >= 0, got {arg}={val!r}")
    lin = amp = kappa = shift = const = 0.0
    if name in ("u", "both"):
        lin += a * (1.0 + beta_u) / (a * a * (1.0 + beta_u) + b * b) - a
    if name in ("v", "both"):
        s2 = 1.0 / (1.0 + beta_v)  # sigma_v^2
        dv = a * a * s2 + b * b  # D_v
        al = math.sqrt(beta_v / (1.0 + beta_v))  # alpha_v
        if nu == "rademacher":
            hi, lo, p = 1.0, -1.0, 0.5
        else:
            if not 0.0 < float(rho) < 1.0:
                raise ValueError(f"rho must be in (0, 1), got rho={rho!r}")
            sd = math.sqrt(rho - rho * rho)
            hi, lo, p = (1.0 - rho) / sd, -rho / sd, float(rho)
        delta = hi - lo
        lin += a * s2 / dv - a
        amp = al * b * b / dv * delta / 2.0
        kappa = a * al * delta / (2.0 * dv)
        shift = 0.5 * (math.log(p / (1.0 - p)) - a * a * al * al * (hi * hi - lo * lo) / (2 * dv))
        const = al * b * b / dv * (hi + lo) / 2.0
    return LinkCoeffs(*(float(x) for x in (lin, amp, kappa, shift, const)))


def oracle_link(name: str, beta_u: float, beta_v: float, a: float, b: float,
                nu: str = "rademacher", rho: float = 0.7) -> Callable:
    """The oracle link phi of spec §Method as a function h -> (phi(h), phi'(h)).

    Args:
      name: 'u' (linear, couples to Var(s)), 'v' (tanh, couples to kappa_4(s)) or 'both'.
      beta_u, beta_v: spike strengths (>= 0).
      a, b: VP noise coefficients, a^2 + b^2 = 1.
      nu, rho: law of the latent on v ('rademacher' or 'tsodyks' with sparsity rho).

    Returns:
      ``phi(h [...]) -> (f [...], f' [...])``, elementwise and jit/vmap friendly.
    """
    c = link_coefficients(name, beta_u, beta_v, a, b, nu, rho)
    return lambda h: c(h)


def single_index_denoise(w, xt, phi: Callable, a: float):
    """D_w(x_t) = a x_t + w phi(w . x_t) for w [d], x_t [..., d] -> [..., d]."""
    f, _ = phi(xt @ w)  # [...]
    return a * xt + f[..., None] * w


def dsm_loss(x0, xt, w, phi: Callable, a: float):
    """Per-sample denoising loss ||x0 - D_w(x_t)||^2 for x0, x_t [..., d] -> [...]."""
    r = x0 - single_index_denoise(w, xt, phi, a)
    return jnp.sum(r * r, axis=-1)
