"""Geometric control of the refined policy (spec §Method "Geometry", P1 and P2) [R].

With a bijective conditional flow a = f(z; s), a latent refinement T_s moves the base
distribution p0 = N(0, I) to q_s = T_s # p0, and the refined policy is pi = f # q_s while the
prior is pi_prior = f # p0.

* P1 (invariance): TV(pi, pi_prior) = TV(q_s, p0) and KL(pi || pi_prior) = KL(q_s || p0);
  Pinsker: TV <= sqrt(KL / 2).
* P2 (contraction): if f(.; s) is L_f-Lipschitz where it matters,
  W_p(pi, pi_prior) <= L_f * W_p(q_s, p0) <= L_f * (E ||T_s(z) - z||^p)^(1/p).

Closed forms used by the tests and the claims: for q = N(m, diag sigma^2) against N(0, I),
KL = 1/2 sum_j (sigma_j^2 + m_j^2 - 1 - log sigma_j^2) and W2^2 = ||m||^2 + ||sigma - 1||^2;
for a pure shift delta, TV = 2 Phi(||delta|| / 2) - 1, KL = ||delta||^2 / 2, W2 = ||delta||.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm


def tv_shift(delta):
    """TV(N(delta, I), N(0, I)) = 2 Phi(||delta|| / 2) - 1. ``delta`` [..., D] -> [...]."""
    r = jnp.linalg.norm(jnp.asarray(delta, jnp.float32), axis=-1)
    return 2.0 * norm.cdf(r / 2.0) - 1.0


def kl_gauss(m, log_sigma):
    """KL(N(m, diag sigma^2) || N(0, I)) over the last axis."""
    m, ls = jnp.asarray(m, jnp.float32), jnp.asarray(log_sigma, jnp.float32)
    return 0.5 * jnp.sum(jnp.exp(2.0 * ls) + m * m - 1.0 - 2.0 * ls, axis=-1)


def w2_gauss(m, sigma):
    """W2(N(m, diag sigma^2), N(0, I)) over the last axis."""
    m, sigma = jnp.asarray(m, jnp.float32), jnp.asarray(sigma, jnp.float32)
    return jnp.sqrt(jnp.sum(m * m, axis=-1) + jnp.sum((sigma - 1.0) ** 2, axis=-1))


def pinsker(kl):
    """The TV bound sqrt(KL / 2)."""
    return jnp.sqrt(jnp.maximum(jnp.asarray(kl, jnp.float32), 0.0) / 2.0)


def mc_kl_shift(forward_fn, inverse_fn, log_prob_fn, delta, key, n: int):
    """Monte-Carlo KL(f # N(delta, I) || f # N(0, I)) from the flow's log-densities (P1).

    Samples a = f(z), z ~ N(delta, I), and averages log pi_delta(a) - log pi_prior(a), where
    log pi_delta(a) = log N(f^-1(a) - delta; 0, I) + log|det d f^-1 / d a| is the shifted
    policy's density through the flow's inverse and log pi_prior(a) is the flow's own
    ``log_prob``. P1 says the result is KL(N(delta, I) || N(0, I)) = ||delta||^2 / 2; a flow
    whose inverse or log-det is wrong breaks it.

    Args:
      forward_fn: ``z [n, A] -> a [n, A]`` at a fixed state.
      inverse_fn: ``a [n, A] -> (z [n, A], logdet [n])`` (log|det d f^-1 / d a|).
      log_prob_fn: ``a [n, A] -> [n]`` log pi_prior(a | s).
      delta: [A] the latent shift.
      key: typed PRNG key.
      n: samples.

    Returns:
      (estimate, standard error).
    """
    delta = jnp.asarray(delta, jnp.float32)
    z = jax.random.normal(key, (n, delta.shape[-1]), jnp.float32) + delta
    a = forward_fn(z)
    z_back, logdet = inverse_fn(a)
    log_shifted = jnp.sum(norm.logpdf(z_back - delta), -1) + logdet
    d = log_shifted - log_prob_fn(a)
    return jnp.mean(d), jnp.std(d) / jnp.sqrt(jnp.float32(n))


def lipschitz_estimate(flow, s, z):
    """L^_f = max over ``z`` of sigma_max(d f(z; s) / d z), via ``jax.jacfwd`` and an SVD.

    An estimate on the given points (the latent ball of radius 3 + eps and the refinement
    segments), not a certificate.

    Args:
      flow: a ``ConditionalRealNVP`` (or any ``flow(z [B, A], s [B, O]) -> a``).
      s: [O] one state.
      z: [n, A] latent points.

    Returns:
      (L^_f, sigma_max per point [n]).
    """
    def f(zi):
        return flow(zi[None], s[None])[0]

    jac = jax.vmap(jax.jacfwd(f))(jnp.asarray(z, jnp.float32))  # [n, A, A]
    sig = jnp.linalg.svd(jac, compute_uv=False)[..., 0]
    return jnp.max(sig), sig


def latent_ball(key, n: int, dim: int, radius):
    """n points uniform in the centred ball of ``radius`` in R^dim."""
    kd, kr = jax.random.split(key)
    d = jax.random.normal(kd, (n, dim), jnp.float32)
    d = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
    r = radius * jax.random.uniform(kr, (n, 1), jnp.float32) ** (1.0 / dim)
    return d * r


def coupling_w2(flow, s, z0, z2):
    """(E ||f(z2; s) - f(z0; s)||^2)^(1/2): the W2 cost of the coupling (z0, T_s(z0)) pushed
    through the flow, an upper bound of W2(pi, pi_prior) that P2 bounds by L_f * eps.
    ``s`` [O]; ``z0``, ``z2`` [n, A]."""
    sb = jnp.broadcast_to(s, z0.shape[:1] + s.shape)
    d = flow(z2, sb) - flow(z0, sb)
    return jnp.sqrt(jnp.mean(jnp.sum(d * d, axis=-1)))


def mc_kl_through_flow(flow, s, delta, key, n: int, space: str = "latent"):
    """:func:`mc_kl_shift` for a ``ConditionalRealNVP`` at one state ``s`` [O].

    ``space="action"`` evaluates both log-densities at the actions a = tanh(u) through the
    flow's full inverse, so it includes the float32 round trip atanh(tanh(u)): actions with
    |u| > atanh(1 - 1e-5) ~ 6.1 are clipped there (spec: dataset actions are clipped before
    atanh), which biases the estimate once the flow puts mass on the box's faces.
    ``space="latent"`` (default) evaluates them at the pre-tanh point u: log pi(a|s) differs
    from the density of u only by the tanh log-det, which is the same for both policies and
    cancels in the KL, so this is the same quantity without the saturation error.
    """
    sb = jnp.broadcast_to(s, (int(n),) + s.shape)
    if space == "action":
        return mc_kl_shift(lambda z: flow(z, sb), lambda a: flow.inverse(a, sb),
                           lambda a: flow.log_prob(a, sb), delta, key, int(n))
    if space != "latent":
        raise ValueError(f"space must be 'latent' or 'action', got {space!r}")

    def log_prob_u(u):
        z, logdet = flow.inverse_latent(u, sb)
        return jnp.sum(norm.logpdf(z), -1) + logdet

    return mc_kl_shift(lambda z: flow.forward_latent(z, sb)[0],
                       lambda u: flow.inverse_latent(u, sb), log_prob_u, delta, key, int(n))
