"""Noise schedule and time sampling shared by every diffusion family (spec §Method, Noise).

Log-linear schedule alpha_t = 1 - (1 - eps) t, so alpha'_t = -(1 - eps) and the MDLM NELBO
weight alpha'_t / (1 - alpha_t) is -1/t. Times are antithetic (stratified) per batch:
u_i = (U / n + i / n) mod 1, t = (1 - eps) u + eps, which keeps t away from the 1/t blow-up
at 0 (spec §Pitfalls).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

EPS = 1e-3


class LogLinear(NamedTuple):
    """alpha_t = 1 - (1 - eps) t on t in [0, 1] (alpha_0 = 1, alpha_1 = eps)."""

    eps: float = EPS

    def alpha(self, t):
        """Probability that a token is still clean at time t."""
        return 1.0 - (1.0 - self.eps) * t

    def dalpha(self, t):
        """d alpha / dt = -(1 - eps) (broadcast to t's shape)."""
        return jnp.full_like(jnp.asarray(t, jnp.float32), -(1.0 - self.eps))

    def sigma(self, t):
        """sigma_t = -log alpha_t: the time conditioning of Duo (0 for the other families)."""
        return -jnp.log(self.alpha(t))


def antithetic_times(key: jax.Array, n: int, eps: float = EPS) -> jax.Array:
    """``n`` stratified times [n] in [eps, 1]: one uniform offset U shared by the batch,
    u_i = (U / n + i / n) mod 1, t = (1 - eps) u + eps."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got n={n}")
    u0 = jax.random.uniform(key, ())
    u = jnp.mod(u0 / n + jnp.arange(n, dtype=jnp.float32) / n, 1.0)
    return (1.0 - eps) * u + eps
