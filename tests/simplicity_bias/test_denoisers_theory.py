"""Oracle links against binned Monte Carlo and quadrature, the closed-form SGD gradient
against autodiff, the float64 population loss against Monte Carlo, and the diffusion
information exponents of claims 9-12 at smoke scale."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.simplicity_bias import denoisers, mcm, online, theory

A = B = 1 / math.sqrt(2)
M_GRID = np.geomspace(0.02, 0.2, 10)


def _s_h(cfg, along, n, seed):
    """Samples of s = x0 . spike and h = a s + b g from the MCM sampler (float64 host)."""
    k_spk, k_x, k_g = jax.random.split(jax.random.key(seed), 3)
    u, v = mcm.spikes(k_spk, cfg.d)
    x = mcm.sample(k_x, n, cfg, u, v)
    s = np.asarray(x @ (u if along == "u" else v), np.float64)
    g = np.asarray(jax.random.normal(k_g, (n,)), np.float64)
    return s, A * s + B * g


@pytest.mark.parametrize("link, cfg", [
    ("u", mcm.MCMConfig(d=4)),
    ("v", mcm.MCMConfig(d=4, beta_u=0.0, beta_v=9.0)),
    ("v", mcm.MCMConfig(d=4, beta_u=0.0, beta_v=9.0, nu="tsodyks", rho=0.7)),
])
def test_oracle_link_equals_binned_conditional_mean(link, cfg):
    s, h = _s_h(cfg, link, 1_000_000, seed=11)
    phi = denoisers.oracle_link(link, cfg.beta_u, cfg.beta_v, A, B, cfg.nu, cfg.rho)
    f = np.asarray(phi(jnp.asarray(h, jnp.float32))[0], np.float64)
    target = s - A * h  # E[target | h] = phi(h) for the oracle
    edges = np.linspace(-2.5, 2.5, 26)
    idx = np.digitize(h, edges) - 1
    z_oracle, z_lin = [], []
    lin_only = denoisers.link_coefficients(link, cfg.beta_u, cfg.beta_v, A, B, cfg.nu,
                                           cfg.rho).lin * h
    for k in range(25):
        sel = idx == k
        se = target[sel].std() / math.sqrt(sel.sum())
        # Comparing bin means of target and of phi(h) absorbs the within-bin slope of phi.
        z_oracle.append(abs(np.mean(target[sel] - f[sel])) / se)
        z_lin.append(abs(np.mean(target[sel] - lin_only[sel])) / se)
    # 25 bins at 4.5 SE: a Bonferroni family-wise false-alarm rate below 2e-4.
    assert max(z_oracle) < 4.5, max(z_oracle)
    if link == "v":  # power: dropping the tanh (the He_3 part) is detected by far.
        assert max(z_lin) > 20, max(z_lin)


def test_oracle_link_equals_quadrature_conditional_mean():
    beta_v = 4.0
    al, sv = math.sqrt(beta_v / (1 + beta_v)), math.sqrt(1 / (1 + beta_v))
    x, w = np.polynomial.hermite.hermgauss(100)
    zeta = math.sqrt(2) * x
    h = np.linspace(-3, 3, 13)[:, None, None]
    s = al * np.array([1.0, -1.0])[None, :, None] + sv * zeta[None, None, :]  # [1, 2, Q]
    lik = np.exp(-0.5 * (h - A * s) ** 2 / B ** 2) * w  # p(h | s) x quadrature weight
    cond = np.sum(s * lik, axis=(1, 2)) / np.sum(lik, axis=(1, 2))  # E[s | h]
    for link, beta_u in (("v", 0.0), ("both", 0.0)):  # beta_u = 0: phi_u vanishes
        phi = denoisers.oracle_link(link, beta_u, beta_v, A, B)
        f = np.asarray(phi(jnp.asarray(h.ravel(), jnp.float32))[0], np.float64)
        np.testing.assert_allclose(f, cond - A * h.ravel(), atol=2e-6)  # float32 link
    # u: s ~ N(0, 1 + beta_u), E[s | h] linear; phi' is the derivative of phi.
    phi = denoisers.oracle_link("u", 4.0, beta_v, A, B)
    hh = jnp.linspace(-2.0, 2.0, 9)
    f, fp = phi(hh)
    np.testing.assert_allclose(f + A * hh, A * 5 / (A * A * 5 + B * B) * hh, rtol=1e-6)
    phi = denoisers.oracle_link("both", 4.0, beta_v, A, B)
    np.testing.assert_allclose(phi(hh)[1], jax.vmap(jax.grad(lambda t: phi(t)[0]))(hh),
                               rtol=1e-5)


def test_closed_form_gradient_is_projected_autodiff_and_steps_stay_on_sphere():
    with jax.enable_x64(True):
        d = 12
        k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
        cfg = mcm.MCMConfig(d=d, latent_corr="nonlinear")
        u, v = mcm.spikes(k1, d)
        phi = denoisers.oracle_link("both", cfg.beta_u, cfg.beta_v, A, B)
        x0 = mcm.sample(k2, 5, cfg, u, v)
        xt = A * x0 + B * jax.random.normal(k3, x0.shape, x0.dtype)
        w = jax.random.normal(k4, (d,), x0.dtype)
        w = w / jnp.linalg.norm(w)
        assert w.dtype == jnp.float64
        for i in range(5):
            g = jax.grad(lambda ww: denoisers.dsm_loss(x0[i], xt[i], ww, phi, A))(w)
            g = g - (g @ w) * w
            np.testing.assert_allclose(online.sphere_grad(w, x0[i], xt[i], phi, A), g,
                                       rtol=1e-10, atol=1e-12)
        # The w-dependent part of the per-sample loss is -2 phi(h)(s - a h) + phi(h)^2.
        s, h = x0 @ w, xt @ w
        f = phi(h)[0]
        np.testing.assert_allclose(
            denoisers.dsm_loss(x0, xt, w, phi, A) - jnp.sum((x0 - A * xt) ** 2, -1),
            -2 * f * (s - A * h) + f * f, rtol=1e-10, atol=1e-12)

    # Many float32 steps with a large delta: the renormalisation keeps ||w|| = 1.
    x0 = mcm.sample(jax.random.key(1), 500, cfg, u.astype(jnp.float32), v.astype(jnp.float32))
    xt = A * x0 + B * jax.random.normal(jax.random.key(2), x0.shape)

    def body(ww, batch):
        ww = online.sgd_step(ww, batch[0], batch[1], phi, A, 0.3)
        return ww, jnp.linalg.norm(ww)

    _, norms = jax.lax.scan(body, jnp.ones(d) / math.sqrt(d), (x0, xt))
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)  # float32 rounding


@pytest.mark.parametrize("cfg, link, m_u, m_v", [
    (mcm.MCMConfig(d=8, latent_corr="nonlinear"), "both", 0.6, 0.5),
    (mcm.MCMConfig(d=8, beta_u=0.0, beta_v=9.0), "v", 0.0, 0.95),
    (mcm.MCMConfig(d=8, latent_corr="sign", tau=0.5), "both", 0.5, 0.5),
    (mcm.MCMConfig(d=8, nu="tsodyks"), "both", 0.3, 0.8),
])
def test_population_loss_matches_monte_carlo(cfg, link, m_u, m_v):
    n = 1_000_000
    k_spk, k_x, k_g, k_w = jax.random.split(jax.random.key(3), 4)
    u, v = mcm.spikes(k_spk, cfg.d)
    r = jax.random.normal(k_w, (cfg.d,))
    r = r - (r @ u) * u - (r @ v) * v
    w = m_u * u + m_v * v + math.sqrt(1 - m_u ** 2 - m_v ** 2) * r / jnp.linalg.norm(r)
    x0 = mcm.sample(k_x, n, cfg, u, v)
    xt = A * x0 + B * jax.random.normal(k_g, x0.shape)
    phi = denoisers.oracle_link(link, cfg.beta_u, cfg.beta_v, A, B, cfg.nu, cfg.rho)
    q = np.asarray(denoisers.dsm_loss(x0, xt, w, phi, A) - jnp.sum((x0 - A * xt) ** 2, -1),
                   np.float64)
    want = theory.population_loss(m_u, m_v, cfg, link, A, B)
    se = q.std() / math.sqrt(n)
    assert abs(q.mean() - want) < 4 * se, (q.mean(), want, se)


def _fit(cfg, link, along, m_u=0.0):
    def loss(m):
        mu, mv = (m, 0.0) if along == "u" else (m_u, m)
        return theory.population_loss(mu, mv, cfg, link, A, B)

    base = loss(0.0)
    return theory.fit_exponent(lambda m: loss(m) - base, M_GRID)


# Claims 9-12 (spec §Claims, smoke): pair-wise k = 2, cumulant k = 4, correlated latents
# k = 1, independent control k = 4, with the spec's bands.
def test_exponent_pairwise_claim9():
    assert abs(_fit(mcm.MCMConfig(d=8), "u", "u") - 2) <= 0.1


def test_exponent_cumulant_claim10():
    assert abs(_fit(mcm.MCMConfig(d=8, beta_u=0.0, beta_v=9.0), "v", "v") - 4) <= 0.2


def test_exponent_correlated_claim11():
    assert abs(_fit(mcm.MCMConfig(d=8, latent_corr="nonlinear"), "both", "v", 0.9) - 1) <= 0.1


def test_exponent_independent_control_claim12():
    assert abs(_fit(mcm.MCMConfig(d=8), "both", "v", 0.9) - 4) <= 0.2


def test_exponent_tsodyks_is_three_with_its_oracle_link():
    # The Tsodyks latent has a third cumulant; its oracle link has an even part that couples
    # to it (k = 3). An odd link (the Rademacher tanh) only sees the fourth cumulant (k = 4).
    cfg = mcm.MCMConfig(d=8, beta_u=0.0, beta_v=9.0, nu="tsodyks", rho=0.7)
    assert abs(_fit(cfg, "v", "v") - 3) <= 0.1
    odd = denoisers.link_coefficients("v", 0.0, 9.0, A, B)  # Rademacher link
    assert odd.shift == 0.0 and odd.const == 0.0
    tso = denoisers.link_coefficients("v", 0.0, 9.0, A, B, "tsodyks", 0.7)
    assert tso.shift != 0.0 and tso.const != 0.0


def test_fit_exponent_recovers_planted_power():
    assert theory.fit_exponent(lambda m: -3.0 * m ** 3, M_GRID) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="m_grid"):
        theory.fit_exponent(lambda m: m, [0.0, 0.1])


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="link"):
        denoisers.oracle_link("w", 4.0, 4.0, A, B)
    with pytest.raises(ValueError, match="a and b"):
        denoisers.oracle_link("u", 4.0, 4.0, 0.8, 0.8)
    with pytest.raises(ValueError, match="beta_u"):
        denoisers.oracle_link("u", -1.0, 4.0, A, B)
    cfg = mcm.MCMConfig(d=8)
    with pytest.raises(ValueError, match="link"):
        theory.population_loss(0.1, 0.1, cfg, "uv", A, B)
    with pytest.raises(ValueError, match="a and b"):
        theory.population_loss(0.1, 0.1, cfg, "u", 0.5, 0.5)
    with pytest.raises(ValueError, match="m_u"):
        theory.population_loss(0.9, 0.9, cfg, "u", A, B)
    with pytest.raises(ValueError, match="latent_corr"):
        theory.population_loss(0.1, 0.1, cfg._replace(latent_corr="x"), "u", A, B)
