"""The gp2Scale experiment (spec §Experiment): kernel validity -> exactness against dense ->
SLQ accuracy -> scaling -> camera crop (block adaptive Metropolis, kernel 1) -> synth1d_ns
(Adam, kernels 1 and 2; kernel 3, the Risser kernel, reported) -> claims, results.json and figures.

Every phase is resumable: the deterministic phases are cached (``checkpoint.cached``), the
MCMC chain and the Adam runs train in orbax-checkpointed chunks. float64 is required: the
entry script (and the tests) enable ``jax_enable_x64``; ``run`` refuses to start without it.
"""

from __future__ import annotations

import logging
import math
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from icml26_jax.core import checkpoint, results
from icml26_jax.core.optim import promotion_safe
from icml26_jax.gp2scale import (baselines, configs, data, kernels, likelihood, mcmc,
                                 neighbors, posterior, scaling, solvers, sparse_cov)

PAPER = "gp2scale"
IMAGE_PX = 511.0  # camera coordinates are pixel / 511


def _log(msg, *args):
    logging.getLogger("absl").info("gp2scale: " + msg, *args)


def _fields(c, *keys) -> dict:
    return {k: c[k] for k in keys}


def solver_cfg(c, tol=None) -> likelihood.SolverConfig:
    return likelihood.SolverConfig(float(tol or c.cg_tol), int(c.cg_maxiter),
                                   int(c.lanczos_steps))


# --------------------------------------------------------------------------- (1) validity

def phase_validity(c) -> dict:
    """min lambda_min(K) / ||K||_2 per kernel and dimension, and the generalised Wendland
    (l = floor(64 / 2) + 4 = 36) on digits."""
    rng = np.random.default_rng([int(c.seed), 1])
    out = {}
    for kind in kernels.KINDS:
        for dim in c.validity_dims:
            x = jnp.asarray(rng.uniform(0, 1, (int(c.validity_n), int(dim))))
            k = np.asarray(kernels.k_dense(kind, kernels.example_params(kind, int(dim), rng),
                                           x, x))
            ev = np.linalg.eigvalsh(k)
            out[f"{kind}_d{dim}"] = float(ev[0] / ev[-1])
    xd = data.load_digits_inputs()[: int(c.digits_n)]
    ls = float(np.median(np.sqrt(np.sum((xd[:200, None] - xd[None, :200]) ** 2, -1))))
    p = kernels.WendlandParams(jnp.asarray(1.0), jnp.full((xd.shape[1],), ls), jnp.asarray(0.0))
    k = np.asarray(kernels.k_dense("wendland", p, jnp.asarray(xd), jnp.asarray(xd)))
    ev = np.linalg.eigvalsh(k)
    out["wendland_digits"] = float(ev[0] / ev[-1])
    out["digits_density"] = float(np.mean(k != 0))
    out["digits_order"] = kernels.wendland_order(xd.shape[1])
    return out


# --------------------------------------------------------------------------- (2, 3) exactness

def synth2d_problem(n: int, seed: int, ls_mult: float = 1.0):
    """Morton-sorted synth2d with kernel 1 at ``ls_mult`` x the scaling length scale."""
    x, y = data.synth2d(n, seed)
    perm = neighbors.morton_order(x)
    ls = data.synth2d_lengthscale(n) * ls_mult
    p = kernels.WendlandParams(jnp.asarray(1.0), jnp.asarray([ls, ls]), jnp.asarray(1e-2))
    return x[perm], y[perm], p


def _solve(kind, p, x, pat, b, tol, maxiter=5000):
    op = sparse_cov.operator(kind, p, x, pat)
    return solvers.mbcg(op.matmat, b, op.diag(), tol=tol, maxiter=maxiter, keep=1)


def sparse_exact_loglik(kind, p, x: np.ndarray, y: np.ndarray, pat, tol: float) -> dict:
    """Eq. L1 on the sparse matrix: mBCG quadratic form at ``tol`` and the exact ``splu``
    log-determinant of the same (assembled BCSR) matrix."""
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    res = jax.jit(lambda p, x, pat, b: _solve(kind, p, x, pat, b, tol))(p, xj, pat, yj[:, None])
    quad = float(yj @ res.x[:, 0])
    a = sparse_cov.assemble("wendland", p, xj, pat)
    lu = baselines.splu_loglik(sparse_cov.to_scipy(a), y)
    n = len(y)
    return {"loglik": -0.5 * quad - 0.5 * lu["logdet"] - 0.5 * n * math.log(2 * math.pi),
            "quad": quad, "logdet": float(lu["logdet"]), "alpha": res.x[:, 0],
            "cg_iters": int(res.iters[0])}


def phase_exactness(c) -> dict:
    out = {"loglik_rel_err": {}}
    for n in c.exact_ns:
        x, y, p = synth2d_problem(int(n), int(c.seed) + int(n))
        pat = neighbors.build_pattern(x, np.asarray(p.ls))
        sp = sparse_exact_loglik("wendland", p, x, y, pat, float(c.exact_tol))
        dense = baselines.dense_gp("wendland", p, jnp.asarray(x), jnp.asarray(y),
                                   jnp.asarray(x[:1]))
        out["loglik_rel_err"][str(n)] = abs(sp["loglik"] - float(dense.loglik)) / abs(
            float(dense.loglik))
        _log("exactness N=%d: sparse %.10f dense %.10f (nnz/row %.1f)", n, sp["loglik"],
             float(dense.loglik), int(pat.nnz) / int(n))
    # posterior at posterior_n with posterior_test held-out points
    n = int(c.posterior_n)
    x, y, p = synth2d_problem(n + int(c.posterior_test), int(c.seed) + 7)
    rng = np.random.default_rng(int(c.seed) + 8)
    test = np.zeros(len(y), bool)
    test[rng.choice(len(y), int(c.posterior_test), replace=False)] = True
    xtr, ytr, xte = x[~test], y[~test], x[test]
    pat = neighbors.build_pattern(xtr, np.asarray(p.ls))
    sp = sparse_exact_loglik("wendland", p, xtr, ytr, pat, float(c.exact_tol))
    xj = jnp.asarray(xtr)
    mu = posterior.posterior_mean("wendland", p, xj, jnp.asarray(xte), sp["alpha"])
    op = sparse_cov.operator("wendland", p, xj, pat)
    var = posterior.posterior_var("wendland", p, xj, jnp.asarray(xte), op,
                                  tol=float(c.exact_tol))
    dense = baselines.dense_gp("wendland", p, xj, jnp.asarray(ytr), jnp.asarray(xte))
    out["posterior_mean_err"] = float(jnp.max(jnp.abs(mu - dense.mu)))
    out["posterior_var_err"] = float(jnp.max(jnp.abs(var - dense.var)))
    out["posterior_err"] = max(out["posterior_mean_err"], out["posterior_var_err"])
    out["max_loglik_rel_err"] = max(out["loglik_rel_err"].values())
    return out


# --------------------------------------------------------------------------- (4) SLQ

def phase_slq(c) -> dict:
    n = int(c.slq_n)
    x, y, p = synth2d_problem(n, int(c.seed) + 11)
    pat = neighbors.build_pattern(x, np.asarray(p.ls))
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    a = sparse_cov.assemble("wendland", p, xj, pat)
    exact = float(baselines.splu_loglik(sparse_cov.to_scipy(a), y)["logdet"])
    cfg = solver_cfg(c)
    ll = jax.jit(lambda p, x, y, pat, pr: likelihood.log_marglik("wendland", p, x, y, pat, pr,
                                                                 cfg)[1])
    ests, ses = [], []
    for r in range(int(c.slq_repeats)):
        key = jax.random.fold_in(jax.random.key(int(c.seed)), 1000 + r)
        aux = ll(p, xj, yj, pat, solvers.rademacher(key, n, int(c.num_probes)))
        ests.append(float(aux.logdet))
        ses.append(float(aux.logdet_se))
    mean = float(np.mean(ests))
    pooled = float(np.sqrt(np.sum(np.square(ses))) / len(ses))  # SE of the mean
    return {"exact": exact, "estimates": np.asarray(ests), "ses": np.asarray(ses),
            "mean": mean, "pooled_se": pooled, "rel_error": abs(mean - exact) / abs(exact),
            "error_in_se": abs(mean - exact) / pooled, "n": n,
            "single_se_rel": float(np.mean(ses) / abs(exact))}


# --------------------------------------------------------------------------- (5) scaling

def phase_scaling(c) -> dict:
    rows = []
    for n in c.scaling_ns:
        r = scaling.time_loglik(int(n), "jax", int(c.seed), num_probes=int(c.num_probes),
                                lanczos_steps=int(c.lanczos_steps), tol=float(c.cg_tol),
                                maxiter=int(c.cg_maxiter))
        _log("scaling N=%d: pattern %.2f s, assemble %.2f s, loglik %.2f s (compile %.1f s), "
             "%d CG iterations, %.1f nnz/row", n, r["pattern_s"], r["assemble_s"], r["eval_s"],
             r["compile_s"], r["cg_iters"], r["nnz_per_row"])
        rows.append(r)
    ns = [r["n"] for r in rows]
    slope = scaling.loglog_slope(ns, [r["total_s"] for r in rows])
    dense = scaling.time_loglik(int(c.dense_n), "dense", int(c.seed))
    sparse_at = scaling.time_loglik(int(c.dense_n), "jax", int(c.seed),
                                    num_probes=int(c.num_probes),
                                    lanczos_steps=int(c.lanczos_steps), tol=float(c.cg_tol))
    _log("dense Cholesky at N=%d: %.2f s (sparse total %.2f s)", c.dense_n, dense["eval_s"],
         sparse_at["total_s"])
    keys = ("n", "pattern_s", "assemble_s", "eval_s", "compile_s", "total_s", "cg_iters",
            "nnz", "nnz_per_row", "loglik", "logdet_se", "rss_mb")
    return {"rows": {k: np.asarray([r[k] for r in rows]) for k in keys}, "slope": slope,
            "dense": {k: dense[k] for k in ("n", "eval_s", "compile_s", "loglik")},
            "sparse_at_dense_n": {k: sparse_at[k] for k in ("n", "total_s", "loglik")},
            "speedup": dense["eval_s"] / sparse_at["total_s"]}


# --------------------------------------------------------------------------- (6) camera

def _bounds(c):
    lo = np.array([c.sigma2_bounds[0], c.ls_bounds_px[0] / IMAGE_PX, c.ls_bounds_px[0] / IMAGE_PX,
                   c.noise_bounds[0]], np.float64)
    hi = np.array([c.sigma2_bounds[1], c.ls_bounds_px[1] / IMAGE_PX, c.ls_bounds_px[1] / IMAGE_PX,
                   c.noise_bounds[1]], np.float64)
    return lo, hi


def _wparams(theta) -> kernels.WendlandParams:
    theta = jnp.asarray(theta)
    return kernels.WendlandParams(theta[0], theta[1:3], theta[3])


class AdaptiveLoglik:
    """Host log-likelihood of kernel 1 at ``theta = (sigma2, ls1, ls2, noise)``: the pattern
    is rebuilt for each proposal's support (``pattern_mode="adaptive"``, as fvGP reassembles
    the covariance per evaluation) and padded to a power-of-two bucket, so the jitted
    likelihood compiles once per bucket; ``"fixed"`` builds one pattern at the upper bound."""

    def __init__(self, x, y, probes, cfg, mode: str, ls_max):
        self.x, self.y = np.asarray(x), np.asarray(y)
        self.xj, self.yj, self.probes = jnp.asarray(x), jnp.asarray(y), probes
        self.mode = mode
        self.fixed = (neighbors.build_pattern(self.x, ls_max, method="cells")
                      if mode == "fixed" else None)
        self.fn = jax.jit(lambda p, x, y, pat, pr: likelihood.log_marglik(
            "wendland", p, x, y, pat, pr, cfg))
        self.evals = 0
        self.cg_iters = []

    def pattern(self, ls):
        if self.fixed is not None:
            return self.fixed
        # four buckets per octave: at most 19 % padding (the mat-mats dominate) for a few more
        # compilations as the support moves
        return neighbors.build_pattern(self.x, np.asarray(ls), method="cells",
                                       capacity="pow2_4")

    def __call__(self, theta) -> float:
        theta = np.asarray(theta, np.float64)
        val, aux = self.fn(_wparams(theta), self.xj, self.yj, self.pattern(theta[1:3]),
                           self.probes)
        self.evals += 1
        self.cg_iters.append(int(np.max(np.asarray(aux.cg_iters))))
        v = float(val)
        return v if math.isfinite(v) else -math.inf


def load_dataset(c) -> data.GPData:
    if c.dataset == "camera":
        return data.load_camera(tuple(int(v) for v in c.crop), int(c.seed))
    if c.dataset == "volcano":
        return data.load_volcano(int(c.seed))
    return data.load_npy(c.x_path, c.y_path, int(c.seed))


def evaluate_wendland(c, theta, d: data.GPData, probes_key) -> dict:
    """Log-likelihood (t = num_probes), posterior mean / variance and scores at ``theta``."""
    p = _wparams(theta)
    xj, yj = jnp.asarray(d.x_train), jnp.asarray(d.y_train)
    pat = neighbors.build_pattern(d.x_train, np.asarray(theta[1:3]), method="cells")
    probes = solvers.rademacher(probes_key, len(d.y_train), int(c.num_probes))
    val, aux = jax.jit(lambda p, x, y, pat, pr: likelihood.log_marglik(
        "wendland", p, x, y, pat, pr, solver_cfg(c)))(p, xj, yj, pat, probes)
    xs = jnp.asarray(d.x_test)
    mu = posterior.posterior_mean("wendland", p, xj, xs, aux.alpha)
    var = posterior.posterior_var("wendland", p, xj, xs, sparse_cov.operator(
        "wendland", p, xj, pat), tol=1e-8)
    pv = var + p.noise
    yt = jnp.asarray(d.y_test)
    return {"loglik": float(val), "logdet_se": float(aux.logdet_se),
            "rmse": posterior.rmse(mu, yt), "nlpd": posterior.nlpd(mu, pv, yt),
            "crps": posterior.crps_gaussian(mu, pv, yt), "nnz_per_row": int(pat.nnz) / len(yj),
            "mu": np.asarray(mu)}


def phase_camera(c, workdir: str) -> dict:
    d = load_dataset(c)
    perm = neighbors.morton_order(d.x_train)
    d = d._replace(x_train=d.x_train[perm], y_train=d.y_train[perm])
    n = len(d.y_train)
    lo, hi = _bounds(c)
    theta0 = np.clip(np.array([1.0, 5.0 / IMAGE_PX, 5.0 / IMAGE_PX, 0.05]), lo * 1.01, hi * 0.99)
    key = jax.random.key(int(c.seed))
    probes = solvers.rademacher(jax.random.fold_in(key, 1), n, int(c.am_probes))
    out = {"n_train": n, "n_test": len(d.y_test)}
    ll = AdaptiveLoglik(d.x_train, d.y_train, probes, solver_cfg(c), c.pattern_mode, hi[1:3])
    t_start = time.time()
    if c.train == "am":
        logp = mcmc.log_target(ll, lo, hi)
        blocks = ((0, 3), (1, 2))  # {sigma2, noise}, {ls1, ls2}
        state = mcmc.am_init(np.log(theta0), logp, blocks)
        iters = int(c.am_iters)
        logs = {"u": np.full((iters, 4), np.nan), "logp": np.full((iters,), np.nan),
                "accept": np.zeros((iters, len(blocks))), "elapsed": np.zeros(())}
        chain_key = jax.random.fold_in(key, 2)

        def advance(state, lg, start, k):
            t0 = time.time()
            for i in range(start, start + k):
                if float(lg["elapsed"]) + (time.time() - t0) > float(c.am_time_cap_s):
                    break  # wall-clock cap: remaining iterations stay NaN
                state, info = mcmc.am_step(state, jax.random.fold_in(chain_key, i), logp, blocks)
                lg["u"][i] = np.asarray(state.u)
                lg["logp"][i] = float(state.logp)
                lg["accept"][i] = np.asarray(info["accept"], np.float64)
            lg["elapsed"] = np.asarray(float(lg["elapsed"]) + time.time() - t0)
            done = np.isfinite(lg["logp"][start:start + k])
            th = np.exp(lg["u"][start:start + k][done])
            msg = (f"logp {np.nanmean(lg['logp'][start:start + k]):.1f}, ls "
                   f"{np.mean(th[:, 1:3]) * IMAGE_PX:.2f} px" if done.any() else "time cap")
            return state, msg

        fp = checkpoint.config_fingerprint({"stage": "am", **_fields(
            c, "seed", "crop", "dataset", "am_iters", "am_probes", "ls_bounds_px",
            "sigma2_bounds", "noise_bounds", "pattern_mode", "cg_tol", "am_time_cap_s")})
        state, logs = checkpoint.run_chunks(os.path.join(workdir, "ckpt", "am"), fingerprint=fp,
                                            state=state, logs=logs, steps=iters,
                                            chunk=int(c.am_chunk), advance=advance, name="am")
        ok = np.isfinite(logs["logp"])
        u = logs["u"][ok]
        burn = len(u) // 2
        theta = np.exp(u[burn:]).mean(0)
        out.update(trace_u=logs["u"], trace_logp=logs["logp"], accept_rate=np.nanmean(
            logs["accept"][ok], axis=0), iters_done=int(ok.sum()),
            chain_s=float(logs["elapsed"]))
    elif c.train == "adam":
        theta = fit_adam_wendland(c, d, ll, lo, hi, theta0, workdir)
    else:
        theta = theta0
    out["train_s"] = time.time() - t_start
    out["theta"] = theta
    out["ls_px"] = theta[1:3] * IMAGE_PX
    out["evals"] = ll.evals
    out["mean_cg_iters"] = float(np.mean(ll.cg_iters)) if ll.cg_iters else float("nan")
    ev = evaluate_wendland(c, theta, d, jax.random.fold_in(key, 3))
    out["ours"] = {k: v for k, v in ev.items() if k != "mu"}
    pairs = neighbors.grid_neighbor_count((512, 512), out["ls_px"])
    out["full_image_nnz_per_row"] = pairs / 512 ** 2
    out["full_image_density"] = pairs / float(512 ** 4)
    # dense stationary Matern-5/2 on the same split
    t0 = time.time()
    mp = baselines.fit_dense_matern52(jnp.asarray(d.x_train), jnp.asarray(d.y_train),
                                      steps=int(c.matern_steps))
    mu, var = baselines.predict_dense_matern52(mp, jnp.asarray(d.x_train),
                                               jnp.asarray(d.y_train), jnp.asarray(d.x_test))
    pv = var + baselines.matern_noise(mp)
    yt = jnp.asarray(d.y_test)
    out["matern"] = {"rmse": posterior.rmse(mu, yt), "nlpd": posterior.nlpd(mu, pv, yt),
                     "crps": posterior.crps_gaussian(mu, pv, yt), "fit_s": time.time() - t0}
    out["rmse_ratio"] = out["ours"]["rmse"] / out["matern"]["rmse"]
    out["images"] = {"x_test": d.x_test, "y_test": d.y_test, "mu": ev["mu"],
                     "mu_matern": np.asarray(mu)}
    return out


def fit_adam_wendland(c, d, ll, lo, hi, theta0, workdir):
    """Adam (lr ``adam_lr``) on theta = lo + (hi - lo) sigmoid(u) with the custom-VJP
    gradient (fixed pattern at the upper bound)."""
    xj, yj = jnp.asarray(d.x_train), jnp.asarray(d.y_train)
    pat = neighbors.build_pattern(d.x_train, hi[1:3], method="cells", capacity="exact")
    probes = ll.probes
    cfg = solver_cfg(c)
    lo_j, hi_j = jnp.asarray(lo), jnp.asarray(hi)

    def loss(u, pat, pr):
        th = lo_j + (hi_j - lo_j) * jax.nn.sigmoid(u)
        return -likelihood.log_marglik("wendland", _wparams(th), xj, yj, pat, pr, cfg)[0] / len(
            d.y_train)

    u0 = jnp.asarray(np.log((theta0 - lo) / (hi - theta0)))
    u, _ = adam_loop(c, loss, u0, (pat, probes), os.path.join(workdir, "ckpt", "camera_adam"),
                     "camera_adam", int(c.adam_steps))
    return np.asarray(lo_j + (hi_j - lo_j) * jax.nn.sigmoid(u))


def adam_loop(c, loss, u0, args, directory, name, steps, extra_fp=None):
    """``steps`` Adam steps on ``loss(u, *args)`` in checkpointed chunks; returns
    ``(u, losses)``. ``extra_fp``: further settings the run depends on (fingerprinted)."""
    tx = promotion_safe(optax.adam(float(c.adam_lr)))
    step = jax.jit(lambda carry, *a: _adam_step(tx, loss, carry, *a))
    logs = {"loss": np.full((steps,), np.nan)}

    def advance(carry, lg, start, k):
        for i in range(start, start + k):
            carry, lv = step(carry, *args)
            lg["loss"][i] = float(lv)
        return carry, f"loss {lg['loss'][start + k - 1]:.4f}"

    fp = checkpoint.config_fingerprint({"stage": name, "steps": steps, **(extra_fp or {}),
                                        **_fields(c, "seed", "adam_lr", "adam_probes", "ns_n",
                                                  "ns_ls_max", "cg_tol", "crop")})
    (u, _), logs = checkpoint.run_chunks(directory, fingerprint=fp, state=(u0, tx.init(u0)),
                                         logs=logs, steps=steps, chunk=max(1, steps // 3),
                                         advance=advance, name=name)
    return u, logs["loss"]


def _adam_step(tx, loss, carry, *args):
    u, opt = carry
    val, g = jax.value_and_grad(loss)(u, *args)
    g = jax.tree.map(lambda a: jnp.where(jnp.isfinite(a), a, 0.0), g)
    upd, opt = tx.update(g, opt, u)
    return (optax.apply_updates(u, upd), opt), val


# --------------------------------------------------------------------------- (7) synth1d_ns

def _k1_from(u, lo, hi):
    th = lo + (hi - lo) * jax.nn.sigmoid(u)
    return kernels.WendlandParams(th[0], th[1:2], th[2])


def _bump_bounds(c):
    """Kernel 2 bounds (fvGP's code): centres [0, 1], radii [0.01, 0.1], amplitudes
    [0.1, 1], sigma2 [0.1, 10], r0 [0.001, 0.02]; noise as kernel 1."""
    nb_ = 4
    lo = np.concatenate([np.zeros(nb_), np.full(nb_, 0.01), np.full(nb_, 0.1)] * 2
                        + [[0.1, 0.001, c.noise_bounds[0]]])
    hi = np.concatenate([np.ones(nb_), np.full(nb_, 0.1), np.full(nb_, 1.0)] * 2
                        + [[10.0, 0.02, c.noise_bounds[1]]])
    return lo, hi


def _k2_from(u, lo, hi):
    th = lo + (hi - lo) * jax.nn.sigmoid(u)
    one = jnp.ones((4,), th.dtype)

    def grp(o):
        return kernels.BumpParams(th[o:o + 4, None], th[o + 4:o + 8], th[o + 8:o + 12], one)

    return kernels.BumpKernelParams(grp(0), grp(12), th[24], th[25], th[26])


def _k2_init(lo, hi):
    centers_f = np.array([0.125, 0.375, 0.625, 0.875])
    centers_g = centers_f + 0.0625
    th = np.concatenate([centers_f, np.full(4, 0.08), np.full(4, 0.5),
                         centers_g, np.full(4, 0.08), np.full(4, 0.5), [1.0, 0.01, 0.05]])
    th = np.clip(th, lo + 1e-3 * (hi - lo), hi - 1e-3 * (hi - lo))
    return np.log((th - lo) / (hi - th))


# Kernel 3 (Risser) [R]: bump centres and the 4 RBF centres of log sigma(x), log ls(x) fixed
# on a grid (static pattern); everything else learned inside bounds.
K3_GRID = np.array([0.125, 0.375, 0.625, 0.875])
K3_G2_SHIFT = 0.0625  # g_2's centres sit between g_1's
K3_RBF_WIDTH = 0.125
K3_FIELDS = (("log_sigma0", 1), ("sigma_w", 4), ("log_ls0", 1), ("ls_w", 4),
             ("g1_radii", 4), ("g1_amps", 4), ("g1_beta", 4),
             ("g2_radii", 4), ("g2_amps", 4), ("g2_beta", 4), ("s0", 1), ("r0", 1),
             ("noise", 1))


def _risser_bounds(c):
    """Kernel 3 bounds [R]: sigma0 in [0.1, 10] and ls0 in [1e-3, 0.2] (log), RBF weights in
    [-2, 2], bump radii / amplitudes as kernel 2 ([0.01, 0.1], [0.1, 1]), beta in [0.25, 4],
    s0 in [0.01, 10], r0 as kernel 2 ([0.001, 0.02]), noise as kernel 1."""
    b = {"log_sigma0": (np.log(0.1), np.log(10.0)), "sigma_w": (-2.0, 2.0),
         "log_ls0": (np.log(1e-3), np.log(0.2)), "ls_w": (-2.0, 2.0),
         "g1_radii": (0.01, 0.1), "g1_amps": (0.1, 1.0), "g1_beta": (0.25, 4.0),
         "g2_radii": (0.01, 0.1), "g2_amps": (0.1, 1.0), "g2_beta": (0.25, 4.0),
         "s0": (0.01, 10.0), "r0": (0.001, 0.02), "noise": tuple(c.noise_bounds)}
    lo = np.concatenate([np.full(k, b[n][0]) for n, k in K3_FIELDS])
    hi = np.concatenate([np.full(k, b[n][1]) for n, k in K3_FIELDS])
    return lo, hi


def _k3_split(th):
    out, o = {}, 0
    for name, k in K3_FIELDS:
        out[name] = th[o:o + k] if k > 1 else th[o]
        o += k
    return out


def _k3_from(u, lo, hi) -> kernels.RisserParams:
    v = _k3_split(lo + (hi - lo) * jax.nn.sigmoid(u))
    grid = jnp.asarray(K3_GRID)[:, None]

    def grp(j, centres):
        return kernels.BumpParams(centres, v[f"g{j}_radii"], v[f"g{j}_amps"], v[f"g{j}_beta"])

    return kernels.RisserParams(v["log_sigma0"], v["sigma_w"], v["log_ls0"], v["ls_w"], grid,
                                jnp.asarray(K3_RBF_WIDTH), grp(1, grid),
                                grp(2, grid + K3_G2_SHIFT), v["s0"], v["r0"], v["noise"])


def _k3_init(lo, hi):
    init = {"log_sigma0": 0.0, "sigma_w": 0.0, "log_ls0": np.log(0.02), "ls_w": 0.0,
            "g1_radii": 0.08, "g1_amps": 0.5, "g1_beta": 1.0, "g2_radii": 0.08,
            "g2_amps": 0.5, "g2_beta": 1.0, "s0": 1.0, "r0": 0.01, "noise": 0.05}
    th = np.concatenate([np.full(k, init[n]) for n, k in K3_FIELDS])
    th = np.clip(th, lo + 1e-3 * (hi - lo), hi - 1e-3 * (hi - lo))
    return np.log((th - lo) / (hi - th))


def risser_pattern(x: np.ndarray, r0_max: float, radius_max: float, capacity="exact"):
    """Kernel 3's static pattern on 1-D ``x [N, 1]``: every pair within ``r0_max`` (the local
    Wendland term) plus every pair of points under one bump group g_j at the radius upper
    bound (``g_j(x) g_j(x')`` can be non-zero there) — exact for every parameter inside the
    bounds, since C_sparse (hence k) is 0 off these pairs."""
    groups = [np.flatnonzero(np.any(np.abs(x[:, :1] - cen[None]) < radius_max, axis=1))
              for cen in (K3_GRID, K3_GRID + K3_G2_SHIFT)]
    return neighbors.build_pattern(x, r0_max, method="cells", capacity=capacity, groups=groups)


def phase_nonstationary(c, workdir: str) -> dict:
    d, truth = data.synth1d_ns(int(c.seed), n=int(c.ns_n))
    perm = np.argsort(d.x_train[:, 0])
    d = d._replace(x_train=d.x_train[perm], y_train=d.y_train[perm])
    xj, yj = jnp.asarray(d.x_train), jnp.asarray(d.y_train)
    xs, yt = jnp.asarray(d.x_test), jnp.asarray(d.y_test)
    n = len(d.y_train)
    key = jax.random.fold_in(jax.random.key(int(c.seed)), 4)
    probes = solvers.rademacher(key, n, int(c.adam_probes))
    cfg = solver_cfg(c)
    out = {"n_train": n, "n_test": len(d.y_test)}
    gap = np.asarray(d.test_in_gap) if hasattr(d, "test_in_gap") else None
    # kernel 1: same sparsity budget as kernel 2's core (support <= ns_ls_max)
    lo1 = np.array([c.sigma2_bounds[0], 1e-3, c.noise_bounds[0]])
    hi1 = np.array([c.sigma2_bounds[1], float(c.ns_ls_max), c.noise_bounds[1]])
    pat1 = neighbors.build_pattern(d.x_train, float(c.ns_ls_max), method="cells",
                                   capacity="exact")  # one fixed pattern: no padding

    def loss1(u, pat, pr):
        return -likelihood.log_marglik("wendland", _k1_from(u, lo1, hi1), xj, yj, pat, pr,
                                       cfg)[0] / n

    th0 = np.array([1.0, 0.5 * float(c.ns_ls_max), 0.05])
    u1, l1 = adam_loop(c, loss1, jnp.asarray(np.log((th0 - lo1) / (hi1 - th0))),
                       (pat1, probes), os.path.join(workdir, "ckpt", "ns_k1"), "ns_k1",
                       int(c.adam_steps))
    lo2, hi2 = _bump_bounds(c)
    pat2 = neighbors.build_pattern(d.x_train, hi2[25], method="cells", capacity="exact")

    def loss2(u, pat, pr):
        return -likelihood.log_marglik("bump", _k2_from(u, lo2, hi2), xj, yj, pat, pr,
                                       cfg)[0] / n

    u2, l2 = adam_loop(c, loss2, jnp.asarray(_k2_init(lo2, hi2)), (pat2, probes),
                       os.path.join(workdir, "ckpt", "ns_k2"), "ns_k2", int(c.adam_steps))
    # "bump_truth": kernel 2 at the generating parameters (an oracle, not a claim): whether
    # the far-field mechanism is there to be learned at all
    fits = [("wendland", "wendland", _k1_from(u1, lo1, hi1), pat1, l1, xj, yj),
            ("bump", "bump", _k2_from(u2, lo2, hi2), pat2, l2, xj, yj),
            ("bump_truth", "bump", truth, pat2, np.zeros(0), xj, yj)]
    if int(c.ns_k3_steps) > 0:
        # kernel 3 (reported, no claim): ns_k3_n training points, its own probes
        sub = np.sort(np.random.default_rng([int(c.seed), 7]).choice(
            n, min(int(c.ns_k3_n), n), replace=False))
        x3, y3 = jnp.asarray(d.x_train[sub]), jnp.asarray(d.y_train[sub])
        lo3, hi3 = _risser_bounds(c)
        names = [nm for nm, k in K3_FIELDS for _ in range(k)]
        pat3 = risser_pattern(d.x_train[sub], hi3[names.index("r0")],
                              hi3[names.index("g1_radii")])
        probes3 = solvers.rademacher(jax.random.fold_in(key, 3), len(sub), int(c.adam_probes))

        def loss3(u, pat, pr):
            return -likelihood.log_marglik("risser", _k3_from(u, lo3, hi3), x3, y3, pat, pr,
                                           cfg)[0] / len(sub)

        u3, l3 = adam_loop(c, loss3, jnp.asarray(_k3_init(lo3, hi3)), (pat3, probes3),
                           os.path.join(workdir, "ckpt", "ns_k3"), "ns_k3",
                           int(c.ns_k3_steps), extra_fp={"ns_k3_n": int(c.ns_k3_n)})
        fits.append(("risser", "risser", _k3_from(u3, lo3, hi3), pat3, l3, x3, y3))
        out["k3_theta"] = {k: np.asarray(v) for k, v in _k3_split(
            lo3 + (hi3 - lo3) * jax.nn.sigmoid(u3)).items()}
        out["k3_n_train"] = len(sub)
        out["k3_density"] = int(pat3.nnz) / float(len(sub)) ** 2
    for name, kind, params, pat, losses, xt_, yt_ in fits:
        op = sparse_cov.operator(kind, params, xt_, pat)
        alpha = solvers.mbcg(op.matmat, yt_[:, None], op.diag(), tol=1e-10, maxiter=5000,
                             keep=1).x[:, 0]
        mu = posterior.posterior_mean(kind, params, xt_, xs, alpha)
        var = posterior.posterior_var(kind, params, xt_, xs, op, tol=1e-8, maxiter=5000)
        pv = var + params.noise
        r = {"rmse": posterior.rmse(mu, yt), "nlpd": posterior.nlpd(mu, pv, yt),
             "crps": posterior.crps_gaussian(mu, pv, yt), "loss_curve": losses,
             "mu": np.asarray(mu), "sd": np.asarray(jnp.sqrt(pv))}
        if gap is not None and gap.any():
            r["nlpd_gap"] = posterior.nlpd(mu[gap], pv[gap], yt[gap])
            r["nlpd_random"] = posterior.nlpd(mu[~gap], pv[~gap], yt[~gap])
        out[name] = r
        _log("synth1d_ns %s: RMSE %.4f NLPD %.4f", name, r["rmse"], r["nlpd"])
    out["k1_theta"] = np.asarray(lo1 + (hi1 - lo1) * jax.nn.sigmoid(u1))
    out["k2_theta"] = np.asarray(lo2 + (hi2 - lo2) * jax.nn.sigmoid(u2))
    out["nlpd_gain"] = out["wendland"]["nlpd"] - out["bump"]["nlpd"]
    out["oracle_nlpd_gain"] = out["wendland"]["nlpd"] - out["bump_truth"]["nlpd"]
    out["plot"] = {"x_train": d.x_train[:, 0], "y_train": d.y_train, "x_test": d.x_test[:, 0],
                   "y_test": d.y_test}
    return out


# --------------------------------------------------------------------------- run

def normalise_config(c) -> None:
    from icml26_jax.core.flags import as_tuple

    for k in ("validity_dims", "exact_ns", "scaling_ns", "crop", "seeds"):
        c[k] = as_tuple(c[k], int)
    for k in ("ls_bounds_px", "sigma2_bounds", "noise_bounds"):
        c[k] = as_tuple(c[k], float)


def run(c: ml_collections.ConfigDict, workdir: str) -> dict:
    """Every phase -> claims, results.json and figures."""
    from icml26_jax.core import distributed
    from icml26_jax.gp2scale import report

    if not jax.config.jax_enable_x64:
        raise ValueError("gp2Scale needs float64: enable jax_enable_x64 before run() (the entry "
                         "script does)")
    normalise_config(c)
    configs.validate(c)
    t_start = time.time()
    os.makedirs(workdir, exist_ok=True)
    m, stage_s = {}, {}

    def stage(name, fn, *keys):
        t0 = time.time()
        fp = checkpoint.config_fingerprint({"stage": name, **_fields(c, "seed", *keys)})
        m[name] = checkpoint.cached(os.path.join(workdir, "ckpt", name), fingerprint=fp,
                                    compute=fn, name=name)
        stage_s[name] = time.time() - t0

    stage("validity", lambda: phase_validity(c), "validity_n", "validity_dims", "digits_n")
    stage("exactness", lambda: phase_exactness(c), "exact_ns", "exact_tol", "posterior_n",
          "posterior_test")
    stage("slq", lambda: phase_slq(c), "slq_n", "slq_repeats", "num_probes", "lanczos_steps",
          "cg_tol")
    stage("scaling", lambda: phase_scaling(c), "scaling_ns", "dense_n", "num_probes",
          "lanczos_steps", "cg_tol")
    t0 = time.time()
    m["camera"] = phase_camera(c, workdir)
    stage_s["camera"] = time.time() - t0
    t0 = time.time()
    m["nonstationary"] = phase_nonstationary(c, workdir)
    stage_s["nonstationary"] = time.time() - t0
    m["stage_s"] = stage_s
    cl = report.claims(m)
    figures = []
    if distributed.is_primary():
        figures = report.figures(workdir, m)
    metrics_out = report.strip_arrays(m)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=metrics_out, claims=cl, runtime_s=runtime,
                                 figures=figures)
    if distributed.is_primary():
        print(results.claims_table(cl))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": metrics_out,
            "claims": [x.to_dict() for x in cl], "runtime_s": runtime, "results_path": path}
