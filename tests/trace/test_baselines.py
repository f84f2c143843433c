"""Discrete-switching baselines (spec §Tests, "Baselines"): Viterbi and forward-backward against
brute-force enumeration of all K^T paths, soft routing and nearest centroid by hand."""

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

from icml26_jax.trace import baselines, data, infer, metrics


def _path_log_joints(pooled, p_stay):
    """log p(path, emissions) for every one of the K^T paths, built from the definition."""
    t_len, k = pooled.shape
    trans = np.full((k, k), (1 - p_stay) / (k - 1))
    np.fill_diagonal(trans, p_stay)
    paths = np.array(list(itertools.product(range(k), repeat=t_len)))  # [K^T, T]
    joint = np.log(1.0 / k) + pooled[np.arange(t_len), paths].sum(axis=1)
    joint += np.log(trans[paths[:, :-1], paths[:, 1:]]).sum(axis=1)
    return paths, joint


@pytest.mark.parametrize("seed,p_stay,scale", [(0, 0.9, 1.0), (1, 0.6, 2.0), (2, 0.97, 0.5)])
def test_viterbi_and_forward_backward_equal_enumeration(seed, p_stay, scale):
    rng = np.random.default_rng(seed)
    t_len, k = 6, 3
    pooled = scale * rng.normal(size=(t_len, k))
    paths, joint = _path_log_joints(pooled, p_stay)

    best = paths[np.argmax(joint)]
    np.testing.assert_array_equal(baselines.hard_switch(pooled, p_stay), np.eye(k)[best])

    post = np.exp(joint - logsumexp(joint))  # [K^T]
    want = np.zeros((t_len, k))
    for t in range(t_len):
        np.add.at(want[t], paths[:, t], post)
    np.testing.assert_allclose(baselines.soft_hmm(pooled, p_stay), want, atol=1e-12)


def test_sticky_prior_suppresses_a_one_step_blip():
    pooled = np.zeros((6, 3))
    pooled[:, 0] = 1.0
    pooled[3] = [0.0, 1.5, 0.0]  # one step weakly prefers state 1
    np.testing.assert_array_equal(baselines.hard_switch(pooled, 0.9).argmax(axis=1), 0)
    np.testing.assert_array_equal(baselines.hard_switch(pooled, 0.34).argmax(axis=1),
                                  [0, 0, 0, 1, 0, 0])


def test_hmm_is_stable_for_pooled_magnitudes():
    # Pooled log-likelihoods are sums over 500 samples: thousands in magnitude.
    rng = np.random.default_rng(3)
    pooled = -5e3 + 50.0 * rng.normal(size=(50, 4))
    post = baselines.soft_hmm(pooled, 0.9)
    assert np.isfinite(post).all()
    np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-12)
    hard = baselines.hard_switch(pooled, 0.9)
    np.testing.assert_array_equal(hard.sum(axis=1), 1.0)
    # Nearly one-hot with such emissions, and then equal to the Viterbi path.
    np.testing.assert_array_equal(post.argmax(axis=1), hard.argmax(axis=1))


def test_soft_routing_by_hand():
    per_sample = np.zeros((2, 2, 2))  # [T, K, B]
    per_sample[0, :, 0] = [0.0, np.log(3.0)]  # responsibilities [1/4, 3/4]
    per_sample[0, :, 1] = [5.0, 5.0]  # [1/2, 1/2]
    per_sample[1, :, 0] = [-1000.0, -1000.0 + np.log(4.0)]  # [1/5, 4/5], far below 0
    per_sample[1, :, 1] = [800.0, 800.0 - np.log(4.0)]  # [4/5, 1/5], far above 0
    got = baselines.soft_routing(per_sample)
    np.testing.assert_allclose(got, [[0.375, 0.625], [0.5, 0.5]], atol=1e-14)
    rng = np.random.default_rng(4)
    got = baselines.soft_routing(rng.normal(size=(7, 3, 11)) * 30)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)


def test_nearest_centroid_picks_the_vertex():
    rng = np.random.default_rng(5)
    mus = rng.normal(size=(4, 6))
    basis = infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)
    labels = rng.integers(0, 4, size=30)
    zbar = mus[labels] + 1e-3 * rng.normal(size=(30, 6))
    np.testing.assert_array_equal(baselines.nearest_centroid(zbar, basis), np.eye(4)[labels])
    # The midpoint of mu^(1) and mu^(2), nudged towards mu^(2).
    mid = 0.49 * mus[1] + 0.51 * mus[2]
    dist = np.linalg.norm(mus - mid, axis=1)
    np.testing.assert_array_equal(baselines.nearest_centroid(mid[None], basis)[0],
                                  np.eye(4)[np.argmin(dist)])


def test_moving_average_of_is_smooth():
    onehot = np.eye(3)[[0, 0, 0, 1, 1, 1, 1, 2, 2, 2]]
    got = baselines.moving_average_of(onehot, 2)
    np.testing.assert_allclose(got, infer.smooth(onehot, 2))
    np.testing.assert_allclose(got[0], [1.0, 0.0, 0.0])  # taps 0..2, all state 0
    np.testing.assert_allclose(got[2], [0.6, 0.4, 0.0])  # taps 0..4


def test_errors_name_the_argument():
    pooled = np.zeros((4, 3))
    for bad in (0.0, 1.0, 1.5, -0.1):
        for fn in (baselines.hard_switch, baselines.soft_hmm):
            with pytest.raises(ValueError, match="p_stay"):
                fn(pooled, bad)
    with pytest.raises(ValueError, match="pooled"):
        baselines.hard_switch(np.zeros(4))
    with pytest.raises(ValueError, match="pooled"):
        baselines.soft_hmm(np.full((3, 2), np.nan))
    with pytest.raises(ValueError, match="per_sample"):
        baselines.soft_routing(np.zeros((4, 3)))
    mus = np.zeros((3, 5))
    basis = infer.Basis(mu0=mus[0], b=(mus[1:] - mus[0]).T, mus=mus)
    with pytest.raises(ValueError, match="zbar"):
        baselines.nearest_centroid(np.zeros((4, 6)), basis)


@pytest.mark.parametrize("family", ["simple", "medium", "complex"])
def test_every_one_hot_path_is_bounded_by_the_nearest_vertex(family):
    """Discrete switching cannot represent interior rows: the row-wise nearest vertex maximises
    w_r2 over one-hot paths (for single-edge, equal-size dW_k, w_r2 is the pooled R^2 of
    alpha), so Viterbi paths, nearest centroids and random switches all stay below it."""
    mp = data.make_mechanisms(42)
    active = [0, 2, 4]
    alpha = data.trajectory(family, 50, 3)
    bound = metrics.w_r2(metrics.nearest_vertex(alpha), alpha, mp, active)
    bound_mae = metrics.interior_mae(metrics.nearest_vertex(alpha), alpha)
    rng = np.random.default_rng(0)
    paths = [np.eye(3)[rng.integers(0, 3, 50)] for _ in range(200)]
    noisy = np.log(np.clip(alpha + 0.2 * rng.random(alpha.shape), 1e-3, None)) * 500
    paths += [baselines.hard_switch(noisy), np.eye(3)[np.argmax(alpha, 1)]]
    for p in paths:
        assert metrics.w_r2(p, alpha, mp, active) <= bound + 1e-12
        assert metrics.interior_mae(p, alpha) >= bound_mae - 1e-12
    assert bound < 0.75 and bound_mae >= 0.19  # far below what a continuous estimate reaches
