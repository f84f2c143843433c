"""PointRobotHazard: Euler dynamics, constraint, reward and termination, observation geometry,
the analytic ``avoidable`` check against a loop reference, purity and determinism."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from icml26_jax.safe_flow_rl import envs

P = envs.EnvParams()


def _state(x, y, v, theta, t=0):
    f = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    return envs.EnvState(f(x), f(y), f(v), f(theta), jnp.asarray(t, jnp.int32))


def _np(state):
    return np.array([state.x, state.y, state.v, state.theta], np.float64)


def test_dynamics_match_hand_integrated_euler():
    s = _state(-1.5, 0.3, 1.2, 0.7)
    ref = _np(s)
    key = jax.random.key(0)
    step = jax.jit(envs.step)  # params travel as a traced pytree
    for a in ([0.5, -0.3], [-1.0, 1.0], [0.0, 0.0], [0.9, 0.2]):
        _, s, _, _, _, _ = step(key, s, jnp.asarray(a, jnp.float32), P)
        x, y, v, th = ref
        ref = np.array([x + 0.05 * v * math.cos(th), y + 0.05 * v * math.sin(th),
                        v + 0.05 * a[0], th + 0.05 * a[1]])
        # float32 state against a float64 reference over 4 steps: 1e-5 is ~100 ulp at |x|~1.
        np.testing.assert_allclose(_np(s), ref, atol=1e-5)
    assert int(s.t) == 4


def test_actions_are_clipped():
    s = _state(0.0, -2.5, 1.0, 1.0)
    key = jax.random.key(0)
    big = envs.step(key, s, jnp.array([3.0, -7.0], jnp.float32), P)
    unit = envs.step(key, s, jnp.array([1.0, -1.0], jnp.float32), P)
    np.testing.assert_array_equal(_np(big[1]), _np(unit[1]))
    np.testing.assert_array_equal(np.asarray(big[5]["action"]), [1.0, -1.0])


def test_constraint_sign_and_value():
    h = envs.constraint(jnp.array([0.4, -0.4, 0.4, 2.5], jnp.float32),
                        jnp.array([-1.2, 1.2, -0.9, -2.5], jnp.float32), P)
    np.testing.assert_allclose(np.asarray(h)[:3], [0.8, 0.8, 0.5], atol=1e-6)
    assert float(h[3]) < 0  # far corner
    d_edge = envs.constraint(jnp.float32(0.4), jnp.float32(-2.0), P)  # on the edge
    assert abs(float(d_edge)) < 1e-6


def test_step_returns_h_of_next_state_and_reward_formula():
    s = _state(0.4, -2.3, 2.0, math.pi / 2)
    obs, s1, r, h, done, info = envs.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32), P)
    g = np.array(P.goal)
    d0 = np.hypot(0.4 - g[0], -2.3 - g[1])
    d1 = np.hypot(float(s1.x) - g[0], float(s1.y) - g[1])
    np.testing.assert_allclose(float(r), d0 - d1, atol=1e-5)
    np.testing.assert_allclose(float(h), 0.8 - math.hypot(float(s1.x) - 0.4, float(s1.y) + 1.2),
                               atol=1e-6)
    assert not bool(done) and not bool(info["terminal"]) and not bool(info["timeout"])


def test_done_at_goal_with_bonus():
    # 0.35 from the goal centre, heading at it at 2 m/s: one step of 0.1 enters the disc.
    s = _state(2.2 - 0.35, 2.2, 2.0, 0.0)
    _, s1, r, h, done, info = envs.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32), P)
    assert bool(done) and bool(info["terminal"]) and bool(info["goal"])
    assert not bool(info["timeout"]) and not bool(info["out_of_bounds"])
    np.testing.assert_allclose(float(r), (0.35 - 0.25) + 1.0, atol=1e-5)
    assert float(h) < 0


@pytest.mark.parametrize("x,y,theta", [(2.98, 0.0, 0.0), (-2.98, 0.0, math.pi),
                                       (0.0, 2.98, math.pi / 2), (0.0, -2.98, -math.pi / 2)])
def test_done_out_of_bounds_is_terminal_not_goal(x, y, theta):
    s = _state(x, y, 1.0, theta)
    _, _, _, h, done, info = envs.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32), P)
    assert bool(done) and bool(info["terminal"]) and bool(info["out_of_bounds"])
    assert not bool(info["goal"]) and not bool(info["timeout"])
    assert float(h) < 0  # leaving the arena is not a safety event


def test_timeout_is_not_terminal():
    s = _state(-2.0, -0.5, 0.1, 0.0, t=P.horizon - 1)
    _, s1, _, _, done, info = envs.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32), P)
    assert bool(done) and bool(info["timeout"]) and not bool(info["terminal"])
    assert int(s1.t) == P.horizon
    s = _state(-2.0, -0.5, 0.1, 0.0, t=P.horizon - 2)
    assert not bool(envs.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32), P)[4])


def test_observation_geometry():
    # Facing +x at the origin: hazard 1 at (0.4, -1.2) is ahead-right, hazard 2 behind-left.
    o = np.asarray(envs.observation(_state(0.0, 0.0, 1.5, 0.0), P))
    assert o.shape == (envs.OBS_DIM,)
    d1, d2 = math.hypot(0.4, 1.2), math.hypot(0.4, 1.2)
    np.testing.assert_allclose(o[:5], [0, 0, 1.5, 1, 0], atol=1e-6)
    np.testing.assert_allclose(o[5:8], [d1, 0.4 / d1, -1.2 / d1], atol=1e-6)
    np.testing.assert_allclose(o[8:11], [d2, -0.4 / d2, 1.2 / d2], atol=1e-6)
    # Facing +y: the body frame turns by -90 degrees (forward = +y, left = -x).
    o = np.asarray(envs.observation(_state(0.0, 0.0, 1.5, math.pi / 2), P))
    np.testing.assert_allclose(o[5:8], [d1, -1.2 / d1, -0.4 / d1], atol=1e-6)
    np.testing.assert_allclose(o[8:11], [d2, 1.2 / d2, 0.4 / d2], atol=1e-6)


def _avoidable_loop(s, n_steps=200):
    """Python reference of ``envs.avoidable``: brake and turn each way until v <= 0, stopping
    at a terminal; intrusion anywhere on the path (or at the start) makes that way fail."""
    cen = np.array(P.hazard_centres)

    def h(x, y):
        return 0.8 - np.min(np.hypot(x - cen[:, 0], y - cen[:, 1]))

    if h(s[0], s[1]) > 0:
        return False
    for w in (1.0, -1.0):
        x, y, v, th = s
        ok = True
        for _ in range(n_steps):
            if v <= 0:
                break
            x, y, v, th = (x + 0.05 * v * math.cos(th), y + 0.05 * v * math.sin(th),
                           v - 0.05, th + 0.05 * w)
            if h(x, y) > 0:
                ok = False
                break
            if abs(x) > 3 or abs(y) > 3 or math.hypot(x - 2.2, y - 2.2) <= 0.3:
                break
        if ok:
            return True
    return False


def test_avoidable_hand_cases():
    cases = [  # (x, y, v, theta, expected)
        (0.4, -1.2, 0.5, 0.0, False),  # inside hazard 1
        (-0.4, 1.0, 0.1, 1.0, False),  # inside hazard 2
        (0.4, -2.3, 2.0, math.pi / 2, False),  # 0.3 below hazard 1, 2 m/s straight at it
        (-0.4, 0.1, 2.0, math.pi / 2, False),  # 0.3 below hazard 2, 2 m/s straight at it
        (2.5, -2.5, 0.5, math.pi / 2, True),  # far from both, slow
        (-2.5, 2.6, 0.3, 0.0, True),
        (0.4, -2.3, 0.2, math.pi / 2, True),  # close, but slow enough to stop
        (0.4, -2.3, 2.0, -math.pi / 2, True),  # close, fast, but heading away
    ]
    st = _state(*[[c[i] for c in cases] for i in range(4)])
    got = np.asarray(envs.avoidable(st, P))
    np.testing.assert_array_equal(got, [c[4] for c in cases])


def test_avoidable_matches_loop_reference():
    rng = np.random.default_rng(0)
    s = np.stack([rng.uniform(-3, 3, 60), rng.uniform(-3, 3, 60), rng.uniform(0.0, 3.0, 60),
                  rng.uniform(-math.pi, math.pi, 60)], 1).astype(np.float32)
    got = np.asarray(envs.avoidable(_state(*s.T), P))
    ref = np.array([_avoidable_loop(row.astype(np.float64)) for row in s])
    # Euler paths in float32 vs float64 can differ at a grazing contact; allow one.
    assert (got != ref).sum() <= 1, np.flatnonzero(got != ref)
    assert 0 < ref.sum() < len(ref)


def test_feasible_grid():
    X, Y, mask = envs.feasible_grid(P, n=40)
    assert X.shape == Y.shape == mask.shape == (40, 40)
    h = np.asarray(envs.constraint(X, Y, P))
    m = np.asarray(mask)
    assert not m[h > 0].any()  # hazards are infeasible
    assert 0.6 < m.mean() < 0.95
    # Heading up-right at v = 2, the infeasible set reaches below-left of each hazard only.
    i_below = np.argmin(np.abs(np.asarray(Y[:, 0]) - (-2.15)))
    j_c1 = np.argmin(np.abs(np.asarray(X[0]) - 0.2))
    assert not m[i_below, j_c1]
    i_c1, j_right = (np.argmin(np.abs(np.asarray(Y[:, 0]) + 1.2)),
                     np.argmin(np.abs(np.asarray(X[0]) - 2.6)))
    assert m[i_c1, j_right]  # right of hazard 1, heading away from it


def test_reset_never_starts_in_hazard_or_goal():
    keys = jax.random.split(jax.random.key(1), 4096)
    obs, s = jax.jit(jax.vmap(lambda k: envs.reset(k, P)))(keys)
    assert obs.shape == (4096, envs.OBS_DIM)
    assert float(jnp.max(envs.constraint(s.x, s.y, P))) <= 0
    assert float(jnp.min(envs.goal_distance(s.x, s.y, P))) > P.goal_radius
    for a, lo, hi in ((s.x, -3, 3), (s.y, -3, 3), (s.v, 0.5, 2), (s.theta, math.pi / 4,
                                                                   3 * math.pi / 4)):
        assert lo <= float(jnp.min(a)) and float(jnp.max(a)) <= hi
    assert int(jnp.max(s.t)) == 0
    # A single proposal does land in hazards (the rejection step is doing something).
    _, s1 = jax.jit(jax.vmap(lambda k: envs.reset(k, P, num_proposals=1)))(keys)
    assert float(jnp.max(envs.constraint(s1.x, s1.y, P))) > 0


def _rollout(key, params=P, T=60):
    """Uniform-random policy for ``T`` steps (no resets): a pure ``lax.scan``."""
    k0, k1 = jax.random.split(key)
    _, s0 = envs.reset(k0, params)

    def body(s, k):
        a = jax.random.uniform(k, (2,), jnp.float32, -1.5, 1.5)
        obs, s, r, h, done, _ = envs.step(k, s, a, params)
        return s, (obs, r, h, done)

    return lax.scan(body, s0, jax.random.split(k1, T))[1]


def test_rollouts_pure_deterministic_and_vmappable():
    keys = jax.random.split(jax.random.key(7), 4)
    roll = jax.jit(_rollout)
    a = roll(keys[0])
    b = jax.jit(_rollout)(keys[0])  # a fresh trace and compile
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    c = roll(keys[1])
    assert not np.array_equal(np.asarray(a[0]), np.asarray(c[0]))
    batched = jax.jit(jax.vmap(_rollout))(keys)
    for i in range(4):
        single = roll(keys[i])
        for x, y in zip(batched, single):
            np.testing.assert_allclose(np.asarray(x[i]), np.asarray(y), rtol=1e-6, atol=1e-6)


def test_wrapper_and_errors():
    env = envs.PointRobotHazard()
    assert env == envs.PointRobotHazard() and hash(env) == hash(envs.PointRobotHazard())
    obs, s = env.reset(jax.random.key(0))
    out = env.step(jax.random.key(0), s, jnp.zeros(2, jnp.float32))
    assert out[0].shape == (env.obs_dim,) and env.action_dim == 2
    with pytest.raises(ValueError, match="num_proposals"):
        envs.reset(jax.random.key(0), P, num_proposals=0)
    with pytest.raises(ValueError, match="n_steps"):
        envs.avoidable(s, P, n_steps=0)
    with pytest.raises(ValueError, match="n must be"):
        envs.feasible_grid(P, n=1)
