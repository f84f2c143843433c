"""The flow prior's training objective (spec §Method "Flow prior") [R].

    L_prior(theta) = - sum_i w_i log pi(a_i | s_i) / sum_i w_i  -  c * mean_i log pi(a_i | s_i)

with w the (batch-normalised) feasibility weights and c = 0.1. The weighted term maps the
high-density core of N(0, I) onto feasible, high-advantage actions; the unweighted term keeps
the whole data support covered (so the refiner's small latent moves stay in-support). With
w = 1 it is plain maximum likelihood: the *unweighted* flow used for the OOD measure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26_jax.core.optim import promotion_safe


def prior_loss(log_probs, w, unweighted_coef: float = 0.1):
    """L_prior for per-sample log-densities [B] and weights [B] (>= 0)."""
    w = jnp.asarray(w, log_probs.dtype)
    weighted = -jnp.sum(w * log_probs) / jnp.maximum(jnp.sum(w), 1e-8)
    return weighted - unweighted_coef * jnp.mean(log_probs)


def flow_optimizer(lr: float = 3e-4, clip: float = 1.0) -> optax.GradientTransformation:
    return promotion_safe(optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr)))


def make_flow_step(graphdef, tx: optax.GradientTransformation, unweighted_coef: float = 0.1):
    """A pure step ``(params, opt_state, obs [B,O], act [B,A], w [B]) -> (params, opt_state,
    loss)``; jit (and vmap over seeds) it at the call site."""

    def loss_fn(params, obs, act, w):
        flow = nnx.merge(graphdef, params)
        return prior_loss(flow.log_prob(act, obs), w, unweighted_coef)

    def step(params, opt_state, obs, act, w):
        loss, grads = jax.value_and_grad(loss_fn)(params, obs, act, w)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
