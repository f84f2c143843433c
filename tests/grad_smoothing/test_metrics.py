"""Linear CKA and the depth metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.grad_smoothing import metrics


def _cka_numpy(x, y):
    """Reference: HSIC with the centring matrix H (Kornblith et al. 2019, eq. for linear
    kernels): HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), K = X X^T, L = Y Y^T."""
    n = x.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    K, L = H @ x @ x.T @ H, H @ y @ y.T @ H
    return np.sum(K * L) / np.sqrt(np.sum(K * K) * np.sum(L * L))


def test_linear_cka_reference_and_invariances():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6))
    y = x @ rng.normal(size=(6, 9)) + 0.5 * rng.normal(size=(40, 9))
    got = float(metrics.linear_cka(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
    np.testing.assert_allclose(got, _cka_numpy(x, y), rtol=1e-4)
    assert float(metrics.linear_cka(jnp.asarray(x, jnp.float32),
                                    jnp.asarray(x, jnp.float32))) == pytest.approx(1.0, abs=1e-5)
    Q, _ = np.linalg.qr(rng.normal(size=(9, 9)))
    y2 = 3.7 * y @ Q
    got2 = float(metrics.linear_cka(jnp.asarray(x, jnp.float32), jnp.asarray(y2, jnp.float32)))
    np.testing.assert_allclose(got2, got, rtol=1e-4)
    # Independent noise: far from 1.
    z = rng.normal(size=(40, 6))
    assert float(metrics.linear_cka(jnp.asarray(x, jnp.float32),
                                    jnp.asarray(z, jnp.float32))) < 0.5
    with pytest.raises(ValueError, match="same N"):
        metrics.linear_cka(jnp.ones((4, 2)), jnp.ones((5, 2)))


def test_adjacent_cka_and_update_metrics():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(2, 8, 5))
    h = np.stack([base, base, rng.normal(size=(2, 8, 5))])  # [L=3, B, T, d]
    c = np.asarray(metrics.adjacent_cka(jnp.asarray(h, jnp.float32)))
    assert c.shape == (2,) and c[0] == pytest.approx(1.0, abs=1e-5) and c[1] < 0.9

    p0 = {"blocks": {"w": jnp.zeros((3, 4)), "b": jnp.zeros((3, 2))}, "head": jnp.zeros(7)}
    d = np.array([[1, 0, 0, 0, 1, 0], [1, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0]], np.float32)
    p1 = {"blocks": {"w": jnp.asarray(d[:, :4]) * 2, "b": jnp.asarray(d[:, 4:]) * 2},
          "head": jnp.ones(7)}
    cos = np.asarray(metrics.adjacent_update_cosine(p1, p0))
    np.testing.assert_allclose(cos, [1.0, 0.0], atol=1e-6)
    norms = np.asarray(metrics.block_update_norms(jax.tree.map(lambda a, b: a - b, p1, p0)))
    np.testing.assert_allclose(norms, [2 * np.sqrt(2), 2 * np.sqrt(2), 2.0], rtol=1e-6)
    with pytest.raises(ValueError, match="blocks"):
        metrics.block_update_norms({"w": jnp.ones(3)})


def test_steps_to_target():
    assert metrics.steps_to_target([25, 50, 75], [3.0, 2.0, 1.5], 2.0) == 50
    assert metrics.steps_to_target([25, 50], [3.0, 2.5], 2.0) is None
    with pytest.raises(ValueError):
        metrics.steps_to_target([1, 2], [1.0], 0.5)
