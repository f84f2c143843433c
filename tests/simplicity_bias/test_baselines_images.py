"""Baselines (Wiener filter and its closed-form loss, Gaussian clones, PCA, FastICA, the NumPy
online step) and the digits clone test (preprocessing, zero-init skip, determinism)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.simplicity_bias import baselines, denoisers, images, mcm, online

A = B = 1 / math.sqrt(2)


def _random_cov(d, seed):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * np.geomspace(0.05, 4.0, d)) @ q.T  # spread spectrum


def test_wiener_closed_form_loss_equals_measured_clone_loss():
    d, n = 16, 200_000
    C = _random_cov(d, 0)
    rng = np.random.default_rng(1)
    x0 = rng.multivariate_normal(np.zeros(d), C, size=n)
    xt = A * x0 + B * rng.standard_normal((n, d))
    W = np.asarray(baselines.wiener(jnp.asarray(C, jnp.float32), A, B), np.float64)
    per = np.sum((x0 - xt @ W.T) ** 2, axis=1)
    want = float(baselines.wiener_loss(jnp.asarray(C, jnp.float32), A, B))
    assert abs(per.mean() - want) < 4 * per.std() / math.sqrt(n), (per.mean(), want)
    # The isotropic denoiser a x_t (optimal only for C = I) is worse here.
    iso = np.sum((x0 - np.asarray(baselines.isotropic_denoise(xt, A))) ** 2, axis=1).mean()
    assert iso > per.mean() + 0.1
    # Gaussian data: W is the best linear map, random perturbations of it do worse.
    for k in range(5):
        E = np.random.default_rng(10 + k).standard_normal((d, d)) * 0.05
        worse = np.sum((x0 - xt @ (W + E).T) ** 2, axis=1).mean()
        assert worse > per.mean()


def test_wiener_input_checks():
    with pytest.raises(ValueError, match="square"):
        baselines.wiener(jnp.ones((3, 4)), A, B)
    with pytest.raises(ValueError, match="a and b"):
        baselines.wiener(jnp.eye(3), 0.5, 0.5)


def test_gaussian_clone_matches_mean_and_covariance():
    rng = np.random.default_rng(2)
    d = 6
    x = rng.exponential(size=(4000, d)) @ rng.standard_normal((d, d))  # non-Gaussian
    clone = np.asarray(baselines.gaussian_clone(jax.random.key(0), jnp.asarray(x, jnp.float32),
                                                200_000), np.float64)
    np.testing.assert_allclose(clone.mean(0), x.mean(0), atol=0.03 * x.std())
    C = np.cov(x.T, bias=True)
    np.testing.assert_allclose(np.cov(clone.T, bias=True), C, atol=0.03 * np.abs(C).max())
    # The clone is Gaussian: fourth moment of a standardised projection ~ 3.
    p = clone @ np.ones(d)
    assert abs(np.mean(((p - p.mean()) / p.std()) ** 4) - 3) < 0.05


def test_pca_finds_u_above_bbp_and_is_blind_to_v():
    d = 32
    cfg = mcm.MCMConfig(d=d)
    u, v = mcm.spikes(jax.random.key(0), d)
    x = np.asarray(mcm.sample(jax.random.key(1), 20 * d, cfg, u, v))
    assert baselines.pca_overlap(x, u) > 0.9  # n/d = 20 >> 1/beta_u^2
    assert baselines.pca_overlap(x, v) < 0.3  # v has unit variance: no PCA signal


@pytest.mark.slow
def test_fastica_finds_v_from_batch_samples():
    d = 8
    cfg = mcm.MCMConfig(d=d, beta_v=9.0)
    u, v = mcm.spikes(jax.random.key(0), d)
    x = np.asarray(mcm.sample(jax.random.key(1), 20 * d * d, cfg, u, v))
    res = baselines.fastica_overlaps(x, v, "logcosh", seed=0)
    assert res["best"] > 0.95 and res["blind"] > 0.95  # the platykurtic component is v
    assert res["chance"] == pytest.approx(math.sqrt(2 * math.log(d) / d))
    with pytest.raises(ValueError, match="fun"):
        baselines.fastica_overlaps(x, v, "tanh")


def test_numpy_step_equals_jax_step():
    d, R = 16, 5
    rng = np.random.default_rng(0)
    w = rng.standard_normal((R, d)).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    x0 = rng.standard_normal((R, d)).astype(np.float32)
    xt = (A * x0 + B * rng.standard_normal((R, d))).astype(np.float32)
    for nu in ("rademacher", "tsodyks"):
        coeffs = denoisers.link_coefficients("both", 4.0, 4.0, A, B, nu)
        phi = denoisers.oracle_link("both", 4.0, 4.0, A, B, nu)
        want = jax.vmap(lambda a_, b_, c_: online.sgd_step(a_, b_, c_, phi, A, 0.1))(
            jnp.asarray(w), jnp.asarray(x0), jnp.asarray(xt))
        got = baselines.numpy_sgd_step(w, x0, xt, coeffs, A, 0.1)
        np.testing.assert_allclose(got, np.asarray(want), atol=2e-6)


def test_numpy_online_reference_learns_u_at_linear_budget():
    d = 32
    m_u, m_v = baselines.online_numpy(np.random.default_rng(0), mcm.MCMConfig(d=d), 1 / d,
                                      60 * d, 16)
    assert np.median(np.abs(m_u)) > 0.6 and np.median(np.abs(m_v)) < 0.35
    with pytest.raises(ValueError, match="independent"):
        baselines.online_numpy(np.random.default_rng(0),
                               mcm.MCMConfig(d=d, latent_corr="sign"), 1 / d, 10, 2)


def test_digits_split_is_standardised_disjoint_and_seeded():
    tr, te = images.load_digits_split(0)
    assert tr.shape == (1400, 64) and te.shape == (397, 64) and tr.dtype == np.float32
    np.testing.assert_allclose(tr.mean(0), 0, atol=1e-5)
    assert tr.std() == pytest.approx(1.0, abs=1e-5)
    tr2, te2 = images.load_digits_split(0)
    np.testing.assert_array_equal(tr, tr2)
    tr3, _ = images.load_digits_split(1)
    assert not np.array_equal(tr, tr3)
    # Disjoint: no test image equals a training image (up to digit duplicates, rare).
    dup = (np.abs(te[:, None, :] - tr[None]).max(-1) < 1e-6).any(1).mean()
    assert dup < 0.02
    with pytest.raises(ValueError, match="n_train"):
        images.load_digits_split(0, n_train=0)


def test_mlp_denoiser_starts_at_the_isotropic_denoiser():
    from flax import nnx

    model = images.MLPDenoiser(64, 32, rngs=nnx.Rngs(0))
    xt = jax.random.normal(jax.random.key(0), (5, 64))
    b = jnp.array([0.2, 0.4, 0.6, 0.8, 0.6])
    np.testing.assert_allclose(model(xt, b), jnp.sqrt(1 - b * b)[:, None] * xt, atol=1e-6)


def test_batch_indices_cover_each_epoch():
    idx = images.batch_indices(0, 10, 4, 2)
    assert idx.shape == (6, 4)  # ceil(10/4) = 3 batches per epoch
    for e in range(2):
        ep = idx[3 * e: 3 * e + 3].ravel()
        assert set(ep[:10]) == set(range(10))  # a permutation, then wrap-around
    np.testing.assert_array_equal(images.checkpoint_steps(100, 5)[:2], [0, 1])


@pytest.mark.slow
def test_clone_curves_small_run_is_deterministic_and_consistent():
    tr, te = images.load_digits_split(0)
    cfg = images.CloneConfig(epochs=3, hidden=32, n_checkpoints=4, b_levels=(0.4, 0.8),
                             n_clone=397)
    r = images.clone_curves(0, tr, te, cfg)
    K = r["steps"].shape[0]
    assert r["steps"][0] == 0 and r["steps"][-1] == 3 * 22 and K == 5
    assert r["L_real"].shape == (K, 2) and r["gap"].shape == (K, 2)
    # Step 0 is the isotropic denoiser: its loss depends on second moments only, so real and
    # clone agree up to the sampling error of 397 images.
    assert np.all(np.abs(r["gap"][0]) < 0.06)
    # Closed-form Wiener loss vs the one measured on 397 clone draws (sampling error ~3 %).
    np.testing.assert_allclose(r["L_W_clone"], r["L_W_theory"], rtol=0.06)
    # The Wiener filter beats the isotropic denoiser on real data.
    assert np.all(r["L_W"] < r["L_real"][0])
    again = images.clone_curves(0, tr, te, cfg)
    np.testing.assert_array_equal(again["L_real"], r["L_real"])
    with pytest.raises(ValueError, match="b_levels"):
        images.clone_curves(0, tr, te, cfg._replace(b_levels=(1.2,)))
    with pytest.raises(ValueError, match="epochs"):
        images.clone_curves(0, tr, te, cfg._replace(epochs=0))
