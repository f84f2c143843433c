"""Training stages of the SafeFlowRL experiment, seeds vmapped (spec §Experiment).

Every stage trains all seeds at once (``core.checkpoint.seed_loop``: a jitted ``lax.scan``
of the step mapped over the seeds, which are sharded over a ``RUNS`` mesh
(``core.mesh.runs_mesh``) by ``core.mesh.map_runs``, checkpointed in chunks with orbax so a
killed run resumes to the same numbers): the critics (Q_h, V_h, Q_r, V_r, Q_c), the weighted /
unweighted flow priors, the ordered refiner over an eps sweep (seeds x budgets, nested vmap)
and the four baseline actors. Seed i draws its keys with ``fold_in(key, i)``, so a vmapped
run's seed i equals a run of that seed alone. Also the learned feasible set's IoU with the
analytic avoidable set and the dataset's feasibility weights.

Every jitted program takes the dataset as an argument, never as a closed-over constant (a
constant grows the program with the data and recompiles for every new dataset): each stage's
``*_setup`` builds its step and returns a :class:`StageStep` whose ``args`` hold the
transitions (broadcast to every seed, since ``seed_loop`` maps a leading seed axis), and the
stage function runs it. ``tests/safe_flow_rl/test_constants.py`` lowers every step.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icml26_jax.core import checkpoint
from icml26_jax.core.checkpoint import per_seed_keys
from icml26_jax.safe_flow_rl import critics, envs


def _host_stack(trees):
    """Stacks per-seed pytrees along a new leading axis on the host (exact copies): an eager
    ``jnp.stack`` compiles one XLA program per leaf shape."""
    return jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]), *trees)


def per_seed(tree, num_seeds: int):
    """Every leaf of ``tree`` repeated for ``num_seeds`` seeds along a new leading axis, as a
    read-only host view (no copy here): ``checkpoint.seed_loop`` maps its ``args`` over a
    leading replica axis, and the replicated dataset has to enter every seed's step as an
    argument, not as a constant the step closes over."""
    return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (int(num_seeds),)
                                                  + np.shape(x)), tree)


class StageStep(NamedTuple):
    """One training stage's step as ``checkpoint.seed_loop`` runs it.

    Attributes:
      one: ``one(state_s, args_s, key_s, step) -> (state_s, logs_s)``, one seed's step.
      state: the initial trained pytree, stacked over seeds [S, ...].
      args: frozen per-seed inputs [S, ...], the dataset among them.
      seed_keys: [S] typed keys.
    """

    one: Callable
    state: Any
    args: Any
    seed_keys: jax.Array


def first_step(st: StageStep):
    """``(fn, args)``: the jitted first step of every seed (``one`` vmapped over the seed axis)
    and its arguments, e.g. to lower the program ``seed_loop`` scans
    (``fn.lower(*args)``)."""
    fn = jax.jit(jax.vmap(lambda state, args, key: st.one(state, args, key, jnp.int32(0))))
    return fn, (st.state, st.args, st.seed_keys)


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
    keys = per_seed_keys(key, int(c.num_seeds))
    hidden = (int(c.hidden), int(c.hidden))
    graphdefs, _ = critics.make_critics(obs_dim, action_dim, hidden, keys[0])
    cfg = critic_config(c)
    states = [critics.init_state(critics.make_critics(obs_dim, action_dim, hidden, k)[1], cfg)
              for k in keys]
    return graphdefs, _host_stack(states)


def critic_setup(c, data: dict, key):
    """(graphdefs, :class:`StageStep`) of the critic stage: ``args`` is ``data`` (the critic
    fields, :func:`device_data`) broadcast to every seed."""
    obs_dim = data["observations"].shape[1]
    action_dim = data["actions"].shape[1]
    k_init, k_data = jax.random.split(key)
    graphdefs, state = init_critics(c, obs_dim, action_dim, k_init)
    cfg = critic_config(c)
    S = int(c.num_seeds)
    seed_keys = per_seed_keys(k_data, S)
    bs = int(c.batch_size)

    def one(state, data, seed_key, step):
        batch = sample_batch(data, jax.random.fold_in(seed_key, step), bs)
        state, info = critics.update_critics(state, batch, graphdefs, cfg)
        return state, {k: info[k] for k in ("loss_qh", "loss_vh", "vh_mean")}

    return graphdefs, StageStep(one, state, per_seed(data, S), seed_keys)


def critic_stage(c, data: dict, key, directory: str, fingerprint: int):
    """Trains the critics of every seed for ``c.critic_steps`` steps (resumable).

    Returns:
      (graphdefs, stacked CriticState, logs) with logs["loss_qh"] etc. [steps, seeds].
    """
    graphdefs, st = critic_setup(c, data, key)
    state, logs = checkpoint.seed_loop(
        st.state, st.args, st.one, st.seed_keys, steps=int(c.critic_steps),
        chunk=int(c.chunk), directory=directory, fingerprint=fingerprint, name="critics",
        message=lambda m: f"loss_qh {float(np.mean(m['loss_qh'])):.4f} "
                          f"V_h mean {float(np.mean(m['vh_mean'])):+.3f}")
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
    return weights_program(c, graphdefs)(state.params, data)


def weights_program(c, graphdefs):
    """:func:`dataset_weights` as one jitted program ``fn(params [S, ...], data)``: the
    critic fields ``data`` an argument, not a constant."""
    from icml26_jax.safe_flow_rl.weights import feasibility_weights

    alphas = (float(c.alpha_c), float(c.alpha_r), float(c.cost_ub))

    def one(params, data):
        v = critic_values(graphdefs, params, data)
        return feasibility_weights(v["qh"], v["vh"], v["qr"], v["vr"], *alphas)

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def init_flows(c, obs_dim: int, action_dim: int, key):
    """(graphdef, stacked params [num_seeds, ...]) of conditional RealNVP priors."""
    from flax import nnx

    from icml26_jax.safe_flow_rl.model import ConditionalRealNVP

    def make(k):
        return nnx.split(ConditionalRealNVP(action_dim, obs_dim, (int(c.hidden),) * 2,
                                            int(c.n_coupling), float(c.s_max),
                                            rngs=nnx.Rngs(k)), nnx.Param)

    keys = per_seed_keys(key, int(c.num_seeds))
    graphdef, _ = make(keys[0])
    params = [make(k)[1] for k in keys]
    return graphdef, _host_stack(params)


def flow_setup(c, data: dict, weights, key, weighted: bool = True):
    """(graphdef, :class:`StageStep`) of one flow-prior stage: ``args = (weights or None,
    observations, actions)``, each per seed (the weights are the seed's own, the transitions
    broadcast); the unweighted flow takes no weights."""
    from icml26_jax.safe_flow_rl.prior import flow_optimizer, make_flow_step
    from icml26_jax.safe_flow_rl.weights import normalize_weights

    obs, act = data["observations"], data["actions"]
    k_init, k_data = jax.random.split(key)
    graphdef, params = init_flows(c, obs.shape[1], act.shape[1], k_init)
    tx = flow_optimizer(float(c.lr))
    opt = jax.jit(jax.vmap(tx.init))(params)  # one program (eagerly: one per leaf shape)
    step = make_flow_step(graphdef, tx, float(c.prior_unweighted_coef))
    S = int(c.num_seeds)
    seed_keys = per_seed_keys(k_data, S)
    n_data, bs = obs.shape[0], int(c.batch_size)

    def one(state, args, seed_key, i):
        w_all, obs, act = args
        idx = jax.random.randint(jax.random.fold_in(seed_key, i), (bs,), 0, n_data)
        w = normalize_weights(w_all[idx]) if weighted else jnp.ones((bs,), jnp.float32)
        p, o, loss = step(*state, obs[idx], act[idx], w)
        return (p, o), {"loss": loss}

    args = (weights if weighted else None, *per_seed((obs, act), S))
    return graphdef, StageStep(one, (params, opt), args, seed_keys)


def flow_stage(c, data: dict, weights, key, directory: str, fingerprint: int,
               weighted: bool = True):
    """Trains one flow prior per seed for ``c.flow_steps`` steps (resumable).

    ``weights``: [num_seeds, N] feasibility weights (ignored when ``weighted`` is False: the
    unweighted flow is plain maximum likelihood on all data). Each minibatch's weights are
    divided by their mean (spec Pitfalls: the exponentials explode).
    Returns (graphdef, stacked params, logs).
    """
    graphdef, st = flow_setup(c, data, weights, key, weighted)
    (params, _), logs = checkpoint.seed_loop(
        st.state, st.args, st.one, st.seed_keys, steps=int(c.flow_steps), chunk=int(c.chunk),
        directory=directory, fingerprint=fingerprint,
        name="flow" if weighted else "flow (unweighted)",
        message=lambda m: f"prior loss {float(np.mean(m['loss'])):.4f}")
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
    keys = [jax.random.fold_in(k, j) for k in per_seed_keys(key, S) for j in range(n_eps)]
    graphdef, _ = make(keys[0])
    params = [make(k)[1] for k in keys]
    stacked = _host_stack(params)
    return graphdef, jax.tree.map(lambda x: x.reshape((S, n_eps) + x.shape[1:]), stacked)


def refiner_setup(c, data: dict, eps_values, crit, flow, key, flow_per_entry: bool = False):
    """(graphdef, [stage-1 :class:`StageStep`, stage-2 :class:`StageStep`]) of the refiner
    stage (arguments as :func:`refiner_stage`). Both steps' ``args = (flow params, critic
    params, Q_r scale, observations)`` per seed; both hold the initial state (stage 2 starts
    from stage 1's trained state)."""
    from flax import nnx

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
    opt = jax.jit(jax.vmap(jax.vmap(tx.init)))(rparams)  # one program, not one per leaf
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

    def one_factory(stage):
        def one_eps(rp, o, fp, cp, scale, e, key_i, obs):
            ks, kz = jax.random.split(key_i)
            idx = jax.random.randint(ks, (bs,), 0, n_data)
            s = obs[idx]
            z0 = jax.random.normal(kz, (bs, A), jnp.float32)
            loss, g = jax.value_and_grad(losses)(rp, fp, cp, scale, s, z0, e, stage)
            upd, o = tx.update(g, o, rp)
            return optax.apply_updates(rp, upd), o, loss

        def one(state, args, seed_key, i):
            fp, cp, scale, obs = args
            key_i = jax.random.fold_in(jax.random.fold_in(seed_key, stage), i)
            rp, o, loss = jax.vmap(one_eps, in_axes=(0, 0, 0 if flow_per_entry else None,
                                                     None, None, 0, None, None))(
                *state, fp, cp, scale, eps, key_i, obs)
            return (rp, o), {f"loss_stage{stage}": loss}
        return one

    S = int(c.num_seeds)
    seed_keys = per_seed_keys(k_data, S)
    args = (fparams, cstate.params, qr_scale, per_seed(obs, S))
    return rg, [StageStep(one_factory(stage), (rparams, opt), args, seed_keys)
                for stage in (1, 2)]


def refiner_stage(c, data: dict, eps_values, crit, flow, key, directory: str,
                  fingerprint: int, flow_per_entry: bool = False):
    """Trains the ordered refiner for every (seed, eps) pair: ``c.refiner_steps`` steps of g_h
    on L_h, then as many of g_r on L_r, flow and critics frozen (resumable).

    Args:
      eps_values: the E total budgets eps = eps_h + eps_r (split evenly; inf = unbounded).
      crit: (critic graphdefs, stacked CriticState) of the seeds.
      flow: (flow graphdef, params): [S, ...] (one prior per seed, shared by the entries) or,
        with ``flow_per_entry``, [S, E, ...] (entry j refines its own prior, e.g. the
        unweighted-prior ablation next to the sweep, in one compiled loop).
    Returns (graphdef, params [S, E, ...], logs).
    """
    rg, steps = refiner_setup(c, data, eps_values, crit, flow, key, flow_per_entry)
    logs = {}
    state = steps[0].state
    for stage, st in zip((1, 2), steps):
        state, stage_logs = checkpoint.seed_loop(
            state, st.args, st.one, st.seed_keys, steps=int(c.refiner_steps),
            chunk=int(c.chunk), directory=f"{directory}/stage{stage}",
            fingerprint=fingerprint, name=f"refiner stage {stage}",
            message=lambda m, k=f"loss_stage{stage}": f"loss {float(np.mean(m[k])):.4f}")
        logs.update(stage_logs)
    return rg, state[0], logs


# ----------------------------------------------------------------------------- baselines


def safe_episode_indices(ds: dict) -> np.ndarray:
    """Indices of the transitions of violation-free episodes (BC-Safe's data)."""
    from icml26_jax.safe_flow_rl.data import episode_stats

    violated = episode_stats(ds)["violated"]
    ep = np.asarray(ds["episode_ids"])
    _, inv = np.unique(ep, return_inverse=True)
    idx = np.flatnonzero(~violated[inv])
    if idx.size == 0:
        raise ValueError("the dataset has no violation-free episode: BC-Safe has no data")
    return idx.astype(np.int32)


def actor_setup(c, kind: str, data: dict, key, *, crit=None, weights=None, safe_idx=None):
    """(graphdef, :class:`StageStep`) of baseline ``kind`` (arguments as :func:`actor_stage`).

    ``args`` per seed: ``(critic params, Q_r scale, Q_c scale, observations, actions, pool)``
    for bc_lag, else ``(weights or None, observations, actions, pool)``; ``pool`` holds the
    indices a minibatch draws from (``safe_idx`` for bc_safe, every transition otherwise).
    """
    from icml26_jax.safe_flow_rl import baselines as B
    from icml26_jax.safe_flow_rl.weights import normalize_weights

    if kind not in B.ACTORS:
        raise ValueError(f"baseline kind must be one of {B.ACTORS}, got {kind!r}")
    obs, act = data["observations"], data["actions"]
    S, bs = int(c.num_seeds), int(c.batch_size)
    k_init, k_data = jax.random.split(key)
    hidden = (int(c.hidden),) * 2
    made = [B.make_actor(kind, obs.shape[1], act.shape[1], hidden, k)
            for k in per_seed_keys(k_init, S)]
    graphdef = made[0][0]
    params = _host_stack([m[1] for m in made])
    tx = B.actor_optimizer(float(c.lr))
    opt = jax.jit(jax.vmap(tx.init))(params)  # one program (eagerly: one per leaf shape)
    if kind == "bc_safe" and safe_idx is None:
        raise ValueError("actor_stage(kind='bc_safe') needs safe_idx")
    if kind == "fisor_lite" and weights is None:
        raise ValueError("actor_stage(kind='fisor_lite') needs weights")
    if kind == "bc_lag" and crit is None:
        raise ValueError("actor_stage(kind='bc_lag') needs crit")
    pool = np.asarray(safe_idx if kind == "bc_safe" else np.arange(obs.shape[0]), np.int32)
    shared = per_seed((obs, act, pool), S)  # obs, act, pool: arguments, never constants

    def batch_idx(pool, seed_key, i):
        j = jax.random.randint(jax.random.fold_in(seed_key, i), (bs,), 0, pool.shape[0])
        return pool[j]

    if kind == "bc_lag":
        cg, cstate = crit
        limit = B.cost_limit(float(c.kappa), float(c.gamma), envs.EnvParams().horizon)
        qr_scale, qc_scale = bc_lag_scales(cg)(cstate.params, obs, act)
        args = (cstate.params, qr_scale, qc_scale, *shared)
        lam0 = jnp.zeros((S,), jnp.float32)

        def one(state, args, seed_key, i):
            p, o, lam = state
            cp, sr, sc, obs, act, pool = args
            idx = batch_idx(pool, seed_key, i)
            (loss, qc), g = jax.value_and_grad(B.bc_lag_loss, argnums=1, has_aux=True)(
                graphdef, p, obs[idx], act[idx], (cg, cp), lam, sr, sc)
            upd, o = tx.update(g, o, p)
            lam = B.dual_ascent(lam, qc, limit, float(c.lag_lr))
            return (optax.apply_updates(p, upd), o, lam), {"loss": loss, "lambda": lam, "qc": qc}

        state = (params, opt, lam0)
    else:
        args = (weights if kind == "fisor_lite" else None, *shared)

        def one(state, args, seed_key, i):
            p, o = state
            w_all, obs, act, pool = args
            idx = batch_idx(pool, seed_key, i)
            w = normalize_weights(w_all[idx]) if kind == "fisor_lite" else jnp.ones(
                (bs,), jnp.float32)
            loss, g = jax.value_and_grad(B.weighted_bc_loss, argnums=1)(
                graphdef, p, obs[idx], act[idx], w)
            upd, o = tx.update(g, o, p)
            return (optax.apply_updates(p, upd), o), {"loss": loss}

        state = (params, opt)
    return graphdef, StageStep(one, state, args, per_seed_keys(k_data, S))


def bc_lag_scales(critic_graphdefs):
    """BC-Lag's per-seed normalisers as one jitted program ``fn(params [S, ...], obs, act)
    -> (mean |Q_r|, max(mean |Q_c|, 1e-3))`` over the dataset pairs, which are arguments."""

    def scales(p, obs, act):
        v = critics.q_values(critic_graphdefs, p, obs, act)
        return jnp.mean(jnp.abs(v[1])), jnp.maximum(jnp.mean(jnp.abs(v[2])), 1e-3)

    return jax.jit(jax.vmap(scales, in_axes=(0, None, None)))


def actor_stage(c, kind: str, data: dict, key, directory: str, fingerprint: int, *,
                crit=None, weights=None, safe_idx=None):
    """Trains baseline ``kind`` (``baselines.ACTORS``) for every seed, ``c.actor_steps`` steps.

    Args:
      kind: "bc_all" (uniform over all transitions), "bc_safe" (uniform over ``safe_idx``),
        "fisor_lite" (feasibility-weighted BC; needs ``weights`` [S, N]) or "bc_lag" (TD3+BC
        on the Lagrangian with dual ascent; needs ``crit``).
      crit: (critic graphdefs, stacked CriticState), for bc_lag.
    Returns (graphdef, stacked actor params, logs); bc_lag's logs hold "lambda" and "qc".
    """
    graphdef, st = actor_setup(c, kind, data, key, crit=crit, weights=weights,
                               safe_idx=safe_idx)
    state, logs = checkpoint.seed_loop(
        st.state, st.args, st.one, st.seed_keys, steps=int(c.actor_steps),
        chunk=int(c.chunk), directory=directory, fingerprint=fingerprint, name=kind,
        message=lambda m: f"loss {float(np.mean(m['loss'])):.4f}" + (
            f" lambda {float(np.mean(m['lambda'])):.3f}" if "lambda" in m else ""))
    return graphdef, state[0], logs
