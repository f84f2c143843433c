"""gp2Scale baselines (spec §Baselines and peers): references, never the production path.

* :func:`dense_gp`: float64 dense Cholesky of ``k_dense + noise I`` with the *same* kernel code
  (the exactness reference up to N ~ 12 000, and the "where it fits" timing row).
* :func:`fit_dense_matern52` / :func:`predict_dense_matern52`: an exact stationary ARD
  Matérn-5/2 GP fitted by ``optax.lbfgs`` on the dense log marginal likelihood.
* :func:`scipy_mbcg` / :func:`scipy_loglik`: the algorithm of ``solvers.mbcg`` and
  ``likelihood.log_marglik`` step for step in numpy, with ``scipy.sparse.csr_array`` mat-mats
  (same CSR data, same probes: the benchmark's "is JAX as fast as scipy" row).
* :func:`splu_loglik`: ``scipy.sparse.linalg.splu`` (COLAMD); ``log|A| = sum log|U_ii|`` —
  fvGP's small-N default and our exact log-determinant reference.
* :func:`bcsr_matmat` / :func:`bcoo_matmat`: the sparse-format ablation. Pure functions: the
  caller jits them with the data and pattern as *arguments* (a closed-over pattern is
  constant-folded by XLA).

All log-likelihoods are eq. L1, ``L = -1/2 r^T A^{-1} r - 1/2 log|A| - N/2 log(2 pi)``.
float64 is the caller's business (enabled by the entry script or the test, never here).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
import scipy.sparse as sp
from jax.experimental import sparse

from icml26_jax.core.optim import promotion_safe
from icml26_jax.gp2scale import kernels, likelihood, solvers
from icml26_jax.gp2scale.neighbors import Pattern

LOG2PI = math.log(2.0 * math.pi)


def _check_rows(name: str, arr, n: int, ndim: int, what: str) -> None:
    shape = tuple(np.shape(arr))
    if len(shape) != ndim or shape[0] != n:
        raise ValueError(f"{name} must be {what} with N={n} rows, got shape {shape}")


def _check_square(name: str, a) -> int:
    shape = tuple(a.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{name} must be a square [N, N] matrix, got shape {shape}")
    return int(shape[0])


# ------------------------------------------------------------------------------- dense GP

class DenseGP(NamedTuple):
    loglik: jax.Array  # [] eq. L1
    alpha: jax.Array  # [N] A^{-1} (y - m)
    mu: jax.Array  # [Ns] posterior mean at xs
    var: jax.Array  # [Ns] latent posterior variance at xs (noise excluded)


def dense_gp(kind: str, params, x: jax.Array, y: jax.Array, xs: jax.Array, *,
             mean: jax.Array | float = 0.0) -> DenseGP:
    """Exact GP by dense Cholesky of ``A = k_dense(x, x) + noise I`` (reference, N <~ 12 000).

    ``mu = m + k_*^T A^{-1} r`` and ``var = k(x_*, x_*) - k_*^T A^{-1} k_*`` (spec §Method
    "Model"), with the same ``kernels.k_dense`` as the sparse path, so sparse and dense agree
    to rounding. Memory: two ``[N, N]`` float64 arrays (2.3 GB at N = 12 000). A matrix that
    is not positive definite gives NaN (``jnp.linalg.cholesky`` does not raise).

    Args:
      kind: ``"wendland"``, ``"bump"`` or ``"risser"``.
      params: the kernel's parameter NamedTuple (its ``noise`` is the diagonal nugget).
      x: ``[N, D]`` training inputs; y: ``[N]`` targets; xs: ``[Ns, D]`` test inputs.
      mean: the constant prior mean ``m``.

    Returns:
      ``DenseGP(loglik, alpha [N], mu [Ns], var [Ns])``.

    Raises:
      ValueError: if ``x``, ``y`` or ``xs`` have inconsistent shapes.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be [N, D], got shape {x.shape}")
    n, d = x.shape
    _check_rows("y", y, n, 1, "[N]")
    if xs.ndim != 2 or xs.shape[1] != d:
        raise ValueError(f"xs must be [Ns, D={d}], got shape {xs.shape}")
    a = kernels.k_dense(kind, params, x, x) + params.noise * jnp.eye(n, dtype=x.dtype)
    chol = jnp.linalg.cholesky(a)
    r = y - mean
    alpha = jax.scipy.linalg.cho_solve((chol, True), r)
    loglik = -0.5 * jnp.dot(r, alpha) - jnp.sum(jnp.log(jnp.diag(chol))) - 0.5 * n * LOG2PI
    ks = kernels.k_dense(kind, params, xs, x)  # [Ns, N]
    v = jax.scipy.linalg.solve_triangular(chol, ks.T, lower=True)  # [N, Ns]
    # prior variance point by point: O(Ns), not the [Ns, Ns] matrix
    kss = jax.vmap(lambda p: kernels.k_dense(kind, params, p[None], p[None])[0, 0])(xs)
    return DenseGP(loglik, alpha, mean + ks @ alpha, kss - jnp.sum(v * v, axis=0))


# ------------------------------------------------------------------------- Matérn-5/2

NOISE_FLOOR = 1e-6  # added to exp(log_noise): keeps A well conditioned on standardised y


class MaternParams(NamedTuple):
    """Log-parameters of the stationary ARD Matérn-5/2 GP (constant mean 0)."""
    log_sigma2: jax.Array  # []
    log_ls: jax.Array  # [D]
    log_noise: jax.Array  # []; noise = exp(log_noise) + NOISE_FLOOR


def matern52(params: MaternParams, x1: jax.Array, x2: jax.Array) -> jax.Array:
    """``[N1, N2]`` ARD Matérn-5/2 kernel ``sigma2 (1 + sqrt5 d + 5 d^2 / 3) exp(-sqrt5 d)``,
    ``d = ||(x1 - x2) / ls||``, one input dimension at a time (no ``[N1, N2, D]`` array)."""
    ls = jnp.exp(params.log_ls)
    sq = jnp.zeros((x1.shape[0], x2.shape[0]), x1.dtype)
    for k in range(x1.shape[-1]):
        sq = sq + ((x1[:, None, k] - x2[None, :, k]) / ls[k]) ** 2
    pos = sq > 0  # double where: finite gradients on the diagonal (d = 0)
    s5 = math.sqrt(5.0) * jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)
    return jnp.exp(params.log_sigma2) * (1.0 + s5 + s5 * s5 / 3.0) * jnp.exp(-s5)


def matern_noise(params: MaternParams) -> jax.Array:
    """The observation noise variance ``exp(log_noise) + NOISE_FLOOR``."""
    return jnp.exp(params.log_noise) + NOISE_FLOOR


def matern_loglik(params: MaternParams, x: jax.Array, y: jax.Array) -> jax.Array:
    """Eq. L1 of the Matérn-5/2 GP with mean 0 by dense Cholesky."""
    n = x.shape[0]
    a = matern52(params, x, x) + matern_noise(params) * jnp.eye(n, dtype=x.dtype)
    return likelihood.dense_loglik(a, y)


def matern_init(x: jax.Array, y: jax.Array) -> MaternParams:
    """Default start: ``sigma2 = var(y)``, ``ls = 0.1 x`` the input range per dimension,
    ``noise = 0.1 var(y)``."""
    span = jnp.maximum(jnp.max(x, axis=0) - jnp.min(x, axis=0), 1e-6)
    v = jnp.maximum(jnp.var(y), 1e-6)
    return MaternParams(jnp.log(v), jnp.log(0.1 * span), jnp.log(0.1 * v))


_LBFGS = promotion_safe(optax.lbfgs())  # zoom line search; strict-promotion safe


@jax.jit
def _lbfgs_step(p: MaternParams, state, x: jax.Array, y: jax.Array):
    """One L-BFGS step on ``-L / N``; module level so it compiles once per ``(N, D)``."""
    def loss(q):
        return -matern_loglik(q, x, y) / x.shape[0]

    # the line search already evaluated (value, grad) at p: reuse them from the state
    value, grad = optax.value_and_grad_from_state(loss)(p, state=state)
    updates, state = _LBFGS.update(grad, state, p, value=value, grad=grad, value_fn=loss)
    p_new = optax.apply_updates(p, updates)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(p_new)]))
    finite = finite & jnp.isfinite(otu.tree_get(state, "value"))
    return p_new, state, value, otu.tree_norm(grad), finite


def fit_dense_matern52(x: jax.Array, y: jax.Array, *, steps: int = 100,
                       init: MaternParams | None = None, gtol: float = 1e-7,
                       ftol: float = 1e-12) -> MaternParams:
    """Type-II maximum likelihood of the stationary ARD Matérn-5/2 GP by ``optax.lbfgs``.

    Optimises the log-parameters ``(log sigma2, log ls [D], log noise)`` of eq. L1 computed by
    dense Cholesky (``-L / N`` is minimised so the tolerances do not scale with N). Expects
    standardised ``y`` (the model's mean is 0). Stops after ``steps`` steps, when the gradient
    norm of ``-L / N`` falls below ``gtol``, when ``-L / N`` changes by less than
    ``ftol (1 + |L / N|)`` between steps, or before a step that would leave finite values
    (the last finite parameters are returned). Each step costs one or a few dense Cholesky
    factorisations (the zoom line search).

    Args:
      x: ``[N, D]`` inputs; y: ``[N]`` standardised targets.
      steps: maximal number of L-BFGS steps (>= 0).
      init: starting log-parameters; default :func:`matern_init`.
      gtol, ftol: stopping tolerances (see above).

    Returns:
      The fitted ``MaternParams``.

    Raises:
      ValueError: if shapes are inconsistent or ``steps < 0``.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be [N, D], got shape {x.shape}")
    _check_rows("y", y, x.shape[0], 1, "[N]")
    if int(steps) < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    p = matern_init(x, y) if init is None else MaternParams(*init)
    if p.log_ls.shape != (x.shape[1],):
        raise ValueError(f"init.log_ls must have shape ({x.shape[1]},), got {p.log_ls.shape}")
    # strong-type the line search's info scalars (weak in init, strong after a step): the
    # step then compiles once per (N, D) instead of twice
    state = jax.tree.map(lambda a: jnp.asarray(a, dtype=a.dtype), _LBFGS.init(p))
    prev = None
    for _ in range(int(steps)):
        p_new, state_new, value, gnorm, finite = _lbfgs_step(p, state, x, y)
        if float(gnorm) < gtol or not bool(finite):
            break
        p, state = p_new, state_new
        value = float(value)
        if prev is not None and abs(prev - value) < ftol * (1.0 + abs(value)):
            break
        prev = value
    return p


def predict_dense_matern52(params: MaternParams, x: jax.Array, y: jax.Array,
                           xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Posterior of the Matérn-5/2 GP at ``xs [Ns, D]``.

    Args:
      params: fitted ``MaternParams``; x: ``[N, D]``; y: ``[N]`` (standardised); xs: ``[Ns, D]``.

    Returns:
      ``(mu [Ns], var [Ns])``, ``var`` latent (add :func:`matern_noise` for ``y_*``).

    Raises:
      ValueError: if shapes are inconsistent.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be [N, D], got shape {x.shape}")
    n, d = x.shape
    _check_rows("y", y, n, 1, "[N]")
    if xs.ndim != 2 or xs.shape[1] != d:
        raise ValueError(f"xs must be [Ns, D={d}], got shape {xs.shape}")
    a = matern52(params, x, x) + matern_noise(params) * jnp.eye(n, dtype=x.dtype)
    chol = jnp.linalg.cholesky(a)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    ks = matern52(params, xs, x)
    v = jax.scipy.linalg.solve_triangular(chol, ks.T, lower=True)
    return ks @ alpha, jnp.exp(params.log_sigma2) - jnp.sum(v * v, axis=0)


# ---------------------------------------------------------------------------- scipy mBCG

def scipy_mbcg(csr, b: np.ndarray, pdiag: np.ndarray, *, tol: float = 1e-8,
               maxiter: int = 1000, keep: int = 50) -> solvers.MBCGResult:
    """``solvers.mbcg`` in numpy: Jacobi-preconditioned CG on all columns of ``b`` at once.

    The same recurrences, freezing rule (``||r|| <= tol ||b||``; a frozen column's alpha and
    beta are 0) and coefficient buffers as the JAX version, with one
    ``scipy.sparse.csr_array @ [N, c]`` mat-mat per iteration, so on the same matrix both
    produce the same iterates up to rounding.

    Args:
      csr: ``[N, N]`` SPD ``scipy.sparse`` matrix (CSR for the fast mat-mat).
      b: ``[N, c]`` right-hand sides; pdiag: ``[N]`` positive preconditioner diagonal.
      tol: relative residual tolerance per column; maxiter: iteration cap; keep: how many
        leading iterations' ``alpha, beta`` to return.

    Returns:
      ``solvers.MBCGResult`` of numpy arrays: ``x [N, c]``, ``alpha, beta [keep, c]``,
      ``iters [c]``, ``relres [c]``.

    Raises:
      ValueError: on shape mismatches or non-positive ``keep`` / ``maxiter``.
    """
    n = _check_square("csr", csr)
    _check_rows("b", b, n, 2, "[N, c]")
    _check_rows("pdiag", pdiag, n, 1, "[N]")
    if int(keep) < 1 or int(maxiter) < 1:
        raise ValueError(f"keep and maxiter must be >= 1, got keep={keep}, maxiter={maxiter}")
    b = np.asarray(b, np.float64)
    c = b.shape[1]
    pinv = (1.0 / np.asarray(pdiag, np.float64))[:, None]
    bnorm = np.linalg.norm(b, axis=0)
    thresh = tol * np.where(bnorm > 0, bnorm, 1.0)
    x = np.zeros_like(b)
    r = b.copy()
    z = pinv * r
    p = z.copy()
    rz = np.sum(r * z, axis=0)
    active = np.linalg.norm(r, axis=0) > thresh
    alphas = np.zeros((keep, c))
    betas = np.zeros((keep, c))
    iters = np.zeros(c, np.int32)
    j = 0
    while j < maxiter and active.any():
        q = csr @ p
        pq = np.sum(p * q, axis=0)
        alpha = np.where(active, rz / np.where(active, pq, 1.0), 0.0)
        x += alpha * p
        r -= alpha * q
        z = pinv * r
        rz_new = np.sum(r * z, axis=0)
        beta = np.where(active, rz_new / np.where(active, rz, 1.0), 0.0)
        p = np.where(active, z + beta * p, p)
        iters += active
        if j < keep:
            alphas[j], betas[j] = alpha, beta
        rz = np.where(active, rz_new, rz)
        active &= np.linalg.norm(r, axis=0) > thresh
        j += 1
    relres = np.linalg.norm(r, axis=0) / np.where(bnorm > 0, bnorm, 1.0)
    return solvers.MBCGResult(x, alphas, betas, iters, relres)


def cg_tridiagonals_np(alpha: np.ndarray, beta: np.ndarray, iters: np.ndarray) -> np.ndarray:
    """``solvers.cg_tridiagonals`` in numpy: ``[c, m, m]`` Lanczos tridiagonals (eq. S3) from
    ``alpha, beta [m, c]``, padded with decoupled unit diagonals past each column's ``iters``."""
    m, c = alpha.shape
    j = np.arange(m)[:, None]
    k = np.minimum(np.asarray(iters), m)[None, :]
    valid = j < k
    a = np.where(valid, alpha, 1.0)
    prev = np.concatenate([np.zeros((1, c)), beta[:-1] / a[:-1]], axis=0)
    diag = np.where(valid, 1.0 / a + prev, 1.0)
    off = np.where(j + 1 < k, np.sqrt(np.maximum(beta, 0.0)) / a, 0.0)[:-1]  # [m - 1, c]
    t = np.zeros((c, m, m))
    i = np.arange(m)
    t[:, i, i] = diag.T
    t[:, i[:-1], i[1:]] = off.T
    t[:, i[1:], i[:-1]] = off.T
    return t


def scipy_loglik(csr, r: np.ndarray, probes: np.ndarray, *, tol: float = 1e-8,
                 maxiter: int = 1000, lanczos_steps: int = 50) -> dict:
    """Eq. L1 exactly as ``likelihood.log_marglik`` computes it, in numpy/scipy.

    Jacobi ``P = diag(A)``, ``z_l = P^{1/2} probes_l``; one :func:`scipy_mbcg` on
    ``[r, z_1..z_t]``; the probe columns' tridiagonals (:func:`cg_tridiagonals_np`) give SLQ
    terms ``||probe_l||^2 sum_k tau_lk^2 log theta_lk`` by ``np.linalg.eigh``;
    ``log|A| = sum log P_ii + mean_l``, SE = ``std_l (ddof 1) / sqrt(t)`` (eq. S4).

    Args:
      csr: ``[N, N]`` SPD ``scipy.sparse`` matrix (e.g. ``sparse_cov.to_scipy`` of the BCSR).
      r: ``[N]`` residual ``y - m``; probes: ``[N, t]`` Rademacher probes (the same as JAX's).
      tol, maxiter, lanczos_steps: as ``likelihood.SolverConfig``.

    Returns:
      ``dict(loglik, logdet, se, quad, iters [1 + t])`` (floats, and an int array).

    Raises:
      ValueError: on shape mismatches.
    """
    n = _check_square("csr", csr)
    _check_rows("r", r, n, 1, "[N]")
    _check_rows("probes", probes, n, 2, "[N, t]")
    if np.shape(probes)[1] < 1:
        raise ValueError("probes must have at least one column, got shape "
                         f"{np.shape(probes)}")
    r = np.asarray(r, np.float64)
    probes = np.asarray(probes, np.float64)
    pdiag = np.asarray(csr.diagonal(), np.float64)
    z = np.sqrt(pdiag)[:, None] * probes
    res = scipy_mbcg(csr, np.concatenate([r[:, None], z], axis=1), pdiag, tol=tol,
                     maxiter=maxiter, keep=lanczos_steps)
    quad = float(r @ res.x[:, 0])
    t = cg_tridiagonals_np(res.alpha[:, 1:], res.beta[:, 1:], res.iters[1:])
    theta, vecs = np.linalg.eigh(t)
    logs = np.log(np.maximum(theta, np.finfo(np.float64).tiny))
    terms = np.sum(probes * probes, axis=0) * np.sum(vecs[:, 0, :] ** 2 * logs, axis=-1)
    logdet = float(np.sum(np.log(pdiag)) + terms.mean())
    nt = terms.shape[0]
    se = float(terms.std(ddof=1) / math.sqrt(nt)) if nt > 1 else 0.0
    return {"loglik": -0.5 * quad - 0.5 * logdet - 0.5 * n * LOG2PI, "logdet": logdet,
            "se": se, "quad": quad, "iters": res.iters}


# ------------------------------------------------------------------------------- splu

def perm_sign(perm: np.ndarray) -> int:
    """Sign (+1 / -1) of a permutation: ``(-1)^(N - number of cycles)``; the cycles are the
    weakly connected components of the graph ``i -> perm[i]`` (no Python loop)."""
    from scipy.sparse.csgraph import connected_components

    perm = np.asarray(perm)
    n = perm.shape[0]
    if n == 0:
        return 1
    graph = sp.csr_array((np.ones(n), (np.arange(n), perm)), shape=(n, n))
    cycles = connected_components(graph, directed=True, connection="weak",
                                  return_labels=False)
    return 1 if (n - cycles) % 2 == 0 else -1


def splu_loglik(csr, r: np.ndarray) -> dict:
    """Exact eq. L1 by sparse LU (``scipy.sparse.linalg.splu``, COLAMD column ordering).

    ``Pr A Pc = L U`` with unit-diagonal ``L``, so ``log|A| = sum log|U_ii|`` (+ ``sum log|L_ii|``
    = 0) and ``sign det A = sign(Pr) sign(Pc) prod sign(L_ii) prod sign(U_ii)``. An SPD matrix
    has ``det A > 0``; a non-positive sign raises (a necessary check only: an indefinite
    matrix with an even number of negative eigenvalues passes it). ``quad = r^T A^{-1} r`` by
    the same factorisation.

    Args:
      csr: ``[N, N]`` SPD ``scipy.sparse`` matrix (duplicate entries, e.g. the pattern's
        zero padding, are summed).
      r: ``[N]`` residual ``y - m``.

    Returns:
      ``dict(loglik, logdet, quad)`` (floats).

    Raises:
      ValueError: on shape mismatches, or if ``A`` is singular or ``det A <= 0``.
    """
    import scipy.sparse.linalg as sla

    n = _check_square("csr", csr)
    _check_rows("r", r, n, 1, "[N]")
    r = np.asarray(r, np.float64)
    a = sp.csc_array(csr, dtype=np.float64, copy=True)
    a.sum_duplicates()
    try:
        lu = sla.splu(a, permc_spec="COLAMD")
    except RuntimeError as e:  # "Factor is exactly singular"
        raise ValueError(f"csr is singular ({e}); it must be SPD") from e
    du, dl = lu.U.diagonal(), lu.L.diagonal()
    sign = (perm_sign(lu.perm_r) * perm_sign(lu.perm_c) * np.prod(np.sign(dl))
            * np.prod(np.sign(du)))
    if not sign > 0:
        raise ValueError("csr is not positive definite: its LU factors give det <= 0")
    logdet = float(np.sum(np.log(np.abs(du))) + np.sum(np.log(np.abs(dl))))
    quad = float(r @ lu.solve(r))
    return {"loglik": -0.5 * quad - 0.5 * logdet - 0.5 * n * LOG2PI, "logdet": logdet,
            "quad": quad}


# ---------------------------------------------------------------------------- formats

def _check_matmat(data, pattern: Pattern, b) -> int:
    n = pattern.indptr.shape[0] - 1
    cap = pattern.rows.shape[0]
    if data.shape != (cap,):
        raise ValueError(f"data must be [C={cap}] (the pattern's capacity), got shape "
                         f"{data.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"b must be [N={n}] or [N={n}, c], got shape {b.shape}")
    return n


def bcsr_matmat(data: jax.Array, pattern: Pattern, b: jax.Array) -> jax.Array:
    """``A @ b`` with ``A = BCSR((data, cols, indptr))``: the production format.

    Args:
      data: ``[C]`` stored values (``sparse_cov.pattern_values``); pattern: its
        ``neighbors.Pattern``; b: ``[N]`` or ``[N, c]``. Pass all three as jit arguments.

    Returns:
      ``[N]`` or ``[N, c]``.

    Raises:
      ValueError: on shape mismatches (static, so also under jit).
    """
    n = _check_matmat(data, pattern, b)
    return sparse.BCSR((data, pattern.cols, pattern.indptr), shape=(n, n)) @ b


def bcoo_matmat(data: jax.Array, pattern: Pattern, b: jax.Array) -> jax.Array:
    """``A @ b`` with the same entries as ``BCOO((data, [rows, cols]))``: the format ablation
    (duplicate padding entries at ``(n-1, n-1)`` hold 0 and add nothing). Arguments, return
    and errors as :func:`bcsr_matmat`."""
    n = _check_matmat(data, pattern, b)
    idx = jnp.stack([pattern.rows, pattern.cols], axis=1)
    return sparse.BCOO((data, idx), shape=(n, n)) @ b
