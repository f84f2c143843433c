"""Ranking metrics (spec §Module API, Metrics). Pure ``jnp`` functions of one ranking,
vmappable over seeds and methods.

Units are ranked by score in descending order. Tied scores are treated as an unordered
group: every per-unit quantity is replaced by its group mean before the cumulative sums,
which is the expectation over random tie-breaking (average ranks). A constant score
therefore has AUTOC exactly 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

APPROX_Q = (0.05, 1.0, 21)  # the q grid of the approximate AUTOC: linspace(0.05, 1, 21)


def _tie_groups(s: jax.Array):
    """Group id of every position of the sorted vector ``s`` (equal neighbours share one)
    and the size of each group."""
    n = s.shape[0]
    new = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    gid = jnp.cumsum(new.astype(jnp.int32)) - 1
    return gid, jax.ops.segment_sum(jnp.ones((n,), s.dtype), gid, num_segments=n)


def _ranked(score: jax.Array, *values: jax.Array):
    """``values`` sorted by descending ``score``, each replaced by its tie-group mean, and
    the tie-group id of every sorted position."""
    n = score.shape[0]
    order = jnp.argsort(-score, stable=True)
    gid, cnt = _tie_groups(score[order])
    out = []
    for v in values:
        tot = jax.ops.segment_sum(v[order], gid, num_segments=n)
        out.append((tot / jnp.maximum(cnt, 1))[gid])
    return out, gid, cnt


def toc_curve(score: jax.Array, tau: jax.Array) -> jax.Array:
    """TOC(k) = (1/k) sum_{top k} tau - mean tau for k = 1..n: ``[n]``."""
    n = score.shape[0]
    (t,), _, _ = _ranked(score, tau)
    k = jnp.arange(1, n + 1, dtype=tau.dtype)
    return jnp.cumsum(t) / k - jnp.mean(tau)


def autoc(score: jax.Array, tau: jax.Array) -> jax.Array:
    """AUTOC = (1/n) sum_k [ (1/k) sum_{top k} tau - mean tau ] (area under the TOC)."""
    return jnp.mean(toc_curve(score, tau))


def policy_value(score: jax.Array, mu0: jax.Array, mu1: jax.Array) -> jax.Array:
    """PV = (1/n) sum_k (1/n)[sum_{top k} mu1 + sum_{rest} mu0]: the value of treating the
    top k, averaged over all budgets k = 1..n."""
    n = score.shape[0]
    (m0, m1), _, _ = _ranked(score, mu0, mu1)
    c1, c0 = jnp.cumsum(m1), jnp.cumsum(m0)
    return jnp.mean((c1 + (c0[-1] - c0)) / n)


def approx_autoc_dr(score: jax.Array, phi: jax.Array) -> jax.Array:
    """The approximate AUTOC of the official code, from DR scores only (no ground truth).

    For q_k in linspace(0.05, 1, 21): I_q marks the top round(q n) units (ties split
    fractionally); TOC(q) ~ mean[(phi - mean phi)(I_q / mean I_q - 1)];
    AUTOC ~ sum_{k=1}^{20} TOC(q_k)(q_{k+1} - q_k) (left Riemann sum). Used for early
    stopping and model selection on validation rows.
    """
    n = score.shape[0]
    (p,), gid, cnt = _ranked(score, phi)
    a = p - jnp.mean(phi)
    # The grid and the unit counts in float64 on the host, as the official NumPy code (q n
    # hits .5 exactly for some n; float32 would round those differently).
    q_np = np.linspace(*APPROX_Q)
    q = jnp.asarray(q_np, phi.dtype)
    target = jnp.asarray(np.round(q_np * n), phi.dtype)
    pos = jnp.arange(n, dtype=phi.dtype)

    def toc(tgt):
        top = (pos < tgt).astype(phi.dtype)
        frac = jax.ops.segment_sum(top, gid, num_segments=n) / jnp.maximum(cnt, 1)
        i_q = frac[gid]
        m = jnp.maximum(jnp.mean(i_q), 1e-12)
        return jnp.mean(a * (i_q / m - 1.0))

    tocs = jax.vmap(toc)(target)
    return jnp.sum(tocs[:-1] * jnp.diff(q))


def pehe(tau: jax.Array, tau_hat: jax.Array) -> jax.Array:
    """sqrt(mean (tau - tau_hat)^2): for CATE learners only (rankers are scale-free)."""
    return jnp.sqrt(jnp.mean((tau - tau_hat) ** 2))


def average_ranks(x: jax.Array) -> jax.Array:
    """Ranks 1..n in ascending order, ties given their average rank."""
    n = x.shape[0]
    order = jnp.argsort(x, stable=True)
    gid, cnt = _tie_groups(x[order])
    tot = jax.ops.segment_sum(jnp.arange(1, n + 1).astype(x.dtype), gid, num_segments=n)
    return jnp.zeros((n,), x.dtype).at[order].set((tot / jnp.maximum(cnt, 1))[gid])


def spearman(a: jax.Array, b: jax.Array) -> jax.Array:
    """Spearman's rank correlation (Pearson correlation of average ranks)."""
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return jnp.sum(ra * rb) / jnp.sqrt(jnp.sum(ra ** 2) * jnp.sum(rb ** 2))


def kendall_tau(a: jax.Array, b: jax.Array) -> jax.Array:
    """Kendall's tau-b (ties corrected), O(n^2) over all pairs."""
    da = jnp.sign(a[:, None] - a[None, :])
    db = jnp.sign(b[:, None] - b[None, :])
    num = jnp.sum(da * db)
    return num / jnp.sqrt(jnp.sum(da ** 2) * jnp.sum(db ** 2))
