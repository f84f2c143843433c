"""OddSHAP's conditioning guard and budget buckets (issue: "a public estimator that never
silently blows up, compiled once per budget bucket").

* Guard: a support with a duplicated column makes the KKT system singular; the guard gives
  the Shapley values of the de-duplicated support. Along directions the sample cannot
  determine it keeps the interaction coefficients smallest. On a random-forest game whose
  proxy support makes the KKT system singular in some runs, every guarded run is finite,
  exactly efficient, no worse than the plain solve it replaced and within 10x paired
  KernelSHAP's mean MSE.
* Buckets: budgets of one power-of-two bucket share one compiled program (counted), spend
  exactly their own budget, and the fallback regime switches inside the program.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.oddshap import baselines, estimator, fourier, games, sampling

CHEAP = dict(proxy_cfg=estimator.ProxyConfig(trees=20, depth=4))


def _table_game(n, seed):
    rng = np.random.default_rng(seed)
    z = fourier.index_bits(n)
    w1 = rng.normal(size=(n, 12))
    table = np.tanh(np.where(z, rng.normal(size=n), 0.0) @ w1) @ rng.normal(size=12)
    t = jnp.asarray(table)
    return games.table_game(t), np.asarray(fourier.shapley_from_table(t))


def test_a_duplicated_support_column_gives_the_deduplicated_fit():
    n, m = 10, 400
    game, _ = _table_game(n, 0)
    est = estimator.make_estimator(n, m, **CHEAP)
    res = est(jax.random.key(1), game)
    k = int(res.col_mask.sum())
    a = np.asarray(res.support)[:k]
    cm = np.ones(k, bool)
    assert not bool(res.guarded)
    # the last selected odd set again, as one more column: an exactly singular system
    a_dup = np.concatenate([a, a[-1:]])
    lay = est.plan.layout
    coal = est.sample(jax.random.key(1))
    values = game.packed(coal.masks)
    solve = jax.jit(lambda v, co, a, cm: estimator.solve_support(v, co, lay, a, cm))
    phi_ref, cond_ref, (g_ref, _) = solve(values, coal, jnp.asarray(a), jnp.asarray(cm))
    phi, cond, (guarded, dropped) = solve(values, coal, jnp.asarray(a_dup),
                                          jnp.ones(k + 1, bool))
    assert not bool(g_ref) and float(cond_ref) < estimator.COND_LIMIT
    assert bool(guarded) and int(dropped) == 1 and not float(cond) <= estimator.COND_LIMIT
    np.testing.assert_allclose(np.asarray(phi), np.asarray(phi_ref), atol=1e-9)
    # efficiency still exact
    np.testing.assert_allclose(float(phi.sum()), float(values[1] - values[0]), atol=1e-10)


def test_undetermined_directions_keep_the_interactions_smallest():
    """Column 4 = column 0 + column 1 - column 2 on every row: one direction the data and the
    constraint (sum of beta) cannot determine.
    The guard's solution fits as well as any solution, meets the constraint exactly, and of
    all such solutions has the smallest interaction coefficients (columns 4, 5): brute force
    over the one-parameter family."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 6))
    x[:, 4] = x[:, 0] + x[:, 1] - x[:, 2]
    y, w = rng.normal(size=60), rng.uniform(0.5, 1.5, 60)
    c, b = np.ones(6), 0.7
    pen = np.array([0, 0, 0, 0, 1, 1], bool)
    gram, xwy = (x * w[:, None]).T @ x, (x * w[:, None]).T @ y
    beta, cond, (guarded, dropped) = jax.jit(estimator.guarded_kkt_solve)(
        jnp.asarray(gram), jnp.asarray(xwy), jnp.asarray(c), b, jnp.asarray(pen))
    beta = np.asarray(beta)
    assert bool(guarded) and int(dropped) == 1 and not float(cond) <= estimator.COND_LIMIT
    np.testing.assert_allclose(beta @ c, b, atol=1e-12)
    # the best constrained fit (lstsq reference) and the same residual
    ref, _ = estimator.constrained_wls(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w),
                                       jnp.asarray(c), b, "lstsq")
    res = lambda bt: float(np.sum(w * (x @ bt - y) ** 2))  # noqa: E731
    np.testing.assert_allclose(res(beta), res(np.asarray(ref)), rtol=1e-10)
    # the family beta + t (1, 1, -1, 0, -1, 0) keeps fit and constraint; ours minimises
    # |beta_4|^2 + |beta_5|^2 over it, i.e. beta_4 = 0
    assert abs(beta[4]) < 1e-9
    assert abs(np.asarray(ref)[4]) > 1e-3  # plain min-norm does not


def test_guard_under_vmap_equals_the_unbatched_guard():
    """The custom batching rule: a batch where one element is singular gives each element
    what the unbatched call gives (the guard's branch only where needed)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5))
    good = x.T @ x
    xs = np.concatenate([x[:, :4], x[:, :1]], axis=1)  # column 4 = column 0
    bad = xs.T @ xs
    grams = jnp.asarray(np.stack([good, bad, good]))
    xwy = jnp.asarray(rng.normal(size=(3, 5)))
    c = jnp.ones(5)
    batched = jax.jit(jax.vmap(lambda g, r: estimator.guarded_kkt_solve(g, r, c, 1.0)))(
        grams, xwy)
    for i in range(3):
        one = estimator.guarded_kkt_solve(grams[i], xwy[i], c, 1.0)
        np.testing.assert_allclose(np.asarray(batched[0][i]), np.asarray(one[0]), atol=1e-10)
        assert bool(batched[2][0][i]) == bool(one[2][0]) == (i == 1)
    assert int(batched[2][1][1]) == 1


@pytest.fixture(scope="module")
def forest_game():
    """A random forest (scikit-learn, 50 trees, unlimited depth) on 12 features of
    Friedman's synthetic regression, baseline imputation, exact Shapley values from the
    full value table: a tree game whose proxy support makes the KKT system (nearly)
    singular in some runs at m = 410."""
    from sklearn.datasets import make_friedman1
    from sklearn.ensemble import RandomForestRegressor

    n = 12
    x, y = make_friedman1(n_samples=800, n_features=n, noise=0.5, random_state=7)
    rf = RandomForestRegressor(n_estimators=50, random_state=0).fit(x, y)
    z = fourier.index_bits(n)
    out = []
    for e in range(3):
        table = jnp.asarray(rf.predict(np.where(z, x[10 + e], x.mean(0))))
        out.append((games.table_game(table), np.asarray(fourier.shapley_from_table(table))))
    return n, out


def test_on_a_forest_game_the_guard_replaces_every_singular_solve_and_never_hurts(
        forest_game):
    """Where the plain KKT solve is singular (it returns NaN or values off by orders of
    magnitude), the guarded estimator returns a finite, exactly efficient estimate no worse
    than the plain one and within 10x paired KernelSHAP's mean MSE; elsewhere the two are
    identical. (Not asserted: every unguarded run within 10x; one well-conditioned run of
    the 90 exceeds it, see the paper README.)"""
    n, cases = forest_game
    m = 410
    odd = estimator.make_estimator(n, m)
    plain = estimator.make_estimator(n, m, solver="kkt_plain")
    ks = baselines.make("kernelshap_paired", n, m)
    keys = jax.random.split(jax.random.key(0), 30)
    run = lambda est, g: jax.vmap(lambda k: est(k, g))(keys)  # noqa: E731
    guarded_runs = 0
    for game, phi in cases:
        r_odd, r_plain, r_ks = run(odd, game), run(plain, game), run(ks, game)
        err = lambda r: np.mean((np.asarray(r.phi) - phi) ** 2, axis=1)  # noqa: E731
        m_odd, m_plain = err(r_odd), np.nan_to_num(err(r_plain), nan=np.inf)
        m_ks = err(r_ks)
        g = np.asarray(r_odd.guarded)
        guarded_runs += int(g.sum())
        assert np.all(np.isfinite(m_odd))
        assert np.all(m_odd[g] <= m_plain[g]), (m_odd[g], m_plain[g])
        assert np.all(m_odd[g] <= 10 * m_ks.mean()), (m_odd[g], m_ks.mean())
        np.testing.assert_allclose(np.asarray(r_odd.phi)[~g], np.asarray(r_plain.phi)[~g],
                                   rtol=1e-12, atol=1e-15)
        assert np.all(~(np.asarray(r_plain.cond)[g] <= estimator.COND_LIMIT))
        total = float(game.packed(fourier.pack(jnp.ones((1, n), bool)))[0]
                      - game.packed(fourier.pack(jnp.zeros((1, n), bool)))[0])
        np.testing.assert_allclose(np.asarray(r_odd.phi).sum(1), total, atol=1e-9)
    assert guarded_runs >= 2  # the case exercises the guard


# ----------------------------------------------------------------------------- buckets

def test_budgets_of_a_bucket_share_one_compilation_and_spend_exactly():
    n = 12
    game, phi = _table_game(n, 3)
    budgets = (300, 350, 410, 512)  # all in the bucket (256, 512]
    assert {sampling.bucket_of(n, m) for m in budgets} == {512}
    before = estimator._call._cache_size()
    for m in budgets:
        est = estimator.make_estimator(n, m, **CHEAP)
        r = est(jax.random.key(0), game)
        assert m - 1 <= int(r.budget_spent) <= m
        assert est.k == int(np.ceil(m / 10)) and n < int(r.col_mask.sum()) <= est.k
        assert np.mean((np.asarray(r.phi) - phi) ** 2) < 1e-2
    assert estimator._call._cache_size() - before == 1
    # the runner's path: one program per (method, n, bucket) as well
    m513 = estimator.make_estimator(n, 513, **CHEAP)(jax.random.key(0), game)
    assert estimator._call._cache_size() - before == 2 and int(m513.budget_spent) <= 513


def test_a_bucket_straddling_eta_n_switches_to_the_fallback_inside_the_program():
    n = 10  # eta n = 100: the bucket (64, 128] holds fallback and regression budgets
    game, _ = _table_game(n, 4)
    before = estimator._call._cache_size()
    low = estimator.make_estimator(n, 80, **CHEAP)(jax.random.key(2), game)
    high = estimator.make_estimator(n, 120, **CHEAP)(jax.random.key(2), game)
    assert estimator._call._cache_size() - before == 1
    assert bool(low.used_fallback) and not bool(high.used_fallback)
    assert np.isnan(float(low.cond)) and np.isfinite(float(high.cond))
    # the fallback returns the proxy's Shapley values: efficiency of the proxy, not exact
    np.testing.assert_allclose(float(high.phi.sum()),
                               float(game.packed(fourier.pack(jnp.ones((1, n), bool)))[0]
                                     - game.packed(fourier.pack(jnp.zeros((1, n), bool)))[0]),
                               atol=1e-10)


def test_runner_cells_of_one_bucket_reuse_the_mapped_program():
    n = 12
    game, _ = _table_game(n, 5)
    mesh = mesh_lib.runs_mesh(4)
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 4))
    from icml26_jax.oddshap import train

    mapped = mesh_lib._map_runs_with((), train.REPLICA_BATCH)  # the runner's map
    before = mapped._cache_size()
    for m in (300, 410):
        est = estimator.make_estimator(n, m, **CHEAP)
        params = jax.tree.map(lambda a: np.tile(np.asarray(a)[None], (4,) + (1,) * a.ndim),
                              game.params)
        out = mesh_lib.map_runs(mesh, train._estimate, (est.program, n, game.fn),
                                np.asarray(keys), params, shared=est.arrays,
                                batch_size=train.REPLICA_BATCH)
        spent = mesh_lib.to_host(out.budget_spent, 4)
        assert np.all((spent >= m - 1) & (spent <= m))
    assert mapped._cache_size() - before == 1


@pytest.mark.parametrize("n", [5, 10, 14, 30])
def test_every_budget_fits_its_bucket_layout(n):
    """The layout (enumerated block, draw slots, candidates) of a bucket bounds every budget
    in it, for both size distributions and both sampling modes (``plan_budget`` raises
    otherwise), and its rows do not depend on the budget."""
    step = 1 if n <= 10 else 13
    for probs in (None, sampling.kernel_size_probs(n)):
        for paired in (True, False):
            rows = {}
            for m in range(2, min(2 ** n, 4096) + 1, step):
                plan = sampling.plan_budget(n, m, probs, paired)
                assert plan.planned_spent <= m and plan.layout.bucket == sampling.bucket_of(n, m)
                rows.setdefault(plan.layout.bucket, set()).add(plan.layout.rows)
            assert all(len(r) == 1 for r in rows.values())
