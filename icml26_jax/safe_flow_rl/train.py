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

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.safe_flow_rl import (baselines, bounds, configs, data as data_lib, envs,
                                     evaluate, policies, report, stages)

PAPER = "safe_flow_rl"
KL_STATES, KL_SAMPLES, KL_DELTA = 8, 10_000, 0.5  # claim 11
W2_STATES, W2_SAMPLES, LIP_POINTS = 8, 2048, 512  # claim 12


def _eps(x) -> float:
    return float("inf") if str(x).strip().lower() in ("inf", "infinity") else float(x)


def normalise_config(c) -> None:
    """Flag strings to their types (``--config.eps_sweep=0.1,0.5,inf``, ``--config.seeds=0,1``)."""
    from icml26_jax.core.flags import as_tuple
    c.eps_sweep = as_tuple(c.eps_sweep, _eps)
    c.seeds = as_tuple(c.seeds, int)
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
    if not float(c.kappa) > 0:
        raise ValueError(f"config.kappa must be > 0, got {c.kappa!r}")
    for name in ("dataset_size", "num_seeds", "hidden", "batch_size", "critic_steps",
                 "flow_steps", "refiner_steps", "actor_steps", "chunk", "num_candidates",
                 "eval_episodes", "n_coupling"):
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
        ds = data_lib.load_dsrl(c.data_path)
        return ds, {"path": c.data_path, "cached": True, "seconds": 0.0}
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
    out = {"kl_zscore": [], "kl_mc": [], "kl_se": [], "w2_ratio": [], "w2_coupling": [],
           "lipschitz": [], "w2_bound": []}

    @jax.jit
    def kl_one(fp, s, k):
        flow_m = nnx.merge(fg, fp)
        kd, km = jax.random.split(k)
        d = jax.random.normal(kd, (A,), jnp.float32)
        delta = KL_DELTA * d / jnp.linalg.norm(d)
        return (bounds.mc_kl_through_flow(flow_m, s, delta, km, KL_SAMPLES),
                bounds.mc_kl_through_flow(flow_m, s, delta, km, KL_SAMPLES, space="action"))

    @jax.jit
    def w2_one(fp, rp, s, k):
        flow_m, r = nnx.merge(fg, fp), nnx.merge(rg, rp)
        k0, kb, kt = jax.random.split(k, 3)
        z0 = jax.random.normal(k0, (W2_SAMPLES, A), jnp.float32)
        sb = jnp.broadcast_to(s, (W2_SAMPLES,) + s.shape)
        from icml26_jax.safe_flow_rl.refiner import refine
        z2, _ = refine(r.g_h, r.g_r, sb, z0, eps / 2, eps / 2)
        coupling = bounds.coupling_w2(flow_m, s, z0, z2)
        ball = bounds.latent_ball(kb, LIP_POINTS, A, 3.0 + eps)
        t = jax.random.uniform(kt, (LIP_POINTS, 1), jnp.float32)
        seg = z0[:LIP_POINTS] + t * (z2[:LIP_POINTS] - z0[:LIP_POINTS])
        lip, _ = bounds.lipschitz_estimate(flow_m, s, jnp.concatenate([ball, seg, z0[:64],
                                                                         z2[:64]]))
        return coupling, lip

    for i in range(S):
        fp, rp = _seed(fparams, i), _seed(rparams, i)
        per_state = [kl_one(fp, states[j], jax.random.fold_in(jax.random.fold_in(kk, i), j))
                     for j in range(KL_STATES)]
        for tag, which in (("", 0), ("_action_space", 1)):
            est = np.array([float(r[which][0]) for r in per_state])
            se = np.array([float(r[which][1]) for r in per_state])
            pooled, pooled_se = float(est.mean()), float(np.sqrt(np.sum(se ** 2)) / KL_STATES)
            out.setdefault("kl_mc" + tag, []).append(pooled)
            out.setdefault("kl_se" + tag, []).append(pooled_se)
            out.setdefault("kl_zscore" + tag, []).append(abs(pooled - KL_DELTA ** 2 / 2)
                                                         / pooled_se)
        ratios, coup, lips = [], [], []
        for j in range(W2_STATES):
            cw, lip = w2_one(fp, rp, states[j], jax.random.fold_in(jax.random.fold_in(kw, i), j))
            coup.append(float(cw))
            lips.append(float(lip))
            ratios.append(float(cw) / (float(lip) * eps) if eps > 0 else 0.0)
        out["w2_ratio"].append(float(np.max(ratios)))
        out["w2_coupling"].append(coup)
        out["lipschitz"].append(lips)
        out["w2_bound"].append([l_ * eps for l_ in lips])
    out["kl_true"] = KL_DELTA ** 2 / 2
    out["eps"] = eps
    return out


def run(c, workdir: str) -> dict:
    """Runs the experiment of config ``c`` in ``workdir``; returns the results dict."""
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    os.makedirs(workdir, exist_ok=True)
    ck = os.path.join(workdir, "checkpoints")
    fp = checkpoint.config_fingerprint(c)
    stage_s = {}
    keys = dict(zip(("critics", "flow", "flow_u", "refiner", "refiner_u", "actors", "eval",
                     "bounds", "nn"), jax.random.split(jax.random.key(int(c.seed)), 9)))
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

    # 4. refiners: the eps sweep on the weighted prior, latent_budget on the unweighted one
    eps_sweep = tuple(float(e) for e in c.eps_sweep)
    rg, rparams, _ = stages.refiner_stage(c, data, eps_sweep, (cg, cstate), (fg, fparams),
                                          keys["refiner"], f"{ck}/refiner", fp)
    _, ruparams, _ = stages.refiner_stage(c, data, (float(c.latent_budget),), (cg, cstate),
                                          (fg, uparams), keys["refiner_u"], f"{ck}/refiner_u",
                                          fp)
    timed("refiners")

    # 5. baselines
    actors = {}
    safe_idx = stages.safe_episode_indices(ds)
    for j, kind in enumerate(baselines.ACTORS):
        actors[kind] = stages.actor_stage(
            c, kind, data, jax.random.fold_in(keys["actors"], j), f"{ck}/{kind}", fp,
            crit=(cg, cstate), weights=weights, safe_idx=safe_idx)[:2]
    timed("baselines")

    # 6. evaluation: every policy from the same starts
    starts, avoid = evaluate.eval_starts(keys["eval"], int(c.eval_episodes), env_params)
    N = int(c.num_candidates)
    pol = {}
    for j, e in enumerate(eps_sweep):
        pol[report.eps_name(e)] = (policies.refined_policy(fg, rg, cg, N, e),
                                   (_eps_slice(rparams, j), fparams, cstate.params))
    j_ours = eps_sweep.index(float(c.latent_budget))
    pol["ours_deterministic"] = (
        policies.refined_policy(fg, rg, cg, N, float(c.latent_budget), deterministic=True),
        (_eps_slice(rparams, j_ours), fparams, cstate.params))
    pol["unweighted_prior_refiner"] = (
        policies.refined_policy(fg, rg, cg, N, float(c.latent_budget)),
        (_eps_slice(ruparams, 0), uparams, cstate.params))
    pol["prior_only"] = (baselines.prior_only(fg, cg, N), (fparams, cstate.params))
    pol["prior_only_unweighted"] = (baselines.prior_only(fg, cg, N), (uparams, cstate.params))
    for kind in ("bc_all", "bc_safe"):
        pol[kind] = (baselines.bc_all(actors[kind][0]), actors[kind][1])
    pol["bc_lag"] = (baselines.bc_lag(actors["bc_lag"][0]), actors["bc_lag"][1])
    pol["fisor_lite"] = (baselines.fisor_lite(actors["fisor_lite"][0], cg, N),
                         (actors["fisor_lite"][1], cstate.params))
    methods, paths = {}, {}
    r_min, r_max = summary["r_min"], summary["r_max"]
    ds_pair = (data["observations"], data["actions"])
    for j, (name, (act, params)) in enumerate(pol.items()):
        t0 = time.time()
        roll = evaluate.rollout_seeds(act, params, jax.random.fold_in(keys["eval"], 1000 + j),
                                      starts, env_params)
        methods[name] = evaluate.policy_metrics(
            roll, avoid, r_min, r_max, float(c.kappa), unweighted_flow=(fg, uparams),
            dataset=ds_pair, key=jax.random.fold_in(keys["nn"], j))
        paths[name] = np.asarray(roll["xy"][0, :, :report.TRAJ_EPISODES])
        m = methods[name]
        logging.info("[%d/%d] %-26s R_norm %.3f  C_norm %.3f  viol %.3f (avoidable %.3f)  "
                     "OOD %.2f  (%.1f s)", j + 1, len(pol), name, m["r_norm"], m["c_norm"],
                     m["violation_rate"], m["avoidable_violation_rate"], m["ood_nll"],
                     time.time() - t0)
    timed("evaluation")

    # 7. bounds
    j_b = j_ours
    bnd = bound_metrics(c, (cg, cstate), (fg, fparams), (rg, _eps_slice(rparams, j_b)),
                        keys["bounds"])
    timed("bounds")

    m, claims = report.evaluate(c, summary, methods, ious, bnd)
    m["stage_s"] = stage_s
    m["avoidable_starts"] = float(np.mean(np.asarray(avoid)))
    figures = []
    if distributed.is_primary():
        figures = report.plots(c, workdir, methods, learned, truth, paths, bnd)
    runtime = time.time() - t_start
    m["stage_s"]["total_s"] = runtime
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
