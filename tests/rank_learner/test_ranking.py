"""The paper's math: AIPW scores, pair labels, the pair sampler, the pairwise loss, and the
orthogonality of the label correction (finite differences in float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from icml26_jax.rank_learner import data, ranking


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def test_orth_labels_closed_form_on_hand_pairs():
    kappa = 0.5
    tau_i, tau_j = np.array([0.3, -0.2, 1.0]), np.array([0.1, 0.4, -1.0])
    phi_i, phi_j = np.array([0.5, -0.1, 3.0]), np.array([0.0, 0.9, -1.5])
    p = _sigmoid((tau_i - tau_j) / kappa)
    # pair 0: p = sigmoid(0.4); residual diff = 0.2 - (-0.1) = 0.3
    assert p[0] == pytest.approx(1 / (1 + np.exp(-0.4)))
    want = p + p * (1 - p) / kappa * ((phi_i - tau_i) - (phi_j - tau_j))
    got, frac = ranking.orth_labels(*map(jnp.asarray, (tau_i, tau_j, phi_i, phi_j)), kappa,
                                    clip=False)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # pair 2: p ~ 0.982, correction 0.0177 * (2 - (-0.5)) / 0.5 pushes it above 1.
    assert want[2] > 1 and 0 < want[0] < 1 and 0 < want[1] < 1
    clipped, frac = ranking.orth_labels(*map(jnp.asarray, (tau_i, tau_j, phi_i, phi_j)), kappa)
    np.testing.assert_allclose(clipped, np.clip(want, 0, 1), rtol=1e-6)
    assert float(frac) == pytest.approx(1 / 3)


def test_orth_labels_equal_soft_labels_when_phi_is_tau():
    rng = np.random.default_rng(0)
    ti, tj = jnp.asarray(rng.normal(size=50)), jnp.asarray(rng.normal(size=50))
    orth, frac = ranking.orth_labels(ti, tj, ti, tj, 0.75)
    np.testing.assert_allclose(orth, ranking.soft_labels(ti, tj, 0.75), rtol=1e-6)
    assert float(frac) == 0.0


def test_pairwise_bce_matches_optax():
    rng = np.random.default_rng(1)
    gi, gj = rng.normal(size=64), rng.normal(size=64)
    labels = rng.uniform(size=64)
    want = optax.sigmoid_binary_cross_entropy(jnp.asarray(gi - gj), jnp.asarray(labels)).mean()
    got = ranking.pairwise_bce(jnp.asarray(gi), jnp.asarray(gj), jnp.asarray(labels))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_sample_pairs_distinct_and_uniform():
    n, m = 7, 100_000
    i, j = map(np.asarray, ranking.sample_pairs(jax.random.key(3), n, m))
    assert i.dtype == np.int32 and (i != j).all()
    assert i.min() >= 0 and j.min() >= 0 and i.max() < n and j.max() < n
    for v in (i, j):
        _, p = stats.chisquare(np.bincount(v, minlength=n))
        assert p > 1e-3, p
    # Every ordered pair equally likely (n(n-1) = 42 cells, ~2,400 draws each).
    _, p = stats.chisquare(np.bincount(i * n + j, minlength=n * n)[
        (np.arange(n * n) // n) != (np.arange(n * n) % n)])
    assert p > 1e-3, p


def test_aipw_unbiased_with_exact_nuisances():
    d = data.synthetic(np.random.default_rng(5), n=200_000)
    phi = np.asarray(ranking.aipw(jnp.asarray(d.y), jnp.asarray(d.t), jnp.asarray(d.mu0),
                                  jnp.asarray(d.mu1), jnp.asarray(d.pi)), np.float64)
    r = phi - d.tau
    assert abs(r.mean()) < 3 * r.std() / np.sqrt(len(r)), (r.mean(), r.std())


def test_aipw_clips_propensity():
    y, t = jnp.array([1.0, 1.0]), jnp.array([1.0, 0.0])
    mu = jnp.zeros(2)
    phi = ranking.aipw(y, t, mu, mu, jnp.array([1e-9, 1 - 1e-9]), clip=0.01)
    np.testing.assert_allclose(phi, [100.0, -100.0], rtol=1e-4)


@pytest.mark.parametrize("bad", [0.0, 0.5, -0.1, 0.7])
def test_aipw_rejects_bad_clip(bad):
    with pytest.raises(ValueError, match="clip"):
        ranking.aipw(jnp.ones(2), jnp.ones(2), jnp.zeros(2), jnp.zeros(2), jnp.ones(2) / 2,
                     clip=bad)


@pytest.mark.parametrize("kappa", [0.0, -1.0])
def test_labels_reject_bad_kappa(kappa):
    with pytest.raises(ValueError, match="kappa"):
        ranking.soft_labels(jnp.ones(2), jnp.zeros(2), kappa)
    with pytest.raises(ValueError, match="kappa"):
        ranking.RankerConfig(kappa=kappa).validate()


def test_sample_pairs_rejects_n_below_2():
    with pytest.raises(ValueError, match="n >= 2"):
        ranking.sample_pairs(jax.random.key(0), 1, 4)


def _risk(delta, orthogonal, x, mu0, mu1, tau, b, g, kappa):
    """Mean pairwise risk over all ordered pairs with mu perturbed by delta along b, exact pi
    and phi replaced by E[phi_hat | X] = tau (exact pi makes AIPW unbiased for any mu)."""
    tau_hat = (mu1 + delta * b) - (mu0 - 0.5 * delta * b)
    n = x.shape[0]
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    if orthogonal:
        lab, _ = ranking.orth_labels(tau_hat[i], tau_hat[j], tau[i], tau[j], kappa, clip=False)
    else:
        lab = ranking.soft_labels(tau_hat[i], tau_hat[j], kappa)
    return ranking.pairwise_bce(g[i], g[j], lab)


def test_orthogonality_finite_differences_float64():
    with jax.enable_x64(True):
        d = data.synthetic(np.random.default_rng(0), n=300)
        x = jnp.asarray(d.x, jnp.float64)
        f64 = lambda a: jnp.asarray(a, jnp.float64)  # noqa: E731
        mu0, mu1, tau = f64(d.mu0), f64(d.mu1), f64(d.tau)
        b = f64(data.perturbation_direction(np.asarray(d.x, np.float64)))
        w = jnp.asarray(np.random.default_rng(1).normal(size=x.shape[1]))
        g = jnp.tanh(x @ w) + 0.3 * x[:, 0]  # a fixed, imperfect scorer
        h = 1e-4

        def deriv(orth):
            r = lambda dl: _risk(dl, orth, x, mu0, mu1, tau, b, g, 0.75)  # noqa: E731
            return float((r(h) - r(-h)) / (2 * h))

        d_orth, d_soft = deriv(True), deriv(False)
    # Central differences are exact to O(h^2 * third derivative) ~ 1e-8 here.
    assert abs(d_orth) < 1e-3, d_orth
    assert abs(d_soft) > 1e-2, d_soft
