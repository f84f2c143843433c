"""Dual-Action Policy Optimization (spec §Method "DAPO" [R]).

A per-image policy picks two actions from a stop-gradient state of the frozen detector:
which prompt groups to route (15 non-empty subsets) and how many refinement steps to run
(r in 0..R). It factorises as

    pi(rho, r | s) = pi_route(rho | s) * pi_ref(r | s, rho)                        (joint)

(an MLP ``state -> 64 -> 64`` with a 15-way route head, and a refine head on the hidden
features plus an embedding of rho). Training is GRPO-style: per image, G joint actions are
sampled, their rewards R_i give group-relative advantages A_i = (R_i - mean R) /
(std R + 1e-6), groups whose rewards are all equal are skipped (the dynamic-sampling trick of
the LLM-RL algorithm also called DAPO, arXiv 2503.14476, labelled as such), and the policy
takes PPO-clip steps (eps = 0.2, 2 epochs per batch, entropy bonus 0.01). Inference is
greedy: argmax rho, then argmax r given that rho.

The reward of the detector task (``reward``) is

    R = [F1_pix(M_r > 0, M) if forged else 1 - mean sigmoid(M_r)]
        + 0.5 * 1[round(y_hat) = y] - lambda_c * r,      clipped to [0, 1.5].

Everything is generic in the reward: ``make_update`` takes any traceable
``reward_fn(ctx, route_idx [B, G], r [B, G]) -> [B, G]``, so the same update trains on the
detector and on the labelled bandit of the claim test (spec §Tests 13).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26_jax.core import optim
from icml26_jax.fpda import prompts

NUM_ROUTES = int(prompts.ROUTES.shape[0])  # 15
ROUTE_EMB = 16
REWARD_MAX = 1.5


class DualActionPolicy(nnx.Module):
    """pi_route(rho | s) and pi_ref(r | s, rho) (module docstring)."""

    def __init__(self, state_dim: int, num_refine: int = 4, hidden: int = 64, *,
                 rngs: nnx.Rngs):
        if state_dim < 1 or num_refine < 1:
            raise ValueError(f"state_dim and num_refine must be >= 1, got {state_dim}, "
                             f"{num_refine}")
        self.state_dim, self.num_refine = int(state_dim), int(num_refine)
        self.fc1 = nnx.Linear(state_dim, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, hidden, rngs=rngs)
        small = nnx.initializers.variance_scaling(0.01, "fan_in", "truncated_normal")
        self.route_head = nnx.Linear(hidden, NUM_ROUTES, kernel_init=small, rngs=rngs)
        self.route_emb = nnx.Embed(NUM_ROUTES, ROUTE_EMB, rngs=rngs)
        self.refine_head = nnx.Linear(hidden + ROUTE_EMB, num_refine, kernel_init=small,
                                      rngs=rngs)

    def hidden(self, s):
        return jnp.tanh(self.fc2(jnp.tanh(self.fc1(s))))

    def route_logits(self, s):
        """[B, D] -> [B, 15] log-probabilities of the routes."""
        return jax.nn.log_softmax(self.route_head(self.hidden(s)), -1)

    def refine_logits(self, s, route_idx):
        """[B, D], route indices [B, ...] -> [B, ..., R + 1] log-probabilities of r."""
        h = self.hidden(s)
        e = self.route_emb(route_idx)  # [B, ..., E]
        h = jnp.broadcast_to(h.reshape(h.shape[:1] + (1,) * (e.ndim - 2) + h.shape[1:]),
                             e.shape[:-1] + h.shape[-1:])
        return jax.nn.log_softmax(self.refine_head(jnp.concatenate([h, e], -1)), -1)


def log_prob(policy: DualActionPolicy, s, route_idx, r):
    """log pi(rho, r | s) = log pi_route(rho | s) + log pi_ref(r | s, rho); actions [B, G]."""
    lr = jnp.take_along_axis(policy.route_logits(s), route_idx, -1)  # [B, G]
    lf = jnp.take_along_axis(policy.refine_logits(s, route_idx), r[..., None], -1)[..., 0]
    return lr + lf


def entropy(policy: DualActionPolicy, s):
    """Exact joint entropy H(rho) + sum_rho pi(rho) H(r | rho), per state [B] (nats)."""
    lr = policy.route_logits(s)  # [B, 15]
    all_routes = jnp.broadcast_to(jnp.arange(NUM_ROUTES), lr.shape)
    lf = policy.refine_logits(s, all_routes)  # [B, 15, R + 1]
    h_ref = -jnp.sum(jnp.exp(lf) * lf, -1)
    pr = jnp.exp(lr)
    return -jnp.sum(pr * lr, -1) + jnp.sum(pr * h_ref, -1)


def sample(policy: DualActionPolicy, s, key, n: int):
    """n joint actions per state: (route_idx [B, n], r [B, n]) int32."""
    k1, k2 = jax.random.split(key)
    lr = policy.route_logits(s)
    route = jax.random.categorical(k1, lr[:, None, :], axis=-1, shape=(s.shape[0], n))
    lf = policy.refine_logits(s, route)
    r = jax.random.categorical(k2, lf, axis=-1)
    return route.astype(jnp.int32), r.astype(jnp.int32)


def greedy(policy: DualActionPolicy, s):
    """Inference: argmax rho, then argmax r given it: (route_idx [B], r [B])."""
    route = jnp.argmax(policy.route_logits(s), -1)
    r = jnp.argmax(policy.refine_logits(s, route), -1)
    return route.astype(jnp.int32), r.astype(jnp.int32)


def soft_f1(pred_bool, masks):
    """Per-image F1 of boolean predictions [..., S, S] against masks (both empty -> 1)."""
    p = pred_bool.astype(jnp.float32)
    m = masks.astype(jnp.float32)
    tp = jnp.sum(p * m, (-2, -1))
    denom = jnp.sum(p, (-2, -1)) + jnp.sum(m, (-2, -1))
    return jnp.where(denom > 0, 2.0 * tp / jnp.maximum(denom, 1.0), 1.0)


def reward(mask_logit_r, y_logit, masks, labels, r, refine_cost: float = 0.02):
    """Per-image reward (module docstring); shapes broadcast over leading axes.

    Args:
      mask_logit_r: M_r [..., S, S]; y_logit: [...]; masks: bool [..., S, S];
      labels: [...] in {0, 1}; r: [...] refinement steps used; refine_cost: lambda_c.

    Returns:
      [...] rewards in [0, 1.5].
    """
    forged = jnp.asarray(labels) > 0
    loc = jnp.where(forged, soft_f1(mask_logit_r > 0, masks),
                    1.0 - jnp.mean(jax.nn.sigmoid(mask_logit_r), (-2, -1)))
    correct = ((y_logit > 0) == forged).astype(jnp.float32)
    return jnp.clip(loc + 0.5 * correct - refine_cost * jnp.asarray(r, jnp.float32),
                    0.0, REWARD_MAX)


def group_advantage(rewards, eps: float = 1e-6):
    """GRPO advantages per group: rewards [B, G] -> (A [B, G], keep [B] bool).

    Groups whose rewards are all equal (std below 1e-8) carry no signal and are skipped.
    """
    mean = rewards.mean(-1, keepdims=True)
    std = rewards.std(-1, keepdims=True)
    keep = std[:, 0] > 1e-8
    return (rewards - mean) / (std + eps), keep


def ppo_loss(policy: DualActionPolicy, s, route_idx, r, old_logp, adv, keep,
             clip_eps: float = 0.2, ent_coef: float = 0.01):
    """PPO-clip loss over the kept groups, minus the entropy bonus.

    -mean_kept min(ratio A, clip(ratio, 1 - eps, 1 + eps) A) - ent_coef * mean H.
    Returns (loss, dict of diagnostics).
    """
    logp = log_prob(policy, s, route_idx, r)
    ratio = jnp.exp(logp - old_logp)
    obj = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    w = keep.astype(jnp.float32)[:, None] * jnp.ones_like(obj)
    pg = -jnp.sum(obj * w) / jnp.maximum(jnp.sum(w), 1.0)
    ent = entropy(policy, s).mean()
    clipped = jnp.sum((jnp.abs(ratio - 1) > clip_eps).astype(w.dtype) * w) / jnp.maximum(
        jnp.sum(w), 1.0)
    return pg - ent_coef * ent, {"pg": pg, "entropy": ent, "clip_frac": clipped}


class DapoConfig(NamedTuple):
    group_samples: int = 8
    epochs: int = 2
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    lr: float = 1e-3


def make_update(graphdef, reward_fn: Callable, cfg: DapoConfig = DapoConfig()):
    """A jitted DAPO update ``(params, opt_state, states [B, D], ctx, key) -> (params,
    opt_state, logs)`` and its optimizer.

    ``reward_fn(ctx, route_idx [B, G], r [B, G]) -> [B, G]`` must be traceable; ``ctx`` is
    whatever it needs (the frozen detector's per-image outputs, the bandit's hidden truth).
    """
    tx = optim.promotion_safe(optax.adam(cfg.lr))

    def update(params, opt_state, states, ctx, key):
        pol = nnx.merge(graphdef, params)
        route, r = sample(pol, states, key, cfg.group_samples)
        rew = reward_fn(ctx, route, r)
        adv, keep = group_advantage(rew)
        old = jax.lax.stop_gradient(log_prob(pol, states, route, r))

        def loss_fn(p):
            return ppo_loss(nnx.merge(graphdef, p), states, route, r, old, adv, keep,
                            cfg.clip_eps, cfg.ent_coef)

        def epoch(carry, _):
            p, o = carry
            (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(p)
            u, o = tx.update(g, o, p)
            return (optax.apply_updates(p, u), o), (loss, aux)

        (params, opt_state), (loss, aux) = jax.lax.scan(epoch, (params, opt_state), None,
                                                         length=cfg.epochs)
        logs = {"reward": rew.mean(), "kept": keep.mean(), "loss": loss[-1],
                "entropy": aux["entropy"][-1], "clip_frac": aux["clip_frac"][-1]}
        return params, opt_state, logs

    return jax.jit(update, donate_argnums=(0, 1)), tx


def uniform_entropy(num_refine: int) -> float:
    """Entropy of the uniform joint policy: log 15 + log (R + 1)."""
    return math.log(NUM_ROUTES) + math.log(num_refine)
