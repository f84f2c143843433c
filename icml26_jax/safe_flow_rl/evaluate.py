"""Evaluation rollouts and metrics (spec §Data "Metrics").

A policy is ``act(params, key, obs [B, O]) -> a [B, A]`` (``policies.refined_policy``, the
constructors of ``baselines``). :func:`rollout` runs ``E`` episodes from given start states
with one ``lax.scan`` over the horizon, mapped over the training seeds (params stacked per
seed; the seeds sharded over every device); every policy is evaluated from the *same* starts (common random numbers). An episode
stops counting at its first ``done`` (goal, out of bounds or horizon); the scan keeps stepping
the finished ones, masked.

Metrics per (policy, seed): episode returns and costs ``C = sum_t 1[h(s_t) > 0]``, the
violation rate over all starts and over the analytically avoidable ones, ``R_norm`` and
``C_norm`` (``data.normalized_metrics``), and the OOD measures: the mean
``-log pi_unweighted(a | s)`` of the evaluated pairs under the seed's unweighted flow, and the
distance from a subsample of evaluated actions to the nearest action among the 50
nearest-state dataset neighbours.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.safe_flow_rl import data as data_lib
from icml26_jax.safe_flow_rl import envs

NN_STATES = 50  # dataset neighbours searched for the nearest action
NN_QUERIES = 512  # evaluated (s, a) pairs per (policy, seed) for the NN distance


def eval_starts(key, num_episodes: int, env_params: envs.EnvParams = envs.EnvParams()):
    """(start states [E], avoidable bool [E]) drawn from the reset distribution."""
    if int(num_episodes) < 1:
        raise ValueError(f"eval_episodes must be >= 1, got {num_episodes!r}")
    return _eval_starts(key, int(num_episodes), env_params)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _eval_starts(key, num_episodes: int, env_params: envs.EnvParams):
    """``eval_starts`` as one compiled program (eagerly, its vmapped reset and the
    avoidability check compiled ~50 small ones)."""
    keys = jax.random.split(key, num_episodes)
    _, st = jax.vmap(lambda k: envs.reset(k, env_params))(keys)
    return st, envs.avoidable(st, env_params)


def rollout(act, params, key, starts: envs.EnvState, env_params: envs.EnvParams):
    """Runs one policy for one seed's params from ``starts`` ([E] states).

    Returns a dict of arrays: ``returns``, ``costs`` [E]; ``obs`` [T, E, O], ``actions``
    [T, E, A], ``alive`` [T, E] (the pairs that count), ``xy`` [T + 1, E, 2] (the start, then
    every state the episode reached; NaN after it ended).
    """
    T = int(env_params.horizon)

    def body(carry, t):
        st, alive, ret, cost = carry
        obs = envs.observation(st, env_params)
        a = act(params, jax.random.fold_in(key, t), obs)
        _, nxt, r, h, done, info = envs.step(key, st, a, env_params)
        af = alive.astype(jnp.float32)
        ret = ret + af * r
        cost = cost + af * (h > 0).astype(jnp.float32)
        xy = jnp.where(alive[:, None], jnp.stack([nxt.x, nxt.y], -1), jnp.nan)
        out = (obs, info["action"], alive, xy)
        return (nxt, alive & ~done, ret, cost), out

    E = starts.x.shape[0]
    init = (starts, jnp.ones((E,), bool), jnp.zeros((E,), jnp.float32),
            jnp.zeros((E,), jnp.float32))
    (_, _, ret, cost), (obs, act_seq, alive, xy) = jax.lax.scan(body, init, jnp.arange(T))
    xy = jnp.concatenate([jnp.stack([starts.x, starts.y], -1)[None], xy], 0)
    return {"returns": ret, "costs": cost, "obs": obs, "actions": act_seq, "alive": alive,
            "xy": xy}


def _rollout_one(static, params, key_data, starts):
    act, env_params = static
    return rollout(act, params, jax.random.wrap_key_data(key_data), starts, env_params)


def rollout_seeds(act, params, key, starts, env_params, mesh=None):
    """:func:`rollout` for every seed: params stacked [S, ...], seed i's key
    ``fold_in(key, i)``; the seeds are sharded over the ``RUNS`` axis of ``mesh`` (default
    ``core.mesh.runs_mesh(S)``, on every process; ``core.mesh.map_runs``).
    ``act`` and ``env_params`` must be hashable (one compile per policy).

    Returns:
      The :func:`rollout` arrays with a leading seed axis [S, ...], as host NumPy arrays.
    """
    S = jax.tree.leaves(params)[0].shape[0]
    mesh = mesh if mesh is not None else mesh_lib.runs_mesh(S)
    keys = jnp.stack([jax.random.fold_in(key, i) for i in range(S)])
    per_seed = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (S,) + np.shape(x)),
                            starts)  # every seed from the same starts
    out = mesh_lib.map_runs(mesh, _rollout_one, (act, env_params), params,
                            mesh_lib.to_host(jax.random.key_data(keys)), per_seed)
    return mesh_lib.to_host(out, S)


def ood_nll(flow_graphdef, flow_params, obs, actions, alive):
    """Mean -log pi_unweighted(a | s) over the alive pairs (one seed). obs [T, E, O]."""
    flow = nnx.merge(flow_graphdef, flow_params)
    lp = flow.log_prob(actions.reshape(-1, actions.shape[-1]), obs.reshape(-1, obs.shape[-1]))
    w = alive.reshape(-1).astype(jnp.float32)
    return -jnp.sum(w * lp) / jnp.maximum(jnp.sum(w), 1.0)


def nn_action_distance(data_obs, data_act, obs, actions, k: int = NN_STATES, weights=None):
    """Mean over queries of min_j ||a - a_j|| over the k nearest dataset states s_j of s.

    ``weights`` [Q] (default all 1) weight the mean: 0 drops a padding query, so that a
    varying number of queries runs as one fixed-shape program.
    """
    d2 = (jnp.sum(obs * obs, -1)[:, None] - 2.0 * obs @ data_obs.T
          + jnp.sum(data_obs * data_obs, -1)[None, :])
    _, idx = jax.lax.top_k(-d2, k)  # [Q, k]
    da = jnp.min(jnp.linalg.norm(data_act[idx] - actions[:, None, :], axis=-1), axis=-1)
    if weights is None:
        return jnp.mean(da)
    return jnp.sum(weights * da) / jnp.maximum(jnp.sum(weights), 1.0)


def _query_subsample(alive, key, n: int):
    """Indices of up to n alive (t, e) pairs, flattened (host side, deterministic in key)."""
    flat = np.flatnonzero(np.asarray(alive).reshape(-1))
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    return flat if len(flat) <= n else np.sort(rng.choice(flat, n, replace=False))


def _padded_queries(obs, actions, sel, n: int):
    """(obs [n, O], actions [n, A], weights [n]) of the pairs ``sel`` of the flattened
    [T, E] arrays, zero-padded to n rows of weight 0 (one program for any number of them)."""
    o = np.zeros((n, obs.shape[-1]), np.float32)
    a = np.zeros((n, actions.shape[-1]), np.float32)
    w = np.zeros((n,), np.float32)
    o[:len(sel)] = np.asarray(obs).reshape(-1, obs.shape[-1])[sel]
    a[:len(sel)] = np.asarray(actions).reshape(-1, actions.shape[-1])[sel]
    w[:len(sel)] = 1.0
    return o, a, w


def policy_metrics(roll: dict, avoidable, r_min: float, r_max: float, kappa: float,
                   unweighted_flow=None, dataset=None, key=None) -> dict:
    """Per-seed metrics of one policy from :func:`rollout_seeds` output.

    Args:
      roll: rollout arrays with a leading seed axis.
      avoidable: bool [E] of the shared starts.
      r_min, r_max, kappa: normalisation (``data.normalized_metrics``).
      unweighted_flow: (graphdef, stacked params) of the seeds' unweighted flows, for the OOD
        log-density; None skips it.
      dataset: (observations, actions) device arrays, for the NN distance; None skips it.
      key: PRNG key of the NN-query subsample.

    Returns:
      ``{"per_seed": [dict per seed], <metric>: mean over seeds, "<metric>_sd": sd}``.
    """
    avoidable = np.asarray(avoidable, bool)
    S = np.asarray(roll["returns"]).shape[0]
    if unweighted_flow is not None:
        # All seeds in one program (their params gathered to the host once: the seeds'
        # slices of an array sharded over them live on different devices).
        ood = np.asarray(_ood_seeds(unweighted_flow[0], mesh_lib.to_host(unweighted_flow[1], S),
                                    roll["obs"], roll["actions"], roll["alive"]))
    if dataset is not None:
        q = [_padded_queries(roll["obs"][i], roll["actions"][i],
                             _query_subsample(roll["alive"][i], jax.random.fold_in(key, i),
                                              NN_QUERIES), NN_QUERIES) for i in range(S)]
        o, a, w = (np.stack(z) for z in zip(*q))
        nn = np.asarray(_nn_seeds(dataset[0], dataset[1], o, a, w))
    per_seed = []
    for i in range(S):
        R, C = np.asarray(roll["returns"][i]), np.asarray(roll["costs"][i])
        m = data_lib.normalized_metrics(R, C, r_min, r_max, kappa)
        m["avoidable_violation_rate"] = (float(np.mean(C[avoidable] > 0)) if avoidable.any()
                                         else float("nan"))
        m["unavoidable_violation_rate"] = (float(np.mean(C[~avoidable] > 0))
                                           if (~avoidable).any() else float("nan"))
        if unweighted_flow is not None:
            m["ood_nll"] = float(ood[i])
        if dataset is not None:
            m["nn_action_distance"] = float(nn[i])
        per_seed.append(m)
    out = {"per_seed": per_seed}
    for k, v in per_seed[0].items():
        if isinstance(v, (bool, np.bool_)) or k == "num_episodes":
            continue
        vals = np.array([ps[k] for ps in per_seed], np.float64)
        out[k] = float(np.mean(vals))
        out[f"{k}_sd"] = float(np.std(vals))
    out["safe"] = bool(out["c_norm"] <= 1.0)
    return out


@jax.jit
def _nn_seeds(data_obs, data_act, obs, actions, weights):
    """:func:`nn_action_distance` of every seed's padded queries ``[S, n, .]``."""
    return jax.vmap(lambda o, a, w: nn_action_distance(data_obs, data_act, o, a, weights=w))(
        obs, actions, weights)


@functools.partial(jax.jit, static_argnums=0)
def _ood_seeds(flow_graphdef, flow_params, obs, actions, alive):
    """:func:`ood_nll` of every seed (params stacked ``[S, ...]``, rollouts ``[S, T, E, .]``)."""
    return jax.vmap(functools.partial(ood_nll, flow_graphdef))(flow_params, obs, actions, alive)
