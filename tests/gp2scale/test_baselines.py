"""gp2Scale baselines against independent references.

dense GP == ``likelihood.dense_loglik`` == the sparse exact pipeline (mBCG at tol 1e-12 +
splu log-det); splu log-det == ``np.linalg.slogdet`` (and the determinant's sign survives
row pivoting); scipy mBCG == dense solve and == ``solvers.mbcg`` coefficient by coefficient;
scipy log-lik == ``likelihood.log_marglik`` on the same probes; BCOO == BCSR == dense; the
Matérn-5/2 fit is a maximum-likelihood estimate; shape errors name the argument.

Tolerances: every comparison of two float64 computations of the *same* quantity uses 1e-9
(dense/direct paths, ~1e3 flops of cancellation over N = 1000) or 1e-8 (two CG runs whose
summation orders differ: rounding differences are amplified over ~50 Krylov steps, measured
~1e-11). They are far above the measured discrepancies and far below any modelling error.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from icml26_jax.gp2scale import baselines as B
from icml26_jax.gp2scale import kernels as K
from icml26_jax.gp2scale import likelihood as L
from icml26_jax.gp2scale import neighbors as nb
from icml26_jax.gp2scale import solvers as S
from icml26_jax.gp2scale import sparse_cov as sc

N = 1000
MEAN = 0.25


@pytest.fixture(autouse=True, scope="module")
def _single_thread_blas():
    """Dense LAPACK (numpy's, scipy's and jax's CPU kernels all call OpenBLAS) with one
    thread: on the shared 2-core machine OpenBLAS's spinning worker threads made a
    250 x 250 Cholesky take 250 ms instead of 0.5 ms."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def problem():
    """Wendland kernel on N = 1000 Morton-sorted points of the unit square (~25 non-zeros
    per row, nugget 0.02); the pattern carries zero padding up to a power of two."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (N, 2))
    x = x[nb.morton_order(x)]
    y = np.sin(6 * x[:, 0]) * np.cos(4 * x[:, 1]) + 0.1 * rng.normal(size=N)
    p = K.WendlandParams(jnp.asarray(1.3), jnp.asarray([0.12, 0.07]), jnp.asarray(0.02))
    pat = nb.build_pattern(x, np.asarray(p.ls))
    assert int(pat.nnz) < pat.capacity  # padding present: it must add nothing anywhere
    data = sc.pattern_values("wendland", p, jnp.asarray(x), pat)
    csr = sc.to_scipy(sc.to_bcsr(data, pat))
    dense = csr.toarray()
    return dict(x=x, y=y, p=p, pat=pat, data=data, csr=csr, dense=dense)


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


@jax.jit
def _jax_mbcg(data, pat, b, pdiag):
    return S.mbcg(lambda v: sc.to_bcsr(data, pat) @ v, b, pdiag, tol=1e-12)


def test_dense_gp_equals_dense_loglik_and_sparse_exact(problem):
    x, y, p, dense = problem["x"], problem["y"], problem["p"], problem["dense"]
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    xs = jnp.asarray(np.random.default_rng(1).uniform(0, 1, (50, 2)))
    d = B.dense_gp("wendland", p, xj, yj, xs, mean=MEAN)
    ll = float(d.loglik)
    ref = float(L.dense_loglik(jnp.asarray(dense), yj - MEAN))
    assert abs(ll - ref) <= 1e-9 * abs(ref)
    # the sparse exact pipeline: mBCG quadratic form at tol 1e-12 + splu log-determinant
    r = y - MEAN
    res = _jax_mbcg(problem["data"], problem["pat"], jnp.asarray(r)[:, None],
                    jnp.asarray(np.diag(dense)))
    lu = B.splu_loglik(problem["csr"], r)
    sparse_ll = -0.5 * float(r @ np.asarray(res.x[:, 0])) - 0.5 * lu["logdet"] - 0.5 * N * B.LOG2PI
    assert abs(sparse_ll - ll) <= 1e-9 * abs(ll)
    assert abs(lu["loglik"] - ll) <= 1e-9 * abs(ll)
    np.testing.assert_allclose(np.asarray(d.alpha), np.linalg.solve(dense, r), rtol=1e-9,
                               atol=1e-9 * np.max(np.abs(np.asarray(d.alpha))))
    # posterior mean and latent variance against numpy's solve on the same kernel matrices
    ks = np.asarray(K.k_dense("wendland", p, xs, xj))
    mu = MEAN + ks @ np.linalg.solve(dense, r)
    var = float(p.sigma2) - np.sum(ks * np.linalg.solve(dense, ks.T).T, axis=1)
    assert _rel(d.mu, mu) <= 1e-9 and _rel(d.var, var) <= 1e-9
    assert np.all(np.asarray(d.var) > 0) and np.all(np.asarray(d.var) < float(p.sigma2))


def test_splu_logdet_equals_slogdet(problem):
    csr, dense, y = problem["csr"], problem["dense"], problem["y"]
    out = B.splu_loglik(csr, y)
    sign, ref = np.linalg.slogdet(dense)
    assert sign == 1.0 and abs(out["logdet"] - ref) <= 1e-9 * abs(ref)
    quad = float(y @ np.linalg.solve(dense, y))
    assert abs(out["quad"] - quad) <= 1e-9 * quad


def test_splu_sign_survives_pivoting_and_rejects_negative_det():
    # partial pivoting swaps rows 0 and 1 (|3| > |1|): U's diagonal has an odd number of
    # negative entries and the row permutation is odd; det = (1 - 9)(-1) = 8 > 0
    a = sp.csr_array(np.array([[1.0, 3.0, 0.0], [3.0, 1.0, 0.0], [0.0, 0.0, -1.0]]))
    np.testing.assert_allclose(B.splu_loglik(a, np.ones(3))["logdet"], np.log(8.0), rtol=1e-14)
    for bad in ([[-1.0, 0, 0], [0, 2, 0], [0, 0, 3]], [[1.0, 2.0], [2.0, 1.0]],
                [[0.0, 1.0], [1.0, 0.0]]):
        with pytest.raises(ValueError, match="csr is not positive definite"):
            B.splu_loglik(sp.csr_array(np.array(bad)), np.ones(len(bad)))
    with pytest.raises(ValueError, match="csr is singular"):
        B.splu_loglik(sp.csr_array(np.array([[1.0, 1.0], [1.0, 1.0]])), np.ones(2))
    for n in range(1, 6):
        for perm in itertools.permutations(range(n)):
            assert B.perm_sign(np.array(perm)) == round(np.linalg.det(np.eye(n)[list(perm)]))


def test_scipy_mbcg_equals_dense_solve_and_jax_mbcg(problem):
    csr, dense, y = problem["csr"], problem["dense"], problem["y"]
    pdiag = csr.diagonal()
    rng = np.random.default_rng(2)
    # columns of different scales converge (and freeze) at different iterations; the zero
    # column is frozen from the start and must stay NaN-free
    b = np.concatenate([y[:, None], rng.normal(size=(N, 3)) * [1.0, 1e3, 1e-3],
                        np.zeros((N, 1))], axis=1)
    exact = np.linalg.solve(dense, b)
    tight = B.scipy_mbcg(csr, b, pdiag, tol=1e-12)
    for c in range(b.shape[1] - 1):
        assert _rel(tight.x[:, c], exact[:, c]) <= 1e-9
    assert np.all(tight.x[:, -1] == 0) and tight.iters[-1] == 0
    assert np.all(tight.relres[:-1] <= 1e-12)
    # coefficient by coefficient against the JAX mBCG (tol 1e-10, first 40 iterations)
    ours = B.scipy_mbcg(csr, b, pdiag, tol=1e-10, keep=40)
    ref = jax.jit(lambda data, pat, bb, pd: S.mbcg(lambda v: sc.to_bcsr(data, pat) @ v, bb,
                                                    pd, tol=1e-10, keep=40))(
        problem["data"], problem["pat"], jnp.asarray(b), jnp.asarray(pdiag))
    # The first 40 coefficients agree to ~2e-15 (measured). Later ones cannot: once CG loses
    # orthogonality (~50 of its ~190 iterations here, cond(A) ~ 300) the two summation
    # orders' rounding differences grow ~2.5x per iteration (5e-7 at 60, 25 % at 100), so
    # the stopping iteration may differ by a few steps; both end below the tolerance.
    it_ours, it_ref = ours.iters, np.asarray(ref.iters)
    assert np.max(np.abs(it_ours - it_ref)) <= 5 and int(it_ours.max()) > 40
    assert np.all(ours.relres <= 1e-10) and np.all(np.asarray(ref.relres) <= 1e-10)
    for mine, theirs in ((ours.alpha, ref.alpha), (ours.beta, ref.beta)):
        theirs = np.asarray(theirs)
        assert np.all(np.isfinite(mine))
        np.testing.assert_array_equal(mine == 0, theirs == 0)  # same frozen entries
        nz = theirs != 0
        assert np.max(np.abs(mine[nz] / theirs[nz] - 1)) <= 1e-8
    # the numpy tridiagonals are solvers.cg_tridiagonals (incl. padded short columns)
    short = B.scipy_mbcg(csr, b, pdiag, tol=1e-3, keep=80)
    assert int(short.iters.max()) < 80
    for res in (ours, short):
        t_np = B.cg_tridiagonals_np(res.alpha, res.beta, res.iters)
        t_jx = np.asarray(S.cg_tridiagonals(jnp.asarray(res.alpha), jnp.asarray(res.beta),
                                            jnp.asarray(res.iters)))
        np.testing.assert_allclose(t_np, t_jx, rtol=1e-14, atol=0)


def test_scipy_loglik_equals_log_marglik(problem):
    x, y, p, pat, csr = problem["x"], problem["y"], problem["p"], problem["pat"], problem["csr"]
    probes = S.rademacher(jax.random.key(0), N, 8)
    cfg = L.SolverConfig(tol=1e-8, maxiter=1000, lanczos_steps=20)
    ll = jax.jit(lambda q, xx, yy, pt, pr: L.log_marglik("wendland", q, xx, yy, pt, pr, cfg,
                                                         mean=MEAN))
    val, aux = ll(p, jnp.asarray(x), jnp.asarray(y), pat, probes)
    out = B.scipy_loglik(csr, y - MEAN, np.asarray(probes), tol=cfg.tol,
                         maxiter=cfg.maxiter, lanczos_steps=cfg.lanczos_steps)
    # stopping iterations may differ by a few steps (see the mBCG test); the SLQ uses only
    # the first 20 coefficients, which agree to rounding
    assert np.max(np.abs(out["iters"] - np.asarray(aux.cg_iters))) <= 5
    assert int(out["iters"].min()) > cfg.lanczos_steps  # the truncated-Lanczos path
    for key, ref in (("loglik", val), ("logdet", aux.logdet), ("quad", aux.quad)):
        assert abs(out[key] - float(ref)) <= 1e-8 * abs(float(ref)), key
    # the SE is a difference of nearly equal terms: relative 1e-6 (measured ~1e-10)
    assert abs(out["se"] - float(aux.logdet_se)) <= 1e-6 * float(aux.logdet_se)


def test_bcoo_equals_bcsr_equals_dense(problem):
    data, pat, dense = problem["data"], problem["pat"], problem["dense"]
    rng = np.random.default_rng(3)
    f_csr, f_coo = jax.jit(B.bcsr_matmat), jax.jit(B.bcoo_matmat)
    for b in (rng.normal(size=(N, 33)), rng.normal(size=N)):
        ref = dense @ b
        bj = jnp.asarray(b)
        for f in (f_csr, f_coo):
            np.testing.assert_allclose(np.asarray(f(data, pat, bj)), ref, rtol=0, atol=1e-12)
    # the pattern and data are arguments: new values reuse the compiled program, and the
    # jaxpr holds no array constants (a closed-over pattern would be constant-folded)
    f_csr(2.0 * data, pat, jnp.asarray(rng.normal(size=(N, 33))))
    assert f_csr._cache_size() == 2  # one per b shape, not one per data
    jaxpr = jax.make_jaxpr(B.bcoo_matmat)(data, pat, jnp.ones((N, 3)))
    assert all(np.size(c) < 100 for c in jaxpr.consts)


def test_dense_matern52_fit_is_a_maximum_likelihood_estimate():
    """200 points of a 2-D ARD Matérn-5/2 GP (ls = 0.1, 0.3; sigma2 = 1; noise 0.01), fitted
    from the default start. Checks: the fit beats its start by far and the true parameters
    too (it is a maximum of L, not merely an improvement), and each length scale is within a
    factor 2 of the truth. Why factor 2: the domain spans 10 and 3.3 length scales, where
    the ML length scale is identifiable; over seeds 0-5 (n = 250) the estimates stayed within
    26 % of the truth, so factor 2 is ~3x that spread in log space yet still rejects a fit
    stuck at the start (0.1 x the range) in the second dimension or an order-of-magnitude
    error."""
    rng = np.random.default_rng(4)
    n = 200
    x = jnp.asarray(rng.uniform(0, 1, (n, 2)))
    true = B.MaternParams(jnp.asarray(0.0), jnp.log(jnp.asarray([0.1, 0.3])),
                          jnp.asarray(np.log(0.01 - B.NOISE_FLOOR)))
    a = B.matern52(true, x, x) + B.matern_noise(true) * jnp.eye(n)
    y = jnp.linalg.cholesky(a) @ jnp.asarray(rng.normal(size=n))
    init = B.matern_init(x, y)
    fit = B.fit_dense_matern52(x, y, steps=100)
    l_fit = float(B.matern_loglik(fit, x, y))
    assert l_fit > float(B.matern_loglik(init, x, y)) + 10.0
    assert l_fit >= float(B.matern_loglik(true, x, y)) - 1e-6
    ratio = np.exp(np.asarray(fit.log_ls)) / np.array([0.1, 0.3])
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio
    mu, var = B.predict_dense_matern52(fit, x, y, x[:20])
    assert np.all(np.asarray(var) > 0) and np.all(np.asarray(var) < np.exp(float(fit.log_sigma2)))
    # at training inputs the mean smooths only the noise (sd 0.1)
    assert float(jnp.max(jnp.abs(mu - y[:20]))) < 0.5


def test_errors_name_the_argument(problem):
    x, y, p, pat, data, csr = (problem[k] for k in ("x", "y", "p", "pat", "data", "csr"))
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    cases = [
        ("y must be", lambda: B.dense_gp("wendland", p, xj, yj[:5], xj[:2])),
        ("xs must be", lambda: B.dense_gp("wendland", p, xj, yj, xj[:2, :1])),
        ("x must be", lambda: B.fit_dense_matern52(xj[:, 0], yj)),
        ("y must be", lambda: B.fit_dense_matern52(xj, yj[:-1])),
        ("steps must be", lambda: B.fit_dense_matern52(xj, yj, steps=-1)),
        ("init.log_ls", lambda: B.fit_dense_matern52(xj, yj, init=B.matern_init(xj[:, :1], yj))),
        ("xs must be", lambda: B.predict_dense_matern52(B.matern_init(xj, yj), xj, yj, xj[:, :1])),
        ("csr must be", lambda: B.scipy_mbcg(csr[:10], np.ones((10, 1)), np.ones(10))),
        ("b must be", lambda: B.scipy_mbcg(csr, np.ones((10, 2)), np.ones(N))),
        ("b must be", lambda: B.scipy_mbcg(csr, np.ones(N), np.ones(N))),
        ("pdiag must be", lambda: B.scipy_mbcg(csr, np.ones((N, 2)), np.ones(N - 1))),
        ("keep and maxiter", lambda: B.scipy_mbcg(csr, np.ones((N, 2)), np.ones(N), keep=0)),
        ("r must be", lambda: B.scipy_loglik(csr, y[:-1], np.ones((N, 2)))),
        ("probes must be", lambda: B.scipy_loglik(csr, y, np.ones((N - 1, 2)))),
        ("probes must have", lambda: B.scipy_loglik(csr, y, np.ones((N, 0)))),
        ("r must be", lambda: B.splu_loglik(csr, y[:10])),
        ("data must be", lambda: B.bcsr_matmat(data[:-1], pat, yj)),
        ("b must be", lambda: B.bcoo_matmat(data, pat, yj[:-1])),
        ("b must be", lambda: jax.jit(B.bcsr_matmat)(data, pat, jnp.ones((N, 2, 2)))),
    ]
    for match, call in cases:
        with pytest.raises(ValueError, match=match):
            call()
