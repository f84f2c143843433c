"""The exact GP log marginal likelihood on a sparse covariance, with a custom VJP (spec
§Method "Model", "Gradient" [R]).

``L(theta) = -1/2 r^T A^{-1} r - 1/2 log|A| - N/2 log(2 pi)`` (eq. L1), ``A = K + V``,
``r = y - m``. One ``solvers.mbcg`` call solves ``A [alpha, u_1..u_t] = [r, z_1..z_t]`` with
``z_l = P^{1/2} r_l`` (Rademacher ``r_l``, Jacobi ``P = diag(A)``); the probe columns' CG
coefficients give the SLQ log-determinant. The gradient reuses the same solves (eq. G1):

    dL/d data_e = 1/2 alpha[row_e] alpha[col_e] - 1/(2t) sum_l u_l[row_e] w_l[col_e],
    w_l = P^{-1} z_l  (E[u_l w_l^T] = A^{-1}),

and for kernel 2's ``A = S + G G^T`` also
``dL/dG = alpha alpha^T G - 1/(2t) sum_l (u_l (w_l^T G) + w_l (u_l^T G))``; the chain rule
to the hyperparameters is ``jax.vjp`` of ``theta -> (data, G)``. The log-determinant
estimate is stochastic but unbiased in expectation; its standard error is returned.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.gp2scale import kernels, solvers
from icml26_jax.gp2scale.neighbors import Pattern
from icml26_jax.gp2scale.sparse_cov import pattern_values, to_bcsr


class SolverConfig(NamedTuple):
    tol: float = 1e-8  # relative residual of every mBCG column
    maxiter: int = 1000
    lanczos_steps: int = 50  # m: tridiagonal size kept per probe


class LoglikAux(NamedTuple):
    alpha: jax.Array  # [N] A^{-1} r
    logdet: jax.Array  # [] SLQ estimate of log|A|
    logdet_se: jax.Array  # [] its standard error
    quad: jax.Array  # [] r^T A^{-1} r
    cg_iters: jax.Array  # [1 + t] iterations per column


def _matmat(data, g, pattern, b):
    out = to_bcsr(data, pattern) @ b
    return out + g @ (g.T @ b)


def _forward(data, g, r, pattern, probes, cfg):
    n = r.shape[0]
    pdiag = data[pattern.diag] + jnp.sum(g * g, axis=1)
    z = jnp.sqrt(pdiag)[:, None] * probes
    # The 1 + t columns are independent solves: sharded over the devices (one per process on
    # CPU: core.mesh.columns_mesh), each running its own CG loop on its columns
    # (core.mesh.map_columns); the results are gathered.
    res = mesh_lib.map_columns(
        lambda data, g, pattern, pdiag, b: solvers.mbcg(
            lambda v: _matmat(data, g, pattern, v), b, pdiag, tol=cfg.tol,
            maxiter=cfg.maxiter, keep=cfg.lanczos_steps),
        jnp.concatenate([r[:, None], z], axis=1), data, g, pattern, pdiag)
    alpha = res.x[:, 0]
    quad = jnp.dot(r, alpha)
    t = solvers.cg_tridiagonals(res.alpha[:, 1:], res.beta[:, 1:], res.iters[1:])
    logdet, se = solvers.slq_logdet(t, jnp.sum(probes * probes, axis=0),
                                    jnp.sum(jnp.log(pdiag)))
    value = -0.5 * quad - 0.5 * logdet - 0.5 * n * math.log(2.0 * math.pi)
    aux = LoglikAux(alpha, logdet, se, quad, res.iters)
    return value, aux, (alpha, res.x[:, 1:], z / pdiag[:, None])


def _grads(res, gl):
    """Eq. G1: cotangents of ``(data, G, r)`` from the forward solves."""
    alpha, u, w, g, pattern = res
    t = u.shape[1]
    rows, cols = pattern.rows, pattern.cols
    g_data = 0.5 * alpha[rows] * alpha[cols] - 0.5 / t * jnp.sum(u[rows] * w[cols], axis=1)
    g_g = (alpha[:, None] * (alpha @ g)[None, :]
           - 0.5 / t * (u @ (w.T @ g) + w @ (u.T @ g)))
    return gl * g_data, gl * g_g, -gl * alpha


_BY_CFG: dict = {}


def _custom_loglik(cfg: SolverConfig):
    """The custom-VJP likelihood of ``(data, G, r)`` for one (hashable, static) config."""
    if cfg in _BY_CFG:
        return _BY_CFG[cfg]

    @jax.custom_vjp
    def f(data, g, r, pattern, probes):
        value, aux, _ = _forward(data, g, r, pattern, probes, cfg)
        return value, aux

    def fwd(data, g, r, pattern, probes):
        value, aux, (alpha, u, w) = _forward(data, g, r, pattern, probes, cfg)
        return (value, aux), (alpha, u, w, g, pattern)

    def bwd(res, cts):
        return (*_grads(res, cts[0]), None, None)

    f.defvjp(fwd, bwd)
    _BY_CFG[cfg] = f
    return f


def log_marglik(kind: str, params, x: jax.Array, y: jax.Array, pattern: Pattern,
                probes: jax.Array, cfg: SolverConfig = SolverConfig(), *,
                mean: jax.Array | float = 0.0, order: int | None = None):
    """``(L, LoglikAux)``: eq. L1 for kernel ``kind`` on the sparse pattern ``pattern``.

    Args:
      kind: ``"wendland"``, ``"bump"`` or ``"risser"``.
      params: the kernel's parameter NamedTuple (differentiable).
      x: ``[N, D]`` inputs (in the pattern's order); y: ``[N]`` targets; mean: constant m.
      pattern: a ``neighbors.Pattern`` covering the current support (passed as an argument
        of the caller's jit, never closed over).
      probes: ``[N, t]`` Rademacher probes (fixed for a whole MCMC chain: common random
        numbers).
      cfg: mBCG tolerance, iteration cap and Lanczos size.
    """
    if x.shape[0] != y.shape[0] or probes.shape[0] != y.shape[0]:
        raise ValueError(f"N mismatch: x has {x.shape[0]} rows, y {y.shape[0]}, probes "
                         f"{probes.shape[0]}")
    if probes.shape[1] < 1:
        raise ValueError("probes must have at least one column")
    data = pattern_values(kind, params, x, pattern, order=order)
    if kind == "bump":
        g = kernels.bump_features(params, x)
    else:
        g = jnp.zeros((x.shape[0], 0), data.dtype)
    return _custom_loglik(SolverConfig(*cfg))(data, g, y - mean, pattern, probes)


def dense_loglik(a: jax.Array, r: jax.Array) -> jax.Array:
    """Eq. L1 by dense Cholesky of ``a [N, N]`` (the reference)."""
    chol = jnp.linalg.cholesky(a)
    v = jax.scipy.linalg.solve_triangular(chol, r, lower=True)
    n = r.shape[0]
    return (-0.5 * jnp.dot(v, v) - jnp.sum(jnp.log(jnp.diag(chol)))
            - 0.5 * n * math.log(2.0 * math.pi))
