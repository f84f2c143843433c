"""gp2Scale spec §Tests 8: block adaptive Metropolis (fvGP's ``gp_mcmc.py`` constants).

A correlated 2-D Gaussian target: the chain's mean and covariance within Monte-Carlo error
(standard errors from an effective-sample-size estimate), for two 1-D blocks and one 2-D
block; bounds respected with ``log_target``; acceptance adapts toward 0.234 from either side;
same key -> bit-identical chain; the eager host path equals the jitted traceable path;
clear ``ValueError``s. Traceable targets run jitted (``run_chain(..., jit=True)``, one scan).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.gp2scale import mcmc

MEAN = np.array([1.0, -2.0], np.float64)
COV = np.array([[1.0, 0.8], [0.8, 2.0]], np.float64)  # correlation 0.57
PREC = np.linalg.inv(COV)


def gauss_logp(u):
    """Traceable log density (up to a constant) of N(MEAN, COV)."""
    d = u - jnp.asarray(MEAN)
    return -0.5 * d @ jnp.asarray(PREC) @ d


def gauss_logp_host(u):
    """The same density as a host function: numpy in, Python float out."""
    d = np.asarray(u, np.float64) - MEAN
    return float(-0.5 * d @ PREC @ d)


def ess(x):
    """Effective sample size of a 1-D chain, Geyer's initial positive sequence estimator
    (sum autocorrelation pairs Gamma_m = rho_2m + rho_2m+1 while Gamma_m > 0)."""
    x = np.asarray(x, np.float64) - np.mean(x)
    n = len(x)
    f = np.fft.rfft(x, 2 * n)
    ac = np.fft.irfft(f * np.conj(f))[:n] / (x @ x)
    tau = -1.0
    for m in range(n // 2 - 1):
        pair = ac[2 * m] + ac[2 * m + 1]
        if pair <= 0:
            break
        tau += 2.0 * pair
    return n / max(tau, 1.0 / n)


@pytest.mark.parametrize("blocks", [((0,), (1,)), ((0, 1),)], ids=["two_1d_blocks", "2d_block"])
def test_chain_recovers_gaussian_mean_and_covariance(blocks):
    state, tr = mcmc.run_chain(np.zeros(2, np.float64), gauss_logp, blocks, jax.random.key(0),
                               5000, jit=True)
    s = tr["u"][1000:]  # burn-in: the adaptation settles within ~1000 iterations (see below)
    # Each check is a mean of an autocorrelated chain: the mean's Monte-Carlo SE is
    # sd / sqrt(ESS). 4 SE: a correct sampler fails a given check with prob. ~6e-5.
    for k in range(2):
        n_eff = ess(s[:, k])
        assert n_eff > 100, (k, n_eff)  # the chain actually mixes (not a vacuous pass)
        se = np.std(s[:, k]) / np.sqrt(n_eff)
        assert abs(s[:, k].mean() - MEAN[k]) < 4 * se, (k, s[:, k].mean(), se)
    # Covariance entry (i, j) is the mean of z = (u_i - m_i)(u_j - m_j) (true mean m): same
    # argument with the ESS of z itself.
    for i in range(2):
        for j in range(i, 2):
            z = (s[:, i] - MEAN[i]) * (s[:, j] - MEAN[j])
            se = np.std(z) / np.sqrt(ess(z))
            assert abs(z.mean() - COV[i, j]) < 4 * se, ((i, j), z.mean(), se)
    # the adapted proposal is a symmetric PSD matrix, padding stays zero
    covs = np.asarray(state.covs)
    np.testing.assert_array_equal(covs, np.transpose(covs, (0, 2, 1)))
    assert np.linalg.eigvalsh(covs).min() >= 0
    rate = tr["accept"][1000:].mean(0)
    assert np.all(np.abs(rate - 0.234) < 0.15), rate


def test_bounds_respected_and_host_likelihood_only_called_inside():
    calls = []

    def loglik(theta):  # host function: records every theta it is asked about
        calls.append(np.array(theta))
        return -0.5 * float(np.sum((np.log(theta) - 0.3) ** 2) / 0.5)

    lo, hi = np.array([0.5, 0.8], np.float64), np.array([3.0, 1.5], np.float64)
    logp = mcmc.log_target(loglik, lo, hi)
    assert logp(np.log(np.array([0.1, 1.0]))) == -math.inf and not calls
    u0 = np.log(np.array([1.0, 1.0], np.float64))
    _, tr = mcmc.run_chain(u0, logp, ((0,), (1,)), jax.random.key(1), 200)
    th = np.exp(tr["u"])
    assert np.all(th >= lo) and np.all(th <= hi)
    called = np.stack(calls)
    assert np.all(called >= lo) and np.all(called <= hi)
    assert len(calls) < 1 + 2 * 200  # some proposals were outside and never evaluated
    assert np.isfinite(tr["logp"]).all()
    # the chain does press against the tight upper bound of theta_2 (it is not vacuous)
    assert th[:, 1].max() > 1.4


def test_bounds_respected_under_jit():
    # traceable likelihood: log_target switches to lax.cond under jit
    loglik = lambda th: -0.5 * jnp.sum((jnp.log(th) - 0.3) ** 2) / 0.5  # noqa: E731
    lo, hi = np.array([0.5, 0.8], np.float64), np.array([3.0, 1.5], np.float64)
    logp = mcmc.log_target(loglik, lo, hi)
    _, tr = mcmc.run_chain(np.zeros(2, np.float64), logp, ((0, 1),), jax.random.key(5), 1500,
                           jit=True)
    th = np.exp(tr["u"])
    assert np.all(th >= lo) and np.all(th <= hi)
    assert th[:, 1].max() > 1.45 and np.isfinite(tr["logp"]).all()


def test_nan_target_never_enters_the_chain():
    # NaN for u_0 > 1.5: those proposals must be rejected, not accepted or propagated
    logp = lambda u: jnp.where(u[0] > 1.5, jnp.nan, gauss_logp(u))  # noqa: E731
    _, tr = mcmc.run_chain(np.zeros(2, np.float64), logp, ((0,), (1,)), jax.random.key(6), 500,
                           jit=True)
    assert np.isfinite(tr["u"]).all() and np.isfinite(tr["logp"]).all()
    assert tr["u"][:, 0].max() <= 1.5 and np.isfinite(tr["log_scale"]).all()


@pytest.mark.parametrize("factor", [1e4, 1e-4], ids=["too_large", "too_small"])
def test_acceptance_moves_toward_target(factor):
    blocks = ((0, 1),)
    # Start the proposal scale 100x too wide (acceptance ~0) or 100x too narrow (~1) in sd.
    init_cov = factor * 0.01 * np.eye(2)
    state, tr = mcmc.run_chain(np.array(MEAN), gauss_logp, blocks, jax.random.key(2), 1500,
                               init_cov=init_cov, jit=True)
    acc = tr["accept"][:, 0].astype(np.float64)
    first = acc[:10].mean()  # the first window, before any adaptation
    last = acc[-500:].mean()
    assert abs(first - 0.234) > 0.2, first  # the start really is badly tuned
    assert abs(last - 0.234) < abs(first - 0.234), (first, last)
    # 500 Bernoulli draws: SE of the rate <= 0.02 (more with autocorrelation); 0.1 is loose
    assert abs(last - 0.234) < 0.1, last
    # s_b and Sigma_b adapt jointly: the proposal size tr(s_b Sigma_b) moved the right way
    size = float(np.exp(tr["log_scale"][-1, 0]) * np.trace(np.asarray(state.covs[0])))
    assert (size < 2.4 ** 2 / 2 * np.trace(init_cov)) == (factor > 1), size


def test_same_key_same_chain_different_key_different_chain():
    blocks = ((0,), (1,))
    run = lambda seed: mcmc.run_chain(np.zeros(2, np.float64), gauss_logp, blocks,  # noqa: E731
                                      jax.random.key(seed), 60, jit=True)[1]
    a, b, c = run(3), run(3), run(4)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["u"], c["u"])


def test_eager_host_chain_equals_jitted_traceable_chain():
    blocks = ((1,), (0,))  # block order differs from coordinate order on purpose
    u0 = np.array([0.3, -0.5], np.float64)
    key = jax.random.key(7)
    # K = 4 so that the 30 iterations include several adaptations
    _, eager = mcmc.run_chain(u0, gauss_logp_host, blocks, key, 30, K=4)
    _, jitted = mcmc.run_chain(u0, gauss_logp, blocks, key, 30, K=4, jit=True)
    for name in ("u", "logp", "log_scale"):
        np.testing.assert_allclose(eager[name], jitted[name], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(eager["accept"], jitted["accept"])
    assert 0 < eager["accept"].mean() < 1  # both accept and reject branches were exercised
    # a jitted am_step equals the eager one state-for-state
    s_e = s_j = mcmc.am_init(u0, gauss_logp, blocks, K=4)
    step = jax.jit(lambda s, k: mcmc.am_step(s, k, gauss_logp, blocks))
    for i in range(9):
        s_e, _ = mcmc.am_step(s_e, jax.random.fold_in(key, i), gauss_logp_host, blocks)
        s_j, _ = step(s_j, jax.random.fold_in(key, i))
    for a, b in zip(s_e, s_j):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def test_init_and_adapt_constants():
    blocks = ((0, 2), (1,))
    s = mcmc.am_init(np.zeros(3, np.float64), lambda u: -0.5 * jnp.sum(u * u), blocks)
    np.testing.assert_allclose(np.exp(np.asarray(s.log_scale)), [2.4 ** 2 / 2, 2.4 ** 2])
    np.testing.assert_allclose(np.asarray(s.covs[0]), 0.01 * np.eye(2))
    np.testing.assert_array_equal(np.asarray(s.covs[1]), [[0.01, 0.0], [0.0, 0.0]])
    # one adaptation at i = 10 (K = 10) by hand: gamma2 = 1/4^0.8, gamma1 = 10 gamma2
    rng = np.random.default_rng(0)
    win = rng.normal(size=(10, 3))
    acc = (rng.uniform(size=(10, 2)) < 0.5).astype(np.float64)
    s = s._replace(window=jnp.asarray(win), window_acc=jnp.asarray(acc))
    a = mcmc.am_adapt(s, 10, blocks)
    g2 = 1.0 / 4.0 ** 0.8
    np.testing.assert_allclose(np.asarray(a.log_scale),
                               np.asarray(s.log_scale) + 10 * g2 * (acc.mean(0) - 0.234),
                               rtol=1e-13)
    c0 = np.cov(win[:, [0, 2]].T)
    eye = 0.01 * np.eye(2)
    np.testing.assert_allclose(np.asarray(a.covs[0]), eye + g2 * (c0 - eye), rtol=1e-13)
    v1 = np.var(win[:, 1], ddof=1)
    np.testing.assert_allclose(float(a.covs[1, 0, 0]), 0.01 + g2 * (v1 - 0.01), rtol=1e-13)
    assert float(a.covs[1, 1, 1]) == 0.0 and float(a.covs[1, 0, 1]) == 0.0


def test_errors_name_the_argument():
    u0 = np.zeros(2, np.float64)
    for bad in [((0,),), ((0,), (0, 1)), ((0,), (2,)), ((0, 1), ()), ()]:
        with pytest.raises(ValueError, match="blocks"):
            mcmc.am_init(u0, gauss_logp, bad)
    with pytest.raises(ValueError, match="u0"):
        mcmc.am_init(np.array([np.nan, 0.0]), gauss_logp, ((0, 1),))
    with pytest.raises(ValueError, match="u0"):
        mcmc.am_init(np.array([np.inf, 0.0]), gauss_logp, ((0, 1),))
    with pytest.raises(ValueError, match="u0"):  # start outside the support
        mcmc.am_init(u0, lambda u: -jnp.inf, ((0, 1),))
    with pytest.raises(ValueError, match="u0"):
        logp = mcmc.log_target(gauss_logp_host, [0.5, 0.5], [2.0, 2.0])
        mcmc.run_chain(np.log(np.array([0.1, 1.0])), logp, ((0, 1),), jax.random.key(0), 5)
    with pytest.raises(ValueError, match="K"):
        mcmc.am_init(u0, gauss_logp, ((0, 1),), K=0)
    with pytest.raises(ValueError, match="n_iter"):
        mcmc.run_chain(u0, gauss_logp, ((0, 1),), jax.random.key(0), 0)
    with pytest.raises(ValueError, match="init_cov"):
        mcmc.am_init(u0, gauss_logp, ((0, 1),), init_cov=np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="hi"):
        mcmc.log_target(gauss_logp_host, [1.0, 1.0], [2.0, 0.5])
    with pytest.raises(ValueError, match="lo"):
        mcmc.log_target(gauss_logp_host, [-1.0, 1.0], [2.0, 2.0])
    s = mcmc.am_init(u0, gauss_logp, ((0, 1),))
    with pytest.raises(ValueError, match="blocks"):
        mcmc.am_step(s, jax.random.key(0), gauss_logp, ((0,), (1,)))
