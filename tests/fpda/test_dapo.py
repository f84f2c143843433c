"""FPDA spec §Tests 6, 7 and 13: the dual-action policy, group advantages, PPO-clip, the
reward, and the DAPO claim test on a labelled synthetic bandit."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.fpda import dapo

D = 45


def _policy(seed=0, zero_heads=False):
    pol = dapo.DualActionPolicy(D, 4, rngs=nnx.Rngs(seed))
    if zero_heads:
        for head in (pol.route_head, pol.refine_head):
            head.kernel[...] = jnp.zeros_like(head.kernel[...])
            head.bias[...] = jnp.zeros_like(head.bias[...])
    return pol


def test_joint_log_prob_is_route_plus_refine():
    pol = _policy(1)
    s = jax.random.normal(jax.random.key(0), (5, D))
    route, r = dapo.sample(pol, s, jax.random.key(1), 3)
    lr = np.asarray(pol.route_logits(s))
    got = np.asarray(dapo.log_prob(pol, s, route, r))
    for b in range(5):
        for g in range(3):
            lf = np.asarray(pol.refine_logits(s[b:b + 1], route[b:b + 1, g]))[0]
            np.testing.assert_allclose(got[b, g], lr[b, route[b, g]] + lf[r[b, g]], atol=1e-5)
    # probabilities of all 60 joint actions sum to 1
    all_r = jnp.broadcast_to(jnp.arange(15), (5, 15))
    joint = np.exp(lr)[..., None] * np.exp(np.asarray(pol.refine_logits(s, all_r)))
    np.testing.assert_allclose(joint.sum((1, 2)), 1.0, atol=1e-5)


def test_uniform_policy_entropy():
    pol = _policy(zero_heads=True)
    s = jax.random.normal(jax.random.key(0), (3, D))
    h = np.asarray(dapo.entropy(pol, s))
    np.testing.assert_allclose(h, math.log(15) + math.log(4), rtol=1e-6)
    assert dapo.uniform_entropy(4) == pytest.approx(math.log(60))


def test_group_advantage_zero_mean_and_skips_flat_groups():
    rew = jnp.array([[0.1, 0.5, 0.9, 0.3], [0.7, 0.7, 0.7, 0.7], [1.5, 0.0, 0.0, 0.0]])
    adv, keep = dapo.group_advantage(rew)
    np.testing.assert_allclose(np.asarray(adv).mean(1), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[0].std(), 1.0, rtol=1e-4)
    assert keep.tolist() == [True, False, True]
    # a skipped group contributes nothing to the loss
    pol = _policy(2)
    s = jax.random.normal(jax.random.key(0), (3, D))
    route, r = dapo.sample(pol, s, jax.random.key(1), 4)
    old = dapo.log_prob(pol, s, route, r)
    base, _ = dapo.ppo_loss(pol, s, route, r, old, adv, keep, ent_coef=0.0)
    adv2 = adv.at[1].set(100.0)  # the flat group's advantages cannot matter
    other, _ = dapo.ppo_loss(pol, s, route, r, old, adv2, keep, ent_coef=0.0)
    assert float(base) == pytest.approx(float(other), abs=1e-7)


def test_ppo_clip_gradient_vanishes_outside_the_clip_region():
    pol = _policy(3)
    graphdef, params = nnx.split(pol, nnx.Param)
    s = jax.random.normal(jax.random.key(0), (4, D))
    route, r = dapo.sample(pol, s, jax.random.key(1), 2)
    logp = dapo.log_prob(pol, s, route, r)
    keep = jnp.ones((4,), bool)

    def grad_norm(old, adv):
        def f(p):
            return dapo.ppo_loss(nnx.merge(graphdef, p), s, route, r, old, adv, keep,
                                 ent_coef=0.0)[0]
        g = jax.grad(f)(params)
        return float(jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(g))))

    pos, neg = jnp.ones((4, 2)), -jnp.ones((4, 2))
    # ratio = e^0.5 > 1.2 with A > 0, and ratio = e^-0.5 < 0.8 with A < 0: clipped, no gradient
    assert grad_norm(logp - 0.5, pos) == 0.0
    assert grad_norm(logp + 0.5, neg) == 0.0
    # inside the region (ratio = 1) the gradient flows
    assert grad_norm(logp, pos) > 1e-4
    # the pessimistic side is never clipped: ratio > 1.2 with A < 0 still has a gradient
    assert grad_norm(logp - 0.5, neg) > 1e-4


def test_reward_bounds_perfect_mask_and_authentic_term():
    masks = np.zeros((3, 8, 8), bool)
    masks[0, 2:5, 2:6] = True
    perfect = jnp.where(jnp.asarray(masks), 9.0, -9.0)
    labels = jnp.array([1, 0, 0])
    y = jnp.array([3.0, -3.0, 3.0])  # correct, correct, wrong
    r = jnp.array([0, 2, 3])
    rew = np.asarray(dapo.reward(perfect, y, jnp.asarray(masks), labels, r, 0.02))
    assert dapo.soft_f1(perfect[:1] > 0, jnp.asarray(masks[:1]))[0] == 1.0
    assert rew[0] == pytest.approx(1.5)  # F1 = 1, detection right, r = 0 (clipped at 1.5)
    sig = 1 / (1 + np.exp(9.0))
    assert rew[1] == pytest.approx(1 - sig + 0.5 - 0.04, rel=1e-5)  # authentic: 1 - mean sigma
    assert rew[2] == pytest.approx(1 - sig - 0.06, rel=1e-5)
    many = dapo.reward(jax.random.normal(jax.random.key(0), (64, 8, 8)) * 5,
                       jax.random.normal(jax.random.key(1), (64,)),
                       jax.random.bernoulli(jax.random.key(2), 0.3, (64, 8, 8)),
                       jnp.arange(64) % 2, jnp.arange(64) % 4, 0.5)
    assert float(many.min()) >= 0.0 and float(many.max()) <= 1.5


def test_dapo_learns_a_state_dependent_policy_on_a_labelled_bandit():
    """Spec §Tests 13 (the claim test of dapo_beats_random_policy, dapo_matches_best_fixed
    and policy_is_per_image at smoke scale): random 45-d states in 4 clusters, each with its
    own best joint action; reward 1 for the right route + 0.5 for the right r. The real
    policy, group advantages and PPO-clip update run for 200 updates."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, D)).astype(np.float32)
    best_route = jnp.array([2, 7, 11, 14])
    best_r = jnp.array([0, 3, 1, 2])

    def states(key, n=32):
        k1, k2 = jax.random.split(key)
        c = jax.random.randint(k1, (n,), 0, 4)
        return jnp.asarray(centers)[c] + 0.5 * jax.random.normal(k2, (n, D)), c

    def reward_fn(c, route, r):
        return ((route == best_route[c][:, None]).astype(jnp.float32)
                + 0.5 * (r == best_r[c][:, None]).astype(jnp.float32))

    pol = dapo.DualActionPolicy(D, 4, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(pol, nnx.Param)
    update, tx = dapo.make_update(graphdef, reward_fn)
    opt = tx.init(params)
    key = jax.random.key(1)
    for step in range(200):
        key, k1, k2 = jax.random.split(key, 3)
        s, c = states(k1)
        params, opt, logs = update(params, opt, s, c, k2)
    s, c = states(jax.random.key(99), 512)
    route, r = dapo.greedy(nnx.merge(graphdef, params), s)
    got = float(reward_fn(c, route[:, None], r[:, None]).mean())
    oracle = 1.5
    # best fixed joint action over the test states (exhaustive over all 60)
    fixed = max(float(reward_fn(c, jnp.full((512, 1), a), jnp.full((512, 1), b)).mean())
                for a in range(15) for b in range(4))
    joint = np.asarray(route) * 4 + np.asarray(r)
    p = np.bincount(joint, minlength=60) / joint.size
    ent = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    assert got >= 0.9 * oracle, (got, logs)
    assert got >= fixed + 0.1, (got, fixed)
    assert ent > 0.3, ent
