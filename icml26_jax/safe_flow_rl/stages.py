"""Training stages of the SafeFlowRL experiment, seeds vmapped (spec §Experiment).

In progress (issue 13): the critic stage (Q_h, V_h, Q_r, V_r, Q_c for every seed at once,
checkpointed in chunks with orbax so a killed run resumes to the same numbers), the learned
feasible set's IoU with the analytic avoidable set, the feasibility weights of the dataset,
the weighted / unweighted flow-prior stage and the ordered refiner stage over an eps sweep
(seeds x budgets, nested vmap). The baseline and evaluation stages follow the same pattern.
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


# ----------------------------------------------------------------------------- flow prior


def critic_values(graphdefs, params, data: dict) -> dict:
    """Q_h (max), Q_r (min), V_h, V_r of every dataset transition under one seed's critics."""
    qh, qr, _ = critics.q_values(graphdefs, params, data["observations"], data["actions"])
    vh, vr, _ = critics.v_values(graphdefs, params, data["observations"])
    return {"qh": qh, "qr": qr, "vh": vh, "vr": vr}


def dataset_weights(c, graphdefs, state, data: dict):
    """[num_seeds, N] feasibility weights of every transition, each seed its own critics."""
    from icml26_jax.safe_flow_rl.weights import feasibility_weights

    def one(params):
        v = critic_values(graphdefs, params, data)
        return feasibility_weights(v["qh"], v["vh"], v["qr"], v["vr"], float(c.alpha_c),
                                   float(c.alpha_r), float(c.cost_ub))

    return jax.jit(jax.vmap(one))(state.params)


def init_flows(c, obs_dim: int, action_dim: int, key):
    """(graphdef, stacked params [num_seeds, ...]) of conditional RealNVP priors."""
    from flax import nnx

    from icml26_jax.safe_flow_rl.model import ConditionalRealNVP

    def make(k):
        return nnx.split(ConditionalRealNVP(action_dim, obs_dim, (int(c.hidden),) * 2,
                                            int(c.n_coupling), float(c.s_max),
                                            rngs=nnx.Rngs(k)), nnx.Param)

    keys = jax.random.split(key, int(c.num_seeds))
    graphdef, _ = make(keys[0])
    params = [make(k)[1] for k in keys]
    return graphdef, jax.tree.map(lambda *x: jnp.stack(x), *params)


def flow_stage(c, data: dict, weights, key, directory: str, fingerprint: int,
               weighted: bool = True):
    """Trains one flow prior per seed for ``c.flow_steps`` steps (resumable).

    ``weights``: [num_seeds, N] feasibility weights (ignored when ``weighted`` is False: the
    unweighted flow is plain maximum likelihood on all data). Each minibatch's weights are
    divided by their mean (spec Pitfalls: the exponentials explode).
    Returns (graphdef, stacked params, logs).
    """
    from icml26_jax.safe_flow_rl.prior import flow_optimizer, make_flow_step
    from icml26_jax.safe_flow_rl.weights import normalize_weights

    obs, act = data["observations"], data["actions"]
    k_init, k_data = jax.random.split(key)
    graphdef, params = init_flows(c, obs.shape[1], act.shape[1], k_init)
    tx = flow_optimizer(float(c.lr))
    opt = jax.vmap(tx.init)(params)
    step = make_flow_step(graphdef, tx, float(c.prior_unweighted_coef))
    seed_keys = jax.random.split(k_data, int(c.num_seeds))
    n_data, bs = obs.shape[0], int(c.batch_size)

    def one(p, o, w_all, seed_key, i):
        idx = jax.random.randint(jax.random.fold_in(seed_key, i), (bs,), 0, n_data)
        w = normalize_weights(w_all[idx]) if weighted else jnp.ones((bs,), jnp.float32)
        return step(p, o, obs[idx], act[idx], w)

    @functools.partial(jax.jit, static_argnames=("n",))
    def run(state, start, n):
        def body(st, i):
            p, o = st
            p, o, loss = jax.vmap(one, in_axes=(0, 0, 0, 0, None))(p, o, weights, seed_keys,
                                                                  start + i)
            return (p, o), loss
        return jax.lax.scan(body, state, jnp.arange(n))

    steps = int(c.flow_steps)
    logs = {"loss": np.zeros((steps, int(c.num_seeds)))}

    def advance(state, logs, start, n):
        state, loss = run(state, jnp.int32(start), n)
        logs["loss"][start:start + n] = np.asarray(loss)
        return state, f"prior loss {float(np.mean(loss[-1])):.4f}"

    (params, _), logs = checkpoint.run_chunks(
        directory, fingerprint=fingerprint, state=(params, opt), logs=logs, steps=steps,
        chunk=int(c.chunk), advance=advance, name="flow" if weighted else "flow (unweighted)")
    return graphdef, params, logs


# ----------------------------------------------------------------------------- latent refiner


def init_refiners(c, obs_dim: int, action_dim: int, key, n_eps: int):
    """(graphdef, params [num_seeds, n_eps, ...]) of ordered refiner heads (identity at init)."""
    from flax import nnx

    from icml26_jax.safe_flow_rl.model import LatentRefiner

    def make(k):
        return nnx.split(LatentRefiner(obs_dim, action_dim, "ordered", (int(c.hidden),) * 2,
                                       rngs=nnx.Rngs(k)), nnx.Param)

    S = int(c.num_seeds)
    keys = jax.random.split(key, S * n_eps)
    graphdef, _ = make(keys[0])
    params = [make(k)[1] for k in keys]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *params)
    return graphdef, jax.tree.map(lambda x: x.reshape((S, n_eps) + x.shape[1:]), stacked)


def refiner_stage(c, data: dict, eps_values, crit, flow, key, directory: str,
                  fingerprint: int):
    """Trains the ordered refiner for every (seed, eps) pair: ``c.refiner_steps`` steps of g_h
    on L_h, then as many of g_r on L_r, flow and critics frozen (resumable).

    Args:
      eps_values: the total budgets eps = eps_h + eps_r (split evenly; inf = unbounded).
      crit: (critic graphdefs, stacked CriticState) of the seeds.
      flow: (flow graphdef, stacked weighted-prior params) of the seeds.
    Returns (graphdef, params [S, E, ...], logs).
    """
    from flax import nnx

    import optax

    from icml26_jax.core.optim import promotion_safe
    from icml26_jax.safe_flow_rl import refiner as R

    cg, cstate = crit
    fg, fparams = flow
    obs = data["observations"]
    A = data["actions"].shape[1]
    eps = jnp.asarray([float(e) for e in eps_values], jnp.float32)
    k_init, k_data = jax.random.split(key)
    rg, rparams = init_refiners(c, obs.shape[1], A, k_init, len(eps_values))
    tx = promotion_safe(optax.adam(float(c.lr)))
    opt = jax.vmap(jax.vmap(tx.init))(rparams)
    bs, n_data = int(c.batch_size), obs.shape[0]
    beta = float(c.beta)
    margin = float(c.margin_sd) * float(jnp.std(data["h"]))
    # Q_r's scale on the data (per seed), for the scale-free reward loss.
    qr_scale = jax.vmap(lambda p: jnp.mean(jnp.abs(critic_values(cg, p, data)["qr"])))(
        cstate.params)

    def losses(rp, fp, cp, scale, s, z0, e, stage):
        ref = nnx.merge(rg, rp)
        fl = nnx.merge(fg, fp)
        vh = critics.v_values(cg, cp, s)[0]
        z1 = z0 + R.budget_step(ref.g_h(s, z0), e / 2)
        if stage == 1:  # L_h through z1 (g_h learns; g_r unused)
            qh = critics.q_values(cg, cp, s, fl(z1, s))[0]
            return R.safety_loss(qh, vh, beta, margin)
        z1 = jax.lax.stop_gradient(z1)  # stage 2: g_h frozen
        z2 = z1 + R.budget_step(ref.g_r(s, z1), e / 2)
        qh, qr, _ = critics.q_values(cg, cp, s, fl(z2, s))
        return R.reward_loss(qh, qr, vh, scale, beta, margin)

    def make_one(stage):
        def one(rp, o, fp, cp, scale, e, key_i):
            ks, kz = jax.random.split(key_i)
            idx = jax.random.randint(ks, (bs,), 0, n_data)
            s = obs[idx]
            z0 = jax.random.normal(kz, (bs, A), jnp.float32)
            loss, g = jax.value_and_grad(losses)(rp, fp, cp, scale, s, z0, e, stage)
            upd, o = tx.update(g, o, rp)
            return optax.apply_updates(rp, upd), o, loss
        return one

    seed_keys = jax.random.split(k_data, int(c.num_seeds))
    steps = int(c.refiner_steps)

    def make_run(stage):
        @functools.partial(jax.jit, static_argnames=("n",))
        def run(state, start, n):
            def body(st, i):
                rp, o = st

                def per_seed(rp_s, o_s, fp, cp, scale, k):
                    key_i = jax.random.fold_in(jax.random.fold_in(k, stage), i)
                    return jax.vmap(make_one(stage), in_axes=(0, 0, None, None, None, 0, None))(
                        rp_s, o_s, fp, cp, scale, eps, key_i)

                rp, o, loss = jax.vmap(per_seed)(rp, o, fparams, cstate.params, qr_scale,
                                                 seed_keys)
                return (rp, o), loss
            return jax.lax.scan(body, state, start + jnp.arange(n))
        return run

    logs = {}
    state = (rparams, opt)
    for stage in (1, 2):
        run = make_run(stage)
        logs[f"loss_stage{stage}"] = np.zeros((steps, int(c.num_seeds), len(eps_values)))

        def advance(st, lg, start, n, run=run, stage=stage):
            st, loss = run(st, jnp.int32(start), n)
            lg[f"loss_stage{stage}"][start:start + n] = np.asarray(loss)
            return st, f"stage {stage} loss {float(np.mean(loss[-1])):.4f}"

        state, stage_logs = checkpoint.run_chunks(
            f"{directory}/stage{stage}", fingerprint=fingerprint, state=state,
            logs={f"loss_stage{stage}": logs[f"loss_stage{stage}"]}, steps=steps,
            chunk=int(c.chunk), advance=advance, name=f"refiner stage {stage}")
        logs.update(stage_logs)
    return rg, state[0], logs
