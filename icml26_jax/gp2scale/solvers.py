"""Batched solves and stochastic log-determinants (spec §Method "Solve and log-det"; mBCG
after Gardner et al. 2018 [R]).

``mbcg`` runs Jacobi-preconditioned conjugate gradients on every column of ``B`` at once
(one sparse mat-mat per iteration), freezing columns as they converge. The CG coefficients
of probe column ``l`` define the Lanczos tridiagonal of ``P^{-1/2} A P^{-1/2}`` started at
``r_l / ||r_l||`` (eq. S3), from which stochastic Lanczos quadrature (SLQ) estimates
``log|A| = sum_i log P_ii + E_r[r^T log(P^{-1/2} A P^{-1/2}) r]`` (eq. S4). No
re-orthogonalisation is stored: the tridiagonals come for free from CG.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp


class MBCGResult(NamedTuple):
    x: jax.Array  # [N, c] solutions
    alpha: jax.Array  # [m, c] CG step sizes of the first m iterations (0 once frozen)
    beta: jax.Array  # [m, c]
    iters: jax.Array  # [c] iterations until each column converged (or maxiter)
    relres: jax.Array  # [c] final ||b - A x|| / ||b|| (recursive residual)


def rademacher(key: jax.Array, n: int, t: int, dtype=jnp.float64) -> jax.Array:
    """``[n, t]`` independent +-1 probes."""
    return jax.random.rademacher(key, (n, t), dtype=dtype)


def mbcg(matmat: Callable[[jax.Array], jax.Array], b: jax.Array, pdiag: jax.Array, *,
         tol: float = 1e-8, maxiter: int = 1000, keep: int = 50) -> MBCGResult:
    """Preconditioned CG (``P = diag(pdiag)``) on ``A X = B`` for all columns of ``b [N, c]``.

    Every column stops at ``||r|| <= tol ||b||`` (its ``alpha`` and ``beta`` are masked to 0
    afterwards, so frozen columns never divide 0 by 0); the loop ends when all have or after
    ``maxiter`` iterations. The first ``keep`` iterations' coefficients are returned for the
    Lanczos tridiagonals.
    """
    n, c = b.shape
    dtype = b.dtype
    pinv = (1.0 / pdiag)[:, None]
    bnorm = jnp.linalg.norm(b, axis=0)
    thresh = tol * jnp.where(bnorm > 0, bnorm, 1.0)
    x = jnp.zeros_like(b)
    r = b
    z = pinv * r
    p = z
    rz = jnp.sum(r * z, axis=0)
    active = jnp.linalg.norm(r, axis=0) > thresh
    # [keep, c] buffers built from a per-column array so that they inherit the columns'
    # sharding (RHS columns may be sharded over a DATA mesh at the jit boundary)
    alphas = jnp.zeros((keep, 1), dtype) + jnp.zeros_like(bnorm)[None, :]
    betas = alphas
    iters = jnp.zeros_like(bnorm, dtype=jnp.int32)

    def cond(state):
        j, _, _, _, _, _, active, _, _, _ = state
        return (j < maxiter) & jnp.any(active)

    def body(state):
        j, x, r, z, p, rz, active, alphas, betas, iters = state
        q = matmat(p)
        pq = jnp.sum(p * q, axis=0)
        alpha = jnp.where(active, rz / jnp.where(active, pq, 1.0), 0.0)
        x = x + alpha * p
        r = r - alpha * q
        z = pinv * r
        rz_new = jnp.sum(r * z, axis=0)
        beta = jnp.where(active, rz_new / jnp.where(active, rz, 1.0), 0.0)
        p = jnp.where(active, z + beta * p, p)
        iters = iters + active.astype(jnp.int32)
        in_keep = j < keep
        jj = jnp.minimum(j, keep - 1)
        alphas = jnp.where(in_keep, alphas.at[jj].set(alpha), alphas)
        betas = jnp.where(in_keep, betas.at[jj].set(beta), betas)
        rz = jnp.where(active, rz_new, rz)
        active = active & (jnp.linalg.norm(r, axis=0) > thresh)
        return j + 1, x, r, z, p, rz, active, alphas, betas, iters

    state = (jnp.int32(0), x, r, z, p, rz, active, alphas, betas, iters)
    _, x, r, _, _, _, _, alphas, betas, iters = jax.lax.while_loop(cond, body, state)
    relres = jnp.linalg.norm(r, axis=0) / jnp.where(bnorm > 0, bnorm, 1.0)
    return MBCGResult(x, alphas, betas, iters, relres)


def cg_tridiagonals(alpha: jax.Array, beta: jax.Array, iters: jax.Array) -> jax.Array:
    """Lanczos tridiagonals ``[c, m, m]`` from CG coefficients ``alpha, beta [m, c]`` (eq. S3):
    ``T_jj = 1 / alpha_j + beta_{j-1} / alpha_{j-1}``, ``T_{j,j+1} = sqrt(beta_j) / alpha_j``.
    A column that converged after ``k < m`` iterations is padded with decoupled unit diagonal
    entries (eigenvalue 1 with zero first-row weight: they add log 1 = 0)."""
    m, c = alpha.shape
    j = jnp.arange(m, dtype=jnp.int32)[:, None]
    k = jnp.minimum(iters, m)[None, :]
    valid = j < k  # [m, c]
    a = jnp.where(valid, alpha, 1.0)
    prev = jnp.concatenate([jnp.zeros((1, c), alpha.dtype), beta[:-1] / a[:-1]], axis=0)
    diag = jnp.where(valid, 1.0 / a + prev, 1.0)
    off_valid = (j + 1) < k  # couples j and j + 1 only if both are real iterations
    off = jnp.where(off_valid, jnp.sqrt(jnp.maximum(beta, 0.0)) / a, 0.0)[:-1]  # [m - 1, c]
    t = jax.vmap(jnp.diag, in_axes=1)(diag)
    t = t + jax.vmap(lambda o: jnp.diag(o, 1) + jnp.diag(o, -1), in_axes=1)(off)
    return t


def slq_terms(t: jax.Array, sqnorms: jax.Array) -> jax.Array:
    """``[c]`` per-probe quadratures ``||r_l||^2 sum_k tau_lk^2 log theta_lk`` (eq. S4) from
    tridiagonals ``t [c, m, m]``; ``theta, tau`` are eigenvalues and first-row eigenvector
    entries of ``T_l``."""
    # One LAPACK call per tridiagonal (lax.map), not one batched call: jaxlib splits a
    # batched eigh over the CPU thread pool and waits for the pieces, and with the program
    # replicated on every simulated CPU device (core.mesh.map_columns) those waits took
    # every pool thread: a deadlock. An unbatched call runs on its own thread.
    theta, vecs = jax.lax.map(jnp.linalg.eigh, t)
    tau2 = vecs[:, 0, :] ** 2
    logs = jnp.log(jnp.maximum(theta, jnp.finfo(t.dtype).tiny))
    return sqnorms * jnp.sum(tau2 * logs, axis=-1)


def slq_logdet(t: jax.Array, sqnorms: jax.Array, logdet_p: jax.Array):
    """``(estimate, standard error)`` of ``log|A| = logdet_p + mean_l slq_l``; the SE is
    ``std_l(slq_l) / sqrt(num_probes)``."""
    terms = slq_terms(t, sqnorms)
    n = terms.shape[0]
    se = jnp.std(terms, ddof=1) / jnp.sqrt(n) if n > 1 else jnp.zeros((), terms.dtype)
    return logdet_p + jnp.mean(terms), se
