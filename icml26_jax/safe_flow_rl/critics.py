"""FISOR's Hamilton-Jacobi safety critics and IQL reward critics (spec §Method "HJ and reward
critics"), as pure functions over parameter pytrees.

* Safety (HJ reachability, h > 0 is a violation):
  Q_h(s, a) <- (1 - gamma) h(s) + gamma max(h(s), V_h(s')) at non-terminal transitions and
  Q_h <- h(s) at terminals (:func:`hj_target`); V_h is fitted to Q_h by the *reversed*
  expectile (:func:`safe_expectile_loss`: weight tau on negative residuals), so
  V_h(s) ~ the minimum of Q_h over in-support actions.
* Reward (IQL): V_r fitted to Q_r by the ordinary expectile (:func:`expectile_loss`),
  Q_r <- r + gamma mask V_r(s').
* Cost (for the BC-Lag baseline [R]): a discounted cost critic of the behaviour policy,
  Q_c <- c + gamma mask V_c(s'), V_c fitted by the mean (expectile 0.5).

Q networks are ensembles of 2; the safety side takes the **max** (pessimistic), the reward side
the **min**. Targets are Polyak-averaged copies (rate 0.005). One :func:`update_critics` call is
one gradient step on every network; the caller jits it (and vmaps it over seeds).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26_jax.core.optim import promotion_safe
from icml26_jax.safe_flow_rl.model import MLP

Q_NETS = ("qh1", "qh2", "qr1", "qr2", "qc")
V_NETS = ("vh", "vr", "vc")


def expectile_loss(d, tau):
    """IQL's expectile: mean of |tau - 1[d < 0]| d^2 (weight tau on positive residuals)."""
    w = jnp.where(d > 0, tau, 1.0 - tau)
    return jnp.mean(w * d * d)


def safe_expectile_loss(d, tau):
    """FISOR's reversed expectile: weight tau on *negative* residuals d = Q_h - V_h, so V_h
    tracks the lower end (the safest in-support action)."""
    w = jnp.where(d < 0, tau, 1.0 - tau)
    return jnp.mean(w * d * d)


def hj_target(h, v_next, mask, gamma):
    """The HJ reachability target: (1 - gamma) h + gamma max(h, V_h(s')); h at terminals
    (``mask`` = 0)."""
    return jnp.where(mask > 0, (1.0 - gamma) * h + gamma * jnp.maximum(h, v_next), h)


class CriticConfig(NamedTuple):
    gamma: float = 0.99
    expectile_h: float = 0.9
    expectile_r: float = 0.9
    polyak: float = 0.005
    lr: float = 3e-4


class CriticState(NamedTuple):
    """Parameters of every critic, their Polyak targets, the optimizer state and the step."""

    params: dict  # name -> nnx.State
    target: dict  # the Q networks' targets
    opt_state: optax.OptState
    step: jax.Array


def make_critics(obs_dim: int, action_dim: int, hidden, key):
    """(graphdefs, params): Q networks on (s, a) and V networks on s, initialised from
    ``key``."""
    keys = jax.random.split(key, len(Q_NETS) + len(V_NETS))
    graphdefs, params = {}, {}
    for k, name in zip(keys, Q_NETS + V_NETS):
        in_dim = obs_dim + (action_dim if name in Q_NETS else 0)
        g, p = nnx.split(MLP(in_dim, tuple(hidden), 1, rngs=nnx.Rngs(k)), nnx.Param)
        graphdefs[name], params[name] = g, p
    return graphdefs, params


def optimizer(cfg: CriticConfig) -> optax.GradientTransformation:
    return promotion_safe(optax.adam(cfg.lr))


def init_state(params, cfg: CriticConfig) -> CriticState:
    target = {n: params[n] for n in Q_NETS}
    return CriticState(params, target, optimizer(cfg).init(params), jnp.zeros((), jnp.int32))


def _apply(graphdefs, params, name, x):
    return nnx.merge(graphdefs[name], params[name])(x)[..., 0]


def q_values(graphdefs, params, obs, act):
    """(Q_h max over the ensemble, Q_r min over the ensemble, Q_c), each [B]."""
    x = jnp.concatenate([obs, act], -1)
    qh = jnp.maximum(_apply(graphdefs, params, "qh1", x), _apply(graphdefs, params, "qh2", x))
    qr = jnp.minimum(_apply(graphdefs, params, "qr1", x), _apply(graphdefs, params, "qr2", x))
    return qh, qr, _apply(graphdefs, params, "qc", x)


def v_values(graphdefs, params, obs):
    """(V_h, V_r, V_c), each [B]."""
    return tuple(_apply(graphdefs, params, n, obs) for n in V_NETS)


def critic_loss(params, target, graphdefs, batch, cfg: CriticConfig):
    """The sum of every critic's loss on one batch, and their values for logging.

    ``batch``: observations [B, O], actions [B, A], rewards [B], h [B] (of s), costs [B],
    next_observations [B, O], masks [B] (0 at true terminals only).
    """
    obs, act, nobs = batch["observations"], batch["actions"], batch["next_observations"]
    h, r, c, mask = batch["h"], batch["rewards"], batch["costs"], batch["masks"]
    qh_t, qr_t, _ = q_values(graphdefs, target, obs, act)
    qh_t, qr_t = jax.lax.stop_gradient(qh_t), jax.lax.stop_gradient(qr_t)
    vh, vr, vc = v_values(graphdefs, params, obs)
    vh_n, vr_n, vc_n = jax.lax.stop_gradient(jnp.stack(v_values(graphdefs, params, nobs)))
    l_vh = safe_expectile_loss(qh_t - vh, cfg.expectile_h)
    l_vr = expectile_loss(qr_t - vr, cfg.expectile_r)
    x = jnp.concatenate([obs, act], -1)
    y_h = hj_target(h, vh_n, mask, cfg.gamma)
    y_r = r + cfg.gamma * mask * vr_n
    y_c = c + cfg.gamma * mask * vc_n
    l_qh = sum(jnp.mean((_apply(graphdefs, params, n, x) - y_h) ** 2) for n in ("qh1", "qh2"))
    l_qr = sum(jnp.mean((_apply(graphdefs, params, n, x) - y_r) ** 2) for n in ("qr1", "qr2"))
    qc = _apply(graphdefs, params, "qc", x)
    l_qc = jnp.mean((qc - y_c) ** 2)
    l_vc = jnp.mean((jax.lax.stop_gradient(qc) - vc) ** 2)
    total = l_vh + l_vr + l_qh + l_qr + l_qc + l_vc
    return total, {"loss_vh": l_vh, "loss_vr": l_vr, "loss_qh": l_qh, "loss_qr": l_qr,
                   "loss_qc": l_qc, "vh_mean": jnp.mean(vh), "vr_mean": jnp.mean(vr)}


def update_critics(state: CriticState, batch, graphdefs, cfg: CriticConfig = CriticConfig()):
    """One gradient step on every critic plus the Polyak update; pure (jit / vmap it)."""
    (_, info), grads = jax.value_and_grad(critic_loss, has_aux=True)(
        state.params, state.target, graphdefs, batch, cfg)
    updates, opt_state = optimizer(cfg).update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    target = jax.tree.map(lambda t, p: (1.0 - cfg.polyak) * t + cfg.polyak * p, state.target,
                          {n: params[n] for n in Q_NETS})
    return CriticState(params, target, opt_state, state.step + 1), info
