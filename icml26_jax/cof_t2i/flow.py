"""Vanilla flow matching in the Wan / SD3 convention (spec §Method "Objective" [R]) and the
Euler sampler.

* Path: z_t = (1 - t) z_0 + t eps, eps ~ N(0, I); t = 0 is data, t = 1 is noise.
* Target velocity: v* = eps - z_0 (d z_t / d t); loss = E ||v_theta(z_t, t, c) - v*||^2,
  averaged over every frame jointly with the *same* t for all frames of a clip.
* Training times: t ~ logit-normal(0, 1). Sampling times: a uniform grid from 1 to 0 warped
  by the time shift t' = s t / (1 + (s - 1) t) (s = 3), integrated with Euler steps.

The pure functions work on any array shape ``[B, ...]``; ``loss`` and ``sample`` take the
velocity model as an NNX ``(graphdef, params)`` pair (``nnx.split(model)``) so that they are
plain jittable functions of arrays. Only the backbone interface
``model(z, t, text_ids, text_mask)`` of ``adapter.VideoFlowBackbone`` is used.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26_jax.cof_t2i import dit


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


class FlowBatch(NamedTuple):
    """One training batch in latent space."""
    z0: jax.Array  # [B, F, 8, 8, C] scaled clean latents (each frame encoded on its own)
    text_ids: jax.Array  # int32 [B, L]
    text_mask: jax.Array  # bool [B, L]


def drop_text(key, text_ids, text_mask, p: float):
    """Classifier-free-guidance training: each caption is replaced by the empty caption
    (all padding; the model then only sees its null token) with probability ``p``."""
    keep = jax.random.uniform(key, (text_ids.shape[0], 1)) >= p
    return jnp.where(keep, text_ids, 0), jnp.logical_and(jnp.asarray(text_mask, bool), keep)


def loss(graphdef, params, batch: FlowBatch, key, text_dropout: float = 0.1) -> jax.Array:
    """Vanilla flow matching (spec §Method "Objective"): one t ~ logit-normal(0, 1) per
    clip shared by *all* its frames, z_t = (1 - t) z0 + t eps, and the mean squared error
    of v_theta(z_t, t, c) to v* = eps - z0 over every frame jointly."""
    k_t, k_eps, k_drop = jax.random.split(key, 3)
    z0 = batch.z0
    t = logit_normal_t(k_t, z0.shape[0])
    eps = jax.random.normal(k_eps, z0.shape, z0.dtype)
    ids, mask = drop_text(k_drop, batch.text_ids, batch.text_mask, text_dropout)
    v = nnx.merge(graphdef, params)(interpolate(z0, eps, t), t, ids, mask)
    return flow_loss(v, z0, eps)


def sample(graphdef, params, text_ids, text_mask, num_frames: int, steps: int, cfg: float,
           shift: float, key, *, latent_res: int = 8, channels: int = 8) -> jax.Array:
    """All ``num_frames`` latents denoised *jointly* from noise (t = 1) to data (t = 0):
    Euler steps on the shifted grid inside ``lax.fori_loop``; classifier-free guidance
    v_u + cfg (v_c - v_u) with conditional and unconditional halves in one batch of 2B
    (``cfg == 1`` runs the conditional model alone). Returns ``z [B, F, S, S, C]``."""
    if num_frames not in (1, 2, 3):
        raise ValueError(f"num_frames must be 1, 2 or 3, got {num_frames}")
    if not cfg >= 0:
        raise ValueError(f"cfg (guidance weight) must be >= 0, got {cfg}")
    model = nnx.merge(graphdef, params)
    b = text_ids.shape[0]
    z1 = jax.random.normal(key, (b, num_frames, latent_res, latent_res, channels))
    mask = jnp.asarray(text_mask, bool)

    def velocity(z, t):
        tb = jnp.full((b,), t, jnp.float32)
        if cfg == 1.0:
            return model(z, tb, text_ids, mask)
        return dit.cfg_velocity(model, z, tb, text_ids, mask, cfg)

    return euler(velocity, z1, steps, shift)
