"""OddSHAP: Shapley values by regression on the odd Walsh basis (spec §Method "Algorithm").

Given a game ``nu`` and a budget ``m`` (distinct coalitions, empty and grand included):

1. ``sampling``: empty + grand, border-trick enumeration, size-uniform paired draws without
   replacement, kernel-adjusted weights ``w(S)``.
2. Proxy (``proxy.fit_oblivious_gbt``) on every sampled ``(z(S), nu(S))``, its exact Walsh
   spectrum ``g_hat``; ``k = ceil(m / eta)``. If ``m < eta n`` the proxy's own Shapley values
   are returned (eq. W2 on ``g_hat``: the paper's TreeSHAP fallback, exact). Else the support
   ``A`` = the ``n`` singletons + the top ``k - n`` odd sets ``|T| >= 3`` by ``|g_hat(T)|``.
3. Exact intercept and constraint (eq. O1): ``beta_0 = (nu(N) + nu(0)) / 2`` and
   ``sum_{T in A} beta_T = b = -(nu(N) - nu(0)) / 2`` (``chi_T(0) = 1``, ``chi_T(N) = -1`` for
   odd ``T``), so efficiency holds exactly.
4. Pair-collapsed rows (eq. O2): each pair ``(S, S^c)`` is one row, features ``chi_T(S)``,
   target ``nu_odd(S)``, weight ``2 w(S)``; an unpaired row keeps ``nu(S) - beta_0`` and
   ``w(S)`` (same minimiser as the uncollapsed rows).
5. Constrained weighted least squares in float64 (eq. O3), guarded (``guarded_kkt_solve``).
6. ``phi_i = -2 sum_{T in A, i in T} beta_T / |T|`` (eq. W2), ``phi_0 = nu(0)``.

``make_estimator`` returns a pure ``(key, game) -> OddShapResult`` function of static shapes
(the budget plan is host-side), to be jitted and vmapped over seeds and explicands;
``oddshap`` is the one-call convenience. The KKT solve is a Cholesky of ``X^T W X`` with
the constraint eliminated by its Schur complement (the same solution as the bordered KKT
system); ``cond`` is estimated from the Cholesky pivots. **Guard** (inside the program, by
``lax.cond``): where that solve is not trustworthy (``cond > COND_LIMIT = 1e10`` or a
non-finite result) a rank-revealing eigendecomposition finds the directions the sample
cannot determine; the exactly-constrained least squares is solved on the others and, along
those, the interaction coefficients are kept smallest (``interaction_min_norm_solve``);
``OddShapResult.guarded`` and ``.dropped`` (undetermined directions) record it. Under
``vmap`` the guard's branch runs only for batches that need it (``guarded``, a custom
batching rule).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import fourier, proxy, sampling

COND_LIMIT = 1e10  # spec §Method 6: above it the plain KKT solve is not trusted
SOLVERS = ("kkt", "kkt_plain", "lstsq")  # kkt: guarded; kkt_plain: unguarded (diagnostics)
SUPPORTS = ("proxy", "singletons", "random_odd", "all_odd")
PROXIES = ("jax_oblivious",)


class OddShapResult(NamedTuple):
    phi: jax.Array  # f64 [n]
    phi0: jax.Array  # f64 [] nu(empty)
    support: jax.Array  # uint32 [k, W] (fallback: the proxy's top sets; zeros = padding)
    col_mask: jax.Array  # bool [k]
    cond: jax.Array  # f64 [] condition estimate of X^T W X (nan in the fallback)
    used_fallback: jax.Array  # bool []
    budget_spent: jax.Array  # int32 [] distinct coalitions evaluated
    guarded: jax.Array  # bool [] the conditioning guard replaced the plain solve
    dropped: jax.Array  # int32 [] directions the guard found undetermined (0: not guarded)


class ProxyConfig(NamedTuple):
    trees: int = 100
    depth: int = 6
    lr: float = 0.1
    lam: float = 1.0


# ----------------------------------------------------------------------------- regression

def constrained_wls(x: jax.Array, y: jax.Array, w: jax.Array, c: jax.Array, b: jax.Array,
                    solver: str = "kkt") -> tuple[jax.Array, jax.Array]:
    """``min sum_r w_r (x_r^T beta - y_r)^2  s.t.  c^T beta = b`` (eq. O3).

    Args:
      x: ``[R, K]`` features (padding rows have ``w = 0``, padding columns are all zero and
        have ``c = 0``); y: ``[R]``; w: ``[R]`` non-negative weights; c: ``[K]`` 0/1 mask of
        real columns; b: ``[]``.
      solver: ``"kkt"`` — the KKT system ``[[X^T W X, c], [c^T, 0]]`` solved by a Cholesky
        of ``G = X^T W X + c c^T + diag(1 - c)`` (adding ``c (c^T beta - b) = 0`` to the first
        block row changes no solution and makes ``G`` PD whenever the KKT matrix is
        non-singular; padding columns get ``beta = 0``) and the constraint's Schur complement:
        ``beta = G^-1 (r - c lam)``, ``r = X^T W y + c b``, ``lam = (c^T G^-1 r - b) /
        (c^T G^-1 c)``; ``"lstsq"`` — the reference:
        ``X~ = sqrt(W) X``, ``P = I - c c^T / c^T c``, ``z = lstsq(X~ P, y~ - X~ c b / c^T c)``,
        ``beta = P z + c b / c^T c`` (min-norm; padding columns give 0).

        This is the unguarded primitive (``"kkt"`` and ``"kkt_plain"`` are the same here):
        the guard is ``guarded_kkt_solve``, used by ``solve_support``.

    Returns:
      ``(beta [K], cond)`` with ``cond`` the squared ratio of the largest to the smallest
      Cholesky pivot of ``G`` (an estimate of its condition number; ``inf`` if not PD).
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    c = c.astype(x.dtype)
    if solver == "lstsq":
        sw = jnp.sqrt(w)
        xt, yt = x * sw[:, None], y * sw
        cc = jnp.dot(c, c)
        p = jnp.eye(c.shape[0], dtype=x.dtype) - jnp.outer(c, c) / cc
        beta0 = c * b / cc
        z = jnp.linalg.lstsq(xt @ p, yt - xt @ beta0)[0]
        beta = p @ z + beta0
        return beta, jnp.asarray(jnp.nan, x.dtype)
    xw = x * w[:, None]
    return kkt_solve(xw.T @ x, xw.T @ y, c, b)


def kkt_solve(gram: jax.Array, xwy: jax.Array, c: jax.Array, b: jax.Array
              ) -> tuple[jax.Array, jax.Array]:
    """The plain ``"kkt"`` solve of ``constrained_wls`` from ``X^T W X`` and ``X^T W y``
    (no guard: see ``guarded_kkt_solve``)."""
    g, rhs, c = _augmented(gram, xwy, c, b)
    chol = jnp.linalg.cholesky(g)
    beta = _schur_solve(chol, rhs, c, b)
    return beta, _pivot_cond(jnp.diag(chol))


def _augmented(gram, xwy, c, b):
    # c (c^T beta - b) = 0 added to the stationarity equation: G + c c^T is PD exactly when
    # the KKT system is non-singular (e.g. 2^(n-1) odd columns on 2^(n-1) - 1 pairs)
    c = c.astype(gram.dtype)
    return gram + jnp.diag(1.0 - c) + jnp.outer(c, c), xwy + c * b, c


def _schur_solve(chol, rhs, c, b):
    """``beta = G^-1 (r - c lam)``, ``lam = (c^T G^-1 r - b) / (c^T G^-1 c)`` from the
    Cholesky factor of ``G``: the constraint ``c^T beta = b`` holds exactly."""
    both = jax.scipy.linalg.cho_solve((chol, True), jnp.stack([rhs, c], axis=1))
    g_rhs, g_c = both[:, 0], both[:, 1]
    lam = (jnp.dot(c, g_rhs) - b) / jnp.dot(c, g_c)
    return g_rhs - lam * g_c


def _pivot_cond(pivots):
    """Squared ratio of the largest to the smallest Cholesky pivot (``inf`` if not PD)."""
    d = jnp.abs(pivots)
    return jnp.where(jnp.all(jnp.isfinite(d)) & (jnp.min(d) > 0),
                     (jnp.max(d) / jnp.min(d)) ** 2, jnp.inf)


def is_ill_conditioned(beta: jax.Array, cond: jax.Array, limit: float = COND_LIMIT
                       ) -> jax.Array:
    """``True`` where a solve must not be trusted: ``cond > limit`` or a non-finite ``beta``
    (NaN ``cond`` counts as failed)."""
    return ~(cond <= limit) | ~jnp.all(jnp.isfinite(beta))


def interaction_min_norm_solve(gram, xwy, c, b, penalize, limit: float = COND_LIMIT):
    """The guard's solve of the exactly-constrained least squares when its system is
    singular or ill-conditioned.

    A rank-revealing eigendecomposition of ``G = X^T W X + c c^T + diag(1 - c)`` splits the
    coefficient space into determined directions (eigenvalue ``>= lambda_max / limit``) and
    undetermined ones: combinations of support columns that the sampled coalitions cannot
    tell apart (e.g. every odd set of a few players when one pattern of those players was
    never sampled), along which the fit and the constraint are unchanged. On the determined
    directions the solution is the pseudo-inverse one, with the constraint's Schur
    complement (``c^T beta = b`` exactly); along the undetermined ones it takes the
    coefficients that minimise ``||beta[penalize]||`` (the interaction sets ``|T| >= 3``:
    of all fits the data allow, the one with the smallest interactions; singletons are free).
    Plain min-norm (``lstsq``) instead shrinks the singletons too and was 6-58x worse than
    paired KernelSHAP on the guarded runs of a random-forest game (``tests/oddshap``).

    Returns ``(beta, undetermined directions int32)``.
    """
    g, rhs, c = _augmented(gram, xwy, c, b)
    lam, v = jnp.linalg.eigh(g)
    live = lam >= lam[-1] / limit
    inv = jnp.where(live, 1.0 / jnp.where(live, lam, 1.0), 0.0)
    pinv = lambda u: v @ (inv[:, None] * (v.T @ u))  # noqa: E731
    both = pinv(jnp.stack([rhs, c], axis=1))
    lam_c = (jnp.dot(c, both[:, 0]) - b) / jnp.dot(c, both[:, 1])
    beta = both[:, 0] - lam_c * both[:, 1]
    null = v * (~live).astype(g.dtype)[None, :]  # [K, K]: the undetermined directions
    pen = penalize.astype(g.dtype)
    t = jnp.linalg.lstsq(null * pen[:, None], -beta * pen)[0]
    beta = beta + null @ t
    return beta, jnp.sum((~live).astype(jnp.int32)).astype(jnp.int32)


def guarded(plain: Callable, guard: Callable, *operands):
    """``plain(*operands) -> (out, bad)``; where ``bad``, ``guard(out, *operands) -> out``
    replaces ``out``, by ``lax.cond``. Returns ``(out, bad)``.

    Under ``vmap`` a ``lax.cond`` with a batched predicate would run both branches for every
    element; a custom batching rule instead runs ``plain`` batched and ``guard`` batched
    only when some element of the batch needs it (one unbatched ``lax.cond`` on ``any``),
    keeping ``guard``'s output only where ``bad``. (Nested ``vmap``s fall back to running
    both branches for the outer axes: same values.)
    """
    @jax.custom_batching.custom_vmap
    def f(*ops):
        out, bad = plain(*ops)
        return jax.lax.cond(bad, lambda: guard(out, *ops), lambda: out), bad

    @f.def_vmap
    def _rule(axis_size, in_batched, *ops):
        ops = jax.tree.map(lambda a, isb: a if isb else jnp.broadcast_to(
            a, (axis_size,) + jnp.shape(a)), ops, tuple(in_batched))
        out, bad = jax.vmap(plain)(*ops)

        def pick():
            fixed = jax.vmap(guard)(out, *ops)
            return jax.tree.map(lambda a, o: jnp.where(
                bad.reshape(bad.shape + (1,) * (o.ndim - 1)), a, o), fixed, out)

        res = jax.lax.cond(jnp.any(bad), pick, lambda: out)
        res = (res, bad)
        return res, jax.tree.map(lambda _: True, res)

    return f(*operands)


def guarded_kkt_solve(gram: jax.Array, xwy: jax.Array, c: jax.Array, b: jax.Array,
                      penalize: jax.Array | None = None):
    """``kkt_solve`` with the rank/conditioning guard (spec §Method 6): where the plain
    solve is ill-conditioned (``is_ill_conditioned``: ``cond > COND_LIMIT`` or non-finite)
    ``interaction_min_norm_solve`` replaces it (``penalize``: bool ``[K]``, the interaction
    columns; default none, i.e. the min-norm solution). Returns ``(beta, cond, guard)`` with
    ``cond`` the plain solve's estimate and ``guard = (engaged bool, undetermined directions
    int32)``."""
    if penalize is None:
        penalize = jnp.zeros(c.shape, bool)

    def plain(gm, xy, cc, bb, pen):
        beta, cond = kkt_solve(gm, xy, cc, bb)
        return (beta, cond, jnp.asarray(0, jnp.int32)), is_ill_conditioned(beta, cond)

    def guard(out, gm, xy, cc, bb, pen):
        beta, dropped = interaction_min_norm_solve(gm, xy, cc, bb, pen)
        return beta, out[1], dropped

    (beta, cond, dropped), bad = guarded(plain, guard, gram, xwy, c, b, penalize)
    return beta, cond, (bad, dropped)


def collapse_pairs(values: jax.Array, coal: sampling.Coalitions, rows: np.ndarray,
                   paired_rows: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Regression targets and weights of the rows ``rows`` (eq. O2): a pair's first row gets
    ``nu_odd(S) = (nu(S) - nu(S^c)) / 2`` and weight ``2 w(S)``; an unpaired row
    ``nu(S) - beta_0`` and ``w(S)``. ``paired_rows [len(rows)]`` (static) says which."""
    beta0 = 0.5 * (values[1] + values[0])
    v = values[rows]
    partner = values[np.minimum(rows + 1, values.shape[0] - 1)]
    y = jnp.where(paired_rows, 0.5 * (v - partner), v - beta0)
    w = jnp.where(coal.valid[rows], jnp.where(paired_rows, 2.0, 1.0) * coal.weights[rows], 0.0)
    return y, w


def uncollapsed(values: jax.Array, coal: sampling.Coalitions) -> tuple[jax.Array, jax.Array,
                                                                         np.ndarray]:
    """Every sampled coalition its own row (the reference formulation): target
    ``nu(S) - beta_0``, weight ``w(S)``; rows 2.. (empty and grand are the constraint)."""
    beta0 = 0.5 * (values[1] + values[0])
    rows = np.arange(2, values.shape[0])
    return values[rows] - beta0, jnp.where(coal.valid[rows], coal.weights[rows], 0.0), rows


def _layout(plan) -> sampling.Layout:
    return plan.layout if isinstance(plan, sampling.BudgetPlan) else plan


def regression_rows(plan) -> tuple[np.ndarray, np.ndarray]:
    """Static row indices of the collapsed regression and whether each row is a pair (from a
    ``sampling.Layout`` or a ``BudgetPlan``'s layout)."""
    plan = _layout(plan)
    n_pair_rows = plan.n_enumerated + 2 * plan.n_pairs
    pairs = 2 + np.arange(0, n_pair_rows, 2)
    singles = 2 + n_pair_rows + np.arange(plan.n_single)
    rows = np.concatenate([pairs, singles]).astype(np.int64)
    paired = np.concatenate([np.ones(len(pairs), bool), np.zeros(len(singles), bool)])
    return rows, paired


GRAM_TABLE_MAX_N = 16


def gram_by_table(row_masks: jax.Array, w: jax.Array, y: jax.Array, support: jax.Array,
                  col_mask: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """``(X^T W X, X^T W y)`` for Walsh features ``X[r, a] = chi_{A_a}(S_r)`` without forming
    ``X`` (n <= 20): ``chi_a chi_b = chi_{A_a xor A_b}``, so ``(X^T W X)[a, b] = h(A_a xor
    A_b)`` with ``h = FWHT`` of the row weights scattered on the ``2^n`` table (and ``X^T W y``
    likewise from ``w y``). Exact; ``O(n 2^n + K^2)`` instead of ``O(R K^2)``."""
    if n > fourier.MAX_TABLE_PLAYERS:
        raise ValueError(f"gram_by_table needs n <= {fourier.MAX_TABLE_PLAYERS}, got n={n}")
    idx = row_masks[:, 0].astype(jnp.int32)
    both = jnp.zeros((2, 1 << n), w.dtype).at[:, idx].add(jnp.stack([w, w * y]))
    h = fourier.fwht(both)  # [2, 2^n]: h[0, U] = sum_r w_r chi_U(S_r), h[1] with w_r y_r
    a = support[:, 0].astype(jnp.int32)
    gram = jnp.where(col_mask[:, None] & col_mask[None, :], h[0][a[:, None] ^ a[None, :]], 0.0)
    return gram, jnp.where(col_mask, h[1][a], 0.0)


GRAM_BLOCK = 256


def _leading(flags: jax.Array) -> jax.Array:
    """``int32 []``: one past the last ``True`` of ``flags`` (0 if none)."""
    idx = jnp.arange(1, flags.shape[0] + 1, dtype=jnp.int32)
    return jnp.max(jnp.where(flags, idx, 0), initial=0)


def _pad_to(x: jax.Array, size: int, fill=0) -> jax.Array:
    pad = size - x.shape[0]
    return x if pad == 0 else jnp.concatenate(
        [x, jnp.full((pad,) + x.shape[1:], fill, x.dtype)])


def gram_by_blocks(row_masks: jax.Array, w: jax.Array, y: jax.Array, support: jax.Array,
                   col_mask: jax.Array, block: int = GRAM_BLOCK) -> tuple[jax.Array, jax.Array]:
    """``(X^T W X, X^T W y)`` for Walsh features ``X[r, a] = chi_{A_a}(S_r)`` (``0`` where
    ``col_mask`` is off), any ``n``: the same numbers as the dense products, computed over
    ``block``-row and ``block``-column tiles up to the last row with ``w != 0`` and the last
    real column (loop trip counts from the data). A budget's rows and support columns fill
    between half and all of its bucket's slots, so the dense products spent up to 4x the
    arithmetic on zeros; only the upper tiles are multiplied (``X^T W X`` is symmetric, made
    so exactly)."""
    r, k = row_masks.shape[0], support.shape[0]
    rb, kb = -(-r // block), -(-k // block)
    dt = w.dtype
    masks = _pad_to(row_masks, rb * block)
    wp, yp = _pad_to(w, rb * block), _pad_to(y, rb * block)
    sup, cm = _pad_to(support, kb * block), _pad_to(col_mask, kb * block, False)
    n_rows = -(-_leading(wp != 0) // block)
    n_cols = -(-_leading(cm) // block)
    # upper tiles (i <= j) ordered by j: those with j < n_cols are the first n_cols(n_cols+1)/2
    ti, tj = np.triu_indices(kb)
    order = np.lexsort((ti, tj))
    ti, tj = jnp.asarray(ti[order], jnp.int32), jnp.asarray(tj[order], jnp.int32)

    def rows_step(b, carry):
        gram, xwy = carry
        mb = jax.lax.dynamic_slice_in_dim(masks, b * block, block)
        wb = jax.lax.dynamic_slice_in_dim(wp, b * block, block)
        yb = jax.lax.dynamic_slice_in_dim(yp, b * block, block)
        x = jnp.where(cm, fourier.parity_f(mb, sup, dt), 0.0)  # [block, kb * block]
        xw = x * wb[:, None]
        xwy = xwy + xw.T @ yb

        def tile(t, g):
            i, j = ti[t], tj[t]
            xi = jax.lax.dynamic_slice_in_dim(xw, i * block, block, axis=1)
            xj = jax.lax.dynamic_slice_in_dim(x, j * block, block, axis=1)
            upd = jnp.where(i == j, 0.5, 1.0) * (xi.T @ xj)
            cur = jax.lax.dynamic_slice(g, (i * block, j * block), (block, block))
            return jax.lax.dynamic_update_slice(g, cur + upd, (i * block, j * block))

        gram = jax.lax.fori_loop(0, n_cols * (n_cols + 1) // 2, tile, gram)
        return gram, xwy

    init = (jnp.zeros((kb * block, kb * block), dt), jnp.zeros((kb * block,), dt))
    upper, xwy = jax.lax.fori_loop(0, n_rows, rows_step, init)
    gram = upper + upper.T  # diagonal tiles were accumulated at half weight
    return gram[:k, :k], xwy[:k]


def solve_support(values, coal, plan, support, col_mask, *, collapse: bool = True,
                  solver: str = "kkt"):
    """Steps 3-6 for a given support ``A [k, W]``: ``(phi [n], cond, (guarded, dropped))``.
    The ``"kkt"`` solver is guarded (``guarded_kkt_solve``); with ``n <= GRAM_TABLE_MAX_N``
    its normal equations come from ``gram_by_table``, beyond from ``gram_by_blocks``.
    ``"lstsq"`` is the unguarded reference. ``plan``: a ``sampling.Layout`` (or a
    ``BudgetPlan``)."""
    plan = _layout(plan)
    n = plan.n
    if collapse:
        rows, paired = regression_rows(plan)
        y, w = collapse_pairs(values, coal, rows, paired)
    else:
        y, w, rows = uncollapsed(values, coal)
    b = -0.5 * (values[1] - values[0])
    if solver in ("kkt", "kkt_plain"):
        if n <= GRAM_TABLE_MAX_N:
            gram, xwy = gram_by_table(coal.masks[rows], w, y, support, col_mask, n)
        else:
            gram, xwy = gram_by_blocks(coal.masks[rows], w, y, support, col_mask)
        if solver == "kkt":
            beta, cond, guard = guarded_kkt_solve(
                gram, xwy, col_mask, b, col_mask & (fourier.popcount(support) >= 3))
        else:
            beta, cond = kkt_solve(gram, xwy, col_mask, b)
            guard = (jnp.asarray(False), jnp.asarray(0, jnp.int32))
    else:
        x = jnp.where(col_mask, fourier.parity_f(coal.masks[rows], support, values.dtype), 0.0)
        beta, cond = constrained_wls(x, y, w, col_mask, b, solver)
        guard = (jnp.asarray(False), jnp.asarray(0, jnp.int32))
    phi = fourier.shapley_from_fourier(jnp.where(col_mask, beta, 0.0), support, n)
    return phi, cond, guard


# ----------------------------------------------------------------------------- supports

def singleton_support(n: int) -> tuple[jax.Array, jax.Array]:
    """``A`` = the ``n`` singletons (paired KernelSHAP = singleton OddSHAP)."""
    z = jnp.eye(n, dtype=bool)
    return fourier.pack(z), jnp.ones((n,), bool)


def all_odd_support(n: int) -> tuple[jax.Array, jax.Array]:
    """Every odd set (``2^(n-1)`` of them; n <= 20): the consistent, exact full support."""
    z = fourier.index_bits(n)
    odd = z.sum(1) % 2 == 1
    return fourier.pack(jnp.asarray(z[odd])), jnp.ones((int(odd.sum()),), bool)


def random_odd_like(key, support, col_mask, n: int):
    """Ablation: the singletons of ``support`` kept, every other set replaced by a uniformly
    random set of the same (odd) size."""
    sizes = fourier.popcount(support)
    u = jax.random.uniform(key, (support.shape[0], n))
    ranks = jnp.argsort(jnp.argsort(u, axis=1), axis=1)
    rand = fourier.pack(ranks < sizes[:, None].astype(ranks.dtype))
    keep = (sizes <= 1)[:, None]
    return jnp.where(keep, support, rand), col_mask


# ----------------------------------------------------------------------------- estimator

def _check_budget(n: int, m: int, eta: float):
    fourier.check_players(n)
    if not 2 <= int(m) <= 2.0 ** n:
        raise ValueError(f"m (budget) must be in [2, 2^n = {2 ** n}], got {m}")
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta}")


class OddArrays(NamedTuple):
    """The budget-dependent (traced) part of an estimator: budgets of one bucket share its
    compiled program."""
    plan: sampling.PlanArrays
    k: jax.Array  # int32 []: support size ceil(m / eta) (slots beyond it are masked)
    fallback: jax.Array  # bool []: m < eta n (the proxy's own Shapley values)


def make_estimator(n: int, m: int, *, eta: float = 10.0, support: str = "proxy",
                   paired: bool = True, weights: str = "expected", solver: str = "kkt",
                   proxy_cfg: ProxyConfig = ProxyConfig(), proxy_name: str = "jax_oblivious",
                   collapse: bool = True, size_probs=None) -> "Estimator":
    """OddSHAP for ``n`` players at budget ``m``: an ``Estimator`` (pure, jit/vmap-safe
    ``(key, game) -> OddShapResult``, or its ``sample`` / ``fit`` halves). Its program
    depends on ``m`` only through the power-of-two bucket of ``m`` (``sampling.Layout``):
    every budget of a bucket reuses one compilation (``Estimator.__call__``).

    Args:
      eta: samples per support column (``k = ceil(m / eta)``); the fallback is taken iff
        ``m < eta n``.
      support: ``"proxy"`` (OddSHAP), ``"singletons"`` (= paired KernelSHAP with these
        weights), ``"random_odd"`` (ablation: the proxy's set sizes, random members),
        ``"all_odd"`` (every odd set; n <= 20, consistency check).
      paired: paired sampling (``False``: the unpaired-sampling ablation, same support rule).
      weights, size_probs: passed to ``sampling``; solver: ``"kkt"`` (guarded) or
        ``"lstsq"``; collapse: pair-collapsed rows (``False``: uncollapsed, the reference
        formulation).
    """
    _check_budget(n, m, eta)
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {SUPPORTS}, got {support!r}")
    if proxy_name not in PROXIES:
        raise ValueError(f"proxy must be one of {PROXIES} inside the jitted estimator, got "
                         f"{proxy_name!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    plan = sampling.plan_budget(n, m, size_probs, paired)
    k = int(math.ceil(m / eta))
    fallback = support == "proxy" and m < eta * n
    needs_proxy = support in ("proxy", "random_odd")
    if needs_proxy and not fallback and k < n:
        raise ValueError(f"k = ceil(m / eta) = {k} < n = {n}")
    lay = plan.layout
    if support == "all_odd":
        slots = 1 << (n - 1)
    else:
        slots = max(n, int(math.ceil(lay.bucket / eta)))
    lo = max(2, lay.bucket // 2 + 1)
    regime = ("none" if support != "proxy" or lo >= eta * n
              else "all" if lay.bucket < eta * n else "some")  # where the fallback can occur
    static = (lay, slots, regime, support, weights, solver, proxy_cfg, collapse)
    arrays = OddArrays(sampling.plan_arrays(plan), np.int32(k), np.bool_(fallback))
    return Estimator(_build_oddshap, static, arrays, plan, k, fallback)


@functools.lru_cache(maxsize=None)
def _build_oddshap(static):
    """``(sample(arrays, key), fit(arrays, key, draw, values))`` of a static spec."""
    lay, slots, regime, support, weights, solver, proxy_cfg, collapse = static
    n = lay.n
    needs_proxy = support in ("proxy", "random_odd")

    def sample(arrays, key) -> sampling.Coalitions:
        return sampling.sample(jax.random.split(key)[0], lay, arrays.plan, weights=weights)

    def fit(arrays, key, coal: sampling.Coalitions, values: jax.Array) -> OddShapResult:
        k_rand = jax.random.split(key)[1]
        spent = sampling.budget_spent(coal)
        empty = values[0]
        fb = jnp.asarray(arrays.fallback)
        none = (jnp.asarray(jnp.nan), jnp.asarray(False), jnp.asarray(0, jnp.int32))
        if needs_proxy:
            z = fourier.unpack(coal.masks, n)
            model = proxy.fit_oblivious_gbt(z, values, coal.valid, trees=proxy_cfg.trees,
                                            depth=proxy_cfg.depth, lr=proxy_cfg.lr,
                                            lam=proxy_cfg.lam)
            sm, sc, sv = proxy.tree_spectrum(model, n)
            a, cm = proxy.select_support(sm, sc, sv, n, slots)
            cm = cm & (jnp.arange(slots, dtype=jnp.int32) < jnp.asarray(arrays.k).astype(jnp.int32))
            if support == "random_odd":
                a, cm = random_odd_like(k_rand, a, cm, n)
        elif support == "singletons":
            a, cm = singleton_support(n)
        else:
            a, cm = all_odd_support(n)

        def regression():
            phi, cond, (grd, dropped) = solve_support(values, coal, lay, a, cm,
                                                      collapse=collapse, solver=solver)
            return phi, (cond, grd, dropped)

        def proxy_values():  # the fallback: the proxy's exact Shapley values
            return fourier.shapley_from_fourier(jnp.where(sv, sc, 0.0), sm, n), none

        if regime == "none":
            phi, (cond, grd, dropped) = regression()
        elif regime == "all":
            phi, (cond, grd, dropped) = proxy_values()
        else:  # a real branch when the budget is not batched (it never is in the runner)
            phi, (cond, grd, dropped) = jax.lax.cond(fb, proxy_values, regression)
        return OddShapResult(phi, empty, a, cm, cond, fb if regime != "none" else
                             jnp.asarray(False), spent, grd, dropped)

    return sample, fit


class Estimator:
    """A Shapley estimator at a fixed budget, split at the game: ``sample(key) -> draw``
    (coalitions; ``draw.masks uint32 [M, W]``), the game evaluated on ``draw.masks``, then
    ``fit(key, draw, values [M]) -> OddShapResult``. ``est(key, game)`` does all three in one
    jitted program shared by every budget of the bucket (``static`` is its compile key,
    ``arrays`` the budget's traced part). The split lets one compiled sampler serve every
    game with the same ``n`` and bucket, and methods with the same sampler share their
    draws. Inside a larger program pass ``arrays`` explicitly (``sample(key, arrays)``) to
    keep them traced."""

    def __init__(self, build, static, arrays, plan=None, k=0, fallback=False):
        self.build, self.static, self.arrays = build, static, arrays
        self.plan, self.k, self.fallback = plan, k, fallback

    @property
    def program(self) -> tuple:
        """Hashable: what the compiled program depends on (not the budget within a bucket)."""
        return (self.build, self.static)

    def sample(self, key, arrays=None):
        return self.build(self.static)[0](self.arrays if arrays is None else arrays, key)

    def fit(self, key, draw, values, arrays=None):
        return self.build(self.static)[1](self.arrays if arrays is None else arrays, key, draw,
                                          values)

    def __call__(self, key, game) -> OddShapResult:
        return _call(self.program, self.arrays, key, game)


def run_program(program, arrays, key, game) -> OddShapResult:
    """Sample, evaluate ``game`` on the draw, fit (``program = Estimator.program``)."""
    build, static = program
    sample, fit = build(static)
    draw = sample(arrays, key)
    return fit(arrays, key, draw, game.packed(draw.masks))


_call = jax.jit(run_program, static_argnums=0)


def oddshap(key, game, m: int, *, eta: float = 10.0, proxy: str = "jax_oblivious",
            support_override=None, paired: bool = True, **kw) -> OddShapResult:
    """One OddSHAP estimate (spec's signature). ``support_override``: one of ``SUPPORTS``
    (default ``"proxy"``). Budgets of one power-of-two bucket share one compilation."""
    est = make_estimator(game.n, m, eta=eta, support=support_override or "proxy",
                         paired=paired, proxy_name=proxy, **kw)
    return est(key, game)
