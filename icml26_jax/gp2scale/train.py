"""The gp2Scale experiment (spec §Experiment): kernel validity -> exactness against dense ->
SLQ accuracy -> scaling -> camera crop (block adaptive Metropolis, kernel 1) -> synth1d_ns
(Adam, kernels 1 and 2; kernel 3, the Risser kernel, reported) -> claims, results.json and figures.

Multi-host: every likelihood's 1 + t CG columns are sharded over the devices
(``core.mesh.map_columns``, in ``likelihood``: every device on GPU/TPU, one per process on
CPU); the MCMC chain and the Adam runs are sequential in their steps, so every process runs
the same steps; only process 0 writes, and the chain's wall-clock cap is process 0's
decision on every process.

Every phase is resumable: the deterministic phases are cached (``checkpoint.cached``), the
MCMC chain and the Adam runs train in orbax-checkpointed chunks. float64 is required: the
entry script (and the tests) enable ``jax_enable_x64``; ``run`` refuses to start without it.
"""

from __future__ import annotations

import math
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.gp2scale import (baselines, configs, data, kernels, likelihood, mcmc,
                                 neighbors, posterior, scaling, solvers, sparse_cov)

from icml26_jax.gp2scale.fitting import _fields, _log, adam_loop, solver_cfg
from icml26_jax.gp2scale.nonstationary import phase_nonstationary

PAPER = "gp2scale"
IMAGE_PX = 511.0  # camera coordinates are pixel / 511


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


def wendland_loglik(cfg: likelihood.SolverConfig):
    """The jitted kernel-1 likelihood ``(p, x, y, pat, probes) -> (value, aux)`` of the camera
    fit and its evaluation: the data, pattern and probes are arguments, never constants baked
    into the program (``tests/gp2scale/test_constants.py``)."""
    return jax.jit(lambda p, x, y, pat, pr: likelihood.log_marglik(
        "wendland", p, x, y, pat, pr, cfg))


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
        self.fn = wendland_loglik(cfg)
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
        self.cg_iters.append(int(np.max(mesh_lib.to_host(aux.cg_iters))))
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
    val, aux = wendland_loglik(solver_cfg(c))(p, xj, yj, pat, probes)
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


def camera_problem(c):
    """The camera fit's inputs: ``(d, lo, hi, theta0, key, probes)``, the Morton-sorted data
    set, the bounds, the start, the run's key and the chain's fixed probes."""
    d = load_dataset(c)
    perm = neighbors.morton_order(d.x_train)
    d = d._replace(x_train=d.x_train[perm], y_train=d.y_train[perm])
    lo, hi = _bounds(c)
    theta0 = np.clip(np.array([1.0, 5.0 / IMAGE_PX, 5.0 / IMAGE_PX, 0.05]), lo * 1.01, hi * 0.99)
    key = jax.random.key(int(c.seed))
    probes = solvers.rademacher(jax.random.fold_in(key, 1), len(d.y_train), int(c.am_probes))
    return d, lo, hi, theta0, key, probes


def phase_camera(c, workdir: str) -> dict:
    d, lo, hi, theta0, key, probes = camera_problem(c)
    n = len(d.y_train)
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
                # process 0's clock decides: a wall-clock stop must not split the chain
                if distributed.agreed(float(lg["elapsed"]) + (time.time() - t0)
                                      > float(c.am_time_cap_s)):
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

    def loss(u, x, y, pat, pr):  # the data are arguments: never baked into the program
        th = lo_j + (hi_j - lo_j) * jax.nn.sigmoid(u)
        return -likelihood.log_marglik("wendland", _wparams(th), x, y, pat, pr, cfg)[0] / (
            y.shape[0])

    u0 = jnp.asarray(np.log((theta0 - lo) / (hi - theta0)))
    u, _ = adam_loop(c, loss, u0, (xj, yj, pat, probes),
                     os.path.join(workdir, "ckpt", "camera_adam"), "camera_adam",
                     int(c.adam_steps))
    return np.asarray(lo_j + (hi_j - lo_j) * jax.nn.sigmoid(u))


# --------------------------------------------------------------------------- run

def normalise_config(c) -> None:
    from icml26_jax.core.flags import as_tuple

    for k in ("validity_dims", "exact_ns", "scaling_ns", "crop", "seeds"):
        c[k] = as_tuple(c[k], int, name=k)
    for k in ("ls_bounds_px", "sigma2_bounds", "noise_bounds"):
        c[k] = as_tuple(c[k], float, name=k)


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
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    m, stage_s = {}, {}
    _phases(c, workdir, m, stage_s)
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


def _phases(c, workdir: str, m: dict, stage_s: dict) -> None:
    """Every phase in order; fills ``m`` (metrics) and ``stage_s`` (seconds per phase)."""

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
