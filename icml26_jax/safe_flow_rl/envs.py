"""PointRobotHazard: FISOR's PointRobot reach-avoid task as a pure, vmappable JAX environment.

gymnax-style: ``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, h, done, info)`` are pure functions
of their arguments (``PointRobotHazard`` bundles them with its default parameters). The
dynamics are FISOR's ``env/point_robot.py``: a unicycle with state ``(x, y, v, theta)``,

    x' = v cos(theta),  y' = v sin(theta),  v' = u0,  theta' = u1,   u in [-1, 1]^2,

integrated by one explicit Euler step of ``dt = 0.05``. The constraint function is
``h(s) = r_hazard - min_i ||p - c_i||`` (``h > 0`` is a violation); the reward is FISOR's
``r = (d_prev - d) + 1[d <= r_goal]`` with ``d`` the distance to the goal centre. An episode
ends at the goal or when ``|x| > bound`` or ``|y| > bound`` (``terminal``; out of bounds is not
a safety event), or after ``horizon`` steps (``timeout``, not a terminal).

``avoidable`` is FISOR's analytic feasibility check (brake at ``u0 = -1`` while turning at
``|u1| = 1`` until ``v <= 0``), evaluated for both turn directions; ``feasible_grid`` gives it
on an ``(x, y)`` grid at fixed ``(v, theta)`` for the IoU against a learned ``{V_h <= 0}``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

OBS_DIM = 11
ACTION_DIM = 2


class EnvParams(NamedTuple):
    """Static description of the task (FISOR's values).

    Attributes:
      dt: Euler step.
      horizon: steps per episode before a timeout.
      hazard_centres: ``K`` hazard disc centres ``((x, y), ...)``.
      hazard_radius: radius of every hazard disc.
      goal: goal disc centre ``(x, y)``.
      goal_radius: radius of the goal disc.
      bound: arena half-width; ``|x| > bound`` or ``|y| > bound`` ends the episode.
    """

    dt: float = 0.05
    horizon: int = 300
    hazard_centres: tuple = ((0.4, -1.2), (-0.4, 1.2))
    hazard_radius: float = 0.8
    goal: tuple = (2.2, 2.2)
    goal_radius: float = 0.3
    bound: float = 3.0


class EnvState(NamedTuple):
    """Robot state; every field has the same (batch) shape ``[...]``.

    Attributes: x, y position; v signed speed; theta heading (not wrapped); t steps taken
    (int32). The previous goal distance of FISOR's env is a function of ``(x, y)`` and is
    recomputed in ``step`` rather than stored.
    """

    x: jax.Array
    y: jax.Array
    v: jax.Array
    theta: jax.Array
    t: jax.Array


def _f32(a) -> jax.Array:
    return jnp.asarray(a, jnp.float32)


def _centres(params: EnvParams) -> jax.Array:
    return _f32(params.hazard_centres).reshape(-1, 2)  # [K, 2]


def hazard_distances(x, y, params: EnvParams) -> jax.Array:
    """Distances from ``(x, y)`` to every hazard centre, ``[..., K]``."""
    c = _centres(params)
    return jnp.hypot(_f32(x)[..., None] - c[:, 0], _f32(y)[..., None] - c[:, 1])


def constraint(x, y, params: EnvParams) -> jax.Array:
    """``h = r_hazard - min_i ||p - c_i||``, ``[...]``; ``h > 0`` is a violation."""
    return params.hazard_radius - jnp.min(hazard_distances(x, y, params), axis=-1)


def goal_distance(x, y, params: EnvParams) -> jax.Array:
    """Distance to the goal centre, ``[...]``."""
    g = _f32(params.goal)
    return jnp.hypot(_f32(x) - g[0], _f32(y) - g[1])


def out_of_bounds(x, y, params: EnvParams) -> jax.Array:
    """``|x| > bound`` or ``|y| > bound``, ``bool[...]``."""
    return (jnp.abs(x) > params.bound) | (jnp.abs(y) > params.bound)


def observation(state: EnvState, params: EnvParams) -> jax.Array:
    """The 11-D observation ``[..., 5 + 3K]``.

    ``(x, y, v, cos theta, sin theta)`` followed, per hazard, by its distance and the cosine and
    sine of its bearing in the body frame (the hazard vector rotated by ``-theta``, as in
    FISOR's ``_get_obs``). At a hazard centre the bearing is undefined and reported as (1, 0).
    """
    c, s = jnp.cos(state.theta), jnp.sin(state.theta)
    cen = _centres(params)
    dx = cen[:, 0] - state.x[..., None]  # [..., K]
    dy = cen[:, 1] - state.y[..., None]
    bx = dx * c[..., None] + dy * s[..., None]  # body frame: forward
    by = -dx * s[..., None] + dy * c[..., None]  # body frame: left
    d = jnp.hypot(bx, by)
    safe = jnp.where(d > 0, d, 1.0)
    cos_b = jnp.where(d > 0, bx / safe, 1.0)
    sin_b = jnp.where(d > 0, by / safe, 0.0)
    haz = jnp.stack([d, cos_b, sin_b], axis=-1).reshape(*d.shape[:-1], -1)  # [..., 3K]
    base = jnp.stack([state.x, state.y, state.v, c, s], axis=-1)
    return jnp.concatenate([base, haz], axis=-1).astype(jnp.float32)


def _euler(x, y, v, theta, u0, u1, dt):
    return (x + dt * v * jnp.cos(theta), y + dt * v * jnp.sin(theta), v + dt * u0,
            theta + dt * u1)


def _valid_start(x, y, params: EnvParams) -> jax.Array:
    return (constraint(x, y, params) <= 0) & (goal_distance(x, y, params) > params.goal_radius)


def reset(key: jax.Array, params: EnvParams = EnvParams(), num_proposals: int = 16
          ) -> tuple[jax.Array, EnvState]:
    """Draws a start state: ``x, y ~ U[-b, b]``, ``v ~ U[0.5, 2]``, ``theta ~ U[pi/4, 3pi/4]``.

    Starts inside a hazard or the goal are rejected [R]: ``num_proposals`` candidates are drawn
    at once and the first valid one is kept (rejection sampling without a data-dependent loop).
    A proposal is invalid with probability ~0.12, so all 16 fail with probability ~1e-15; in
    that case the first proposal is returned.

    Args:
      key: a typed PRNG key (``jax.random.key``).
      params: task parameters.
      num_proposals: number of vectorised proposals (static).

    Returns:
      ``(obs [11], state)`` with scalar state fields.
    """
    if int(num_proposals) < 1:
        raise ValueError(f"num_proposals must be >= 1, got {num_proposals!r}")
    lo = jnp.array([-params.bound, -params.bound, 0.5, math.pi / 4], jnp.float32)
    hi = jnp.array([params.bound, params.bound, 2.0, 3 * math.pi / 4], jnp.float32)
    prop = jax.random.uniform(key, (num_proposals, 4), jnp.float32, lo, hi)
    i = jnp.argmax(_valid_start(prop[:, 0], prop[:, 1], params))  # first True (or 0)
    s = prop[i]
    state = EnvState(s[0], s[1], s[2], s[3], jnp.zeros((), jnp.int32))
    return observation(state, params), state


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams = EnvParams()
         ) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, dict]:
    """One Euler step. The dynamics are deterministic; ``key`` is kept for the gymnax API.

    Args:
      key: unused PRNG key.
      state: current state (any batch shape ``[...]``).
      action: ``[..., 2]`` (acceleration, turn rate), clipped to ``[-1, 1]^2``.
      params: task parameters.

    Returns:
      ``(obs [..., 11], next_state, reward [...], h [...], done bool[...], info)``. ``h`` is
      the constraint value of the *next* state. ``info`` holds ``terminal`` (goal or out of
      bounds), ``timeout`` (horizon reached without a terminal), ``goal``, ``out_of_bounds``
      and the applied (clipped) ``action``. ``done = terminal | timeout``. The caller resets.
    """
    del key
    a = jnp.clip(_f32(action), -1.0, 1.0)
    d_prev = goal_distance(state.x, state.y, params)
    x, y, v, th = _euler(state.x, state.y, state.v, state.theta, a[..., 0], a[..., 1],
                         params.dt)
    nxt = EnvState(x, y, v, th, state.t + 1)
    d = goal_distance(x, y, params)
    at_goal = d <= params.goal_radius
    reward = (d_prev - d) + at_goal.astype(jnp.float32)
    oob = out_of_bounds(x, y, params)
    terminal = at_goal | oob
    timeout = (nxt.t >= params.horizon) & ~terminal
    info = {"terminal": terminal, "timeout": timeout, "goal": at_goal, "out_of_bounds": oob,
            "action": a}
    return (observation(nxt, params), nxt, reward, constraint(x, y, params),
            terminal | timeout, info)


def avoidable(state: EnvState, params: EnvParams = EnvParams(), n_steps: int = 200
              ) -> jax.Array:
    """FISOR's analytic feasibility check, for both turn directions. ``bool[...]``.

    From ``state``, brake at ``u0 = -1`` while turning at ``u1 = +1`` (resp. ``-1``) with the
    environment's Euler step, stepping while ``v > 0``. The state is avoidable iff it is not in
    a hazard and, for at least one direction, no state of the braking path has ``h > 0``. The
    path stops early when the episode would end (goal or out of bounds): nothing after a
    terminal can violate, matching the ``Q_h = h(s)`` terminal target. FISOR turns only away
    from the hazard ahead; trying both directions is never less permissive.

    Args:
      state: states with fields of shape ``[...]`` (``t`` is ignored).
      params: task parameters.
      n_steps: static length of the simulated path; covers speeds up to ``n_steps * dt``
        (10 for the default), beyond which the remaining path is not checked.
    """
    if int(n_steps) < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps!r}")
    x0, y0, v0, th0 = (_f32(state.x), _f32(state.y), _f32(state.v), _f32(state.theta))
    x0, y0, v0, th0 = jnp.broadcast_arrays(x0, y0, v0, th0)
    dirs = jnp.array([1.0, -1.0], jnp.float32).reshape((2,) + (1,) * x0.ndim)
    shape = dirs.shape[:1] + x0.shape
    carry0 = tuple(jnp.broadcast_to(a, shape) for a in (x0, y0, v0, th0))
    alive0 = jnp.ones(shape, bool)
    hit0 = jnp.broadcast_to(constraint(x0, y0, params) > 0, shape)

    def body(carry, _):
        (x, y, v, th), alive, hit = carry
        active = alive & (v > 0)
        nx, ny, nv, nth = _euler(x, y, v, th, -1.0, dirs, params.dt)
        hit = hit | (active & (constraint(nx, ny, params) > 0))
        ended = out_of_bounds(nx, ny, params) | (goal_distance(nx, ny, params)
                                                  <= params.goal_radius)
        alive = alive & ~(active & ended)
        new = tuple(jnp.where(active, n, o) for n, o in zip((nx, ny, nv, nth), (x, y, v, th)))
        return (new, alive, hit), None

    (_, _, hit), _ = lax.scan(body, (carry0, alive0, hit0), None, length=int(n_steps))
    return jnp.any(~hit, axis=0)


def feasible_grid(params: EnvParams = EnvParams(), n: int = 100, v: float = 2.0,
                  theta: float = math.pi / 4) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The analytic avoidable set on an ``n x n`` grid over ``[-b, b]^2`` at fixed ``(v, theta)``.

    Returns:
      ``(X [n, n], Y [n, n], mask bool[n, n])`` with ``X[i, j] = xs[j]``, ``Y[i, j] = ys[i]``
      (``meshgrid`` "xy" indexing) and ``mask = avoidable(X, Y, v, theta)``.
    """
    if int(n) < 2:
        raise ValueError(f"n must be >= 2, got {n!r}")
    g = jnp.linspace(-params.bound, params.bound, int(n), dtype=jnp.float32)
    X, Y = jnp.meshgrid(g, g, indexing="xy")
    st = EnvState(X, Y, jnp.full_like(X, v), jnp.full_like(X, theta),
                  jnp.zeros(X.shape, jnp.int32))
    return X, Y, avoidable(st, params)


class PointRobotHazard:
    """gymnax-style wrapper: stateless, hashable, so it can be closed over or passed static.

    ``env.reset(key, params)``, ``env.step(key, state, action, params)`` with
    ``params=None`` meaning ``env.default_params``.
    """

    name = "point_robot"
    obs_dim = OBS_DIM
    action_dim = ACTION_DIM

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset(self, key, params: EnvParams | None = None):
        return reset(key, self.default_params if params is None else params)

    def step(self, key, state, action, params: EnvParams | None = None):
        return step(key, state, action, self.default_params if params is None else params)

    def avoidable(self, state, params: EnvParams | None = None, n_steps: int = 200):
        return avoidable(state, self.default_params if params is None else params, n_steps)

    def constraint(self, state: EnvState, params: EnvParams | None = None):
        return constraint(state.x, state.y, self.default_params if params is None else params)

    def __hash__(self):
        return hash(type(self))

    def __eq__(self, other):
        return type(other) is type(self)
