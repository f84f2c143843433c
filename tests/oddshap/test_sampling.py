"""OddSHAP spec §Tests 4-5: the paired, size-uniform, without-replacement sampler with the
border trick — distinct coalitions, complements present, complete enumerated sizes, exact
budget, the size histogram, complement-symmetric weights, vmap == loop."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from icml26_jax.oddshap import fourier, sampling


def _rows(coal, n):
    v = np.asarray(coal.valid)
    return np.asarray(fourier.unpack(coal.masks, n))[v], np.asarray(coal.weights)[v], v


@pytest.mark.parametrize("n,m,paired", [(10, 200, True), (10, 201, True), (12, 700, False),
                                        (40, 400, True), (9, 512, True)])
def test_distinct_complements_enumeration_and_budget(n, m, paired):
    plan = sampling.plan_budget(n, m, paired=paired)
    coal = jax.jit(lambda k: sampling.sample(k, plan))(jax.random.key(0))
    z, w, valid = _rows(coal, n)
    keys = {tuple(r) for r in z}
    assert len(keys) == len(z)  # no duplicates
    spent = int(sampling.budget_spent(coal))
    assert m - 1 <= spent <= m and spent == plan.planned_spent
    assert keys >= {tuple(np.zeros(n, bool)), tuple(np.ones(n, bool))}
    if paired:
        assert all(tuple(~np.asarray(r)) in keys for r in z)
    sizes = z.sum(1)
    for s in plan.enumerated_sizes:  # every coalition of an enumerated size is present
        assert np.sum(sizes == s) == math.comb(n, s) and np.sum(sizes == n - s) == math.comb(n, n - s)
    # weights depend on the size only and are complement-symmetric
    for s in range(1, n):
        ws = w[sizes == s]
        if len(ws):
            np.testing.assert_allclose(ws, ws[0], rtol=1e-12)
            wc = w[sizes == n - s]
            np.testing.assert_allclose(wc, ws[0], rtol=1e-12)
    assert np.all(w[(sizes == 0) | (sizes == n)] == 0)


def test_border_trick_enumerates_small_sizes_and_weights_are_kernel_there():
    n, m = 10, 300
    plan = sampling.plan_budget(n, m)
    assert plan.enumerated_sizes == (1,)  # 298 / 9 >= 10 = C(10, 1); then 278 / 7 < 45
    coal = sampling.sample(jax.random.key(3), plan)
    z, w, _ = _rows(coal, n)
    sizes = z.sum(1)
    np.testing.assert_allclose(w[sizes == 1], sampling.kernel_weight(n, 1), rtol=1e-12)
    # sampled sizes: 1 / (s (n - s) p(s) m_sampled) with p uniform over 2..8
    m_sampled = 2 * plan.n_pairs
    s = 4
    np.testing.assert_allclose(w[sizes == s], 1.0 / (s * (n - s) * (1 / 7) * m_sampled),
                               rtol=1e-12)


def test_size_histogram_matches_p():
    n, m = 30, 2002  # nothing enumerated at n = 30: sizes 1..29 uniform
    plan = sampling.plan_budget(n, m)
    assert plan.enumerated_sizes == (1,) or plan.enumerated_sizes == ()
    coal = sampling.sample(jax.random.key(7), plan)
    z, _, _ = _rows(coal, n)
    lay = plan.layout
    first = np.asarray(coal.valid)[2 + lay.n_enumerated::2]
    sizes = np.asarray(fourier.unpack(coal.masks, n)).sum(1)[2 + lay.n_enumerated::2][first]
    # the first member of each sampled pair
    sizes = sizes[: 2000]
    # a pair drawn at size s or n - s: the member listed is the drawn one
    support = list(plan.sampled_sizes)
    counts = np.array([np.sum(sizes == s) for s in support])
    expected = np.asarray(plan.size_probs) * len(sizes)
    p = stats.chisquare(counts, expected).pvalue
    assert len(sizes) >= 900 and p > 1e-3, (p, counts)


def test_stratified_weights_use_realised_counts():
    n, m = 12, 600
    plan = sampling.plan_budget(n, m)
    coal = sampling.sample(jax.random.key(1), plan, weights="stratified")
    z, w, _ = _rows(coal, n)
    sizes = z.sum(1)
    s = [x for x in plan.sampled_sizes][2]
    valid = np.asarray(coal.valid)
    all_sizes = np.asarray(fourier.unpack(coal.masks, n)).sum(1)
    start = 2 + plan.layout.n_enumerated
    n_s = np.sum((all_sizes == s)[start:] & valid[start:])
    np.testing.assert_allclose(w[sizes == s], 1.0 / (s * (n - s) * n_s), rtol=1e-12)
    with pytest.raises(ValueError, match="weights must be one of"):
        sampling.sample(jax.random.key(1), plan, weights="leverage")


def test_vmap_equals_loop_and_same_key_same_draw():
    plan = sampling.plan_budget(14, 900)
    keys = jax.random.split(jax.random.key(5), 4)
    batched = jax.jit(jax.vmap(lambda k: sampling.sample(k, plan)))(keys)
    for i in range(4):
        one = sampling.sample(keys[i], plan)
        for a, b in zip(one, batched):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
    again = jax.jit(jax.vmap(lambda k: sampling.sample(k, plan)))(keys)
    np.testing.assert_array_equal(np.asarray(again.masks), np.asarray(batched.masks))
    assert not np.array_equal(np.asarray(batched.masks[0]), np.asarray(batched.masks[1]))


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=10, m=1), "m \\(budget\\) must be in"),
    (dict(n=10, m=1025), "m \\(budget\\) must be in"),
    (dict(n=129, m=100), "n \\(number of players\\) must be in"),
    (dict(n=6, m=20, size_probs=np.ones(5)), "size_probs must be"),
])
def test_plan_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sampling.plan_budget(**kwargs)
