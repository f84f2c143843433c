"""The synthetic prior (spec §Method "Prior"): bank layout, determinism, family mix, the
covariate effect, KernelSynth algebra and sampling, spikes, the mini prior."""

import dataclasses

import numpy as np
import pytest
import scipy.linalg

from icml26_jax.baguan_ts import prior

N_BANK = 400


@pytest.fixture(scope="module")
def bank():
    return prior.make_bank(0, N_BANK)


def _r2(A, y):
    """In-sample R^2 of the least-squares fit of y on the columns of A."""
    beta, *_ = np.linalg.lstsq(A, y, rcond=None)
    return 1.0 - np.var(y - A @ beta) / np.var(y)


def _lag_design(X):
    """[T, 1 + 9F]: intercept and x, x^2, x^3 of each standardised covariate at lags 0, 1, 2
    (cubic terms so the random tanh responses are mostly captured)."""
    T = X.shape[0]
    cols = [np.ones(T)]
    for f in range(X.shape[1]):
        x = (X[:, f] - X[:, f].mean()) / (X[:, f].std() + 1e-9)
        for lag in range(3):
            xl = prior._lagged(x, lag)
            cols += [xl, xl**2, xl**3]
    return np.stack(cols, axis=1)


def test_bank_layout_and_padding(bank):
    n, t_max = N_BANK, prior.PriorConfig().t_max
    assert bank.y.shape == (n, t_max) and bank.y.dtype == np.float32
    assert bank.X.shape == (n, t_max, prior.F_MAX) and bank.X.dtype == np.float32
    for a in (bank.length, bank.n_feat, bank.family, bank.period):
        assert a.shape == (n,) and a.dtype == np.int32
    assert np.isfinite(bank.y).all() and np.isfinite(bank.X).all()
    assert bank.length.min() >= 192 and bank.length.max() <= 512
    assert bank.length.max() - bank.length.min() > 200  # lengths really vary
    assert set(np.unique(bank.n_feat)) == {0, 1, 2, 3}
    assert bank.period.min() >= 1
    for i in range(n):
        T, F = bank.length[i], bank.n_feat[i]
        assert not bank.y[i, T:].any() and not bank.X[i, T:].any()
        assert not bank.X[i, :, F:].any()
        assert (bank.X[i, :T, :F].std(axis=0) > 0).all()  # every real column varies
        assert bank.y[i, :T].std() > 0
    fam = bank.family
    assert (bank.n_feat[fam == prior.KERNELSYNTH] == 0).all()
    assert (bank.n_feat[fam == prior.SPIKE] <= 1).all()
    assert (bank.n_feat[fam == prior.COVARIATE] >= 1).all()


def test_bank_deterministic_and_prefix_stable(bank):
    again = prior.make_bank(0, N_BANK)
    for a, b in zip(bank, again):
        np.testing.assert_array_equal(a, b)
    head = prior.make_bank(0, 10)  # task i depends only on (seed, i)
    for a, b in zip(head, bank):
        np.testing.assert_array_equal(a, b[:10])
    other = prior.make_bank(1, 10)
    assert not np.array_equal(other.y, head.y)


def test_family_frequencies(bank):
    cfg = prior.PriorConfig()
    counts = np.bincount(bank.family, minlength=len(prior.FAMILIES))
    assert counts[prior.MINI] == counts[prior.SYNTHETIC_ENERGY] == 0
    for fam, p in ((prior.KERNELSYNTH, cfg.p_kernelsynth), (prior.SPIKE, cfg.p_spike),
                   (prior.COVARIATE, cfg.p_covariate)):
        sd = np.sqrt(N_BANK * p * (1 - p))  # binomial; 4.5 sd is a loose, seed-fixed bound
        assert abs(counts[fam] - N_BANK * p) < 4.5 * sd, (prior.FAMILIES[fam], counts)


def test_covariate_effect_is_substantial():
    """y regressed on its own lagged covariates vs on another task's covariates (same kinds of
    smooth paths, so spurious fits are matched)."""
    cfg = prior.PriorConfig()
    tasks = [prior.sample_covariate_task(np.random.default_rng(s), cfg, 256) for s in range(30)]
    own, other = [], []
    for i, task in enumerate(tasks):
        y = task.y.astype(np.float64)
        own.append(_r2(_lag_design(task.X), y))
        other.append(_r2(_lag_design(tasks[(i + 1) % len(tasks)].X), y))
    assert np.median(own) > 0.6, np.median(own)
    assert np.median(own) - np.median(other) > 0.3, (np.median(own), np.median(other))
    assert np.mean(np.array(own) > np.array(other)) > 0.8


def test_kernelsynth_periodic_autocorrelation():
    cfg = prior.PriorConfig()
    for s in range(5):
        task = prior.sample_kernelsynth_task(np.random.default_rng(s), cfg, 256,
                                             kernels=("periodic",))
        p, y = task.period, task.y.astype(np.float64)
        assert p in cfg.periods and task.X.shape == (256, 0)
        acf = lambda lag: np.corrcoef(y[lag:], y[:-lag])[0, 1]  # noqa: E731
        assert acf(p) > 0.95, (p, acf(p))
        assert acf(p) - acf(max(p // 2, 1)) > 0.3, (p, acf(p), acf(p // 2))


def test_kernelsynth_sum_and_product_algebra():
    """K(a + b) = K(a) + K(b) and K(a * b) = K(a) . K(b) (elementwise), replaying the draws;
    the linear kernel matches its closed form."""
    cfg, T = prior.PriorConfig(), 64
    for op in ("+", "*"):
        K, _ = prior.kernelsynth_gram(np.random.default_rng(3), cfg, T, ("linear", "periodic"),
                                      (op,))
        rng = np.random.default_rng(3)
        K_lin, _ = prior.kernelsynth_gram(rng, cfg, T, ("linear",))
        K_per, p = prior.kernelsynth_gram(rng, cfg, T, ("periodic",))
        np.testing.assert_allclose(K, K_lin + K_per if op == "+" else K_lin * K_per, rtol=1e-12)
    c = np.random.default_rng(3).uniform(0.0, T)
    tc = (np.arange(T) - c) / T
    np.testing.assert_allclose(K_lin, np.outer(tc, tc) + 0.1, rtol=1e-12)
    assert p > 0
    np.testing.assert_allclose(K_per[0, p], 1.0, rtol=1e-12)  # periodic at lag p
    np.testing.assert_array_equal(K_per, scipy.linalg.toeplitz(K_per[0]))  # stationary
    assert np.linalg.eigvalsh(K_per + 1e-9 * np.eye(T)).min() > -1e-8  # PSD


def test_kernelsynth_sample_is_cholesky_factor_times_normal():
    cfg, T = prior.PriorConfig(), 128
    kernels, ops = ("rbf", "periodic", "white"), ("*", "+")
    task = prior.sample_kernelsynth_task(np.random.default_rng(7), cfg, T, kernels, ops)
    rng = np.random.default_rng(7)
    K, _ = prior.kernelsynth_gram(rng, cfg, T, kernels, ops)
    z = rng.normal(size=T)
    y = np.linalg.cholesky(K + 1e-6 * np.mean(np.diag(K)) * np.eye(T)) @ z
    expected = prior._finish(rng, y)
    np.testing.assert_allclose(task.y, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_spike_tasks():
    """Sharp spikes at one phase of the period: the mean |second difference| per phase is much
    larger there than at phases two or more steps away (over 300 seeds the smallest ratio is
    ~4, at p = 7 where the sinusoid's own curvature is largest); the covariate flags exactly the
    spikes that occur."""
    cfg = prior.PriorConfig()
    n_cov = 0
    for s in range(12):
        task = prior.sample_spike_task(np.random.default_rng(s), cfg, 256)
        y, p = task.y.astype(np.float64), task.period
        d2 = np.abs(y[1:-1] - 0.5 * (y[:-2] + y[2:]))
        phase = np.arange(1, len(y) - 1) % p
        profile = np.array([d2[phase == k].mean() for k in range(p)])
        k = int(profile.argmax())
        far = [j for j in range(p) if min((j - k) % p, (k - j) % p) >= 2]
        assert profile[k] > 3 * profile[far].max(), (s, p, profile)
        if task.X.shape[1]:
            n_cov += 1
            flag = task.X[1:-1, 0]
            assert set(np.unique(flag)) <= {0.0, 1.0} and set(phase[flag > 0]) == {k}
            missed = (phase == k) & (flag == 0)
            if missed.any():
                assert d2[flag > 0].mean() > 5 * d2[missed].mean()
    assert 0 < n_cov < 12


def test_random_sign_flip():
    y = np.sin(np.arange(100.0))
    signs = [np.sign(np.corrcoef(prior._finish(np.random.default_rng(s), y), y)[0, 1])
             for s in range(200)]
    assert 60 < np.sum(np.array(signs) > 0) < 140


def test_mini_prior_is_sinusoid_plus_one_covariate():
    cfg = prior.PriorConfig(mini=True)
    bank = prior.make_bank(0, 20, cfg)
    assert (bank.family == prior.MINI).all() and (bank.n_feat == 1).all()
    for i in range(20):
        T, p = bank.length[i], bank.period[i]
        y, x = bank.y[i, :T].astype(np.float64), bank.X[i, :T, 0].astype(np.float64)
        t = np.arange(T)
        sincos = np.stack([np.ones(T), np.sin(2 * np.pi * t / p), np.cos(2 * np.pi * t / p)], 1)
        full = _r2(np.column_stack([sincos, x]), y)
        assert full > 0.97, (i, full)
        assert _r2(sincos, y) < full - 0.05  # the covariate matters


def test_config_validation():
    with pytest.raises(ValueError, match="p_kernelsynth"):
        prior.PriorConfig(p_kernelsynth=0.9, p_spike=0.2)
    with pytest.raises(ValueError, match="max_feat"):
        prior.PriorConfig(max_feat=4)
    with pytest.raises(ValueError, match="ar_phi"):
        prior.PriorConfig(ar_phi=(0.0, 1.0))
    with pytest.raises(ValueError, match="kernels"):
        prior.kernelsynth_gram(np.random.default_rng(0), prior.PriorConfig(), 32, ("cosine",))
    with pytest.raises(ValueError, match="n must be"):
        prior.make_bank(0, 0)
    small = dataclasses.replace(prior.PriorConfig(), t_min=64, t_max=96, periods=(7, 12))
    b = prior.make_bank(0, 8, small)
    assert b.y.shape == (8, 96) and b.length.max() <= 96
    bad = prior.Task(np.zeros((10, 4), np.float32), np.zeros(10, np.float32), 0, 1)
    with pytest.raises(ValueError, match="do not fit"):
        prior.stack([bad], 16)
