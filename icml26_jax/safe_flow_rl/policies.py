"""Action selection among sampled candidates (spec §Method "Deployment") [R].

N candidates are decoded; if any is feasible (Q_h <= 0) the one with the largest Q_r among them
is taken, otherwise the one with the smallest Q_h (FISOR's "minqc" rule is this fallback
alone). Learned critics decide; there is no hand-written hazard rule anywhere in a policy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def select_index(qh, qr, margin=0.0):
    """Index of the chosen candidate. ``qh``, ``qr``: [..., N] -> [...] int32.

    A candidate counts as feasible when Q_h <= -margin (the spec's rule is margin 0; the
    experiment calibrates a margin on validation starts, see ``train.calibrate_margin``).
    """
    feasible = qh <= -jnp.asarray(margin, qh.dtype)[..., None]
    best_feasible = jnp.argmax(jnp.where(feasible, qr, -jnp.inf), axis=-1)
    safest = jnp.argmin(qh, axis=-1)
    return jnp.where(jnp.any(feasible, axis=-1), best_feasible, safest).astype(jnp.int32)


def select_action(actions, qh, qr, margin=0.0):
    """The chosen action: ``actions`` [..., N, A], ``qh``/``qr`` [..., N] -> [..., A]."""
    i = select_index(qh, qr, margin)
    return jnp.take_along_axis(actions, i[..., None, None], axis=-2)[..., 0, :]


def select_min_qh(actions, qh):
    """FISOR's argmin-Q_h selection (the FISOR-lite baseline)."""
    i = jnp.argmin(qh, axis=-1)
    return jnp.take_along_axis(actions, i[..., None, None], axis=-2)[..., 0, :]


def refined_policy(flow_graphdef, refiner_graphdef, critic_graphdefs, n: int,
                   deterministic: bool = False):
    """Our deployment rule: N latents z0 ~ N(0, I) (one z0 = 0 when ``deterministic``), the
    ordered refinement with eps_h = eps_r = eps / 2, decoding through the flow, then
    :func:`select_action` on the frozen critics.

    Returns ``act(params, key, obs [B, O]) -> a [B, A]`` with params = (refiner params, flow
    params, critic params, eps, margin), pure so that evaluation can vmap it over seeds; the
    budget and the selection margin are arguments, so one compiled rollout serves a sweep.
    """
    from flax import nnx

    from icml26_jax.safe_flow_rl import critics
    from icml26_jax.safe_flow_rl.refiner import refine

    n = 1 if deterministic else int(n)

    def act(params, key, obs):
        rp, fp, cp, eps, margin = params
        ref = nnx.merge(refiner_graphdef, rp)
        flow = nnx.merge(flow_graphdef, fp)
        shape = obs.shape[:1] + (n, flow.action_dim)
        z0 = (jnp.zeros(shape, jnp.float32) if deterministic
              else jax.random.normal(key, shape, jnp.float32))
        s = jnp.broadcast_to(obs[:, None, :], obs.shape[:1] + (n,) + obs.shape[-1:])
        z2, _ = refine(ref.g_h, ref.g_r, s, z0, eps / 2.0, eps / 2.0)
        cand = flow(z2, s)
        qh, qr, _ = critics.q_values(critic_graphdefs, cp, s, cand)
        return select_action(cand, qh, qr, margin)

    return act
