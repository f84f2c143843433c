"""OddSHAP spec §Tests 6, 9-12 and claim 3: collapsed == uncollapsed rows, KKT == lstsq,
padding columns, full-budget exactness, efficiency, the fallback rule, convergence on a SOUM,
errors naming the argument, seeds vmapped == looped == sharded, the permutation baseline's
budget, and singleton OddSHAP == LeverageSHAP on identical coalitions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scipy import stats

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.oddshap import baselines, estimator, fourier, games, sampling


def _soum(n, seed, terms=None):
    rng = np.random.default_rng(seed)
    masks, coefs = [], []
    for k in range(terms or n // 3):
        size = [3, 5][k] if k < 2 else rng.choice([1, 2, 3, 5], p=[.3, .3, .25, .15])
        z = np.zeros(n, bool)
        z[rng.choice(n, size, replace=False)] = True
        masks.append(np.asarray(fourier.pack(jnp.asarray(z))))
        coefs.append(rng.choice([-1, 1]) * rng.uniform(0.5, 1.5))
    return games.soum_game(np.stack(masks), np.asarray(coefs), n)


# tests about the regression, the budget or batching, not the proxy's quality: a cheap proxy
CHEAP = dict(proxy_cfg=estimator.ProxyConfig(trees=10))


def _table_game(n, seed):
    v = np.random.default_rng(seed).normal(size=1 << n)
    return games.table_game(jnp.asarray(v)), np.asarray(fourier.shapley_from_table(
        jnp.asarray(v))), v


def test_collapsed_equals_uncollapsed_and_kkt_equals_lstsq_padding_zero():
    n, m = 10, 400
    game, _, _ = _table_game(n, 0)
    support = estimator.make_estimator(n, m, **CHEAP)  # a proxy support (k = 40)
    res = jax.jit(support)(jax.random.key(1), game)
    a, cm = res.support, res.col_mask.at[-3:].set(False)  # three padding columns
    a = jnp.where(cm[:, None], a, jnp.uint32(0))
    plan = support.plan
    coal = support.sample(jax.random.key(1))
    values = game.packed(coal.masks)
    variants = [(collapse, solver) for collapse in (True, False) for solver in ("kkt", "lstsq")]
    # the four solves in ONE compiled program (one compilation instead of four)
    out = jax.jit(lambda v, co, a, cm: {
        k: estimator.solve_support(v, co, plan, a, cm, collapse=k[0], solver=k[1])[0]
        for k in variants})(values, coal, a, cm)
    ref = np.asarray(out[True, "kkt"])
    for k, v in out.items():
        np.testing.assert_allclose(v, ref, atol=1e-9, err_msg=str(k))
    # beta of padding columns is exactly 0 with the KKT solver
    rows, paired = estimator.regression_rows(plan)
    y, w = estimator.collapse_pairs(values, coal, rows, paired)
    x = jnp.where(cm, fourier.parity_f(coal.masks[rows], a), 0.0)
    beta, cond = estimator.constrained_wls(x, y, w, cm, -0.5 * (values[1] - values[0]))
    assert np.all(np.asarray(beta)[~np.asarray(cm)] == 0.0) and 1 <= float(cond) < 1e10
    np.testing.assert_allclose(jnp.sum(jnp.where(cm, beta, 0.0)), -0.5 * (values[1] - values[0]), atol=1e-12)


@pytest.mark.parametrize("n", [6, 9])
def test_full_budget_with_all_odd_sets_is_exact(n):
    game, phi, _ = _table_game(n, n)
    r = jax.jit(estimator.make_estimator(n, 2 ** n, support="all_odd"))(jax.random.key(0), game)
    np.testing.assert_allclose(r.phi, phi, atol=1e-8)
    assert int(r.budget_spent) == 2 ** n


def test_efficiency_exact_and_fallback_iff_budget_below_eta_n():
    n = 12
    game, phi, v = _table_game(n, 3)
    for m in (119, 120):  # either side of eta n = 120
        est = estimator.make_estimator(n, m, eta=10.0, **CHEAP)
        r = jax.jit(est)(jax.random.key(m), game)
        assert bool(r.used_fallback) == (m < 120) == est.fallback
        if not est.fallback:
            np.testing.assert_allclose(float(r.phi.sum()), v[-1] - v[0], atol=1e-8)
            assert int(r.col_mask.sum()) <= est.k and int(r.col_mask[:n].sum()) == n
        assert m - 1 <= int(r.budget_spent) <= m


def test_singleton_oddshap_equals_leverageshap_on_identical_coalitions():
    """Claim 3: paired regression on 0/1 features (LeverageSHAP) filters the even part, so
    it equals OddSHAP restricted to the singletons."""
    n = 11
    game, _, _ = _table_game(n, 4)
    for m in (150, 700):
        a = jax.jit(estimator.make_estimator(n, m, support="singletons"))(jax.random.key(2), game)
        b = jax.jit(baselines.make("leverageshap", n, m))(jax.random.key(2), game)
        np.testing.assert_allclose(a.phi, b.phi, atol=1e-8)
        # the unpaired regression does NOT filter the even part: it differs
        c = jax.jit(baselines.make("kernelshap_unpaired", n, m))(jax.random.key(2), game)
        assert float(jnp.abs(c.phi - a.phi).max()) > 1e-6


def test_oddshap_converges_on_a_soum_and_beats_kernelshap():
    """Spec test 10: on soum30 the MSE falls with m (Spearman rho < 0, p < 0.05 over 10
    seeds x 4 budgets)."""
    n = 30
    game, phi, _ = _soum(n, 0)
    keys = jax.random.split(jax.random.key(0), 10)
    budgets, mses = [], []
    last = {}
    for m in (300, 600, 1500, 3000):
        r = jax.jit(jax.vmap(estimator.make_estimator(n, m), in_axes=(0, None)))(keys, game)
        err = np.mean((np.asarray(r.phi) - phi) ** 2, axis=1)
        budgets += [m] * 10
        mses += list(err)
        last["odd"] = err.mean()
    rho, p = stats.spearmanr(budgets, mses)
    assert rho < 0 and p < 0.05, (rho, p)
    r = jax.jit(jax.vmap(baselines.make("kernelshap_paired", n, 3000), in_axes=(0, None)))(
        keys, game)
    assert last["odd"] < 0.5 * np.mean((np.asarray(r.phi) - phi) ** 2)


def test_permutation_antithetic_spends_exactly_m_distinct_and_is_exact_in_the_limit():
    n = 6
    game, phi, _ = _table_game(n, 5)
    for m in (10, 40):
        r = jax.jit(baselines.make("permutation_antithetic", n, m))(jax.random.key(1), game)
        assert int(r.budget_spent) == m
    # at the full budget the last coalitions are coupon-collector rare: fewer may be paid,
    # never more
    # every coalition paid: contributions are exact marginal contributions of real orders
    keys = jax.random.split(jax.random.key(0), 400)
    est = baselines.make("permutation_antithetic", n, 64)
    rs = jax.jit(jax.vmap(est, in_axes=(0, None)))(keys, game)
    assert 48 <= int(rs.budget_spent.min()) and int(rs.budget_spent.max()) <= 64
    np.testing.assert_allclose(np.asarray(rs.phi).mean(0), phi, atol=0.05)
    seq = jnp.asarray([[0], [3], [3], [1], [0], [2]], jnp.uint32)
    paid, spent = baselines.first_m_distinct(seq, 2)
    np.testing.assert_array_equal(np.asarray(paid), [True, True, True, False, True, False])
    assert int(spent) == 2


def test_seeds_vmapped_equal_looped_and_sharded():
    n, m = 10, 300
    game, _, _ = _table_game(n, 6)
    est = estimator.make_estimator(n, m, **CHEAP)
    keys = jax.random.split(jax.random.key(9), 8)
    batched = jax.jit(jax.vmap(est, in_axes=(0, None)))(keys, game)
    one = jax.jit(est)
    for i in (0, 5):
        np.testing.assert_allclose(one(keys[i], game).phi, batched.phi[i], atol=1e-10)
    mesh = mesh_lib.make_mesh((8,), (mesh_lib.DATA,), auto=True)  # XLA propagates
    ks = jax.device_put(keys, NamedSharding(mesh, P(mesh_lib.DATA)))
    sharded = jax.jit(jax.vmap(est, in_axes=(0, None)))(ks, game)
    assert len(sharded.phi.sharding.device_set) == 8
    np.testing.assert_allclose(sharded.phi, batched.phi, atol=1e-10)
    again = jax.jit(jax.vmap(est, in_axes=(0, None)))(keys, game)
    np.testing.assert_array_equal(np.asarray(again.phi), np.asarray(batched.phi))


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=10, m=1), "m \\(budget\\) must be in"),
    (dict(n=10, m=2000), "m \\(budget\\) must be in"),
    (dict(n=10, m=200, eta=0.0), "eta must be > 0"),
    (dict(n=130, m=200), "n \\(number of players\\)"),
    (dict(n=10, m=200, support="even"), "support must be one of"),
    (dict(n=10, m=200, solver="qr"), "solver must be one of"),
])
def test_estimator_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        estimator.make_estimator(**kwargs)


def test_game_errors():
    game, _, _ = _table_game(5, 0)
    with pytest.raises(ValueError, match="coalitions must be bool"):
        game(jnp.zeros((3, 5), jnp.int32))
    bad = games.Game({"t": jnp.zeros(4)}, lambda p, z: p["t"], 5)
    with pytest.raises(ValueError, match="must return \\[m\\]"):
        bad(jnp.zeros((3, 5), bool))
    with pytest.raises(ValueError, match="method must be one of"):
        baselines.make("svarm", 5, 10)
    assert sampling.plan_budget(5, 32).planned_spent == 32


def test_proxy_support_finds_planted_odd_sets_far_above_chance():
    """Claim 7's mechanism on soum30: the odd sets the proxy picks from the sampled
    coalitions hit the planted ones (|T| >= 3 with a non-zero true coefficient) far more often
    than random odd sets of the same sizes, and almost all of them at m = 50 n."""
    n = 30
    game, _, (smask, scoef) = _soum(n, 1)
    sizes = np.asarray(fourier.popcount(jnp.asarray(smask)))
    planted = {tuple(r) for r, t, c in zip(smask, sizes, scoef) if t >= 3 and t % 2 and c}
    rec = {}
    for m, supports in ((600, ("proxy", "random_odd")), (1500, ("proxy",))):
        for support in supports:
            est = estimator.make_estimator(n, m, support=support)
            r = jax.jit(jax.vmap(est, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 3),
                                                          game)
            hits = [len({tuple(np.asarray(x)) for x, ok in zip(a, cm) if ok} & planted)
                    for a, cm in zip(r.support, r.col_mask)]
            rec[m, support] = np.mean(hits) / min(len(planted), est.k - n)
    assert rec[600, "proxy"] > 5 * rec[600, "random_odd"] + 0.1, rec
    assert rec[1500, "proxy"] >= 0.75, rec


def test_gram_by_table_equals_explicit_normal_equations():
    n = 9
    rng = np.random.default_rng(4)
    rows = fourier.pack(jnp.asarray(rng.random((300, n)) < 0.5))
    sup = fourier.pack(jnp.asarray(rng.random((40, n)) < 0.4))
    cm = jnp.asarray(rng.random(40) < 0.8)
    w, y = jnp.asarray(rng.random(300)), jnp.asarray(rng.normal(size=300))
    g, r = estimator.gram_by_table(rows, w, y, sup, cm, n)
    x = jnp.where(cm, fourier.parity_f(rows, sup), 0.0)
    np.testing.assert_allclose(g, (x * w[:, None]).T @ x, atol=1e-11)
    np.testing.assert_allclose(r, (x * w[:, None]).T @ y, atol=1e-11)


@pytest.mark.parametrize("rows, cols, live_rows, live_cols, block", [
    (700, 300, 650, 280, 64),  # tiles cut by the live rows and columns
    (513, 257, 100, 257, 256),  # one row tile of a padded second
    (64, 40, 0, 40, 16),  # no weighted row: zeros
    (300, 200, 300, 5, 32),  # one column tile
])
def test_gram_by_blocks_equals_the_dense_products(rows, cols, live_rows, live_cols, block):
    """The tiled normal equations (trip counts from the last weighted row and the last real
    column) equal the dense products, and the Gram is exactly symmetric."""
    n = 45
    rng = np.random.default_rng(rows + cols)
    masks = fourier.pack(jnp.asarray(rng.random((rows, n)) < 0.5))
    sup = fourier.pack(jnp.asarray(rng.random((cols, n)) < 0.1))
    cm = jnp.asarray((np.arange(cols) < live_cols) & (rng.random(cols) < 0.9))
    w = jnp.asarray(np.where(np.arange(rows) < live_rows, rng.random(rows), 0.0))
    y = jnp.asarray(rng.normal(size=rows))
    g, r = jax.jit(estimator.gram_by_blocks, static_argnums=5)(masks, w, y, sup, cm, block)
    x = jnp.where(cm, fourier.parity_f(masks, sup), 0.0)
    np.testing.assert_allclose(g, (x * w[:, None]).T @ x, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(r, (x * w[:, None]).T @ y, rtol=1e-12, atol=1e-11)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(g).T)


def test_own_kernelshap_regression_equals_shapiq_kernelshap_on_its_coalitions():
    """Spec test 7: our paired KernelSHAP regression, fed the coalitions and
    sampling_adjustment_weights of shapiq's public CoalitionSampler (same seed), gives
    shapiq's KernelSHAP values (1e-6 of max |phi|: shapiq holds the empty and grand
    coalitions by a 1e8 penalty weight, not exactly)."""
    shapiq = pytest.importorskip("shapiq")
    from shapiq.approximator.sampling import CoalitionSampler

    n, m = 8, 100
    v = np.random.default_rng(0).normal(size=1 << n)
    pow2 = 1 << np.arange(n)

    def game(z):
        return v[np.atleast_2d(np.asarray(z, bool)) @ pow2]

    ks = shapiq.KernelSHAP(n, pairing_trick=True, random_state=3)
    iv = ks.approximate(budget=m, game=game)
    ref = np.array([iv[(i,)] for i in range(n)])
    cs = CoalitionSampler(n, ks._init_sampling_weights(), pairing_trick=True, random_state=3)
    cs.sample(m)
    z = cs.coalitions_matrix.astype(bool)
    sizes = z.sum(1)
    inner = (sizes > 0) & (sizes < n)
    z = np.concatenate([np.zeros((1, n), bool), np.ones((1, n), bool), z[inner]])
    w = np.concatenate([[0.0, 0.0], sampling.kernel_weight(n, sizes[inner])
                        * cs.sampling_adjustment_weights[inner]])
    coal = sampling.Coalitions(fourier.pack(jnp.asarray(z)), jnp.zeros(len(z), bool),
                               jnp.asarray(w), jnp.ones(len(z), bool))
    phi, _ = baselines.kernel_regression(jnp.asarray(game(z)), coal, n)
    assert cs.n_coalitions == m
    np.testing.assert_allclose(phi, ref, atol=1e-6 * np.abs(ref).max())
