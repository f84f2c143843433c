"""Vanilla flow matching in the Wan / SD3 convention (spec §Method "Objective" [R]) and the
Euler sampler.

* Path: z_t = (1 - t) z_0 + t eps, eps ~ N(0, I); t = 0 is data, t = 1 is noise.
* Target velocity: v* = eps - z_0 (d z_t / d t); loss = E ||v_theta(z_t, t, c) - v*||^2,
  averaged over every frame jointly with the *same* t for all frames of a clip.
* Training times: t ~ logit-normal(0, 1). Sampling times: a uniform grid from 1 to 0 warped
  by the time shift t' = s t / (1 + (s - 1) t) (s = 3), integrated with Euler steps.

The model-dependent loss and the CFG sampler (``loss``, ``sample``) build on these pure
functions; everything here works on any array shape ``[B, ...]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _bcast(t, z):
    return jnp.reshape(t, t.shape + (1,) * (z.ndim - t.ndim))


def interpolate(z0: jax.Array, eps: jax.Array, t: jax.Array) -> jax.Array:
    """z_t = (1 - t) z0 + t eps with one t per example ([B]) broadcast over the rest."""
    t = _bcast(jnp.asarray(t, z0.dtype), z0)
    return (1.0 - t) * z0 + t * eps


def target_velocity(z0: jax.Array, eps: jax.Array) -> jax.Array:
    """v* = eps - z0."""
    return eps - z0


def flow_loss(v_pred: jax.Array, z0: jax.Array, eps: jax.Array) -> jax.Array:
    """Mean squared error to v* over every element (all frames jointly)."""
    return jnp.mean((v_pred - target_velocity(z0, eps)) ** 2)


def logit_normal_t(key, n: int, mean: float = 0.0, std: float = 1.0) -> jax.Array:
    """n training times t = sigmoid(N(mean, std^2)) in (0, 1)."""
    return jax.nn.sigmoid(mean + std * jax.random.normal(key, (n,)))


def shift_time(t: jax.Array, s: float) -> jax.Array:
    """t' = s t / (1 + (s - 1) t): monotone on [0, 1], fixes 0 and 1; s > 1 spends more of
    a uniform grid at high noise."""
    if s <= 0:
        raise ValueError(f"shift must be > 0, got {s}")
    return s * t / (1.0 + (s - 1.0) * t)


def time_grid(steps: int, shift: float = 1.0) -> jax.Array:
    """``steps + 1`` sampling times from 1 down to 0 (shifted)."""
    if int(steps) != steps or steps < 1:
        raise ValueError(f"sampling steps must be a positive integer, got {steps}")
    return shift_time(jnp.linspace(1.0, 0.0, int(steps) + 1), shift)


def euler(velocity, z1: jax.Array, steps: int, shift: float = 1.0) -> jax.Array:
    """Integrates dz/dt = velocity(z, t) from t = 1 (z1) to t = 0 with Euler steps on the
    shifted grid, in a ``lax.fori_loop``. ``velocity(z, t)`` takes a scalar t."""
    ts = time_grid(steps, shift)

    def body(i, z):
        t, t_next = ts[i], ts[i + 1]
        return z + (t_next - t) * velocity(z, t)

    return jax.lax.fori_loop(0, int(steps), body, z1)
