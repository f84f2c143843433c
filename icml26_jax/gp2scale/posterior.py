"""Exact posterior on the sparse covariance (spec §Method "Model") and predictive scores.

``mu(x*) = m + k*^T alpha`` and ``sigma^2(x*) = k(x*, x*) - k*^T A^{-1} k*`` (eq. P1, P2). The
cross-covariance ``k*`` is sparse too: only training points within the support of a test
point contribute (``neighbors.cross_pattern``), plus, for kernel 2, the rank-2 bump part.
Variances solve ``A^{-1} k*`` for ``chunk`` test points at a time with one mBCG call.
Kernel 3 (``"risser"``) uses dense cross-covariance rows (its far-field pattern is only
materialised for the training set; it runs at N <= a few thousand).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.gp2scale import kernels, neighbors, solvers


@functools.partial(jax.jit, static_argnames=("kind", "order"))
def _cross_local(kind, params, xs, x, rows, cols, order=None):
    """Local (compact-support) cross values for test-train pairs ``(rows, cols)``."""
    both = jnp.concatenate([xs, x], axis=0)
    return kernels.pair_values(kind, params, both, rows, cols + xs.shape[0], order=order)


def cross_matrix_dense(kind, params, xs, x, *, order=None) -> jax.Array:
    """``k(xs, x) [Ns, N]`` built from the sparse cross pattern (exact: every pair beyond the
    support is 0), the rank-2 bump part added for kernel 2; dense rows for kernel 3."""
    if kind == "risser":
        return kernels.k_dense(kind, params, xs, x)
    rows, cols = neighbors.cross_pattern(np.asarray(xs), np.asarray(x),
                                         np.asarray(kernels.support(kind, params)))
    vals = _cross_local(kind, params, xs, x, jnp.asarray(rows), jnp.asarray(cols), order=order)
    return _scatter_cross(kind, params, xs, x, vals, jnp.asarray(rows), jnp.asarray(cols))


@functools.partial(jax.jit, static_argnames=("kind",))
def _scatter_cross(kind, params, xs, x, vals, rows, cols):
    k = jnp.zeros((xs.shape[0], x.shape[0]), vals.dtype).at[rows, cols].add(vals)
    if kind == "bump":
        k = k + kernels.bump_features(params, xs) @ kernels.bump_features(params, x).T
    return k


@functools.partial(jax.jit, static_argnames=("kind",))
def prior_var(kind, params, xs) -> jax.Array:
    """``k(x*, x*) [Ns]`` (noise excluded)."""
    if kind == "wendland":
        return jnp.broadcast_to(params.sigma2, (xs.shape[0],))
    if kind == "bump":
        return params.sigma2 + jnp.sum(kernels.bump_features(params, xs) ** 2, axis=1)
    idx = jnp.arange(xs.shape[0])
    return kernels.pair_values(kind, params, xs, idx, idx)


def posterior_mean(kind, params, x, xs, alpha, *, mean=0.0, order=None) -> jax.Array:
    """``[Ns]`` eq. P1 given ``alpha = A^{-1} (y - m)`` (sparse: a segment sum over the cross
    pattern, never an ``[Ns, N]`` matrix, for kernels 1 and 2)."""
    if kind == "risser":
        return mean + cross_matrix_dense(kind, params, xs, x) @ alpha
    rows, cols = neighbors.cross_pattern(np.asarray(xs), np.asarray(x),
                                         np.asarray(kernels.support(kind, params)))
    vals = _cross_local(kind, params, xs, x, jnp.asarray(rows), jnp.asarray(cols), order=order)
    return _mean_from_cross(kind, params, xs, x, alpha, vals, jnp.asarray(rows),
                            jnp.asarray(cols), mean)


@functools.partial(jax.jit, static_argnames=("kind",))
def _mean_from_cross(kind, params, xs, x, alpha, vals, rows, cols, mean):
    mu = jax.ops.segment_sum(vals * alpha[cols], rows, num_segments=xs.shape[0])
    if kind == "bump":
        mu = mu + kernels.bump_features(params, xs) @ (kernels.bump_features(params, x).T @ alpha)
    return mean + mu


def posterior_var(kind, params, x, xs, op, *, chunk: int = 256, tol: float = 1e-10,
                  maxiter: int = 2000, order=None) -> jax.Array:
    """``[Ns]`` eq. P2 (latent f, noise excluded); ``op`` is the training covariance operator
    (``sparse_cov.operator``). ``A^{-1} k*`` is solved for ``chunk`` test points at a time by
    one jitted mBCG call (the last chunk zero-padded: one compilation), its columns sharded
    over the devices (``core.mesh.map_columns``)."""
    ks_all = np.asarray(cross_matrix_dense(kind, params, xs, x, order=order))  # [Ns, N]
    solve = _solver(float(tol), int(maxiter))
    out = []
    for s in range(0, ks_all.shape[0], chunk):
        ks = ks_all[s:s + chunk]
        pad = np.zeros((chunk, ks.shape[1]), ks.dtype)
        pad[:len(ks)] = ks
        sol = mesh_lib.to_host(solve(op, jnp.asarray(pad.T)))[:, :len(ks)]
        out.append(np.sum(ks.T * sol, axis=0))
    return prior_var(kind, params, xs) - jnp.asarray(np.concatenate(out))


_SOLVERS: dict = {}


def _solver(tol: float, maxiter: int):
    key = (tol, maxiter)
    if key not in _SOLVERS:
        # The chunk's columns are independent solves: sharded over the devices.
        _SOLVERS[key] = jax.jit(lambda op, b: mesh_lib.map_columns(
            lambda op, b: solvers.mbcg(op.matmat, b, op.diag(), tol=tol, maxiter=maxiter,
                                       keep=1).x, b, op))
    return _SOLVERS[key]


def rmse(mu, y) -> float:
    return float(_rmse(mu, y))


def nlpd(mu, var, y) -> float:
    """Mean negative log predictive density of ``y`` under ``N(mu, var)`` (var includes the
    noise)."""
    return float(_nlpd(mu, var, y))


def crps_gaussian(mu, var, y) -> float:
    """Mean closed-form CRPS of ``N(mu, var)`` at ``y`` (Gneiting & Raftery 2007)."""
    return float(_crps(mu, var, y))


@jax.jit
def _rmse(mu, y):
    return jnp.sqrt(jnp.mean((mu - y) ** 2))


@jax.jit
def _nlpd(mu, var, y):
    var = jnp.maximum(var, 1e-12)
    return jnp.mean(0.5 * jnp.log(2 * math.pi * var) + 0.5 * (y - mu) ** 2 / var)


@jax.jit
def _crps(mu, var, y):
    sd = jnp.sqrt(jnp.maximum(var, 1e-12))
    z = (y - mu) / sd
    pdf = jnp.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + jax.scipy.special.erf(z / math.sqrt(2)))
    return jnp.mean(sd * (z * (2 * cdf - 1) + 2 * pdf - 1 / math.sqrt(math.pi)))
