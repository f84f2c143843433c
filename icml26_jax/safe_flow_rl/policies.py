"""Action selection among sampled candidates (spec §Method "Deployment") [R].

N candidates are decoded; if any is feasible (Q_h <= 0) the one with the largest Q_r among them
is taken, otherwise the one with the smallest Q_h (FISOR's "minqc" rule is this fallback
alone). Learned critics decide; there is no hand-written hazard rule anywhere in a policy.
"""

from __future__ import annotations

import jax.numpy as jnp


def select_index(qh, qr):
    """Index of the chosen candidate. ``qh``, ``qr``: [..., N] -> [...] int32."""
    feasible = qh <= 0.0
    best_feasible = jnp.argmax(jnp.where(feasible, qr, -jnp.inf), axis=-1)
    safest = jnp.argmin(qh, axis=-1)
    return jnp.where(jnp.any(feasible, axis=-1), best_feasible, safest).astype(jnp.int32)


def select_action(actions, qh, qr):
    """The chosen action: ``actions`` [..., N, A], ``qh``/``qr`` [..., N] -> [..., A]."""
    i = select_index(qh, qr)
    return jnp.take_along_axis(actions, i[..., None, None], axis=-2)[..., 0, :]


def select_min_qh(actions, qh):
    """FISOR's argmin-Q_h selection (the FISOR-lite baseline)."""
    i = jnp.argmin(qh, axis=-1)
    return jnp.take_along_axis(actions, i[..., None, None], axis=-2)[..., 0, :]
