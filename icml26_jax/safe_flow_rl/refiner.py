"""The latent refiner [R] (spec §Method "Latent refiner"): ordered (safety, then reward) steps in
the flow's base space with radial clipping, so ||z2 - z0|| <= eps_h + eps_r exactly and, by
P2 (``bounds``), W_p(pi, pi_prior) <= L_f * (eps_h + eps_r).

1. z1 = z0 + eps_h * u_h / max(1, ||u_h||),  u_h = g_h(s, z0);
2. z2 = z1 + eps_r * u_r / max(1, ||u_r||),  u_r = g_r(s, z1);
3. a = f(z2; s).

``eps = inf`` is the unbounded ablation (no radial clip: z1 = z0 + u_h). The flow and every
critic are frozen while g_h (stage 1) and then g_r (stage 2) are trained on
:func:`refiner_losses`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def budget_step(u, eps):
    """``eps * u / max(1, ||u||)`` over the last axis; ``u`` itself when ``eps`` is inf."""
    eps = jnp.asarray(eps, jnp.float32)
    # sqrt(|u|^2 + tiny): the heads start at u = 0, where the plain norm's gradient is 0/0.
    scale = jnp.maximum(1.0, jnp.sqrt(jnp.sum(u * u, axis=-1, keepdims=True) + 1e-12))
    finite = jnp.where(jnp.isinf(eps), 0.0, eps)
    return jnp.where(jnp.isinf(eps), u, finite * u / scale)


def refine(g_h, g_r, s, z0, eps_h, eps_r):
    """The ordered refinement of base samples.

    Args:
      g_h, g_r: ``(s [B, O], z [B, A]) -> u [B, A]``, the safety and reward heads.
      s: [B, O] states; z0: [B, A] base samples.
      eps_h, eps_r: the two latent budgets (>= 0; inf = unbounded).

    Returns:
      (z2 [B, A], aux) with aux = {"z1", "shift_norm" = ||z2 - z0||}.
    """
    z1 = z0 + budget_step(g_h(s, z0), eps_h)
    z2 = z1 + budget_step(g_r(s, z1), eps_r)
    return z2, {"z1": z1, "shift_norm": jnp.linalg.norm(z2 - z0, axis=-1)}


def safety_loss(qh_z1, vh, beta, margin):
    """L_h = E[1[V_h > 0] Q_h(s, f(z1)) + beta 1[V_h <= 0] relu(Q_h(s, f(z1)) + m)]: in
    infeasible states push towards the safest action, in feasible ones keep Q_h below -m."""
    infeasible = (vh > 0).astype(qh_z1.dtype)
    return jnp.mean(infeasible * qh_z1 + beta * (1.0 - infeasible) * jax.nn.relu(qh_z1 + margin))


def reward_loss(qh_z2, qr_z2, vh, qr_scale, beta, margin):
    """L_r = E[-1[V_h <= 0] Q_r(s, f(z2)) / qr_scale + beta relu(Q_h(s, f(z2)) + m)]."""
    feasible = (vh <= 0).astype(qr_z2.dtype)
    return jnp.mean(-feasible * qr_z2 / qr_scale + beta * jax.nn.relu(qh_z2 + margin))
