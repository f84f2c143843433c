"""Taylor-Gaussians (spec §Method "TGs").

Gaussian i is anchored at time t_i; with Delta = t - t_i (time normalised to [0, 1])

    mu_i(t)    = mu_i + v_i Delta + 1/2 a_i Delta^2                  (order 2; order 1: a = 0;
                                                                      order 0: v = a = 0)
    sigma_i(t) = sigmoid(o_i) exp(-(Delta / exp(lambda_i))^2)        (temporal opacity [R],
                                                                      Spacetime-Gaussians form)

Rotation, scale and colour are static. The order-k Taylor remainder of a smooth trajectory is
||x^(k+1)|| Delta^(k+1) / (k+1)!: for order 1 it is 1/2 ||a|| Delta^2, quadratic in the horizon
(:func:`taylor_error`), the failure the paper targets.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

ORDERS = (0, 1, 2)


class TaylorGaussians(NamedTuple):
    """N Gaussians (pad with ``opacity_logit = -inf``-like values for static shapes).

    Attributes:
      mean: [N, 3] position at the anchor time.
      vel: [N, 3] first-order motion (per unit of normalised time).
      acc: [N, 3] second-order motion.
      t_anchor: [N] anchor times t_i.
      log_tscale: [N] lambda_i, log of the temporal-opacity width.
      log_scale: [N, 3] log of the axis scales.
      quat: [N, 4] rotation quaternion (w, x, y, z), normalised on use.
      opacity_logit: [N] o_i.
      rgb: [N, 3] colour.
    """

    mean: jax.Array
    vel: jax.Array
    acc: jax.Array
    t_anchor: jax.Array
    log_tscale: jax.Array
    log_scale: jax.Array
    quat: jax.Array
    opacity_logit: jax.Array
    rgb: jax.Array


def check_order(order: int) -> int:
    if isinstance(order, bool) or order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return int(order)


def positions_at(g: TaylorGaussians, t, order: int = 2) -> jax.Array:
    """mu_i(t) [N, 3] with the Taylor expansion truncated at ``order`` (0, 1 or 2)."""
    order = check_order(order)
    dt = (jnp.asarray(t, jnp.float32) - g.t_anchor)[:, None]
    pos = g.mean
    if order >= 1:
        pos = pos + g.vel * dt
    if order >= 2:
        pos = pos + 0.5 * g.acc * dt * dt
    return pos


def opacity_at(g: TaylorGaussians, t, temporal: bool = True) -> jax.Array:
    """sigma_i(t) [N]: sigmoid(o) times the temporal factor exp(-(Delta / exp(lambda))^2)
    when ``temporal``, else the constant sigmoid(o)."""
    base = jax.nn.sigmoid(g.opacity_logit)
    if not temporal:
        return base
    dt = jnp.asarray(t, jnp.float32) - g.t_anchor
    return base * jnp.exp(-jnp.square(dt * jnp.exp(-g.log_tscale)))


def quat_to_rotmat(q: jax.Array) -> jax.Array:
    """Unit rotation matrices [..., 3, 3] of quaternions (w, x, y, z) [..., 4] (normalised)."""
    q = q / jnp.maximum(jnp.linalg.norm(q, axis=-1, keepdims=True), 1e-12)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def covariances(g: TaylorGaussians) -> jax.Array:
    """Sigma_i = R_q S S^T R_q^T [N, 3, 3], S = diag(exp(log_scale))."""
    R = quat_to_rotmat(g.quat)
    M = R * jnp.exp(g.log_scale)[:, None, :]  # R S
    return M @ jnp.swapaxes(M, -1, -2)


def taylor_error(acc, dt):
    """The order-1 truncation error 1/2 ||a|| Delta^2 of a constant-acceleration trajectory."""
    return 0.5 * jnp.linalg.norm(jnp.asarray(acc, jnp.float32), axis=-1) * jnp.square(dt)


def mask_motion(g: TaylorGaussians, order: int) -> TaylorGaussians:
    """The same Gaussians with the motion terms above ``order`` zeroed (the order-1 / order-0
    baselines share code and parameters with order 2; only the mask differs)."""
    order = check_order(order)
    vel = g.vel if order >= 1 else jnp.zeros_like(g.vel)
    acc = g.acc if order >= 2 else jnp.zeros_like(g.acc)
    return g._replace(vel=vel, acc=acc)
