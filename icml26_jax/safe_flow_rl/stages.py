"""Training stages of the SafeFlowRL experiment, seeds vmapped (spec §Experiment).

In progress (issue 13): the critic stage (Q_h, V_h, Q_r, V_r, Q_c for every seed at once,
checkpointed in chunks with orbax so a killed run resumes to the same numbers) and the
learned feasible set's IoU with the analytic avoidable set. The flow, refiner, baseline and
evaluation stages follow the same pattern.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import checkpoint
from icml26_jax.safe_flow_rl import critics, envs

CRITIC_FIELDS = ("observations", "actions", "rewards", "h", "costs", "next_observations",
                 "masks")


def device_data(ds: dict) -> dict:
    """The critic fields of a dataset as float32 device arrays."""
    return {k: jnp.asarray(np.asarray(ds[k], np.float32)) for k in CRITIC_FIELDS}


def sample_batch(data: dict, key, batch_size: int) -> dict:
    """A uniform minibatch (with replacement) of the transitions."""
    n = data["observations"].shape[0]
    idx = jax.random.randint(key, (batch_size,), 0, n)
    return {k: v[idx] for k, v in data.items()}


def critic_config(c) -> critics.CriticConfig:
    return critics.CriticConfig(gamma=float(c.gamma), expectile_h=float(c.expectile_h),
                                expectile_r=float(c.expectile_r), lr=float(c.lr))


def init_critics(c, obs_dim: int, action_dim: int, key):
    """(graphdefs, stacked CriticState [num_seeds, ...]): one independent init per seed."""
    keys = jax.random.split(key, int(c.num_seeds))
    hidden = (int(c.hidden), int(c.hidden))
    graphdefs, _ = critics.make_critics(obs_dim, action_dim, hidden, keys[0])
    cfg = critic_config(c)
    states = [critics.init_state(critics.make_critics(obs_dim, action_dim, hidden, k)[1], cfg)
              for k in keys]
    return graphdefs, jax.tree.map(lambda *x: jnp.stack(x), *states)


def critic_stage(c, data: dict, key, directory: str, fingerprint: int):
    """Trains the critics of every seed for ``c.critic_steps`` steps (resumable).

    Returns:
      (graphdefs, stacked CriticState, logs) with logs["loss_qh"] etc. [steps // 100, seeds].
    """
    obs_dim = data["observations"].shape[1]
    action_dim = data["actions"].shape[1]
    k_init, k_data = jax.random.split(key)
    graphdefs, state = init_critics(c, obs_dim, action_dim, k_init)
    cfg = critic_config(c)
    seed_keys = jax.random.split(k_data, int(c.num_seeds))
    bs = int(c.batch_size)

    def one(state, seed_key, step):
        batch = sample_batch(data, jax.random.fold_in(seed_key, step), bs)
        return critics.update_critics(state, batch, graphdefs, cfg)

    @functools.partial(jax.jit, static_argnames=("n",))
    def run(state, start, n):
        def body(st, i):
            st, info = jax.vmap(one, in_axes=(0, 0, None))(st, seed_keys, start + i)
            return st, (info["loss_qh"], info["loss_vh"], info["vh_mean"])
        return jax.lax.scan(body, state, jnp.arange(n))

    steps = int(c.critic_steps)
    logs = {"loss_qh": np.zeros((steps, int(c.num_seeds))),
            "loss_vh": np.zeros((steps, int(c.num_seeds))),
            "vh_mean": np.zeros((steps, int(c.num_seeds)))}

    def advance(state, logs, start, n):
        state, (lq, lv, vm) = run(state, jnp.int32(start), n)
        logs["loss_qh"][start:start + n] = np.asarray(lq)
        logs["loss_vh"][start:start + n] = np.asarray(lv)
        logs["vh_mean"][start:start + n] = np.asarray(vm)
        return state, (f"loss_qh {float(np.mean(lq[-1])):.4f} "
                       f"V_h mean {float(np.mean(vm[-1])):+.3f}")

    state, logs = checkpoint.run_chunks(directory, fingerprint=fingerprint, state=state,
                                        logs=logs, steps=steps, chunk=int(c.chunk),
                                        advance=advance, name="critics")
    return graphdefs, state, logs


def feasibility_iou(graphdefs, params, env_params: envs.EnvParams = envs.EnvParams(),
                    n: int = 100, v: float = 2.0, theta: float = float(np.pi / 4)):
    """IoU of the learned feasible set {V_h <= 0} with the analytic avoidable set on the
    spec's (x, y) grid at fixed (v, theta). Returns (iou, learned mask, analytic mask)."""
    X, Y, mask = envs.feasible_grid(env_params, n=n, v=v, theta=theta)
    st = envs.EnvState(x=X.ravel(), y=Y.ravel(), v=jnp.full(X.size, v, jnp.float32),
                       theta=jnp.full(X.size, theta, jnp.float32),
                       t=jnp.zeros(X.size, jnp.int32))
    obs = envs.observation(st, env_params)
    vh = critics.v_values(graphdefs, params, obs)[0].reshape(X.shape)
    learned = np.asarray(vh <= 0.0)
    truth = np.asarray(mask)
    union = np.sum(learned | truth)
    return float(np.sum(learned & truth) / max(union, 1)), learned, truth
