"""Coalition sampling with exact budget accounting (spec §Method "Algorithm" 1-2).

A budget ``m`` counts *distinct* coalitions evaluated, the empty and grand coalitions
included (cost 2, always spent). The rest is spent as follows (host plan, then a jit/vmap-safe
draw with static shapes):

* **Border trick** (``plan_budget``): with budget ``B`` left and size probabilities ``p(s)``
  renormalised over the remaining sizes, while some remaining size has expected count
  ``B p(s) >= C(n, s)``, sizes ``s`` and ``n - s`` are enumerated completely (their cost
  subtracted, ``p`` renormalised).
* **Paired** (default): ``n_pairs = floor(B / 2)`` pairs ``{S, S^c}``, ``|S| ~ p``, ``S``
  uniform within its size, without replacement (a duplicate pair is redrawn and costs
  nothing); an odd leftover unit is not spent. **Unpaired**: ``n_single = B`` coalitions.
* **Weights** (eq. K1): kernel ``mu(s) = 1 / (s (n - s) C(n, s))``; enumerated sizes get
  ``mu(s)``; sampled coalitions ``mu(s) / (P(S) m_sampled) = 1 / (s (n - s) p(s) m_sampled)``
  with ``P(S) = p(s) / C(n, s)`` (``weights="stratified"`` [R]: the realised count ``n_s`` of
  size ``s`` replaces ``p(s) m_sampled``). The empty and grand coalitions carry weight 0 in the
  regression: the exact intercept and constraint use them (``estimator``).

Without replacement inside jit: ``cap >= n_draw`` candidates are drawn, duplicates are found
by a stable lexicographic sort of the packed (canonical) masks, and the first ``n_draw``
distinct ones in draw order are kept. ``plan_budget`` chooses ``cap`` so that the expected
number of distinct candidates exceeds ``n_draw`` by a wide margin; the coalitions actually
obtained are ``valid`` and counted in ``budget_spent``.

**Buckets** (spec §Experiment): shapes depend on the power-of-two bucket of ``m`` only
(``Layout``, static), what the budget itself spends on ``PlanArrays`` (traced): budgets of
one bucket share one compiled program. Row layout of ``Coalitions`` (every field ``[M]``,
``M = layout.rows``): ``[empty, grand, enumerated block: pairs (S, S^c) of the sizes the
bucket's top enumerates, sampled pairs (S, S^c)... | sampled singles...]``; rows the budget
does not spend (sizes it does not enumerate, draw slots beyond its own count, an odd leftover
unit, fewer distinct candidates than planned) are ``valid=False`` with weight 0. The budget
actually spent stays exact (``budget_spent``). ``pair_first`` marks the first row of each
complementary pair (its partner is the next row).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import fourier

WEIGHTS = ("expected", "stratified")


class Layout(NamedTuple):
    """Static row layout shared by every budget of a power-of-two bucket (fixes every shape,
    so one program serves all of them): ``[empty, grand, enumerated block, sampled pairs |
    singles]``. The enumerated block holds every pair of the sizes enumerated at the top of
    the bucket (rows of a size the budget does not enumerate are ``valid=False``); ``n_draw``
    is the most draws any budget of the bucket makes, ``cap`` the most candidates."""
    n: int
    paired: bool
    bucket: int  # power of two >= m (at most 2^n)
    enumerated_sizes: tuple  # sizes s <= n - s with a block (the bucket top's enumeration)
    n_enumerated: int  # rows of the enumerated block
    n_draw: int  # draw slots (pairs if paired, else coalitions)
    cap: int  # candidates drawn for without-replacement selection
    rows: int  # 2 + n_enumerated + (2 if paired else 1) * n_draw

    @property
    def n_pairs(self) -> int:
        return self.n_draw if self.paired else 0

    @property
    def n_single(self) -> int:
        return 0 if self.paired else self.n_draw


class BudgetPlan(NamedTuple):
    """Host-side plan of budget ``m``: what is enumerated and drawn (exact), and the static
    ``layout`` of its bucket."""
    n: int
    m: int
    paired: bool
    enumerated_sizes: tuple  # sizes s <= n - s enumerated completely (with n - s)
    sampled_sizes: tuple  # the remaining sizes 1..n-1
    size_probs: tuple  # p(s) over sampled_sizes, renormalised (sums to 1)
    n_enumerated: int  # coalitions enumerated (pairs counted twice)
    n_pairs: int  # sampled pairs (paired)
    n_single: int  # sampled coalitions (unpaired)
    cap: int  # candidates this budget alone would need
    layout: Layout

    @property
    def planned_spent(self) -> int:
        return 2 + self.n_enumerated + 2 * self.n_pairs + self.n_single

    @property
    def rows(self) -> int:
        return self.layout.rows


class PlanArrays(NamedTuple):
    """The dynamic part of a plan (traced arrays: budgets of one bucket share programs)."""
    enum_on: jax.Array  # bool [n + 1]: size s enumerated (s and n - s)
    size_probs: jax.Array  # f64 [n + 1]: p(s) over the sampled sizes, 0 elsewhere
    n_draw: jax.Array  # int32 []: draws made (pairs if paired)


class Coalitions(NamedTuple):
    masks: jax.Array  # uint32 [M, W]
    pair_first: jax.Array  # bool [M]: first row of a complementary pair (partner = next row)
    weights: jax.Array  # f64 [M] regression weight of each coalition (0 for empty / grand)
    valid: jax.Array  # bool [M] row holds a real, distinct coalition


def kernel_weight(n: int, s) -> np.ndarray:
    """``mu(s) = 1 / (s (n - s) C(n, s))`` (Shapley kernel), 0 at ``s in {0, n}``."""
    s = np.asarray(s)
    out = np.zeros(s.shape, np.float64)
    inner = (s > 0) & (s < n)
    si = s[inner]
    out[inner] = 1.0 / (si * (n - si) * np.exp(_log_comb(n, si)))
    return out


def _log_comb(n, s):
    s = np.asarray(s, np.float64)
    return (math.lgamma(n + 1) - np.vectorize(math.lgamma)(s + 1)
            - np.vectorize(math.lgamma)(n - s + 1))


def uniform_size_probs(n: int) -> np.ndarray:
    """OddSHAP / LeverageSHAP: ``p(s) ∝ 1`` on ``s = 1..n-1`` (index ``s``; 0 at 0 and n)."""
    p = np.zeros(n + 1)
    p[1:n] = 1.0
    return p / p.sum()


def kernel_size_probs(n: int) -> np.ndarray:
    """KernelSHAP: ``p(s) ∝ 1 / (s (n - s))`` on ``s = 1..n-1``."""
    p = np.zeros(n + 1)
    s = np.arange(1, n)
    p[1:n] = 1.0 / (s * (n - s))
    return p / p.sum()


def _expected_distinct(counts: np.ndarray, draws: float, probs: np.ndarray) -> float:
    """Expected distinct items after ``draws`` draws, item classes of sizes ``counts`` drawn
    with class probabilities ``probs`` (uniform inside a class)."""
    lam = draws * probs / counts
    return float(np.sum(counts * -np.expm1(-lam)))


def bucket_of(n: int, m: int) -> int:
    """The power-of-two bucket of budget ``m`` (``m`` rounded up to a power of two, at most
    ``2^n``)."""
    return int(min(1 << max(int(m) - 1, 1).bit_length(), 2 ** n))


def _check_plan_args(n, m, size_probs):
    n = fourier.check_players(n)
    if n < 2:
        raise ValueError(f"n (number of players) must be >= 2, got {n}")
    if not 2 <= int(m) <= 2.0 ** n:
        raise ValueError(f"m (budget) must be in [2, 2^n = {2 ** n}], got {m}")
    p = uniform_size_probs(n) if size_probs is None else np.asarray(size_probs, np.float64)
    if p.shape != (n + 1,) or np.any(p < 0) or not np.allclose(p[1:n], p[1:n][::-1]):
        raise ValueError(f"size_probs must be [n + 1] = [{n + 1}], non-negative and symmetric "
                         f"(p(s) = p(n - s)), got shape {p.shape}")
    return n, int(m), p


def _spend(n: int, m: int, p: np.ndarray, paired: bool):
    """The border trick and the draw count of budget ``m``: ``(enumerated, n_enum,
    remaining, pr, n_draw)``."""
    remaining = [s for s in range(1, n) if p[s] > 0]
    budget = m - 2
    enumerated = []
    changed = True
    while changed and remaining:
        changed = False
        pr = np.array([p[s] for s in remaining])
        pr = pr / pr.sum()
        for s, ps in zip(remaining, pr):
            if s > n - s:
                continue
            cost = math.comb(n, s) * (1 if s == n - s else 2)
            if budget * ps >= math.comb(n, s) and cost <= budget:
                enumerated.append(s)
                budget -= cost
                remaining = [r for r in remaining if r not in (s, n - s)]
                changed = True
                break
    n_enum = sum(math.comb(n, s) * (1 if s == n - s else 2) for s in enumerated)
    pr = np.array([p[s] for s in remaining], np.float64)
    pr = pr / pr.sum() if remaining else pr
    n_draw = (budget // 2 if paired else budget) if remaining else 0
    avail = sum(math.comb(n, s) for s in remaining)
    if paired:
        avail //= 2
    return tuple(enumerated), n_enum, remaining, pr, min(n_draw, avail)


@functools.lru_cache(maxsize=512)
def _layout(n: int, bucket: int, p_key: tuple, paired: bool) -> Layout:
    """The bucket's layout: its enumerated block is the top budget's (the enumeration only
    grows with the budget, checked in ``plan_budget``); ``n_draw`` and ``cap`` are maxima over
    the bucket's budgets, found at the ends of the stretches of equal enumeration (where
    ``n_draw`` and ``cap`` peak) by bisection."""
    p = np.asarray(p_key)
    lo, hi = max(2, bucket // 2 + 1), bucket
    if bucket <= 2:
        lo = hi
    ends = {}

    def at(m):
        if m not in ends:
            enum, n_enum, rem, pr, n_draw = _spend(n, m, p, paired)
            ends[m] = (enum, n_draw, _choose_cap(n, rem, pr, n_draw, paired))
        return ends[m]

    def split(a, b):  # [a, b] with at(a), at(b) known
        if at(a)[0] == at(b)[0] or b - a <= 1:
            return
        mid = (a + b) // 2
        split(a, mid)
        split(mid, b)

    split(lo, hi)
    enum_top = at(hi)[0]
    n_draw = max(v[1] for v in ends.values())
    # one growth step of _choose_cap above the largest: its geometric steps make the cap of a
    # budget inside a stretch up to one step larger than at the stretch's end
    cap = int(max(v[2] for v in ends.values()) * 1.3) + 1
    n_enum = sum(math.comb(n, s) * (1 if s == n - s else 2) for s in enum_top)
    rows = 2 + n_enum + (2 if paired else 1) * n_draw
    return Layout(n, bool(paired), bucket, enum_top, n_enum, n_draw, cap, rows)


def plan_budget(n: int, m: int, size_probs=None, paired: bool = True) -> BudgetPlan:
    """The plan of budget ``m`` (see module docstring) and its bucket's ``layout``.
    ``size_probs``: ``[n + 1]`` (index = size; default uniform), symmetric ``p(s) = p(n -
    s)``."""
    n, m, p = _check_plan_args(n, m, size_probs)
    enumerated, n_enum, remaining, pr, n_draw = _spend(n, m, p, paired)
    n_pairs, n_single = (n_draw, 0) if paired else (0, n_draw)
    cap = _choose_cap(n, remaining, pr, n_draw, paired)
    layout = _layout(n, bucket_of(n, m), tuple(float(x) for x in p), bool(paired))
    if not set(enumerated) <= set(layout.enumerated_sizes) or n_draw > layout.n_draw \
            or cap > layout.cap:  # the layout bounds every budget of its bucket (tested)
        raise AssertionError(f"budget {m} does not fit its bucket layout {layout}")
    return BudgetPlan(n, m, bool(paired), enumerated, tuple(remaining),
                      tuple(float(x) for x in pr), n_enum, n_pairs, n_single, cap, layout)


def plan_arrays(plan: BudgetPlan) -> PlanArrays:
    """The dynamic arrays of ``plan`` (host NumPy; pass them as jit arguments)."""
    n = plan.n
    on = np.zeros(n + 1, bool)
    for s in plan.enumerated_sizes:
        on[s] = on[n - s] = True
    probs = np.zeros(n + 1)
    probs[list(plan.sampled_sizes)] = plan.size_probs
    return PlanArrays(on, probs, np.int32(plan.n_pairs if plan.paired else plan.n_single))


def _choose_cap(n, sizes, probs, n_draw, paired) -> int:
    if n_draw == 0:
        return 0
    counts = np.array([math.comb(n, s) for s in sizes], np.float64)
    pr = np.asarray(probs, np.float64)
    if paired:
        # pairs with a member of size s: C(n, s), reached from size s or n - s (C / 2 per
        # size with probability p(s) gives the same expected count; also right at s = n / 2)
        counts = counts / 2.0
    cap = max(n_draw + 16, int(1.25 * n_draw))
    for _ in range(60):
        mean = _expected_distinct(counts, cap, pr)
        if mean >= n_draw + 6.0 * math.sqrt(max(n_draw, 1.0)) + 4 or mean >= counts.sum() - 0.5:
            break
        cap = int(cap * 1.3) + 1
    return int(cap)


def enumerate_pairs(n: int, sizes) -> np.ndarray:
    """``uint32 [P, W]`` (numpy): one member of every complementary pair of the enumerated
    ``sizes`` (each ``s <= n - s``). For ``s = n / 2`` each pair appears once (the member
    without player ``n - 1``)."""
    w = fourier.num_words(n)
    out = []
    for s in sizes:
        for comb in itertools.combinations(range(n), s):
            if 2 * s == n and (n - 1) in comb:
                continue
            mask = np.zeros(w, np.uint64)
            for i in comb:
                mask[i // 32] |= np.uint64(1) << np.uint64(i % 32)
            out.append(mask.astype(np.uint32))
    return np.asarray(out, np.uint32).reshape(-1, w)


def _full_mask(n: int) -> np.ndarray:
    w = fourier.num_words(n)
    m = np.zeros(w, np.uint64)
    for i in range(n):
        m[i // 32] |= np.uint64(1) << np.uint64(i % 32)
    return m.astype(np.uint32)


def complement(masks: jax.Array, n: int) -> jax.Array:
    """Packed ``S^c`` of packed ``S`` (``[..., W]``)."""
    return masks ^ jnp.asarray(_full_mask(n))


def _random_subsets(key, n: int, sizes: jax.Array) -> jax.Array:
    """``bool [c, n]``: a uniform subset of size ``sizes[r]`` per row (ranks of uniforms)."""
    u = jax.random.uniform(key, (sizes.shape[0], n))
    # the sizes[r] smallest uniforms of a row: below or at its sizes[r]-th order statistic
    # (one sort; ties have probability 0). Sizes are >= 1.
    kth = jnp.take_along_axis(jnp.sort(u, axis=1), (sizes - 1)[:, None].astype(jnp.int32),
                              axis=1)
    return u <= kth


def first_distinct(masks: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Indices of the first ``k`` distinct rows of ``masks [c, W]`` in row order, and a
    validity flag (``False`` where fewer than ``k`` distinct rows exist)."""
    c, w = masks.shape
    idx = jnp.arange(c)
    keys = [idx] + [masks[:, j] for j in range(w)]  # last key = primary (jnp.lexsort)
    order = jnp.lexsort(keys)
    sm = masks[order]
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(sm[1:] != sm[:-1], axis=1)])
    first_idx = jnp.where(new, order, c)  # original index of each group's first occurrence
    chosen = jnp.sort(first_idx)[:k]
    ok = chosen < c
    return jnp.where(ok, chosen, 0), ok


def sample(key: jax.Array, plan, arrays: PlanArrays | None = None, size_probs=None,
           weights: str = "expected") -> Coalitions:
    """Draws a plan's coalitions (jit/vmap-safe in ``key`` and ``arrays``).

    Args:
      key: a typed PRNG key.
      plan: a ``BudgetPlan`` (then ``arrays`` defaults to ``plan_arrays(plan)``) or the
        static ``Layout`` of its bucket (then ``arrays`` is required): every budget of a
        bucket gives the same shapes, so one compiled program draws for all of them.
      arrays: the budget's ``PlanArrays`` (traced or host).
      size_probs: unused beyond the plan (kept for the spec's signature).
      weights: ``"expected"`` (``p(s) m_sampled``) or ``"stratified"`` (realised ``n_s``).
    """
    del size_probs
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if isinstance(plan, BudgetPlan):
        arrays = plan_arrays(plan) if arrays is None else arrays
        layout = plan.layout
    elif isinstance(plan, Layout):
        if arrays is None:
            raise ValueError("sample(key, layout) needs the budget's arrays (plan_arrays)")
        layout = plan
    else:
        raise ValueError(f"plan must be a BudgetPlan or a Layout, got {type(plan).__name__}")
    n = layout.n
    w_words = fourier.num_words(n)
    full = jnp.asarray(_full_mask(n))
    enum_on = jnp.asarray(arrays.enum_on)
    p_full = jnp.asarray(arrays.size_probs, jnp.float64)
    n_draw_dyn = jnp.asarray(arrays.n_draw).astype(jnp.int32)
    empty = jnp.zeros((1, w_words), jnp.uint32)
    parts_m = [empty, full[None]]
    parts_first = [jnp.zeros((2,), bool)]
    parts_w = [jnp.zeros((2,))]
    parts_v = [jnp.ones((2,), bool)]
    if layout.n_enumerated:
        e = jnp.asarray(enumerate_pairs(n, layout.enumerated_sizes))
        ec = e ^ full
        inter = jnp.stack([e, ec], axis=1).reshape(-1, w_words)
        sizes_e = np.asarray(_pair_sizes(n, layout.enumerated_sizes))
        on = enum_on[sizes_e]
        parts_m.append(jnp.where(on[:, None], inter, jnp.uint32(0)))
        parts_first.append(jnp.tile(jnp.array([True, False]), e.shape[0]) & on)
        parts_w.append(jnp.where(on, jnp.asarray(kernel_weight(n, sizes_e)), 0.0))
        parts_v.append(on)
    if layout.n_draw:
        k_size, k_set = jax.random.split(key)
        # inverse CDF of p over the sizes 1..n-1 (sizes of probability 0 are never drawn)
        cdf = jnp.cumsum(p_full[1:n])[:-1]
        sidx = jnp.sum(jax.random.uniform(k_size, (layout.cap,))[:, None] >= cdf[None], axis=1)
        sizes = jnp.clip(1 + sidx, 1, n - 1)
        cand = fourier.pack(_random_subsets(k_set, n, sizes))  # [cap, W]
        slots = jnp.arange(layout.n_draw, dtype=jnp.int32) < n_draw_dyn
        if layout.paired:
            # canonical member of {S, S^c}: the one without player n - 1
            top = (cand[:, (n - 1) // 32] >> jnp.uint32((n - 1) % 32)) & jnp.uint32(1)
            canon = jnp.where((top == 1)[:, None], cand ^ full, cand)
            pick, ok = first_distinct(canon, layout.n_draw)
            ok = ok & slots
            s_mask = cand[pick]
            rows = jnp.stack([s_mask, s_mask ^ full], axis=1).reshape(-1, w_words)
            ok_rows = jnp.repeat(ok, 2)
            first = jnp.tile(jnp.array([True, False]), layout.n_draw)
            m_sampled = 2.0 * jnp.sum(ok.astype(jnp.float64))
        else:
            pick, ok = first_distinct(cand, layout.n_draw)
            ok = ok & slots
            rows = cand[pick]
            ok_rows = ok
            first = jnp.zeros((layout.n_draw,), bool)
            m_sampled = jnp.sum(ok.astype(jnp.float64))
        rs = fourier.popcount(rows)  # [R]
        p_of = p_full[rs]
        s_f = rs.astype(p_of.dtype)
        if weights == "expected":
            denom = s_f * (n - s_f) * p_of * jnp.maximum(m_sampled, 1.0)
        else:  # mu(s) C(n, s) / n_s = 1 / (s (n - s) n_s), n_s the realised count of size s
            counts = jnp.zeros((n + 1,)).at[rs].add(ok_rows.astype(jnp.float64))
            denom = s_f * (n - s_f) * jnp.maximum(counts[rs], 1.0)
        ok_rows = ok_rows & (denom > 0)
        wts = jnp.where(ok_rows, 1.0 / jnp.where(ok_rows, denom, 1.0), 0.0)
        parts_m.append(jnp.where(ok_rows[:, None], rows, jnp.uint32(0)))
        parts_first.append(first & ok_rows)
        parts_w.append(wts)
        parts_v.append(ok_rows)
    return Coalitions(jnp.concatenate(parts_m), jnp.concatenate(parts_first),
                      jnp.concatenate(parts_w), jnp.concatenate(parts_v))


def _pair_sizes(n, sizes):
    """Sizes of the rows ``(S, S^c)`` of ``enumerate_pairs(n, sizes)``, in order."""
    out = []
    for s in sizes:
        cnt = math.comb(n, s) // (2 if 2 * s == n else 1)
        out += [s, n - s] * cnt
    return out


def budget_spent(coal: Coalitions) -> jax.Array:
    """Distinct coalitions evaluated (``valid`` rows)."""
    return jnp.sum(coal.valid.astype(jnp.int32))
