"""FISOR's feasibility-guided weights (spec §Method "Feasibility weights").

    w(s, a) = 1[V_h(s) > 0] * clip(exp(alpha_c (V_h(s) - Q_h(s, a))), 1, cost_ub)
            + 1[V_h(s) <= 0] * 1[Q_h(s, a) <= 0] * clip(exp(alpha_r (Q_r(s, a) - V_r(s))), 0, 100)

In an infeasible state (V_h > 0: no in-support action keeps the state safe) the weight prefers
the safest actions (smallest Q_h); in a feasible state it advantage-weights the feasible
actions and gives the infeasible ones weight 0. Weights are divided by their batch mean
before use (:func:`normalize_weights`), since the exponentials explode.
"""

from __future__ import annotations

import jax.numpy as jnp


def feasibility_weights(qh, vh, qr, vr, alpha_c: float = 5.0, alpha_r: float = 3.0,
                        cost_ub: float = 150.0, adv_ub: float = 100.0):
    """Per-sample weights [B] (unnormalised).

    Args:
      qh: [B] Q_h(s, a) (max over the ensemble: pessimistic).
      vh: [B] V_h(s).
      qr: [B] Q_r(s, a) (min over the ensemble).
      vr: [B] V_r(s).
      alpha_c, alpha_r: temperatures of the safety and reward exponentials.
      cost_ub: upper clip of the infeasible-state weight (lower clip 1).
      adv_ub: upper clip of the feasible-state weight (lower clip 0).
    """
    qh, vh, qr, vr = (jnp.asarray(x, jnp.float32) for x in (qh, vh, qr, vr))
    w_unsafe = jnp.clip(jnp.exp(alpha_c * (vh - qh)), 1.0, cost_ub)
    w_safe = jnp.where(qh <= 0.0, jnp.clip(jnp.exp(alpha_r * (qr - vr)), 0.0, adv_ub), 0.0)
    return jnp.where(vh > 0.0, w_unsafe, w_safe)


def normalize_weights(w):
    """``w / mean(w)`` (a batch of all-zero weights stays zero)."""
    m = jnp.mean(w)
    return jnp.where(m > 0, w / jnp.where(m > 0, m, 1.0), jnp.zeros_like(w))
