"""The SafeFlowRL experiment (spec §Experiment): offline data, HJ / reward / cost critics, the
feasibility-weighted and unweighted flow priors, the ordered latent refiner over an eps sweep,
the baselines, evaluation rollouts, the geometric bounds, claims and figures.

Every training stage trains all seeds at once (vmapped) and checkpoints in chunks under
``<workdir>/checkpoints/<stage>`` with the config's fingerprint, so a killed run resumes to the
same numbers. The stage seconds are recorded in ``metrics["stage_s"]``.
"""

from __future__ import annotations

import math
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.safe_flow_rl import (baselines, bounds, configs, critics, data as data_lib,
                                     envs, evaluate, policies, report, stages)
from icml26_jax.safe_flow_rl.refiner import refine

PAPER = "safe_flow_rl"
KL_STATES, KL_SAMPLES, KL_DELTA = 8, 10_000, 0.5  # claim 11
W2_STATES, W2_SAMPLES, LIP_POINTS = 8, 2048, 512  # claim 12


def _eps(x) -> float:
    return float("inf") if str(x).strip().lower() in ("inf", "infinity") else float(x)


def normalise_config(c) -> None:
    """Flag strings to their types (``--config.eps_sweep=0.1,0.5,inf``, ``--config.seeds=0,1``)."""
    from icml26_jax.core.flags import as_tuple
    c.eps_sweep = as_tuple(c.eps_sweep, _eps, name="eps_sweep")
    c.select_margins_sd = as_tuple(c.select_margins_sd, float, name="select_margins_sd")
    c.seeds = as_tuple(c.seeds, int, name="seeds")
    c.latent_budget = _eps(c.latent_budget)


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the field and the allowed values."""
    if c.env not in configs.ENVS:
        raise ValueError(f"config.env must be one of {', '.join(configs.ENVS)}, got {c.env!r}")
    if c.env != "point_robot":
        raise ValueError(f"config.env={c.env!r}: only point_robot (E1) is built; corridor_run "
                         "(E2) is the spec's optional second task and is not implemented")
    if c.refiner not in configs.REFINERS:
        raise ValueError(f"config.refiner must be one of {', '.join(configs.REFINERS)}, got "
                         f"{c.refiner!r}")
    if c.refiner != "ordered":
        raise ValueError("config.refiner='gaussian' is the spec's optional variant and is not "
                         "implemented; use config.refiner=ordered")
    eps = [_eps(e) for e in c.eps_sweep]
    if not eps or any(not e >= 0 for e in eps):
        raise ValueError(f"config.eps_sweep must be non-empty budgets >= 0 (inf allowed), got "
                         f"{tuple(c.eps_sweep)}")
    if not _eps(c.latent_budget) >= 0 or math.isinf(_eps(c.latent_budget)):
        raise ValueError(f"config.latent_budget must be a finite eps >= 0, got "
                         f"{c.latent_budget!r}")
    if _eps(c.latent_budget) not in eps:
        raise ValueError(f"config.latent_budget={c.latent_budget} must be one of "
                         f"config.eps_sweep={tuple(eps)} (ours is that sweep entry)")
    if not c.select_margins_sd or any(not float(m) >= 0 for m in c.select_margins_sd):
        raise ValueError(f"config.select_margins_sd must be non-empty margins >= 0, got "
                         f"{tuple(c.select_margins_sd)}")
    if not 0 <= float(c.val_target) <= 1:
        raise ValueError(f"config.val_target must be a rate in [0, 1], got {c.val_target!r}")
    if not float(c.kappa) > 0:
        raise ValueError(f"config.kappa must be > 0, got {c.kappa!r}")
    for name in ("dataset_size", "num_seeds", "hidden", "batch_size", "critic_steps",
                 "flow_steps", "refiner_steps", "actor_steps", "chunk", "num_candidates",
                 "eval_episodes", "val_episodes", "n_coupling"):
        v = c[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"config.{name} must be a positive integer, got {v!r}")
    if c.dataset_size < 2_000:
        raise ValueError(f"config.dataset_size must be >= 2000 transitions, got "
                         f"{c.dataset_size}")
    for name in ("gamma", "expectile_h", "expectile_r"):
        if not 0 < float(c[name]) < 1:
            raise ValueError(f"config.{name} must be in (0, 1), got {c[name]!r}")
    if c.data_path and not os.path.exists(c.data_path):
        raise ValueError(f"config.data_path {c.data_path!r} does not exist")


def _dataset(c, workdir):
    if c.data_path:
        from icml26_jax.datasets import offline_episodes
        t0 = time.time()
        try:  # our schema (offline_episodes.save_source): through the TFDS builder
            offline_episodes.source_info(c.data_path)
        except (ValueError, OSError):  # else the DSRL layout
            ds = data_lib.load_dsrl(c.data_path)
        else:
            ds = offline_episodes.load_offline_episodes(
                c.data_path, data_dir=os.path.join(workdir, "data", "tfds"))
        return ds, {"path": c.data_path, "cached": True, "seconds": time.time() - t0}
    return data_lib.load_or_make_dataset(envs.EnvParams(), int(c.dataset_size), int(c.seed),
                                         workdir)


def _seed(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def _eps_slice(tree, j):
    return jax.tree.map(lambda x: x[:, j], tree)


def bound_metrics(c, crit, flow, ref, key) -> dict:
    """Claims 11 and 12 per seed: the KL invariance z-score (P1) and the W2 bound ratio (P2)
    of the refiner at ``c.latent_budget``, on states drawn from the evaluation starts."""
    fg, fparams = flow
    rg, rparams = ref  # [S, ...] at latent_budget
    eps = float(c.latent_budget)
    S = int(c.num_seeds)
    ks, kk, kw = jax.random.split(key, 3)
    starts, _ = evaluate.eval_starts(ks, max(KL_STATES, W2_STATES))
    states = envs.observation(starts, envs.EnvParams())
    A = 2
    out = {}

    def kl_one(fp, s, k):
        flow_m = nnx.merge(fg, fp)
        kd, km = jax.random.split(k)
        d = jax.random.normal(kd, (A,), jnp.float32)
        delta = KL_DELTA * d / jnp.linalg.norm(d)
        return (bounds.mc_kl_through_flow(flow_m, s, delta, km, KL_SAMPLES),
                bounds.mc_kl_through_flow(flow_m, s, delta, km, KL_SAMPLES, space="action"))

    def w2_one(fp, rp, s, k):
        flow_m, r = nnx.merge(fg, fp), nnx.merge(rg, rp)
        k0, kb, kt = jax.random.split(k, 3)
        z0 = jax.random.normal(k0, (W2_SAMPLES, A), jnp.float32)
        sb = jnp.broadcast_to(s, (W2_SAMPLES,) + s.shape)
        z2, _ = refine(r.g_h, r.g_r, sb, z0, eps / 2, eps / 2)
        coupling = bounds.coupling_w2(flow_m, s, z0, z2)
        ball = bounds.latent_ball(kb, LIP_POINTS, A, 3.0 + eps)
        t = jax.random.uniform(kt, (LIP_POINTS, 1), jnp.float32)
        seg = z0[:LIP_POINTS] + t * (z2[:LIP_POINTS] - z0[:LIP_POINTS])
        lip, _ = bounds.lipschitz_estimate(flow_m, s, jnp.concatenate([ball, seg, z0[:64],
                                                                         z2[:64]]))
        return coupling, lip

    def grid_keys(key, n):  # [S, n]: key (i, j) = fold_in(fold_in(key, i), j)
        return jnp.stack([jnp.stack([jax.random.fold_in(jax.random.fold_in(key, i), j)
                                     for j in range(n)]) for i in range(S)])

    # Seeds and states at once: a vmap over seeds (params, keys) of a vmap over states.
    n_states = jnp.broadcast_to(states, (S,) + states.shape)
    kl = jax.jit(jax.vmap(jax.vmap(kl_one, in_axes=(None, 0, 0))))(
        fparams, n_states[:, :KL_STATES], grid_keys(kk, KL_STATES))
    coupling, lip = jax.jit(jax.vmap(jax.vmap(w2_one, in_axes=(None, None, 0, 0))))(
        fparams, rparams, n_states[:, :W2_STATES], grid_keys(kw, W2_STATES))
    for tag, (est, se) in (("", kl[0]), ("_action_space", kl[1])):
        est, se = np.asarray(est, np.float64), np.asarray(se, np.float64)  # [S, states]
        pooled = est.mean(1)
        pooled_se = np.sqrt(np.sum(se ** 2, 1)) / KL_STATES
        out["kl_mc" + tag] = pooled.tolist()
        out["kl_se" + tag] = pooled_se.tolist()
        out["kl_zscore" + tag] = (np.abs(pooled - KL_DELTA ** 2 / 2) / pooled_se).tolist()
    coupling, lip = np.asarray(coupling, np.float64), np.asarray(lip, np.float64)  # [S, states]
    ratios = coupling / (lip * eps) if eps > 0 else np.zeros_like(coupling)
    out["w2_ratio"] = ratios.max(1).tolist()
    out["w2_coupling"] = coupling.tolist()
    out["lipschitz"] = lip.tolist()
    out["w2_bound"] = (lip * eps).tolist()
    out["kl_true"] = KL_DELTA ** 2 / 2
    out["eps"] = eps
    return out


class Models(NamedTuple):
    """Everything a run trains (seeds stacked on the leading axis of every params tree)."""

    dataset: dict  # NumPy transitions
    summary: dict  # data.dataset_summary
    data: dict  # device arrays of the critic fields
    critics: tuple  # (graphdefs, CriticState)
    ious: list  # feasibility IoU per seed
    iou_masks: tuple  # (learned, analytic) grids of seed 0
    weights: jax.Array  # [S, N] feasibility weights
    flow: tuple  # (graphdef, weighted-prior params)
    flow_unweighted: jax.Array  # unweighted-prior params (same graphdef)
    refiner: tuple  # (graphdef, params [S, E + 1, ...]): the eps sweep, then the ablation
    actors: dict  # kind -> (graphdef, params)


def fit(c, workdir: str, stage_s: dict | None = None) -> Models:
    """Trains (or restores from ``<workdir>/checkpoints``) every model of a run."""
    stage_s = {} if stage_s is None else stage_s
    ck = os.path.join(workdir, "checkpoints")
    fp = checkpoint.config_fingerprint(c)
    keys = _keys(c)
    env_params = envs.EnvParams()
    S = int(c.num_seeds)

    def timed(name):
        stage_s[name] = time.time() - timed.t0
        timed.t0 = time.time()
        logging.info("stage %s done in %.1f s", name, stage_s[name])
    timed.t0 = time.time()

    # 1. data
    ds, info = _dataset(c, workdir)
    summary = data_lib.dataset_summary(ds)
    data = stages.device_data(ds)
    logging.info("data: %d transitions, %d episodes, violating %.3f, top-decile violating %.3f "
                 "(%s)", len(ds["rewards"]), summary["num_episodes"],
                 summary["violation_fraction"], summary["top_violation_fraction"],
                 "cached" if info["cached"] else f"{info['seconds']:.1f} s")
    timed("data")

    # 2. critics
    cg, cstate, _ = stages.critic_stage(c, data, keys["critics"], f"{ck}/critics", fp)
    ious, learned, truth = [], None, None
    for i in range(S):
        iou, lm, tm = stages.feasibility_iou(cg, _seed(cstate.params, i), env_params)
        ious.append(iou)
        if i == 0:
            learned, truth = lm, tm
    logging.info("feasibility IoU per seed: %s", np.round(ious, 3).tolist())
    timed("critics")

    # 3. flow priors
    weights = stages.dataset_weights(c, cg, cstate, data)
    fg, fparams, _ = stages.flow_stage(c, data, weights, keys["flow"], f"{ck}/flow", fp)
    _, uparams, _ = stages.flow_stage(c, data, weights, keys["flow_u"], f"{ck}/flow_u", fp,
                                      weighted=False)
    timed("flows")

    # 4. refiners: the eps sweep on the weighted prior and, as one more entry of the same
    # compiled loop, latent_budget on the unweighted prior (the ablation)
    eps_sweep = tuple(float(e) for e in c.eps_sweep)
    entries = eps_sweep + (float(c.latent_budget),)
    per_entry = jax.tree.map(  # on the host (an eager jnp.stack compiles one per leaf)
        lambda w, u: np.stack([np.asarray(w)] * len(eps_sweep) + [np.asarray(u)], axis=1),
        fparams, uparams)
    rg, rparams, _ = stages.refiner_stage(c, data, entries, (cg, cstate), (fg, per_entry),
                                          keys["refiner"], f"{ck}/refiner", fp,
                                          flow_per_entry=True)
    del per_entry
    timed("refiners")

    # 5. baselines
    actors = {}
    safe_idx = stages.safe_episode_indices(ds)
    for j, kind in enumerate(baselines.ACTORS):
        actors[kind] = stages.actor_stage(
            c, kind, data, jax.random.fold_in(keys["actors"], j), f"{ck}/{kind}", fp,
            crit=(cg, cstate), weights=weights, safe_idx=safe_idx)[:2]
    timed("baselines")

    return Models(ds, summary, data, (cg, cstate), ious, (learned, truth), weights,
                  (fg, fparams), uparams, (rg, rparams), actors)


def _keys(c) -> dict:
    return dict(zip(("critics", "flow", "flow_u", "refiner", "val", "actors", "eval",
                     "bounds", "nn"), jax.random.split(jax.random.key(int(c.seed)), 9)))


def calibrate_margin(c, models: Models) -> tuple[np.ndarray, dict]:
    """The selection margin m_sel of every seed, chosen on validation starts.

    Our policy at eps = ``c.latent_budget`` is rolled out from ``c.val_episodes`` starts drawn
    with the run's validation key (disjoint from the evaluation starts) for every margin
    ``k * sd_D(h)``, k in ``c.select_margins_sd``. Per seed, the margin with the largest
    validation R_norm among those whose avoidable-start violation rate is at most
    ``c.val_target`` is kept; if none is, the one with the lowest such rate.

    Returns:
      (margins [S] float32, table) with table["margin"] [K] and table[metric] [K, S].
    """
    S, N = int(c.num_seeds), int(c.num_candidates)
    keys = _keys(c)
    env_params = envs.EnvParams()
    cg, cstate = models.critics
    fg, fparams = models.flow
    rg, rparams = models.refiner
    j = [float(e) for e in c.eps_sweep].index(float(c.latent_budget))
    sd_h = float(np.std(np.asarray(models.dataset["h"])))
    grid = [float(k) * sd_h for k in c.select_margins_sd]
    starts, avoid = evaluate.eval_starts(keys["val"], int(c.val_episodes), env_params)
    act = policies.refined_policy(fg, rg, cg, N)
    table = {"margin": grid, "r_norm": [], "avoidable_violation_rate": [], "c_norm": []}
    for i, m in enumerate(grid):
        params = (_eps_slice(rparams, j), fparams, cstate.params,
                  jnp.full((S,), float(c.latent_budget), jnp.float32),
                  jnp.full((S,), m, jnp.float32))
        roll = evaluate.rollout_seeds(act, params, jax.random.fold_in(keys["val"], i), starts,
                                      env_params)
        met = evaluate.policy_metrics(roll, avoid, models.summary["r_min"],
                                      models.summary["r_max"], float(c.kappa))
        for k in ("r_norm", "avoidable_violation_rate", "c_norm"):
            table[k].append([ps[k] for ps in met["per_seed"]])
        logging.info("validation margin %.3f: R_norm %s, avoidable violation %s", m,
                     np.round(table["r_norm"][-1], 3).tolist(),
                     np.round(table["avoidable_violation_rate"][-1], 3).tolist())
    r = np.asarray(table["r_norm"])  # [K, S]
    v = np.asarray(table["avoidable_violation_rate"])
    chosen = []
    for s in range(S):
        ok = np.flatnonzero(v[:, s] <= float(c.val_target))
        k = ok[np.argmax(r[ok, s])] if ok.size else int(np.lexsort((-r[:, s], v[:, s]))[0])
        chosen.append(grid[int(k)])
    table["chosen"] = chosen
    table["sd_h"] = sd_h
    logging.info("selection margin per seed: %s", np.round(chosen, 3).tolist())
    return np.asarray(chosen, np.float32), table


def policies_of(c, models: Models, margins) -> dict:
    """name -> (act, params stacked over seeds) of every evaluated policy (spec §Baselines):
    ours over the eps sweep (``report.eps_name``), ours deterministic (z0 = 0), the
    unweighted prior + refiner, prior-only (weighted / unweighted), BC-All, BC-Safe, BC-Lag,
    FISOR-lite. ``margins`` [S]: each seed's selection margin, shared by every policy that
    uses the Q_h / Q_r rule (ours and its ablations)."""
    S, N = int(c.num_seeds), int(c.num_candidates)
    cg, cstate = models.critics
    fg, fparams = models.flow
    uparams = models.flow_unweighted
    rg, rparams = models.refiner
    actors = models.actors
    eps_sweep = tuple(float(e) for e in c.eps_sweep)
    full = lambda v: jnp.full((S,), v, jnp.float32)  # noqa: E731  (a per-seed budget)
    ours = policies.refined_policy(fg, rg, cg, N)  # one act, so one compile for the sweep
    prior = baselines.prior_only(fg, cg, N)
    bc = baselines.bc_all(actors["bc_all"][0])
    m = jnp.asarray(margins, jnp.float32)
    pol = {}
    for j, e in enumerate(eps_sweep):
        pol[report.eps_name(e)] = (ours, (_eps_slice(rparams, j), fparams, cstate.params,
                                          full(e), m))
    j_ours = eps_sweep.index(float(c.latent_budget))
    pol["ours_deterministic"] = (
        policies.refined_policy(fg, rg, cg, N, deterministic=True),
        (_eps_slice(rparams, j_ours), fparams, cstate.params, full(c.latent_budget), m))
    pol["unweighted_prior_refiner"] = (ours, (_eps_slice(rparams, len(eps_sweep)), uparams,
                                              cstate.params, full(c.latent_budget), m))
    pol["prior_only"] = (prior, (fparams, cstate.params, m))
    pol["prior_only_unweighted"] = (prior, (uparams, cstate.params, m))
    pol["bc_all"] = (bc, actors["bc_all"][1])
    pol["bc_safe"] = (bc, actors["bc_safe"][1])
    pol["bc_lag"] = (baselines.bc_lag(actors["bc_lag"][0]), actors["bc_lag"][1])
    pol["fisor_lite"] = (baselines.fisor_lite(actors["fisor_lite"][0], cg, N),
                         (actors["fisor_lite"][1], cstate.params))
    return pol


def evaluate_policies(c, models: Models, pol: dict) -> tuple[dict, dict, jax.Array]:
    """Rolls every policy out from the same ``c.eval_episodes`` starts, every seed.

    Returns (metrics by name, seed-0 xy paths of the first episodes by name, avoidable [E]).
    """
    keys = _keys(c)
    env_params = envs.EnvParams()
    fg, _ = models.flow
    starts, avoid = evaluate.eval_starts(keys["eval"], int(c.eval_episodes), env_params)
    methods, paths = {}, {}
    r_min, r_max = models.summary["r_min"], models.summary["r_max"]
    ds_pair = (models.data["observations"], models.data["actions"])
    for j, (name, (act, params)) in enumerate(pol.items()):
        t0 = time.time()
        roll = evaluate.rollout_seeds(act, params, jax.random.fold_in(keys["eval"], 1000 + j),
                                      starts, env_params)
        methods[name] = evaluate.policy_metrics(
            roll, avoid, r_min, r_max, float(c.kappa), unweighted_flow=(fg, models.flow_unweighted),
            dataset=ds_pair, key=jax.random.fold_in(keys["nn"], j))
        paths[name] = np.asarray(roll["xy"][0, :, :report.TRAJ_EPISODES])
        m = methods[name]
        logging.info("[%d/%d] %-26s R_norm %.3f  C_norm %.3f  viol %.3f (avoidable %.3f)  "
                     "OOD %.2f  (%.1f s)", j + 1, len(pol), name, m["r_norm"], m["c_norm"],
                     m["violation_rate"], m["avoidable_violation_rate"], m["ood_nll"],
                     time.time() - t0)
    return methods, paths, avoid


def candidate_stats(graphdefs):
    """``fn(rp, fp, up, cp, eps, s, z0)``, jitted: one seed's refiner ``rp`` at budget ``eps``
    on states ``s`` [n, O] from latents ``z0`` [n, A] (arguments, not constants of the
    program): the mean latent shift, the mean -log pi_unweighted (flow params ``up``) of the
    candidates refined through flow ``fp``, their mean Q_h and Q_r.
    ``graphdefs = (refiner, flow, critics)``."""
    rg, fg, cg = graphdefs

    @jax.jit
    def one(rp, fp, up, cp, eps, s, z0):
        ref, flow, uflow = nnx.merge(rg, rp), nnx.merge(fg, fp), nnx.merge(fg, up)
        z2, aux = refine(ref.g_h, ref.g_r, s, z0, eps / 2, eps / 2)
        a = flow(z2, s)
        qh, qr, _ = critics.q_values(cg, cp, s, a)
        return (jnp.mean(aux["shift_norm"]), -jnp.mean(uflow.log_prob(a, s)), jnp.mean(qh),
                jnp.mean(qr))

    return one


def budget_diagnostics(c, models: Models, n: int = 2048) -> dict:
    """What each budget of the sweep does before selection, on ``n`` dataset states: the mean
    latent shift ||z2 - z0|| of the trained refiner, and the mean -log pi_unweighted of the
    refined candidates a = f(z2; s) (the OOD measure without the selection and without the
    state distribution of a rollout). Lists over the sweep, each averaged over seeds."""
    cg, cstate = models.critics
    fg, fparams = models.flow
    rg, rparams = models.refiner
    k_s, k_z = jax.random.split(jax.random.fold_in(_keys(c)["bounds"], 7))
    obs = models.data["observations"]
    s = obs[jax.random.randint(k_s, (n,), 0, obs.shape[0])]
    z0 = jax.random.normal(k_z, (n, 2), jnp.float32)
    one = candidate_stats((rg, fg, cg))
    names = ("latent_shift", "candidate_ood_nll", "candidate_qh", "candidate_qr")
    eps = jnp.asarray([float(x) for x in c.eps_sweep], jnp.float32)
    # seeds x budgets in one call: vmap over seeds of a vmap over the sweep's refiners
    vals = jax.vmap(jax.vmap(one, in_axes=(0, None, None, None, 0, None, None)),
                    in_axes=(0, 0, 0, 0, None, None, None))(
        jax.tree.map(lambda x: x[:, :len(eps)], rparams), fparams, models.flow_unweighted,
        cstate.params, eps, s, z0)  # each [S, E]
    return {k: np.asarray(v, np.float64).mean(0).tolist() for k, v in zip(names, vals)}


def run(c, workdir: str) -> dict:
    """Runs the experiment of config ``c`` in ``workdir``; returns the results dict."""
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    stage_s = {}
    models = fit(c, workdir, stage_s)
    t0 = time.time()
    margins, calib = calibrate_margin(c, models)
    stage_s["calibration"] = time.time() - t0
    t0 = time.time()
    methods, paths, avoid = evaluate_policies(c, models, policies_of(c, models, margins))
    stage_s["evaluation"] = time.time() - t0
    t0 = time.time()
    j_ours = [float(e) for e in c.eps_sweep].index(float(c.latent_budget))
    rg, rparams = models.refiner
    bnd = bound_metrics(c, models.critics, models.flow, (rg, _eps_slice(rparams, j_ours)),
                        _keys(c)["bounds"])
    stage_s["bounds"] = time.time() - t0
    logging.info("evaluation %.1f s, bounds %.1f s", stage_s["evaluation"], stage_s["bounds"])

    m, claims = report.evaluate(c, models.summary, methods, models.ious, bnd)
    m["eps_sweep"].update(budget_diagnostics(c, models))
    m["stage_s"] = stage_s
    m["selection_margin"] = calib
    m["avoidable_starts"] = float(np.mean(np.asarray(avoid)))
    figures = []
    if distributed.is_primary():
        figures = report.plots(c, workdir, methods, *models.iou_masks, paths, bnd)
    runtime = time.time() - t_start
    m["stage_s"]["total_s"] = runtime
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
