"""HJ / IQL critics (spec §Tests "Critics"): targets and expectile losses on hand cases, the
5-state chain against brute-force min-max h values, vmapped seeds equal separate runs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.safe_flow_rl import critics


def test_hj_target_hand_cases():
    h = jnp.asarray([-1.0, 0.5, -0.2, 0.3])
    v_next = jnp.asarray([-2.0, -1.0, 0.4, 9.0])
    mask = jnp.asarray([1.0, 1.0, 1.0, 0.0])
    g = 0.9
    want = [0.1 * -1.0 + 0.9 * -1.0, 0.1 * 0.5 + 0.9 * 0.5, 0.1 * -0.2 + 0.9 * 0.4, 0.3]
    np.testing.assert_allclose(critics.hj_target(h, v_next, mask, g), want, rtol=1e-6)


def test_expectile_losses_weight_opposite_residual_signs():
    d = jnp.asarray([2.0, -1.0])
    # IQL: tau on positive residuals; FISOR's reversed expectile: tau on negative ones.
    assert float(critics.expectile_loss(d, 0.9)) == pytest.approx((0.9 * 4 + 0.1 * 1) / 2)
    assert float(critics.safe_expectile_loss(d, 0.9)) == pytest.approx((0.1 * 4 + 0.9 * 1) / 2)


def _chain_batch():
    """5 states in a line, actions -1 / +1 (moves, clipped at the ends); no terminals."""
    h = np.asarray([-1.0, -0.6, 0.5, -0.7, -0.4], np.float32)
    obs, act, nobs, hs = [], [], [], []
    eye = np.eye(5, dtype=np.float32)
    for s in range(5):
        for a in (-1, 1):
            n = min(max(s + a, 0), 4)
            obs.append(eye[s]), act.append([float(a)]), nobs.append(eye[n]), hs.append(h[s])
    n = len(obs)
    batch = {"observations": np.asarray(obs), "actions": np.asarray(act, np.float32),
             "next_observations": np.asarray(nobs), "h": np.asarray(hs),
             "rewards": np.zeros(n, np.float32), "costs": (np.asarray(hs) > 0).astype(np.float32),
             "masks": np.ones(n, np.float32)}
    return {k: jnp.asarray(v) for k, v in batch.items()}, h


def _brute_force(h, gamma):
    """Value iteration of V(s) = (1 - g) h(s) + g max(h(s), min_a V(s'))."""
    v = h.copy()
    for _ in range(5000):
        nxt = np.minimum(v[np.clip(np.arange(5) - 1, 0, 4)], v[np.clip(np.arange(5) + 1, 0, 4)])
        v = (1 - gamma) * h + gamma * np.maximum(h, nxt)
    return v


def test_chain_vh_matches_brute_force_min_max():
    batch, h = _chain_batch()
    cfg = critics.CriticConfig(gamma=0.9, expectile_h=0.99, polyak=0.05, lr=3e-3)
    graphdefs, params = critics.make_critics(5, 1, (32, 32), jax.random.key(0))
    state = critics.init_state(params, cfg)
    step = jax.jit(functools.partial(critics.update_critics, graphdefs=graphdefs, cfg=cfg))
    for _ in range(1500):
        state, info = step(state, batch)
    vh = critics.v_values(graphdefs, state.params, jnp.eye(5))[0]
    want = _brute_force(h, 0.9)
    # The min-max structure: state 2 (a hazard) is infeasible, its neighbours can step away.
    assert np.all(np.abs(np.asarray(vh) - want) < 0.05), (np.asarray(vh), want)


def test_vmapped_seeds_equal_separate_runs():
    batch, _ = _chain_batch()
    cfg = critics.CriticConfig()
    keys = jax.random.split(jax.random.key(1), 2)
    graphdefs, _ = critics.make_critics(5, 1, (16,), keys[0])
    states = [critics.init_state(critics.make_critics(5, 1, (16,), k)[1], cfg) for k in keys]
    step = functools.partial(critics.update_critics, graphdefs=graphdefs, cfg=cfg)
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *states)
    vm = jax.jit(jax.vmap(step, in_axes=(0, None)))
    one = jax.jit(step)
    for _ in range(5):
        stacked, _ = vm(stacked, batch)
        states = [one(s, batch)[0] for s in states]
    for i, s in enumerate(states):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6),
                     stacked.params, s.params)
