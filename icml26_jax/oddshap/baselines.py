"""Baselines of spec §Baselines, sharing OddSHAP's games, budget accounting and float64
regression (``estimator``):

* ``kernelshap_paired``: KernelSHAP — size probabilities ``∝ 1 / (s (n - s))``, paired,
  without replacement, border trick, and the classic constrained regression on 0/1
  features, one row per coalition (``kernel_regression``; intercept ``nu(0)`` and
  ``sum phi = nu(N) - nu(0)`` exact).
* ``kernelshap_unpaired``: the same without pairing (every coalition its own row).
* ``leverageshap``: OddSHAP's size-uniform paired sampler with the classic regression, so the
  gap to OddSHAP is due only to the odd higher-order support (and, by the pairing theorem,
  it equals OddSHAP with ``A`` = singletons on the same coalitions: claim 3).
* ``permutation_antithetic``: permutations ``pi`` and their reverses, marginal contributions;
  the budget counts distinct coalitions (a repeated prefix is cached, not re-paid).
* ``exact_shapley``: FWHT of the value table (n <= 20) and the brute-force definition
  (n <= 12, tests).

Each ``make_<name>(n, m)`` returns an ``estimator.Estimator`` (pure, jit/vmap-safe
``(key, game) -> OddShapResult``, or its ``sample`` / ``fit`` halves); ``<name>(key, game,
m)`` is the one-call form returning ``phi [n]``.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import estimator, fourier, sampling

METHODS = ("oddshap", "kernelshap_paired", "kernelshap_unpaired", "leverageshap",
           "permutation_antithetic")


def kernel_regression(values: jax.Array, coal: sampling.Coalitions, n: int,
                      solver: str = "kkt"):
    """Classic KernelSHAP regression (Lundberg & Lee, exact constraint): every sampled
    coalition one row, 0/1 features ``z(S)``, target ``nu(S) - nu(0)``, weight ``w(S)``,
    ``sum_i beta_i = nu(N) - nu(0)``; ``phi = beta``. The ``"kkt"`` solve is guarded: where
    it is ill-conditioned (``estimator.is_ill_conditioned``, e.g. fewer rows than players
    at the smallest budgets) the min-norm ``"lstsq"`` reference replaces it, inside the
    program (``estimator.guarded``). Returns ``(phi [n], cond, guarded)``."""
    rows = np.arange(2, values.shape[0])
    z = fourier.unpack(coal.masks[rows], n).astype(values.dtype)
    w = jnp.where(coal.valid[rows], coal.weights[rows], 0.0)
    y, c, b = values[rows] - values[0], jnp.ones((n,), values.dtype), values[1] - values[0]
    if solver == "lstsq":
        phi, cond = estimator.constrained_wls(z, y, w, c, b, "lstsq")
        return phi, cond, jnp.asarray(False)

    def plain(*ops):
        phi, cond = estimator.constrained_wls(*ops, "kkt")
        return (phi, cond), estimator.is_ill_conditioned(phi, cond)

    def guard(out, *ops):
        return estimator.constrained_wls(*ops, "lstsq")[0], out[1]

    (phi, cond), bad = estimator.guarded(plain, guard, z, y, w, c, b)
    return phi, cond, bad


def _regression(n, m, *, paired, size_probs, weights="expected", solver="kkt"
                ) -> estimator.Estimator:
    """A sampler (``sampling``) + ``kernel_regression`` at budget ``m`` (one program per
    power-of-two bucket of ``m``)."""
    estimator._check_budget(n, m, 1.0)
    plan = sampling.plan_budget(n, m, size_probs, paired)
    return estimator.Estimator(_build_regression, (plan.layout, weights, solver),
                               sampling.plan_arrays(plan), plan)


@functools.lru_cache(maxsize=None)
def _build_regression(static):
    lay, weights, solver = static
    n = lay.n

    def sample(arrays, key):
        return sampling.sample(jax.random.split(key)[0], lay, arrays, weights=weights)

    def fit(arrays, key, coal, values):
        del arrays, key
        # arrays are made per trace: the builder is cached and must hold none
        support, col_mask = estimator.singleton_support(n)
        phi, cond, grd = kernel_regression(values, coal, n, solver)
        return estimator.OddShapResult(phi, values[0], support, col_mask, cond,
                                       jnp.asarray(False), sampling.budget_spent(coal), grd,
                                       jnp.asarray(0, jnp.int32))

    return sample, fit


def make_kernelshap_paired(n: int, m: int, **kw) -> estimator.Estimator:
    """KernelSHAP: sizes ``∝ 1 / (s (n - s))``, paired, without replacement, border trick."""
    return _regression(n, m, paired=True, size_probs=sampling.kernel_size_probs(n), **kw)


def make_kernelshap_unpaired(n: int, m: int, **kw) -> estimator.Estimator:
    """KernelSHAP without pairing."""
    return _regression(n, m, paired=False, size_probs=sampling.kernel_size_probs(n), **kw)


def make_leverageshap(n: int, m: int, **kw) -> estimator.Estimator:
    """LeverageSHAP: OddSHAP's size-uniform paired sampler (leverage-score sizes), the classic
    regression on singletons. With the same key it draws OddSHAP's coalitions."""
    return _regression(n, m, paired=True, size_probs=sampling.uniform_size_probs(n), **kw)


def permutation_plan(n: int, m: int) -> int:
    """Number of permutation pairs drawn (static): enough that the first ``m`` distinct
    coalitions are nearly always reached; the budget cut is exact (``make_permutation``)."""
    per_pair = max(2 * (n - 1), 1)
    return max(1, int(math.ceil(4 * max(m - 2, 1) / per_pair)) + 2)


def make_permutation_antithetic(n: int, m: int) -> estimator.Estimator:
    """Antithetic permutation sampling at budget ``m`` distinct coalitions.

    ``P`` pairs ``(pi, reverse(pi))`` are drawn (``P`` fixed by the power-of-two bucket of
    ``m``, so budgets of a bucket share one program); their prefix coalitions are listed in
    draw order (``empty`` and ``N`` first); the first ``m`` *distinct* coalitions are the ones
    paid for, and a marginal contribution ``nu(prefix_{k+1}) - nu(prefix_k)`` counts iff both
    coalitions are among them. ``phi_i`` = mean of player ``i``'s counted contributions
    (``(nu(N) - nu(0)) / n`` if it has none: the budget did not reach it)."""
    estimator._check_budget(n, m, 1.0)
    bucket = sampling.bucket_of(n, m)
    return estimator.Estimator(_build_permutation, (n, permutation_plan(n, bucket)),
                               np.int32(m))


@functools.lru_cache(maxsize=None)
def _build_permutation(static):
    n, pairs = static
    w = fourier.num_words(n)

    def sample(m, key):
        full = jnp.asarray(sampling._full_mask(n))
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(
            jax.random.split(jax.random.split(key)[0], pairs))
        perms = jnp.stack([perms, perms[:, ::-1]], axis=1).reshape(2 * pairs, n)  # [Q, n]
        onehot = jax.nn.one_hot(perms, n, dtype=bool)  # [Q, n(pos), n(player)]
        prefix = jnp.cumsum(onehot, axis=1).astype(bool)  # prefix_{k+1} at position k
        inner = fourier.pack(prefix[:, :-1].reshape(-1, n))  # sizes 1..n-1, [Q (n-1), W]
        head = jnp.stack([jnp.zeros((w,), jnp.uint32), full])
        seq = jnp.concatenate([head, inner])  # draw order
        paid, spent = first_m_distinct(seq, m)
        return PermutationDraw(seq, perms, paid, spent)

    def fit(m, key, draw, vals):
        del m, key
        perms, paid = draw.perms, draw.paid
        v0, vn = vals[0], vals[1]
        vin = vals[2:].reshape(2 * pairs, n - 1)
        pin = paid[2:].reshape(2 * pairs, n - 1)
        # chain values nu(prefix_0 .. prefix_n) and their paid flags
        chain = jnp.concatenate([jnp.full((2 * pairs, 1), v0), vin,
                                 jnp.full((2 * pairs, 1), vn)], axis=1)
        cpaid = jnp.concatenate([jnp.full((2 * pairs, 1), paid[0]), pin,
                                 jnp.full((2 * pairs, 1), paid[1])], axis=1)
        contrib = chain[:, 1:] - chain[:, :-1]  # [Q, n] by position
        ok = cpaid[:, 1:] & cpaid[:, :-1]
        tot = jnp.zeros((n,)).at[perms.reshape(-1)].add(jnp.where(ok, contrib, 0.0).reshape(-1))
        cnt = jnp.zeros((n,)).at[perms.reshape(-1)].add(ok.reshape(-1).astype(jnp.float64))
        phi = jnp.where(cnt > 0, tot / jnp.maximum(cnt, 1.0), (vn - v0) / n)
        return estimator.OddShapResult(phi, v0, jnp.zeros((1, w), jnp.uint32),
                                       jnp.zeros((1,), bool), jnp.asarray(jnp.nan),
                                       jnp.asarray(False), draw.spent, jnp.asarray(False),
                                       jnp.asarray(0, jnp.int32))

    return sample, fit


class PermutationDraw(NamedTuple):
    masks: jax.Array  # uint32 [c, W] every prefix coalition in draw order
    perms: jax.Array  # int32 [Q, n]
    paid: jax.Array  # bool [c]
    spent: jax.Array  # int32 []


def first_m_distinct(seq: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """For rows ``seq [c, W]`` in draw order: ``paid [c]`` — the row's coalition is among the
    first ``m`` distinct coalitions of the sequence (a repeat of a paid coalition is paid,
    costing nothing) — and the number of distinct coalitions paid for."""
    c, w = seq.shape
    order = jnp.lexsort([jnp.arange(c)] + [seq[:, j] for j in range(w)])
    sm = seq[order]
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(sm[1:] != sm[:-1], axis=1)])
    group = jnp.cumsum(new) - 1  # group id of each sorted row
    first_of_group = jax.ops.segment_min(order, group, num_segments=c)
    first_pos = jnp.zeros((c,), order.dtype).at[order].set(first_of_group[group])  # per row
    is_first = first_pos == jnp.arange(c)
    rank = jnp.cumsum(is_first) - 1  # distinct rank of each first occurrence, draw order
    m = jnp.asarray(m).astype(rank.dtype)
    paid = rank[first_pos] < m
    return paid, jnp.minimum(jnp.sum(is_first).astype(rank.dtype), m).astype(jnp.int32)


def make_oddshap(n: int, m: int, **kw) -> estimator.Estimator:
    return estimator.make_estimator(n, m, **kw)


MAKERS = {"oddshap": make_oddshap, "kernelshap_paired": make_kernelshap_paired,
          "kernelshap_unpaired": make_kernelshap_unpaired, "leverageshap": make_leverageshap,
          "permutation_antithetic": make_permutation_antithetic}


def make(method: str, n: int, m: int, **kw) -> estimator.Estimator:
    """The ``Estimator`` of ``method`` (one of ``METHODS``) for ``n`` players at budget ``m``:
    ``est(key, game) -> OddShapResult`` (``phi``, ``budget_spent``, ``cond``, ...)."""
    if method not in MAKERS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "permutation_antithetic":
        return make_permutation_antithetic(n, m)
    return MAKERS[method](n, m, **kw)


def _one_call(method):
    def f(key, game, m, **kw):
        return make(method, game.n, m, **kw)(key, game).phi
    f.__name__ = method
    f.__doc__ = f"``phi [n]`` of {method} at budget ``m`` (one jitted call)."
    return f


kernelshap_paired = _one_call("kernelshap_paired")
kernelshap_unpaired = _one_call("kernelshap_unpaired")
leverageshap = _one_call("leverageshap")
permutation_antithetic = _one_call("permutation_antithetic")


def exact_shapley(game) -> jax.Array:
    """Exact ``phi [n]`` via the FWHT of the value table (eq. W1, W2; n <= 20)."""
    from icml26_jax.oddshap import games as games_lib

    return fourier.shapley_from_table(games_lib.value_table(game))


def shapley_bruteforce(values: np.ndarray) -> np.ndarray:
    """The definition ``phi_i = sum_{S ∌ i} |S|! (n - |S| - 1)! / n! (nu(S+i) - nu(S))`` on a
    value table (numpy; n <= 12, tests)."""
    values = np.asarray(values, np.float64)
    n = int(values.shape[-1]).bit_length() - 1
    if n > 12:
        raise ValueError(f"brute force is for n <= 12, got n={n}")
    phi = np.zeros(n)
    fact = [math.factorial(k) for k in range(n + 1)]
    for s in range(1 << n):
        size = bin(s).count("1")
        for i in range(n):
            if not s >> i & 1:
                wgt = fact[size] * fact[n - size - 1] / fact[n]
                phi[i] += wgt * (values[s | 1 << i] - values[s])
    return phi


def shapley_permutations(values: np.ndarray) -> np.ndarray:
    """Average marginal contribution over all ``n!`` orders (numpy; n <= 8, tests)."""
    values = np.asarray(values, np.float64)
    n = int(values.shape[-1]).bit_length() - 1
    phi = np.zeros(n)
    perms = list(itertools.permutations(range(n)))
    for p in perms:
        s = 0
        for i in p:
            phi[i] += values[s | 1 << i] - values[s]
            s |= 1 << i
    return phi / len(perms)
