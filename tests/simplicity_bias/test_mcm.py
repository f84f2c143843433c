"""The mixed cumulant model: sampler moments (covariance, unit variance along v, fourth
cumulants within 4 standard errors), latent correlations, PCA leakage, Gaussian clones and
input validation."""

import math

import jax
import numpy as np
import pytest

from icml26_jax.simplicity_bias import mcm

N = 200_000


def _kappa4(y):
    """Sample fourth cumulant of y [n] and its delta-method standard error.

    kappa_4 = mu_4 - 3 mu_2^2 (centred moments); influence function
    (y^4 - mu_4) - 6 mu_2 (y^2 - mu_2) - 4 mu_3 y (the centring term), SE = std(IF)/sqrt(n).
    """
    y = np.asarray(y, np.float64)
    y = y - y.mean()
    m2, m3, m4 = (np.mean(y ** k) for k in (2, 3, 4))
    infl = (y ** 4 - m4) - 6 * m2 * (y ** 2 - m2) - 4 * m3 * y
    return m4 - 3 * m2 ** 2, infl.std() / math.sqrt(y.size)


def _draw(cfg, seed=0, n=N):
    k_spk, k_x = jax.random.split(jax.random.key(seed))
    u, v = mcm.spikes(k_spk, cfg.d)
    x = mcm.sample(k_x, n, cfg, u, v)
    return np.asarray(x, np.float64), np.asarray(u, np.float64), np.asarray(v, np.float64)


def test_spikes_orthonormal():
    u, v = mcm.spikes(jax.random.key(3), 40)
    q = np.stack([u, v])
    np.testing.assert_allclose(q @ q.T, np.eye(2), atol=1e-6)


@pytest.mark.parametrize("corr", ["independent", "sign"])
def test_sampler_covariance_and_v_direction(corr):
    cfg = mcm.MCMConfig(d=16, latent_corr=corr)
    x, u, v = _draw(cfg)
    n = x.shape[0]
    c_true = np.asarray(mcm.covariance(cfg, u.astype(np.float32), v.astype(np.float32)),
                        np.float64)
    c_hat = x.T @ x / n  # the mean is zero by construction
    # E||C_hat - C||_F^2 = (tr(C)^2 + ||C||_F^2) / n for Gaussian data; the data are
    # platykurtic along v, so 3x that RMS error is a safe bound that a wrong spike violates
    # (beta_u = 4 puts 4 on the diagonal; the sampling error is ~0.06).
    tol = 3 * math.sqrt((np.trace(c_true) ** 2 + np.sum(c_true ** 2)) / n)
    assert np.linalg.norm(c_hat - c_true) < tol
    y = x @ v
    # Var(x . v) = 1 exactly; SE of a variance of a unit-variance platykurtic variable
    # <= sqrt(2 / n) ~ 0.003.
    assert abs(y.var() - 1.0) < 4 * math.sqrt(2.0 / n)
    if corr == "independent":
        k4, se = _kappa4(y)
        want = -2.0 * (cfg.beta_v / (1 + cfg.beta_v)) ** 2
        assert want == pytest.approx(mcm.kappa4_along(cfg, 1.0))
        assert abs(k4 - want) < 4 * se, (k4, want, se)
        # A random direction with no v-overlap is Gaussian: kappa_4 = 0.
        r = np.random.default_rng(1).normal(size=cfg.d)
        r -= (r @ v) * v
        k4r, ser = _kappa4(x @ (r / np.linalg.norm(r)))
        assert abs(k4r) < 4 * ser, (k4r, ser)


def test_latent_moments_nonlinear_and_sign():
    lam, nu = mcm.sample_latents(jax.random.key(5), 1_000_000,
                                 mcm.MCMConfig(d=4, latent_corr="nonlinear"))
    lam, nu = np.asarray(lam, np.float64), np.asarray(nu, np.float64)
    se = 1 / math.sqrt(lam.size)
    assert set(np.unique(nu)) == {-1.0, 1.0}
    assert abs(nu.mean()) < 4 * se  # Var(nu) = 1
    assert abs(np.mean(lam * nu)) < 4 * se  # Var(lam nu) = 1
    third = lam ** 3 * nu  # Var = E lam^6 = 15
    want = 2 * mcm.T_NONLINEAR ** 2 / math.sqrt(2 * math.pi)
    assert want == pytest.approx(1.106, abs=1e-3)
    assert abs(third.mean() - want) < 4 * third.std() * se
    for tau in (0.0, 1.0):
        lam, nu = mcm.sample_latents(jax.random.key(6), 1_000_000,
                                     mcm.MCMConfig(d=4, latent_corr="sign", tau=tau))
        prod = np.asarray(lam, np.float64) * np.asarray(nu, np.float64)
        want = math.sqrt(2 / math.pi) / math.sqrt(1 + tau ** 2)
        assert abs(prod.mean() - want) < 4 * prod.std() * se


def test_tsodyks_latent_standardised():
    cfg = mcm.MCMConfig(d=4, nu="tsodyks", rho=0.7)
    _, nu = mcm.sample_latents(jax.random.key(7), 1_000_000, cfg)
    nu = np.asarray(nu, np.float64)
    se = 1 / math.sqrt(nu.size)
    assert abs(nu.mean()) < 4 * se
    assert abs(nu.var() - 1) < 4 * np.std(nu ** 2) * se
    k4, sek = _kappa4(nu)
    assert abs(k4 - mcm.kappa4_nu(cfg)) < 4 * sek


def test_pca_overlap_v_matches_eigenvector():
    cfg = mcm.MCMConfig(d=12, latent_corr="sign")
    u, v = mcm.spikes(jax.random.key(0), cfg.d)
    evals, evecs = np.linalg.eigh(np.asarray(mcm.covariance(cfg, u, v), np.float64))
    leak = abs(evecs[:, -1] @ np.asarray(v, np.float64))
    assert mcm.pca_overlap_v(cfg) == pytest.approx(leak, abs=1e-5)
    assert mcm.pca_overlap_v(cfg) == pytest.approx(0.30, abs=0.01)  # spec's value
    for corr in ("independent", "nonlinear"):
        assert mcm.pca_overlap_v(cfg._replace(latent_corr=corr)) == 0.0


def test_gaussian_clone_matches_mean_and_covariance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 5)) @ rng.normal(size=(5, 5)) + rng.normal(size=5)
    clone = np.asarray(mcm.gaussian_clone(jax.random.key(1), x.astype(np.float32), 400_000),
                       np.float64)
    cov = np.cov(x.T, bias=True)
    # 4e5 draws: mean SE ~ sqrt(diag C / n), covariance error ~ ||C|| sqrt(2 / n) (~0.2 %).
    np.testing.assert_allclose(clone.mean(0), x.mean(0),
                               atol=4 * math.sqrt(np.max(np.diag(cov)) / 4e5))
    np.testing.assert_allclose(np.cov(clone.T, bias=True), cov,
                               atol=4 * np.max(np.diag(cov)) * math.sqrt(2 / 4e5))


@pytest.mark.parametrize("kwargs, word", [
    (dict(d=8, latent_corr="cubic"), "latent_corr"),
    (dict(d=8, nu="gauss"), "nu"),
    (dict(d=1), "d"),
    (dict(d=8, beta_u=-1.0), "beta_u"),
    (dict(d=8, beta_v=-0.5), "beta_v"),
    (dict(d=8, nu="tsodyks", latent_corr="sign"), "latent_corr"),
])
def test_config_errors_name_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        mcm.sample_latents(jax.random.key(0), 4, mcm.MCMConfig(**kwargs))
    with pytest.raises(ValueError, match=word):
        mcm.pca_overlap_v(mcm.MCMConfig(**kwargs))


def test_spikes_rejects_small_d():
    with pytest.raises(ValueError, match="d must be"):
        mcm.spikes(jax.random.key(0), 1)
