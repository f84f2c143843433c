"""Offline datasets for SafeFlowRL: the PointRobotHazard mixture, DSRL files, metrics.

``make_dataset`` rolls out four behaviour policies on ``PointRobotHazard`` with one jitted
``vmap`` (episodes) of a ``lax.scan`` (steps). Every episode's randomness is a function of
``(key, chunk, episode)``: the same key gives the same dataset, and a smaller dataset is a
prefix of a larger one. The episode mixture [R] (spec §Data):

- ``RECKLESS`` (30 %): goal-seekers at full throttle that cross hazards: they steer through
  the hazard that lengthens their route to the goal least, then at the goal.
- ``CAUTIOUS`` (30 %): PD to the goal plus a hazard repulsion acting within the margin 0.3 of
  every hazard edge; slower near hazards and while turning. The margin is narrow for a
  unicycle whose turn radius is its speed, so head-on approaches still intrude.
- ``NOISY`` (20 %): the cautious expert plus i.i.d. ``N(0, 0.3^2)`` action noise.
- ``RANDOM`` (20 %): i.i.d. uniform actions in ``[-1, 1]^2``.

Why the reckless seekers aim *through* a hazard: the straight route to the goal crosses a
hazard from only ~30 % of the uniform starts, so hazard-blind straight seekers violate in
~25 % of their episodes and the whole mixture in ~24 %, below the spec's >= 35 %. With the
crossing seekers (~82 % of them violate; the rest leave the arena in their first steps from
starts at the top edge) the 100k-transition datasets of seeds 0-5 have 39-43 % violating
episodes (cautious ~23 %, noisy ~24 %, random ~22 %) and 60-72 % violating episodes among
the top-decile returns. The undiscounted return ``d_0 - d_T + 1[goal]`` does not depend on
the path, so the top decile is the far starts that reach the goal; its safe part is mostly
the experts' runs from the lower-left corner through the gap between the hazards. At 20k
transitions (~310 episodes, ~31 in the top decile) seeds 0-9 give 35-45 % and 58-70 %.
Every statistic is measured by ``dataset_summary``; nothing is filtered.

Stored per transition ``t`` (all NumPy): ``observations``/``next_observations`` ``[N, 11]``,
``actions`` ``[N, 2]`` (the clipped actions the environment applied), ``rewards``, ``h`` (the
constraint value of the *current* state ``s_t``, the ``h(s)`` of the HJ target),
``next_h`` (``h(s_{t+1})``), ``costs = 1[h > 0]`` and ``next_costs = 1[next_h > 0]``,
``terminals`` (goal or out of bounds), ``timeouts`` (horizon, or the cut that ends the last
episode at exactly ``N`` transitions), ``masks = 1 - terminals`` (timeouts bootstrap), all
float32, and int32 ``episode_ids`` (0, 1, ... in order) and ``behaviour_ids``.

The episode cost (spec §Metrics) is ``C = sum_t 1[h(s_t) > 0]`` over the states an episode
visits. Starts are never in a hazard, so ``C = sum_t next_costs`` over its transitions, which
is also what an evaluation loop counts from the ``h`` that ``envs.step`` returns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from icml26_jax.core import distributed
from icml26_jax.datasets import offline_episodes
from icml26_jax.safe_flow_rl import envs

RECKLESS, CAUTIOUS, NOISY, RANDOM = 0, 1, 2, 3
BEHAVIOURS = ("reckless", "cautious", "noisy", "random")
DEFAULT_MIX = (0.3, 0.3, 0.2, 0.2)
KEYS = ("observations", "actions", "rewards", "h", "next_h", "costs", "next_costs",
        "next_observations", "masks", "terminals", "timeouts", "episode_ids", "behaviour_ids")
DSRL_KEYS = ("observations", "actions", "rewards", "costs", "terminals", "timeouts",
             "next_observations")
DSRL_H_VIOLATION = 25.0  # FISOR maps a binary cost > 0 to h = +25 ...
DSRL_H_SAFE = -1.0  # ... and cost == 0 to h = -1.

# Behaviour constants [R], fixed by the dataset statistics of the spec (violating share and
# top-decile violating share), never by a downstream result.
_TURN_GAIN = 3.0  # heading P gain of every controller (saturates at |u1| = 1)
_SPEED_GAIN = 2.0  # speed P gain of every controller
_RECKLESS_VMAX = 2.0  # reckless top speed (full throttle up to it)
_BRAKE_ERR = math.pi / 4  # reckless seekers slow down to turn when off course by more ...
_TURN_SPEED = 0.3  # ... to this speed (turn radius v / |u1|)
_MARGIN = 0.3  # cautious repulsion acts within this distance of a hazard's edge
_REP_GAIN = 2.5  # repulsion weight at the edge (the goal attraction has norm 1)
_CRUISE = 1.5  # cautious cruise speed (the reckless top speed is 2)
_SLOW_FLOOR = 0.25  # cautious speed factor at a hazard's edge
_NOISE_SD = 0.3  # noisy-expert action noise


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


def _reckless(state: envs.EnvState, mem: jax.Array, params: envs.EnvParams
              ) -> tuple[jax.Array, jax.Array]:
    """Reckless goal-seeker: full throttle to the goal *through* a hazard.

    ``mem`` is the current target: ``-1`` before the first step, ``i < K`` hazard ``i``, ``K``
    the goal. The seeker first steers at the centre of the hazard that lengthens its route to
    the goal least; once inside it, it steers at the goal. It accelerates at full throttle up to
    ``_RECKLESS_VMAX`` and slows down only to turn when its heading is off by more than
    ``_BRAKE_ERR`` (otherwise the turn radius v / |u1| carries it out of the arena).
    """
    g = envs._f32(params.goal)
    c = envs._centres(params)  # [K, 2]
    K = c.shape[0]
    d_hz = jnp.hypot(c[:, 0] - state.x, c[:, 1] - state.y)  # [K]
    detour = d_hz + jnp.hypot(g[0] - c[:, 0], g[1] - c[:, 1])
    mem = jnp.where(mem < 0, jnp.argmin(detour).astype(jnp.int32), mem)
    inside = d_hz[jnp.minimum(mem, K - 1)] < params.hazard_radius
    mem = jnp.where((mem < K) & inside, K, mem)
    tgt = jnp.concatenate([c, g[None]], axis=0)[mem]  # [2]
    err = _wrap(jnp.arctan2(tgt[1] - state.y, tgt[0] - state.x) - state.theta)
    v_star = jnp.where(jnp.abs(err) < _BRAKE_ERR, _RECKLESS_VMAX, _TURN_SPEED)
    u0 = jnp.clip(_SPEED_GAIN * (v_star - state.v), -1.0, 1.0)
    u1 = jnp.clip(_TURN_GAIN * err, -1.0, 1.0)
    return jnp.stack([u0, u1], axis=-1), mem


def _cautious(state: envs.EnvState, params: envs.EnvParams) -> jax.Array:
    """Cautious expert: PD to the goal plus hazard repulsion within ``_MARGIN`` of the edges.

    The desired heading is that of ``F = unit(goal - p) + sum_i w_i unit(p - c_i)`` with
    ``w_i = _REP_GAIN (1 - clearance_i / _MARGIN)_+^2``; the desired speed is ``_CRUISE``
    scaled down near hazards, while turning (``cos`` of the heading error), when ``|F|`` is
    small and within 1 of the goal. Speed and heading follow by saturated P control (the
    speed loop is the damping of the position PD). The margin is narrow for a unicycle with
    turn radius ``v``, so head-on approaches still intrude: the expert is cautious, not safe.
    """
    g = envs._f32(params.goal)
    c = envs._centres(params)  # [K, 2]
    gx, gy = g[0] - state.x, g[1] - state.y
    dg = jnp.hypot(gx, gy)
    fx, fy = gx / jnp.maximum(dg, 1e-6), gy / jnp.maximum(dg, 1e-6)  # unit attraction
    hx, hy = state.x - c[:, 0], state.y - c[:, 1]  # [K], pointing away from each hazard
    dh = jnp.maximum(jnp.hypot(hx, hy), 1e-6)
    clear = dh - params.hazard_radius  # [K]
    w = _REP_GAIN * jnp.clip(1.0 - clear / _MARGIN, 0.0, None) ** 2
    fx = fx + jnp.sum(w * hx / dh)
    fy = fy + jnp.sum(w * hy / dh)
    err = _wrap(jnp.arctan2(fy, fx) - state.theta)
    slow = jnp.clip(jnp.min(clear) / _MARGIN, _SLOW_FLOOR, 1.0)
    v_star = (_CRUISE * slow * jnp.clip(jnp.hypot(fx, fy), 0.0, 1.0)
              * jnp.clip(jnp.cos(err), 0.0, None) * jnp.clip(dg, 0.0, 1.0))
    u0 = jnp.clip(_SPEED_GAIN * (v_star - state.v), -1.0, 1.0)
    u1 = jnp.clip(_TURN_GAIN * err, -1.0, 1.0)
    return jnp.stack([u0, u1], axis=-1)


def behaviour_action(bid: jax.Array, key: jax.Array, state: envs.EnvState, mem: jax.Array,
                     params: envs.EnvParams) -> tuple[jax.Array, jax.Array]:
    """The action ``[2]`` of behaviour ``bid`` (scalar int) in an unbatched ``state``.

    ``mem`` is the behaviours' memory (the reckless seeker's target, ``-1`` at reset). All
    four actions are computed and one is selected, so the function vmaps without branching.
    Returns ``(action, mem)``.
    """
    k_noise, k_rand = jax.random.split(key)
    reck, mem = _reckless(state, mem, params)
    caut = _cautious(state, params)
    noisy = caut + _NOISE_SD * jax.random.normal(k_noise, (2,), jnp.float32)
    rand = jax.random.uniform(k_rand, (2,), jnp.float32, -1.0, 1.0)
    acts = jnp.stack([reck, caut, noisy, rand])  # [4, 2]
    return jnp.clip(acts[bid], -1.0, 1.0), mem


def rollout_episode(key: jax.Array, bid: jax.Array, params: envs.EnvParams,
                    horizon: int) -> dict:
    """One episode of behaviour ``bid``, padded to ``horizon`` steps.

    Returns a dict of ``[horizon, ...]`` arrays; ``valid`` marks the steps before the episode
    ended (a prefix). Pure: the same ``(key, bid)`` gives the same episode.
    """
    k_reset, k_steps = jax.random.split(key)
    _, s0 = envs.reset(k_reset, params)

    def body(carry, k):
        s, mem, alive = carry
        a, mem = behaviour_action(bid, k, s, mem, params)
        obs_n, s_n, r, h_n, done, info = envs.step(k, s, a, params)
        out = {"observations": envs.observation(s, params), "actions": info["action"],
               "rewards": r, "h": envs.constraint(s.x, s.y, params), "next_h": h_n,
               "next_observations": obs_n, "terminals": info["terminal"],
               "timeouts": info["timeout"], "valid": alive}
        return (s_n, mem, alive & ~done), out

    carry = (s0, jnp.full((), -1, jnp.int32), jnp.ones((), bool))
    _, out = lax.scan(body, carry, jax.random.split(k_steps, horizon))
    return out


def _check_mix(mix) -> np.ndarray:
    m = np.asarray(mix, np.float64)
    if m.shape != (4,) or np.any(m < 0) or not np.isclose(m.sum(), 1.0):
        raise ValueError(f"mix must be 4 non-negative shares summing to 1 "
                         f"({', '.join(BEHAVIOURS)}), got {mix!r}")
    return m


def _chunk_behaviours(mix: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    counts = np.floor(mix * n).astype(int)
    counts[np.argsort(-(mix * n - counts))[: n - counts.sum()]] += 1  # largest remainders
    return rng.permutation(np.repeat(np.arange(4), counts)).astype(np.int32)


@functools.lru_cache(maxsize=8)
def _generator(env_params: envs.EnvParams):
    """The jitted ``vmap`` of ``rollout_episode`` for one task (compiled once per shape)."""
    horizon = int(env_params.horizon)
    return jax.jit(jax.vmap(lambda k, b: rollout_episode(k, b, env_params, horizon)))


def make_dataset(env_params: envs.EnvParams, n_transitions: int, key: jax.Array,
                 mix: Sequence[float] = DEFAULT_MIX, chunk_episodes: int = 1024) -> dict:
    """Generates ``n_transitions`` transitions of the behaviour mixture.

    Episodes are generated in chunks of ``chunk_episodes`` (one compiled program for all
    chunks); the behaviours of a chunk follow ``mix`` exactly and are shuffled. Whole episodes
    are kept in order until ``n_transitions`` is reached; the last one is cut there and its
    last transition marked as a timeout.

    Args:
      env_params: task parameters (closed over: static for the compiled rollout).
      n_transitions: dataset size, ``>= 1``.
      key: a typed PRNG key.
      mix: episode shares of (reckless, cautious, noisy, random).
      chunk_episodes: episodes per chunk (a fixed size keeps one compiled program; 100k
        transitions take two chunks of 1024).

    Returns:
      the dataset dict described in the module docstring.
    """
    if int(n_transitions) < 1:
        raise ValueError(f"n_transitions must be >= 1, got {n_transitions!r}")
    n = int(n_transitions)
    m = _check_mix(mix)
    if int(chunk_episodes) < 1:
        raise ValueError(f"chunk_episodes must be >= 1, got {chunk_episodes!r}")
    E = int(chunk_episodes)
    if not isinstance(env_params, envs.EnvParams):
        raise ValueError(f"env_params must be an envs.EnvParams, got {type(env_params)}")
    gen = _generator(env_params)
    # The behaviour shuffle uses a NumPy generator seeded from the key (data generation only).
    seed = int(jax.random.randint(jax.random.fold_in(key, 0x5EED), (), 0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    parts, total, ep_offset, chunk = [], 0, 0, 0
    while total < n:
        bids = _chunk_behaviours(m, E, rng)
        keys = jax.random.split(jax.random.fold_in(key, chunk), E)
        out = jax.device_get(gen(keys, jnp.asarray(bids)))
        valid = np.asarray(out.pop("valid"))  # [E, T], a prefix per episode
        lengths = valid.sum(1)
        ends = np.cumsum(lengths) + total
        keep = int(np.searchsorted(ends, n) + 1)  # episodes needed to reach n
        keep = min(keep, E)
        flat = {k: np.asarray(v)[:keep][valid[:keep]] for k, v in out.items()}
        flat["episode_ids"] = np.repeat(np.arange(keep, dtype=np.int32) + ep_offset,
                                        lengths[:keep])
        flat["behaviour_ids"] = np.repeat(bids[:keep], lengths[:keep])
        parts.append(flat)
        total += int(lengths[:keep].sum())
        ep_offset += keep
        chunk += 1
    ds = {k: np.concatenate([p[k] for p in parts])[:n] for k in parts[0]}
    ds["terminals"] = ds["terminals"].astype(np.float32)
    ds["timeouts"] = ds["timeouts"].astype(np.float32)
    last = ds["episode_ids"] != np.append(ds["episode_ids"][1:], -1)
    cut = last & (ds["terminals"] == 0) & (ds["timeouts"] == 0)
    ds["timeouts"][cut] = 1.0  # the final episode cut at n transitions is truncated
    ds["masks"] = (1.0 - ds["terminals"]).astype(np.float32)
    ds["costs"] = (ds["h"] > 0).astype(np.float32)
    ds["next_costs"] = (ds["next_h"] > 0).astype(np.float32)
    for k in ("observations", "next_observations", "actions", "rewards", "h", "next_h"):
        ds[k] = ds[k].astype(np.float32)
    return {k: ds[k] for k in KEYS}


def _behaviour_constants() -> dict:
    return {k: v for k, v in sorted(globals().items())
            if k.startswith("_") and k[1:2].isupper() and isinstance(v, (int, float))}


def _seed_key(seed) -> tuple[jax.Array, object]:
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed, np.asarray(jax.random.key_data(seed)).ravel().tolist()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int or a typed PRNG key, got {seed!r}")
    return jax.random.key(int(seed)), int(seed)


def load_or_make_dataset(env_params: envs.EnvParams, n_transitions: int, seed,
                         workdir: str | os.PathLike, mix: Sequence[float] = DEFAULT_MIX
                         ) -> tuple[dict, dict]:
    """``make_dataset(env_params, n_transitions, key, mix)``, cached in the workdir.

    Args:
      env_params, n_transitions, mix: as for ``make_dataset``.
      seed: an int (the key is ``jax.random.key(seed)``) or a typed PRNG key.
      workdir: the generated ``.npz`` source lives in ``<workdir>/data/`` under a name hashed
        from all the arguments and the behaviour constants (never committed); it is prepared
        as the TFDS data set ``offline_episodes`` (ArrayRecord, one example per episode) in
        ``<workdir>/data/tfds`` and read back from there.

    Returns:
      ``(dataset, info)`` with ``info = {"path", "cached", "seconds"}``.
    """
    key, tag = _seed_key(seed)
    spec = json.dumps({"env": [str(f) for f in env_params], "n": int(n_transitions),
                       "seed": tag, "mix": [float(x) for x in _check_mix(mix)],
                       "behaviours": _behaviour_constants(), "version": 1})
    name = "point_robot_" + hashlib.sha1(spec.encode()).hexdigest()[:16] + ".npz"
    path = os.path.join(os.fspath(workdir), "data", name)
    t0 = time.perf_counter()
    cached = os.path.exists(path)

    def make_source():
        if not os.path.exists(path):
            offline_episodes.save_source(make_dataset(env_params, n_transitions, key, mix), path)

    # Process 0 generates and writes the source; after a barrier the others find it. (TFDS
    # preparation below is likewise done by process 0 first: core.data.data_source.)
    distributed.primary_first(make_source, f"safe_flow_rl_source:{path}")
    # Written and read through the TFDS builder (ArrayRecord, one example per episode), the
    # same path a user's own data of this schema takes (offline_episodes.save_source).
    ds = offline_episodes.load_offline_episodes(
        path, data_dir=os.path.join(os.fspath(workdir), "data", "tfds"))
    return ds, {"path": path, "cached": cached, "seconds": time.perf_counter() - t0}


def episode_stats(ds: dict) -> dict:
    """Per-episode statistics, in order of ``episode_ids``.

    Returns:
      ``{"returns", "costs" (C = number of visited states with h > 0), "violated" (C > 0),
      "lengths", "behaviour_ids", "terminal" (ended at the goal or out of bounds)}``, NumPy
      arrays of length ``E``. ``behaviour_ids`` is ``-1`` where the dataset has none.
    """
    ep = np.asarray(ds["episode_ids"])
    if ep.ndim != 1 or ep.size == 0:
        raise ValueError(f"ds['episode_ids'] must be a non-empty 1-D array, got shape "
                         f"{ep.shape}")
    uniq, inv = np.unique(ep, return_inverse=True)
    E = len(uniq)
    if "next_h" in ds:
        step_cost = (np.asarray(ds["next_h"]) > 0).astype(np.float64)
    else:
        step_cost = (np.asarray(ds["costs"]) > 0).astype(np.float64)
    returns = np.bincount(inv, np.asarray(ds["rewards"], np.float64), E)
    costs = np.bincount(inv, step_cost, E)
    lengths = np.bincount(inv, minlength=E)
    term = np.bincount(inv, np.asarray(ds["terminals"], np.float64), E) > 0
    if "behaviour_ids" in ds:
        bid = np.full(E, -1, np.int64)
        bid[inv] = np.asarray(ds["behaviour_ids"])
    else:
        bid = np.full(E, -1, np.int64)
    return {"returns": returns, "costs": costs, "violated": costs > 0, "lengths": lengths,
            "behaviour_ids": bid, "terminal": term}


def dataset_summary(ds: dict, top_fraction: float = 0.1) -> dict:
    """The spec's dataset statistics: violating share overall and among the best returns.

    ``top_violation_fraction`` is the violating share of the episodes whose return is at least
    the ``1 - top_fraction`` quantile of episode returns. Also per-behaviour violation and
    terminal-at-goal rates and ``r_min``/``r_max`` (the extreme episode returns, for R_norm).
    """
    if not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must be in (0, 1], got {top_fraction!r}")
    st = episode_stats(ds)
    r, v = st["returns"], st["violated"]
    top = r >= np.quantile(r, 1.0 - top_fraction)
    out = {"num_episodes": int(len(r)), "violation_fraction": float(v.mean()),
           "top_violation_fraction": float(v[top].mean()), "num_top": int(top.sum()),
           "r_min": float(r.min()), "r_max": float(r.max()),
           "mean_length": float(st["lengths"].mean())}
    for b, name in enumerate(BEHAVIOURS):
        sel = st["behaviour_ids"] == b
        if sel.any():
            out[f"{name}_violation"] = float(v[sel].mean())
            out[f"{name}_share_of_top"] = float((sel & top).sum() / max(top.sum(), 1))
    return out


def normalized_metrics(returns, costs, r_min: float, r_max: float, kappa: float) -> dict:
    """Normalised return and cost of a set of evaluation episodes (spec §Metrics).

    Args:
      returns: episode returns ``[E]``.
      costs: episode costs ``C = sum_t 1[h(s_t) > 0]``, ``[E]``.
      r_min, r_max: the extreme episode returns of the dataset (``r_max > r_min``).
      kappa: cost threshold (5 for E1, 10 for E2), ``> 0``.

    Returns:
      ``{"r_norm": mean (R - r_min) / (r_max - r_min), "c_norm": mean C / kappa,
      "violation_rate": share of episodes with C > 0, "safe": c_norm <= 1,
      "mean_return", "mean_cost", "num_episodes"}`` as Python floats (bool for ``safe``).
    """
    if not kappa > 0:
        raise ValueError(f"kappa must be > 0, got {kappa!r}")
    if not r_max > r_min:
        raise ValueError(f"r_max must be > r_min, got r_min={r_min!r}, r_max={r_max!r}")
    R = np.asarray(returns, np.float64).reshape(-1)
    C = np.asarray(costs, np.float64).reshape(-1)
    if R.shape != C.shape or R.size == 0:
        raise ValueError(f"returns and costs must be non-empty with one entry per episode, "
                         f"got shapes {np.shape(returns)} and {np.shape(costs)}")
    c_norm = float(C.mean() / kappa)
    return {"r_norm": float(np.mean((R - r_min) / (r_max - r_min))), "c_norm": c_norm,
            "violation_rate": float(np.mean(C > 0)), "safe": bool(c_norm <= 1.0),
            "mean_return": float(R.mean()), "mean_cost": float(C.mean()),
            "num_episodes": int(R.size)}


def _episodes_from_flags(terminals, timeouts) -> np.ndarray:
    ends = (np.asarray(terminals) > 0) | (np.asarray(timeouts) > 0)
    return np.concatenate([[0], np.cumsum(ends)[:-1]]).astype(np.int32)


def load_dsrl(path: str | os.PathLike) -> dict:
    """Reads a DSRL-style dataset (``.npz``, or ``.hdf5``/``.h5`` when h5py is installed).

    The file must hold ``observations, actions, rewards, costs, terminals, timeouts,
    next_observations``. Binary costs become FISOR's constraint values
    ``h = +25 if cost > 0 else -1``; DSRL's cost belongs to the transition, and (as FISOR
    does) it is used as ``h(s_t)``. ``next_h`` is the next transition's ``h`` within an
    episode and repeats ``h`` at an episode's last transition (``s_{t+1}`` is not labelled
    there). Episodes end at ``terminals | timeouts``; ``behaviour_ids`` are ``-1``.

    Returns:
      a dict with the keys of ``make_dataset`` (``KEYS``).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"path {path!r} does not exist")
    if path.endswith((".hdf5", ".h5")):
        try:
            import h5py
        except ImportError as e:  # optional extra
            raise ValueError(f"path {path!r} is HDF5 but h5py is not installed; "
                             "pip install h5py or convert it to .npz") from e
        with h5py.File(path, "r") as f:
            missing = [k for k in DSRL_KEYS if k not in f]
            raw = {k: np.asarray(f[k]) for k in DSRL_KEYS if k in f}
    else:
        with np.load(path) as f:
            missing = [k for k in DSRL_KEYS if k not in f.files]
            raw = {k: np.asarray(f[k]) for k in DSRL_KEYS if k in f.files}
    if missing:
        raise ValueError(f"path {path!r} lacks DSRL keys {missing}; needs {list(DSRL_KEYS)}")
    n = len(raw["rewards"])
    if any(len(v) != n for v in raw.values()):
        raise ValueError(f"path {path!r}: arrays have different lengths "
                         f"{ {k: len(v) for k, v in raw.items()} }")
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    cost = f32(raw["costs"]).reshape(n)
    h = np.where(cost > 0, DSRL_H_VIOLATION, DSRL_H_SAFE).astype(np.float32)
    terminals = (f32(raw["terminals"]).reshape(n) > 0).astype(np.float32)
    timeouts = (f32(raw["timeouts"]).reshape(n) > 0).astype(np.float32)
    ep = _episodes_from_flags(terminals, timeouts)
    same_next = np.append(ep[1:] == ep[:-1], False)
    next_h = np.where(same_next, np.append(h[1:], 0.0), h).astype(np.float32)
    return {"observations": f32(raw["observations"]).reshape(n, -1),
            "actions": f32(raw["actions"]).reshape(n, -1),
            "rewards": f32(raw["rewards"]).reshape(n), "h": h, "next_h": next_h,
            "costs": (h > 0).astype(np.float32), "next_costs": (next_h > 0).astype(np.float32),
            "next_observations": f32(raw["next_observations"]).reshape(n, -1),
            "masks": (1.0 - terminals).astype(np.float32), "terminals": terminals,
            "timeouts": timeouts, "episode_ids": ep,
            "behaviour_ids": np.full(n, -1, np.int32)}
