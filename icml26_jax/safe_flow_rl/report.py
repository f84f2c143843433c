"""Claims, tables and figures of the SafeFlowRL experiment (spec §Claims, §Experiment).

Every claim is computed from the run's measured metrics: means over the training seeds unless
stated; claims 11 and 12 take the worst seed. The smoke variant evaluates the claims the spec
marks S (1, 11, 12) with the smoke thresholds.
"""

from __future__ import annotations

import math
import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.safe_flow_rl import envs

TRAJ_EPISODES = 8  # episodes drawn per method in trajectories.png
SAFE_BASELINES = ("bc_all", "bc_safe", "bc_lag", "fisor_lite")
TABLE_METRICS = ("r_norm", "c_norm", "violation_rate", "avoidable_violation_rate",
                 "unavoidable_violation_rate", "ood_nll", "nn_action_distance")


def eps_name(eps: float) -> str:
    """The method name of the refiner at budget eps, e.g. ``ours_eps0.5``, ``ours_epsinf``."""
    return "ours_epsinf" if math.isinf(eps) else f"ours_eps{float(eps):g}"


def spearman(x, y) -> float:
    """Spearman's rho with average ranks for ties (inf ranks last)."""
    def ranks(v):
        v = np.asarray(v, np.float64)
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=np.float64)
        for u in np.unique(v):  # average the ranks of ties
            r[v == u] = r[v == u].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def evaluate(c, summary: dict, methods: dict, ious, bnd: dict):
    """(metrics, claims) of a run."""
    smoke = c.variant == "smoke"
    ours = methods[eps_name(float(c.latent_budget))]
    eps_sweep = [float(e) for e in c.eps_sweep]
    sweep = {"eps": eps_sweep,
             **{k: [methods[eps_name(e)][k] for e in eps_sweep]
                for k in ("violation_rate", "r_norm", "c_norm", "ood_nll", "nn_action_distance",
                          "avoidable_violation_rate")}}
    safe = [n for n in SAFE_BASELINES if methods[n]["c_norm"] <= 1.0]
    best_safe = max(safe, key=lambda n: methods[n]["r_norm"]) if safe else "bc_safe"
    m = {"dataset": summary, "methods": methods, "eps_sweep": sweep,
         "feasibility_iou_per_seed": list(ious), "bounds": bnd,
         "best_safe_baseline": best_safe, "safe_baselines": safe}
    claims = [results.at_least("dataset_violation_fraction", summary["violation_fraction"],
                               0.35)]
    if not smoke:
        claims += [
            results.at_least("bc_all_violation_rate", methods["bc_all"]["violation_rate"], 0.30),
            results.at_most("ours_cnorm_mean", ours["c_norm"], 1.0),
            results.at_most("ours_cnorm_worst_seed",
                            max(s["c_norm"] for s in ours["per_seed"]), 1.2),
            results.at_most("ours_avoidable_violation_rate", ours["avoidable_violation_rate"],
                            0.05),
            results.at_least("return_gap_vs_best_safe_baseline",
                             ours["r_norm"] - methods[best_safe]["r_norm"], -0.02),
            results.at_least("return_gain_vs_bc_safe",
                             ours["r_norm"] - methods["bc_safe"]["r_norm"], 0.05),
            results.at_least("ood_budget_spearman", spearman(eps_sweep, sweep["ood_nll"]), 0.8),
        ]
        inf = eps_name(float("inf"))
        claims.append(results.at_least(
            "unbounded_violation_increase",
            methods[inf]["violation_rate"] - ours["violation_rate"] if inf in methods
            else float("nan"), 0.05))
        claims.append(results.at_least("refiner_return_gain_vs_prior",
                                       ours["r_norm"] - methods["prior_only"]["r_norm"], 0.03))
    claims += [results.at_most("kl_invariance_zscore", max(bnd["kl_zscore"]), 4.0),
               results.at_most("w2_bound_ratio", max(bnd["w2_ratio"]), 1.0)]
    if not smoke:
        claims += [
            results.at_least("feasibility_iou", float(np.mean(ious)), 0.8),
            results.at_least("weighted_prior_violation_reduction",
                             methods["prior_only_unweighted"]["violation_rate"]
                             - methods["prior_only"]["violation_rate"], 0.05),
        ]
    return m, claims


def summary(c, m: dict, claims) -> str:
    """The printed report: one row per method, then the claims."""
    rows = []
    for name, x in m["methods"].items():
        rows.append([name] + [f"{x[k]:.3f}" for k in TABLE_METRICS])
    out = results.format_table(
        rows, ["method", "R_norm", "C_norm", "viol", "viol (avoid.)", "viol (unavoid.)",
               "OOD -log pi_u", "NN dist"],
        title=f"PointRobotHazard, {c.num_seeds} seed(s), {c.eval_episodes} episodes each "
              f"(kappa = {c.kappa:g})")
    return out + "\n" + results.claims_table(claims)


def plots(c, workdir: str, methods: dict, learned, truth, paths: dict, bnd: dict) -> list:
    """The four figures of spec §Experiment; returns their paths."""
    p = envs.EnvParams()
    b = p.bound
    out = []

    # feasible_region.png
    fig, ax = plotting.figure(1, 2, size=(3.6, 3.4))
    for a, mask, title in ((ax[0], learned, "learned {V_h <= 0} (seed 0)"),
                           (ax[1], truth, "analytic avoidable set")):
        a.imshow(np.asarray(mask, float), origin="lower", extent=(-b, b, -b, b), cmap="Greens",
                 vmin=0, vmax=1.3)
        _arena(a, p)
        a.set_title(title, fontsize=9)
    out.append(plotting.save(fig, os.path.join(workdir, "feasible_region.png")))

    # eps_sweep.png
    eps = [float(e) for e in c.eps_sweep]
    finite = [e for e in eps if math.isfinite(e)]
    x_inf = (max(finite) * 2 if finite else 1.0)
    xs = [e if math.isfinite(e) else x_inf for e in eps]
    fig, ax = plotting.figure(1, 3, size=(3.2, 2.8))
    for a, key, label, unit in (
            (ax[0], "violation_rate", "violation rate", "fraction of episodes"),
            (ax[1], "r_norm", "R_norm", "normalised return"),
            (ax[2], "ood_nll", "OOD: -log pi_u(a|s)", "-log pi_u(a|s) (nats)")):
        ys = [methods[eps_name(e)][key] for e in eps]
        sd = [methods[eps_name(e)][key + "_sd"] for e in eps]
        a.errorbar(xs, ys, yerr=sd, marker="o", capsize=3, label="ours (refiner; ± sd, seeds)")
        a.axhline(methods["prior_only"][key], color="gray", ls="--", label="prior only")
        a.set_xscale("log")
        a.set_xticks(xs)
        a.set_xticklabels([f"{e:g}" if math.isfinite(e) else "inf" for e in eps], fontsize=7)
        a.set(xlabel="latent budget eps", ylabel=unit)
        a.set_title(label, fontsize=9)
    ax[0].legend(fontsize=7)
    out.append(plotting.save(fig, os.path.join(workdir, "eps_sweep.png")))

    # trajectories.png
    shown = [n for n in (eps_name(float(c.latent_budget)), "fisor_lite", "bc_safe", "bc_all")
             if n in paths]
    fig, ax = plotting.figure(1, len(shown), size=(3.0, 3.0))
    ax = np.atleast_1d(ax)
    for a, name in zip(ax, shown):
        for xy in np.moveaxis(np.asarray(paths[name]), 1, 0):
            a.plot(xy[:, 0], xy[:, 1], lw=0.8)
            a.plot(xy[0, 0], xy[0, 1], "k.", ms=3)
        _arena(a, p)
        a.set_title(f"{name}: viol {methods[name]['violation_rate']:.2f}", fontsize=9)
    out.append(plotting.save(fig, os.path.join(workdir, "trajectories.png")))

    # bound_tightness.png
    fig, ax = plotting.figure(1, 2, size=(3.6, 3.0))
    coup = np.asarray(bnd["w2_coupling"])  # [S, states]
    bound = np.asarray(bnd["w2_bound"])
    for i in range(coup.shape[0]):
        ax[0].scatter(bound[i], coup[i], s=12, label=f"seed {i}")
    lo = float(min(bound.min(), coup.min()) * 0.8)
    hi = float(max(bound.max(), coup.max()) * 1.25)
    ax[0].plot([lo, hi], [lo, hi], "k--", lw=0.8, label="bound (y = x)")
    ax[0].set_xscale("log")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("L^_f * eps")
    ax[0].set_ylabel("(E||f(z2) - f(z0)||^2)^1/2")
    ax[0].set_title("P2: W2 through the flow", fontsize=9)
    ax[0].legend(fontsize=7)
    kl, se = np.asarray(bnd["kl_mc"]), np.asarray(bnd["kl_se"])
    ax[1].errorbar(np.arange(len(kl)), kl, yerr=2 * se, fmt="o", capsize=3,
                   label="MC KL (+-2 SE)")
    ax[1].axhline(bnd["kl_true"], color="k", ls="--", label="||delta||^2 / 2")
    ax[1].set(xlabel="seed", ylabel="KL divergence (nats)")
    ax[1].set_title("P1: KL invariance", fontsize=9)
    ax[1].legend(fontsize=7)
    out.append(plotting.save(fig, os.path.join(workdir, "bound_tightness.png")))
    return out


def _arena(a, p: envs.EnvParams):
    import matplotlib.patches as mpatches
    for cx, cy in p.hazard_centres:
        a.add_patch(mpatches.Circle((cx, cy), p.hazard_radius, color="red", alpha=0.25))
    a.add_patch(mpatches.Circle(p.goal, p.goal_radius, color="gold", alpha=0.6))
    a.set_xlim(-p.bound, p.bound)
    a.set_ylim(-p.bound, p.bound)
    a.set_aspect("equal")
    a.set(xlabel="x position (arena units)", ylabel="y position (arena units)")
