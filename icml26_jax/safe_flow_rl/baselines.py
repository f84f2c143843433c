"""Baselines of the SafeFlowRL experiment (spec §Baselines and peers), trained on the same data.

- **BC-All**: a tanh-Gaussian MLP actor, behaviour-cloned on every transition.
- **BC-Safe**: the same actor, cloned on the transitions of violation-free episodes only.
- **BC-Lag** [R]: TD3+BC-style deterministic actor on Q~_r - lambda Q~_c with BC weight 2.5,
  lambda by dual ascent on E[Q_c(s, pi(s))] <= kappa (1 - gamma^T) / ((1 - gamma) T). Q_c is
  the discounted cost critic of the shared critic stage. It stands in for CPQ / BCQ-Lag.
- **FISOR-lite**: the Gaussian actor fitted by feasibility-weighted BC (FISOR's weights), and
  FISOR's argmin-Q_h selection over N samples.
- **prior_only**: the flow prior without refiner, the same deployment rule as ours.

Every function here is pure; ``stages.actor_stage`` trains them with seeds vmapped. No
baseline sees a hazard rule: the safe ones get safety from the learned critics only.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26_jax.core.optim import promotion_safe
from icml26_jax.safe_flow_rl import critics, policies
from icml26_jax.safe_flow_rl.model import ACTION_CLIP, MLP, tanh_log_det

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
BC_LAG_ALPHA = 2.5  # TD3+BC's weight on the normalised Q term
ACTORS = ("bc_all", "bc_safe", "bc_lag", "fisor_lite")


class GaussianActor(nnx.Module):
    """pi(a | s) = tanh # N(mu(s), diag sigma(s)^2): an MLP O -> hidden -> 2A.

    ``deterministic`` gives tanh(mu(s)); ``log_prob`` clips actions to +-(1 - 1e-5) before
    atanh, like the flow.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (128, 128), *,
                 rngs: nnx.Rngs):
        self.action_dim = int(action_dim)
        self.net = MLP(int(obs_dim), tuple(hidden), 2 * self.action_dim, rngs=rngs)

    def dist(self, s):
        out = self.net(s)
        mu, log_std = jnp.split(out, 2, axis=-1)
        return mu, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def log_prob(self, a, s):
        """log pi(a | s) [...] of actions a [..., A] in (-1, 1)."""
        mu, log_std = self.dist(s)
        u = jnp.arctanh(jnp.clip(a, -ACTION_CLIP, ACTION_CLIP))
        z = (u - mu) * jnp.exp(-log_std)
        log_n = -0.5 * z * z - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
        return jnp.sum(log_n - tanh_log_det(u), axis=-1)

    def deterministic(self, s):
        return jnp.tanh(self.dist(s)[0])

    def sample(self, key, s, n: int):
        """n actions per state: s [B, O] -> [B, n, A]."""
        mu, log_std = self.dist(s)
        eps = jax.random.normal(key, mu.shape[:-1] + (n, mu.shape[-1]), mu.dtype)
        return jnp.tanh(mu[..., None, :] + jnp.exp(log_std)[..., None, :] * eps)


class DeterministicActor(nnx.Module):
    """pi(s) = tanh(MLP(s)), the TD3+BC actor of BC-Lag."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (128, 128), *,
                 rngs: nnx.Rngs):
        self.net = MLP(int(obs_dim), tuple(hidden), int(action_dim), rngs=rngs)

    def deterministic(self, s):
        return jnp.tanh(self.net(s))


def make_actor(kind: str, obs_dim: int, action_dim: int, hidden, key):
    """(graphdef, params) of the actor of baseline ``kind`` (one of ``ACTORS``)."""
    if kind not in ACTORS:
        raise ValueError(f"baseline kind must be one of {ACTORS}, got {kind!r}")
    cls = DeterministicActor if kind == "bc_lag" else GaussianActor
    return nnx.split(cls(obs_dim, action_dim, tuple(hidden), rngs=nnx.Rngs(key)), nnx.Param)


def actor_optimizer(lr: float) -> optax.GradientTransformation:
    return promotion_safe(optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr)))


def cost_limit(kappa: float, gamma: float, horizon: int) -> float:
    """The discounted form of the episode cost budget: kappa (1 - gamma^T) / ((1 - gamma) T)."""
    return float(kappa) * (1.0 - float(gamma) ** int(horizon)) / ((1.0 - float(gamma))
                                                                  * int(horizon))


def weighted_bc_loss(graphdef, params, obs, act, w):
    """-sum w log pi(a|s) / sum w: BC-All / BC-Safe (w = 1 on their data), FISOR-lite (w the
    batch-normalised feasibility weights)."""
    actor = nnx.merge(graphdef, params)
    lp = actor.log_prob(act, obs)
    return -jnp.sum(w * lp) / jnp.maximum(jnp.sum(w), 1e-8)


def bc_lag_loss(graphdef, params, obs, act, crit, lam, qr_scale, qc_scale,
                alpha: float = BC_LAG_ALPHA):
    """TD3+BC on the Lagrangian: -alpha (Q~_r - lambda Q~_c)(s, pi(s)) + ||pi(s) - a||^2.

    ``crit``: (critic graphdefs, one seed's critic params). Returns (loss, E[Q_c(s, pi(s))]).
    """
    cg, cp = crit
    pi = nnx.merge(graphdef, params).deterministic(obs)
    _, qr, qc = critics.q_values(cg, cp, obs, pi)
    lagr = qr / qr_scale - lam * qc / qc_scale
    bc = jnp.mean(jnp.sum((pi - act) ** 2, axis=-1))
    return -alpha * jnp.mean(lagr) + bc, jnp.mean(qc)


def dual_ascent(lam, qc_mean, limit, lr):
    """lambda <- max(0, lambda + eta (E[Q_c] - limit))."""
    return jnp.maximum(0.0, lam + lr * (qc_mean - limit))


# ----------------------------------------------------------------------------- deployment
# Policy constructors: each returns ``act(params, key, obs [B, O]) -> a [B, A]``, pure in its
# arguments so that evaluation can vmap it over seeds (params stacked per seed).


def bc_all(graphdef):
    """BC-All at evaluation: the mode tanh(mu(s)); params = actor params."""
    return lambda params, key, obs: nnx.merge(graphdef, params).deterministic(obs)


bc_safe = bc_all  # the same actor family, cloned on the violation-free episodes


def bc_lag(graphdef):
    """BC-Lag's deterministic actor; params = actor params."""
    return lambda params, key, obs: nnx.merge(graphdef, params).deterministic(obs)


def fisor_lite(graphdef, critic_graphdefs, n: int):
    """FISOR's rule: N samples of the weighted-BC actor, the one with the smallest Q_h.
    params = (actor params, critic params)."""

    def act(params, key, obs):
        ap, cp = params
        cand = nnx.merge(graphdef, ap).sample(key, obs, n)  # [B, N, A]
        qh = critics.q_values(critic_graphdefs, cp, _tile(obs, n), cand)[0]
        return policies.select_min_qh(cand, qh)

    return act


def prior_only(flow_graphdef, critic_graphdefs, n: int):
    """The flow prior without refiner: N decoded z0 ~ N(0, I) and the Q_h / Q_r deployment
    rule. params = (flow params, critic params, selection margin)."""

    def act(params, key, obs):
        fp, cp, margin = params
        cand, _ = nnx.merge(flow_graphdef, fp).sample(key, obs, n)
        qh, qr, _ = critics.q_values(critic_graphdefs, cp, _tile(obs, n), cand)
        return policies.select_action(cand, qh, qr, margin)

    return act


def _tile(obs, n):
    return jnp.broadcast_to(obs[:, None, :], obs.shape[:1] + (n,) + obs.shape[-1:])
