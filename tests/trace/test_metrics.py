"""TRACE metrics: MCC invariances, the corrected W metric against the flawed full-W
correlation, and the trajectory-correlation controls."""

import numpy as np
import pytest

from icml26_jax.trace import data, metrics

ACTIVE = [0, 2, 4]


@pytest.fixture(scope="module")
def mp():
    return data.make_mechanisms(42)


@pytest.fixture(scope="module")
def y_true(mp):
    return data.sample_pure(np.random.default_rng(0), mp, 400).y.reshape(-1, 8)  # [6000, 8]


def _monotone_permuted(y):
    perm = np.array([3, 0, 7, 1, 6, 2, 5, 4])
    maps = [np.tanh, lambda v: v**3, lambda v: -2.0 * v + 1.0, np.exp,
            lambda v: 0.5 * v, lambda v: -np.arctan(v), lambda v: v + v**3, lambda v: -v**5]
    return np.stack([maps[i](y[:, p]) for i, p in enumerate(perm)], axis=1)


def test_mcc_monotone_and_affine(y_true):
    z = _monotone_permuted(y_true)
    assert metrics.mcc(z, y_true, method="spearman") == pytest.approx(1.0, abs=1e-12)
    # Pearson is 1 for affine maps only; the Hungarian match must still find the permutation.
    perm = np.array([5, 1, 0, 7, 2, 4, 6, 3])
    affine = y_true[:, perm] * np.array([-1.0, 2, 3, -0.5, 1, 1, -4, 0.1]) + 3.0
    assert metrics.mcc(affine, y_true) == pytest.approx(1.0, abs=1e-12)
    assert 0.8 < metrics.mcc(z, y_true) < 1.0
    noise = np.random.default_rng(1).normal(size=y_true.shape)
    assert metrics.mcc(noise, y_true) < 0.1
    with pytest.raises(ValueError, match="method"):
        metrics.mcc(z, y_true, method="kendall")


def test_mcc_constant_column_scores_zero(y_true):
    z = y_true.copy()
    z[:, 0] = 1.0
    assert metrics.mcc(z, y_true) == pytest.approx(7 / 8, abs=1e-6)


@pytest.mark.parametrize("kind", data.FAMILIES)
def test_constant_guesses_fail_w_r2_but_pass_full_w_corr(mp, kind):
    alpha = data.trajectory(kind, 50, 3)
    rng = np.random.default_rng(3)
    guesses = [alpha.mean(0)] + list(rng.dirichlet(np.ones(3), size=5)) + list(np.eye(3))
    for i, g in enumerate(guesses):
        const = np.tile(g, (50, 1))
        assert metrics.w_r2(const, alpha, mp, ACTIVE) <= 1e-9
        # The time mean scores >= 0.99 (0.996-0.997 here); a constant far from it, e.g. a
        # vertex, still scores >= 0.98 (minimum over the simplex ~0.983 at data_seed 42).
        assert metrics.w_corr_full(const, alpha, mp, ACTIVE) >= (0.99 if i == 0 else 0.98)
        assert metrics.traj_corr(const, alpha) == 0.0
        assert metrics.dw_centred_corr(const, alpha, mp, ACTIVE) == 0.0
    assert metrics.w_r2(alpha, alpha, mp, ACTIVE) == pytest.approx(1.0)
    assert metrics.w_corr_full(alpha, alpha, mp, ACTIVE) == pytest.approx(1.0)
    assert metrics.dw_centred_corr(alpha, alpha, mp, ACTIVE) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", data.FAMILIES)
def test_w_r2_equals_pooled_alpha_r2(mp, kind):
    alpha = data.trajectory(kind, 50, 3)
    rng = np.random.default_rng(4)
    for scale in (0.05, 0.3):
        hat = alpha + scale * rng.normal(size=alpha.shape)
        pooled = 1 - np.sum((hat - alpha) ** 2) / np.sum((alpha - alpha.mean(0)) ** 2)
        assert metrics.w_r2(hat, alpha, mp, ACTIVE) == pytest.approx(pooled, abs=1e-12)
    # w_of matches the definition entrywise.
    w = metrics.w_of(alpha, mp, ACTIVE)
    t = 7
    ref = mp.w_lag1 + sum(alpha[t, k] * mp.delta_w[a] for k, a in enumerate(ACTIVE))
    np.testing.assert_allclose(w[t], ref, atol=1e-15)


def test_w_r2_penalises_compression_but_corr_does_not(mp):
    alpha = data.trajectory("simple", 50, 3)
    shrunk = 0.5 * alpha + 0.5 * alpha.mean(0)  # same shape, half the amplitude
    assert metrics.traj_corr(shrunk, alpha) == pytest.approx(1.0)
    assert metrics.dw_centred_corr(shrunk, alpha, mp, ACTIVE) == pytest.approx(1.0)
    assert metrics.w_r2(shrunk, alpha, mp, ACTIVE) == pytest.approx(0.75)


def test_traj_corr_zero_variance_columns():
    alpha = data.trajectory("medium", 50, 3)
    assert metrics.traj_corr(alpha, alpha) == pytest.approx(1.0)
    pred = alpha.copy()
    pred[:, 1] = 1 / 3
    assert metrics.traj_corr(pred, alpha) == pytest.approx(2 / 3)
    assert metrics.traj_corr(np.full((50, 3), 1 / 3), alpha) == 0.0
    assert metrics.traj_corr(alpha, np.full((50, 3), 1 / 3)) == 0.0
    with pytest.raises(ValueError, match="pred"):
        metrics.traj_corr(alpha[:, :2], alpha)


@pytest.mark.parametrize("kind", data.FAMILIES)
def test_permutation_control(kind):
    alpha = data.trajectory(kind, 50, 3)
    assert metrics.traj_corr(alpha, alpha) == pytest.approx(1.0)
    control = metrics.permutation_control(alpha, alpha, seed=0, n=20)
    assert 0.0 < control < 0.2
    assert control == metrics.permutation_control(alpha, alpha, seed=0, n=20)


@pytest.mark.parametrize("kind,bound", [("simple", 0.20), ("medium", 0.20), ("complex", 0.25)])
def test_one_hot_outputs_cannot_reach_interior(kind, bound):
    alpha = data.trajectory(kind, 50, 3)
    nv = metrics.nearest_vertex(alpha)
    assert (nv.sum(1) == 1).all() and (alpha[np.arange(50), nv.argmax(1)] == alpha.max(1)).all()
    best = metrics.interior_mae(nv, alpha)
    assert best >= bound - 0.005  # spec: best one-hot 0.20 / 0.20 / 0.26
    rng = np.random.default_rng(5)
    for _ in range(20):
        one_hot = np.eye(3)[rng.integers(0, 3, size=50)]
        assert metrics.interior_mae(one_hot, alpha) >= best - 1e-12
    assert metrics.interior_mae(alpha, alpha) == 0.0


def test_interior_mae_masks_vertex_rows():
    true = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.95, 0.05, 0]])
    pred = np.array([[0.0, 1, 0], [0.4, 0.6, 0], [0.0, 0, 1]])
    assert metrics.interior_mae(pred, true) == pytest.approx(0.2 / 3)
    assert np.isnan(metrics.interior_mae(pred[[0]], true[[0]]))
    with pytest.raises(ValueError, match="margin"):
        metrics.interior_mae(pred, true, margin=1.5)
