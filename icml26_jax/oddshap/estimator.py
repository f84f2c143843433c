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
5. Constrained weighted least squares in float64 (``constrained_wls``; eq. O3).
6. ``phi_i = -2 sum_{T in A, i in T} beta_T / |T|`` (eq. W2), ``phi_0 = nu(0)``.

``make_estimator`` returns a pure ``(key, game) -> OddShapResult`` function of static shapes
(the budget plan is host-side), to be jitted and vmapped over seeds and explicands;
``oddshap`` is the one-call convenience. The KKT solve is a Cholesky of ``X^T W X`` with
the constraint eliminated by its Schur complement (the same solution as the bordered KKT
system); ``cond`` is estimated from the Cholesky diagonal; a NaN or ``cond > 1e10`` marks the
result for the host-side ``lstsq`` re-solve (``COND_LIMIT``, see ``resolve_ill_conditioned``).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import fourier, proxy, sampling

COND_LIMIT = 1e10
SOLVERS = ("kkt", "lstsq")
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
    """The ``"kkt"`` solve of ``constrained_wls`` from ``X^T W X`` and ``X^T W y``."""
    c = c.astype(gram.dtype)
    # c (c^T beta - b) = 0 added to the stationarity equation: G + c c^T is PD exactly when
    # the KKT system is non-singular (e.g. 2^(n-1) odd columns on 2^(n-1) - 1 pairs)
    g = gram + jnp.diag(1.0 - c) + jnp.outer(c, c)
    rhs = xwy + c * b
    chol = jnp.linalg.cholesky(g)
    solve = lambda v: jax.scipy.linalg.cho_solve((chol, True), v)  # noqa: E731
    both = solve(jnp.stack([rhs, c], axis=1))
    g_rhs, g_c = both[:, 0], both[:, 1]
    lam = (jnp.dot(c, g_rhs) - b) / jnp.dot(c, g_c)
    beta = g_rhs - lam * g_c
    d = jnp.abs(jnp.diag(chol))
    cond = jnp.where(jnp.all(jnp.isfinite(d)) & (jnp.min(d) > 0),
                     (jnp.max(d) / jnp.min(d)) ** 2, jnp.inf)
    return beta, cond


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


def regression_rows(plan: sampling.BudgetPlan) -> tuple[np.ndarray, np.ndarray]:
    """Static row indices of the collapsed regression and whether each row is a pair."""
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


def solve_support(values, coal, plan, support, col_mask, *, collapse: bool = True,
                  solver: str = "kkt"):
    """Steps 3-6 for a given support ``A [k, W]``: ``(phi [n], cond)``. With the KKT solver
    and ``n <= GRAM_TABLE_MAX_N`` the normal equations come from ``gram_by_table``."""
    n = plan.n
    if collapse:
        rows, paired = regression_rows(plan)
        y, w = collapse_pairs(values, coal, rows, paired)
    else:
        y, w, rows = uncollapsed(values, coal)
    b = -0.5 * (values[1] - values[0])
    if solver == "kkt" and n <= GRAM_TABLE_MAX_N:
        gram, xwy = gram_by_table(coal.masks[rows], w, y, support, col_mask, n)
        beta, cond = kkt_solve(gram, xwy, col_mask, b)
    else:
        x = jnp.where(col_mask, fourier.parity_f(coal.masks[rows], support, values.dtype), 0.0)
        beta, cond = constrained_wls(x, y, w, col_mask, b, solver)
    return fourier.shapley_from_fourier(jnp.where(col_mask, beta, 0.0), support, n), cond


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


def make_estimator(n: int, m: int, *, eta: float = 10.0, support: str = "proxy",
                   paired: bool = True, weights: str = "expected", solver: str = "kkt",
                   proxy_cfg: ProxyConfig = ProxyConfig(), proxy_name: str = "jax_oblivious",
                   collapse: bool = True, size_probs=None) -> "Estimator":
    """OddSHAP for ``n`` players at budget ``m``: an ``Estimator`` (pure, jit/vmap-safe
    ``(key, game) -> OddShapResult``, or its ``sample`` / ``fit`` halves).

    Args:
      eta: samples per support column (``k = ceil(m / eta)``); the fallback is taken iff
        ``m < eta n``.
      support: ``"proxy"`` (OddSHAP), ``"singletons"`` (= paired KernelSHAP with these
        weights), ``"random_odd"`` (ablation: the proxy's set sizes, random members),
        ``"all_odd"`` (every odd set; n <= 20, consistency check).
      paired: paired sampling (``False``: the unpaired-sampling ablation, same support rule).
      weights, size_probs: passed to ``sampling``; solver: ``"kkt"`` or ``"lstsq"``;
      collapse: pair-collapsed rows (``False``: uncollapsed, the reference formulation).
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

    def sample(key) -> sampling.Coalitions:
        return sampling.sample(jax.random.split(key)[0], plan, weights=weights)

    def fit(key, coal: sampling.Coalitions, values: jax.Array) -> OddShapResult:
        k_rand = jax.random.split(key)[1]
        spent = sampling.budget_spent(coal)
        empty = values[0]
        if needs_proxy:
            z = fourier.unpack(coal.masks, n)
            model = proxy.fit_oblivious_gbt(z, values, coal.valid, trees=proxy_cfg.trees,
                                            depth=proxy_cfg.depth, lr=proxy_cfg.lr,
                                            lam=proxy_cfg.lam)
            sm, sc, sv = proxy.tree_spectrum(model, n)
            if fallback:
                phi = fourier.shapley_from_fourier(jnp.where(sv, sc, 0.0), sm, n)
                a, cm = proxy.select_support(sm, sc, sv, n, max(k, n))
                return OddShapResult(phi, empty, a, cm, jnp.asarray(jnp.nan), jnp.asarray(True),
                                     spent)
            a, cm = proxy.select_support(sm, sc, sv, n, k)
            if support == "random_odd":
                a, cm = random_odd_like(k_rand, a, cm, n)
        elif support == "singletons":
            a, cm = singleton_support(n)
        else:
            a, cm = all_odd_support(n)
        phi, cond = solve_support(values, coal, plan, a, cm, collapse=collapse, solver=solver)
        return OddShapResult(phi, empty, a, cm, cond, jnp.asarray(False), spent)

    return Estimator(plan, sample, fit, k, fallback)


class Estimator:
    """A Shapley estimator at a fixed budget, split at the game: ``sample(key) -> draw``
    (coalitions; ``draw.masks uint32 [M, W]``), the game evaluated on ``draw.masks``, then
    ``fit(key, draw, values [M]) -> OddShapResult``. ``est(key, game)`` does all three. The
    split lets one compiled sampler serve every game with the same ``n`` and budget, and
    methods with the same sampler share their draws."""

    def __init__(self, plan, sample, fit, k=0, fallback=False):
        self.plan, self.sample, self.fit, self.k, self.fallback = plan, sample, fit, k, fallback

    def __call__(self, key, game) -> OddShapResult:
        draw = self.sample(key)
        return self.fit(key, draw, game.packed(draw.masks))


def oddshap(key, game, m: int, *, eta: float = 10.0, proxy: str = "jax_oblivious",
            support_override=None, paired: bool = True, **kw) -> OddShapResult:
    """One OddSHAP estimate (spec's signature). ``support_override``: one of ``SUPPORTS``
    (default ``"proxy"``). Jit the result of ``make_estimator`` for repeated calls."""
    est = make_estimator(game.n, m, eta=eta, support=support_override or "proxy",
                         paired=paired, proxy_name=proxy, **kw)
    return jax.jit(est)(key, game)


def resolve_ill_conditioned(results: OddShapResult, rerun: Callable, limit: float = COND_LIMIT
                            ) -> tuple[np.ndarray, int]:
    """Host step after a batched KKT run: every entry with ``cond > limit`` (or non-finite
    phi) outside the fallback is recomputed by ``rerun(flat_index) -> phi`` (the lstsq
    solver). Returns ``(phi [..., n], number re-solved)``."""
    phi = np.array(results.phi)
    cond = np.asarray(results.cond)
    bad = (~np.asarray(results.used_fallback)) & (~(cond <= limit)
                                                  | ~np.all(np.isfinite(phi), axis=-1))
    flat = phi.reshape(-1, phi.shape[-1])
    for i in np.flatnonzero(bad.reshape(-1)):
        flat[i] = np.asarray(rerun(int(i)))
    return flat.reshape(phi.shape), int(bad.sum())
