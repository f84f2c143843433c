"""Timing one exact log-likelihood on the synth2d scaling workload (spec §Experiment (4),
§Benchmark).

``time_loglik(n, impl)`` draws synth2d at ``n`` points (fixed kernel 1, isotropic
``ls = sqrt(30 / (pi n))``: about 30 non-zeros per row, ``sigma2 = 1``, nugget 1e-2), sorts
them by Morton key and times, separately, the pattern (host), the assembly and one
log-likelihood evaluation (solve + SLQ log-det with ``num_probes`` probes); compilation is
timed on its own and never counted in the evaluation time, for every implementation alike.

Implementations on the *same* matrix and probes:
``"jax"`` (BCSR mBCG, the production path), ``"scipy"`` (the same algorithm on
``scipy.sparse.csr_array``), ``"splu"`` (exact sparse LU), ``"dense"`` (Cholesky including
the dense kernel construction), ``"bcoo"`` (only the 33-column mat-mat, BCOO vs BCSR: the
format ablation).
"""

from __future__ import annotations

import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.gp2scale import baselines, data, kernels, likelihood, neighbors, solvers
from icml26_jax.gp2scale import sparse_cov

IMPLS = ("jax", "scipy", "splu", "dense", "bcoo")


def rss_mb() -> float:
    """Peak resident set size of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def workload(n: int, seed: int = 0):
    """``(x [n, 2] Morton-sorted, y [n], WendlandParams)`` of the scaling benchmark."""
    x, y = data.synth2d(n, seed)
    perm = neighbors.morton_order(x)
    ls = data.synth2d_lengthscale(n)
    p = kernels.WendlandParams(jnp.asarray(1.0), jnp.asarray([ls, ls]), jnp.asarray(1e-2))
    return x[perm], y[perm], p


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def time_loglik(n: int, impl: str = "jax", seed: int = 0, *, num_probes: int = 32,
                lanczos_steps: int = 50, tol: float = 1e-8, maxiter: int = 1000,
                method: str = "cells") -> dict:
    """One timed exact log-likelihood at ``n`` points with implementation ``impl``."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    out = {"n": int(n), "impl": impl}
    t0 = time.perf_counter()
    x, y, p = workload(n, seed)
    out["data_s"] = time.perf_counter() - t0
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    probes = solvers.rademacher(jax.random.key(seed), n, num_probes)
    if impl == "dense":
        fn = jax.jit(lambda q, x, y: likelihood.dense_loglik(
            kernels.k_dense("wendland", q, x, x) + q.noise * jnp.eye(x.shape[0], dtype=x.dtype),
            y))
        t0 = time.perf_counter()
        fn = fn.lower(p, xj, yj).compile()
        out["compile_s"] = time.perf_counter() - t0
        val, out["eval_s"] = _timed(fn, p, xj, yj)
        out.update(loglik=float(val), total_s=out["eval_s"], rss_mb=rss_mb())
        return out

    t0 = time.perf_counter()
    pat = neighbors.build_pattern(x, np.asarray(p.ls), capacity="exact", method=method)
    out["pattern_s"] = time.perf_counter() - t0
    out["nnz"] = int(pat.nnz)
    out["nnz_per_row"] = int(pat.nnz) / n
    asm = jax.jit(lambda q, x, pat: sparse_cov.pattern_values("wendland", q, x, pat))
    t0 = time.perf_counter()
    asm_c = asm.lower(p, xj, pat).compile()
    compile_s = time.perf_counter() - t0
    vals, out["assemble_s"] = _timed(asm_c, p, xj, pat)

    if impl == "jax":
        cfg = likelihood.SolverConfig(tol, maxiter, lanczos_steps)
        ll = jax.jit(lambda q, x, y, pat, pr: likelihood.log_marglik("wendland", q, x, y, pat,
                                                                     pr, cfg))
        t0 = time.perf_counter()
        ll_c = ll.lower(p, xj, yj, pat, probes).compile()
        out["compile_s"] = compile_s + time.perf_counter() - t0
        (val, aux), out["eval_s"] = _timed(ll_c, p, xj, yj, pat, probes)
        out.update(loglik=float(val), logdet=float(aux.logdet), logdet_se=float(aux.logdet_se),
                   cg_iters=int(np.max(mesh_lib.to_host(aux.cg_iters))),
                   cg_iters_solve=int(mesh_lib.to_host(aux.cg_iters)[0]))
    elif impl in ("scipy", "splu"):
        out["compile_s"] = compile_s
        csr = sparse_cov.to_scipy(sparse_cov.to_bcsr(vals, pat))
        if impl == "scipy":
            t0 = time.perf_counter()
            r = baselines.scipy_loglik(csr, y, np.asarray(probes), tol=tol, maxiter=maxiter,
                                       lanczos_steps=lanczos_steps)
            out["eval_s"] = time.perf_counter() - t0
            out.update(loglik=float(r["loglik"]), logdet=float(r["logdet"]),
                       logdet_se=float(r["se"]), cg_iters=int(np.max(r["iters"])))
        else:
            t0 = time.perf_counter()
            r = baselines.splu_loglik(csr, y)
            out["eval_s"] = time.perf_counter() - t0
            out.update(loglik=float(r["loglik"]), logdet=float(r["logdet"]))
    else:  # bcoo: the format ablation on one (num_probes + 1)-column mat-mat
        b = jnp.concatenate([yj[:, None], probes], axis=1)
        res = {}
        for name, fn in (("bcsr", baselines.bcsr_matmat), ("bcoo", baselines.bcoo_matmat)):
            f = jax.jit(fn).lower(vals, pat, b).compile()
            _timed(f, vals, pat, b)
            res[name] = min(_timed(f, vals, pat, b)[1] for _ in range(3))
        out["compile_s"] = compile_s
        out.update(matmat_bcsr_s=res["bcsr"], matmat_bcoo_s=res["bcoo"],
                   eval_s=res["bcoo"])
    out["total_s"] = out["pattern_s"] + out["assemble_s"] + out["eval_s"]
    out["rss_mb"] = rss_mb()
    return out


def loglog_slope(ns, ts) -> float:
    """Least-squares slope of log t against log n."""
    ln, lt = np.log(np.asarray(ns, float)), np.log(np.asarray(ts, float))
    return float(np.polyfit(ln, lt, 1)[0])

