"""Feasibility weights on hand cases and the geometric bounds' closed forms (spec §Tests
"Weights", "Bounds")."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.safe_flow_rl import bounds, weights


def test_feasibility_weights_hand_cases():
    # infeasible state (V_h > 0): clip(exp(5 (V_h - Q_h)), 1, 150)
    w = weights.feasibility_weights(qh=[0.5, 0.0, 2.0], vh=[0.4, 0.4, 0.4], qr=[0.0] * 3,
                                    vr=[0.0] * 3)
    np.testing.assert_allclose(w, [1.0, min(math.exp(5 * 0.4), 150), 1.0], rtol=1e-6)
    w = weights.feasibility_weights(qh=[-2.0], vh=[1.0], qr=[0.0], vr=[0.0])
    assert float(w[0]) == 150.0  # upper clip
    # feasible state: 0 for infeasible actions, else clip(exp(3 (Q_r - V_r)), 0, 100)
    w = weights.feasibility_weights(qh=[0.1, -0.1, -0.1, -0.1], vh=[-0.2] * 4,
                                    qr=[5.0, 0.5, -1.0, 10.0], vr=[0.0] * 4)
    np.testing.assert_allclose(w, [0.0, math.exp(1.5), math.exp(-3.0), 100.0], rtol=1e-6)


def test_normalized_weights_have_unit_mean():
    w = weights.normalize_weights(jnp.asarray([1.0, 3.0, 0.0, 4.0]))
    np.testing.assert_allclose(w, [0.5, 1.5, 0.0, 2.0])
    assert np.all(np.asarray(weights.normalize_weights(jnp.zeros(3))) == 0)


def test_closed_forms_for_a_shift():
    d = jnp.asarray([0.3, 0.4])  # ||delta|| = 0.5
    assert float(bounds.kl_gauss(d, jnp.zeros(2))) == pytest.approx(0.125, rel=1e-6)
    assert float(bounds.w2_gauss(d, jnp.ones(2))) == pytest.approx(0.5, rel=1e-6)
    tv = float(bounds.tv_shift(d))
    assert tv == pytest.approx(2 * 0.5 * (1 + math.erf(0.25 / math.sqrt(2))) - 1, rel=1e-6)
    assert tv <= float(bounds.pinsker(0.125)) + 1e-7  # Pinsker


def test_monte_carlo_matches_closed_forms():
    key = jax.random.key(0)
    n = 200_000
    m, ls = jnp.asarray([0.3, -0.2]), jnp.asarray([0.1, -0.3])
    sig = jnp.exp(ls)
    z = jax.random.normal(key, (n, 2))
    x = m + sig * z
    logq = jnp.sum(jax.scipy.stats.norm.logpdf(x, m, sig), -1)
    logp = jnp.sum(jax.scipy.stats.norm.logpdf(x), -1)
    d = logq - logp
    kl, se = float(jnp.mean(d)), float(jnp.std(d) / math.sqrt(n))
    assert abs(kl - float(bounds.kl_gauss(m, ls))) < 3 * se
    # TV of a shift: 1/2 E_p |q/p - 1|.
    delta = jnp.asarray([0.6, 0.0])
    zp = jax.random.normal(jax.random.fold_in(key, 1), (n, 2))
    ratio = jnp.exp(jnp.sum(jax.scipy.stats.norm.logpdf(zp, delta) -
                            jax.scipy.stats.norm.logpdf(zp), -1))
    t = 0.5 * jnp.abs(ratio - 1.0)
    tv, se = float(jnp.mean(t)), float(jnp.std(t) / math.sqrt(n))
    assert abs(tv - float(bounds.tv_shift(delta))) < 3 * se
    # W2 of diagonal Gaussians: the monotone (sorted) coupling per coordinate is optimal.
    xs = jnp.sort(x, axis=0)
    ys = jnp.sort(jax.random.normal(jax.random.fold_in(key, 2), (n, 2)), axis=0)
    w2 = float(jnp.sqrt(jnp.mean(jnp.sum((xs - ys) ** 2, -1))))
    assert w2 == pytest.approx(float(bounds.w2_gauss(m, sig)), abs=0.01)


def test_mc_kl_shift_through_an_exact_bijection():
    # f(z) = tanh(A z + b): an invertible map with a known inverse and log-det.
    A = jnp.asarray([[1.3, 0.4], [-0.2, 0.8]])
    b = jnp.asarray([0.1, -0.2])
    Ainv = jnp.linalg.inv(A)

    def fwd(z):
        return jnp.tanh(z @ A.T + b)

    def inv(a):
        u = jnp.arctanh(jnp.clip(a, -1 + 1e-6, 1 - 1e-6))
        z = (u - b) @ Ainv.T
        logdet = -jnp.log(jnp.abs(jnp.linalg.det(A))) - jnp.sum(jnp.log1p(-a * a), -1)
        return z, logdet

    def log_prob(a):
        z, ld = inv(a)
        return jnp.sum(jax.scipy.stats.norm.logpdf(z), -1) + ld

    delta = jnp.asarray([0.3, 0.4])
    est, se = bounds.mc_kl_shift(fwd, inv, log_prob, delta, jax.random.key(3), 20_000)
    assert abs(float(est) - 0.125) <= 4 * float(se) + 1e-3
