"""Problems: golden data, closed forms, gradients against autodiff and finite differences,
and the noise laws (variance sigma^2; heavy tails only for the negative control)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.dsgd_hp import problems


def test_golden_h_and_centered_heterogeneity():
    q = problems.quadratic(8, d=10, hetero=0.5)
    np.testing.assert_allclose(
        q.h, [1, 1.86, 1.10, 1.04, 6.51, 8.18, 4.04, 5.36, 3.50, 10], atol=6e-3)
    assert q.h[0] == 1.0 and q.h[-1] == 10.0
    np.testing.assert_allclose((q.b - q.x_star).sum(0), 0.0, atol=1e-12)  # sum_i xi_i = 0
    assert q.hetero_A == pytest.approx(np.linalg.norm(q.h * (q.b - q.x_star), axis=1).max())


def test_quadratic_gap_closed_form():
    q = problems.quadratic(4, hetero=1.0)
    x = np.random.default_rng(0).standard_normal((5, 10))
    # f(x) - f* from the definition f = mean_i 1/2 (x - b_i)^T H (x - b_i).
    f = 0.5 * np.mean(np.sum(q.h * (x[:, None] - q.b) ** 2, -1), -1)
    f_star = 0.5 * np.mean(np.sum(q.h * (q.x_star - q.b) ** 2, -1))
    np.testing.assert_allclose(problems.gap(q, x, xp=np), f - f_star, rtol=1e-12)
    np.testing.assert_allclose(problems.loss(q, x, xp=np), f, rtol=1e-12)


def test_digits_constants_and_newton_optimum():
    nc = problems.digits(4, reg="nonconvex")
    l2 = problems.digits(4, reg="l2")
    assert nc.L == pytest.approx(6.044, abs=1e-3)
    assert l2.L == pytest.approx(6.124, abs=1e-3)
    assert np.linalg.norm(problems.full_grad(l2, l2.x_star, xp=np)) < 1e-12
    assert nc.A.shape == (4 * (1797 // 4), 65) and nc.shards.shape == (4, 1797 // 4)
    assert abs(nc.y.mean() - 0.5) < 0.01  # label digit >= 5 is balanced
    # Every user's shard indexes distinct rows of A.
    assert len(np.unique(nc.shards)) == nc.shards.size


@pytest.mark.parametrize("reg", ["nonconvex", "l2"])
def test_full_grad_matches_finite_differences_and_autodiff(reg):
    prob = problems.digits(4, reg=reg)
    x = 0.3 * np.random.default_rng(1).standard_normal(65)
    g = problems.full_grad(prob, x, xp=np)
    eps = 1e-6
    fd = np.array([(problems.loss(prob, x + eps * e, xp=np) - problems.loss(prob, x - eps * e, xp=np))
                   / (2 * eps) for e in np.eye(65)])
    np.testing.assert_allclose(g, fd, atol=1e-6)  # float64 central differences
    dev = problems.as_device(prob)
    auto = jax.grad(lambda v: problems.loss(dev, v))(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(auto, g, atol=2e-5)  # float32 autodiff


def test_stochastic_gradients_are_unbiased():
    prob = problems.digits(2, reg="nonconvex")
    x = 0.1 * np.ones((1, 2, 65))
    uid = np.arange(2)
    # Averaging the single-sample gradient over every position of the shard gives grad f_i.
    m = prob.shards.shape[1]
    z = np.broadcast_to(np.arange(m)[:, None], (m, 2))
    g = problems.stoch_grad(prob, np.broadcast_to(x, (m, 2, 65)), uid, z, xp=np).mean(0)
    full = problems.full_grad(prob, x[0], xp=np).mean(0)  # mean over users of grad f_i
    np.testing.assert_allclose(g.mean(0), full, atol=1e-12)


def test_quadratic_stoch_grad_is_grad_plus_noise():
    q = problems.quadratic(3, hetero=0.5)
    x = np.random.default_rng(2).standard_normal((2, 3, 10))
    z = np.random.default_rng(3).standard_normal((2, 3, 10))
    g = problems.stoch_grad(q, x, np.arange(3), z, xp=np)
    np.testing.assert_allclose(g, q.h * (x - q.b) + z)
    np.testing.assert_allclose((g - z).mean(1), problems.full_grad(q, x, xp=np).mean(1))


def test_gauss_noise_variance():
    z = np.asarray(problems.noise("gauss", jax.random.key(0), (1_000_000,), 2.0), np.float64)
    assert z.var() == pytest.approx(4.0, rel=0.01)  # sd of the estimate is 0.14%


def test_heavy_noise_law_and_variance():
    sigma = 2.0
    z = np.asarray(problems.noise("heavy", jax.random.key(0), (1_000_000,), sigma), np.float64)
    scale = np.sqrt(2 / (1.5 * 0.5))
    x = np.sort(np.abs(z) * scale / sigma)  # should be Lomax(2.5): P(X > x) = (1 + x)^-2.5
    ecdf = np.arange(1, x.size + 1) / x.size
    assert np.abs(ecdf - (1 - (1 + x) ** -2.5)).max() < 3e-3  # KS: 1.63 / sqrt(1e6) at 1%
    # The sample variance of a tail-2.5 law converges like n^-0.2 (infinite 4th moment; on
    # 1e6 draws it is often 15% off), so it is no test of sigma^2. The law above fixes the
    # variance (E X^2 = 2 / (1.5 * 0.5) exactly); the bulk second moment, whose estimate has
    # finite variance, is checked against its closed form.
    c = 20.0
    grid = np.linspace(0, c, 200_001)
    bulk = np.trapezoid(grid**2 * 2.5 * (1 + grid) ** -3.5, grid)
    assert np.mean(np.where(x <= c, x**2, 0.0)) == pytest.approx(bulk, rel=0.01)
    assert 2 / (1.5 * 0.5) - bulk > 0.5  # the tail beyond 20 carries real variance
    assert abs((z > 0).mean() - 0.5) < 0.003  # symmetric: a random sign


def test_heavy_noise_has_heavier_tails_than_gaussian():
    key = jax.random.key(1)
    g = np.asarray(problems.noise("gauss", key, (1_000_000,), 1.0))
    h = np.asarray(problems.noise("heavy", key, (1_000_000,), 1.0))
    for q in (1e-4, 1 - 1e-4):  # both tails
        assert abs(np.quantile(h, q)) > 1.5 * abs(np.quantile(g, q))


def test_errors():
    with pytest.raises(ValueError, match="unknown noise 'cauchy'; allowed: gauss, heavy"):
        problems.noise("cauchy", jax.random.key(0), (3,), 1.0)
    with pytest.raises(ValueError, match="unknown split 'dirichlet'"):
        problems.digits(4, split="dirichlet")
    with pytest.raises(ValueError, match="unknown reg"):
        problems.digits(4, reg="l1")
    with pytest.raises(ValueError, match="hetero"):
        problems.quadratic(4, hetero=-1.0)
    with pytest.raises(ValueError, match="labels must be boolean"):
        problems.split_problem(np.ones((10, 2)), np.arange(10), 2)


def test_draw_is_counter_based_and_local_grad_uses_it():
    # Noise of (run r, user i) does not depend on which other runs/users are drawn with it.
    q = problems.quadratic(8)
    key_t = jax.random.fold_in(jax.random.key(3), 17)
    full = np.asarray(problems.draw(q, key_t, jnp.arange(6), jnp.arange(8)))
    part = np.asarray(problems.draw(q, key_t, jnp.arange(2, 4), jnp.arange(4, 8)))
    np.testing.assert_array_equal(part, full[2:4, 4:8])
    x = np.ones((6, 8, 10), np.float32)
    g = problems.local_grad(problems.as_device(q), x, jnp.arange(8), key_t, jnp.arange(6))
    np.testing.assert_allclose(g, q.h * (x - q.b) + full, rtol=1e-6, atol=1e-6)
