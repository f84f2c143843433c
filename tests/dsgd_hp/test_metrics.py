"""HP statistics: quantiles, slopes with bootstrap CIs, tail fits, transient times."""

import numpy as np
import pytest

from icml26_jax.dsgd_hp import metrics


def test_quantiles_match_numpy():
    x = np.random.default_rng(0).standard_normal((1000, 3))
    np.testing.assert_allclose(metrics.quantiles(x, [0.5, 0.9]), np.quantile(x, [0.5, 0.9], 0))


def test_slope_ci_recovers_power_law():
    # q_0.9 of c * n^-1 * E with E iid exponential scales exactly like n^-1.
    rng = np.random.default_rng(0)
    ns = np.array([1, 2, 4, 8, 16])
    samples = rng.exponential(size=(5, 4000)) / ns[:, None]
    slope, lo, hi = metrics.slope_ci(ns, samples, 0.9, n_boot=200)
    assert lo < slope < hi
    assert -1.05 < slope < -0.95 and lo < -1.0 < hi


def test_slope_ci_shape_error():
    with pytest.raises(ValueError, match="samples \\[M, R\\]"):
        metrics.slope_ci([1, 2], np.ones((3, 10)), 0.9)


def test_tail_fit_light_vs_heavy():
    rng = np.random.default_rng(0)
    deltas = np.array([0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001])
    light = metrics.tail_fit(rng.exponential(size=20000), deltas)
    # Exponential quantiles are exactly linear in log(1/delta): q = log(1/delta).
    assert light.r2 >= 0.99
    assert light.ratio_999_50 == pytest.approx(np.log(1000) / np.log(2), rel=0.1)
    heavy = metrics.tail_fit(1 + rng.pareto(1.5, size=20000), deltas)  # P(X > x) = x^-1.5
    assert heavy.r2 < 0.9 and heavy.ratio_999_50 > 5 * light.ratio_999_50
    # log q vs log(1/delta): slope 1/alpha for a Pareto(alpha) tail, far below for light ones.
    assert heavy.loglog_slope == pytest.approx(1 / 1.5, abs=0.05)
    assert light.loglog_slope < 0.6 * heavy.loglog_slope


def test_tail_fit_needs_enough_runs():
    with pytest.raises(ValueError, match="R >= 8 / min"):
        metrics.tail_fit(np.ones(500), [0.5, 0.001])


def test_transient_time_and_censoring():
    ts = np.array([500, 1000, 2000, 4000])
    assert metrics.transient_time([3.0, 1.5, 1.2, 1.1], ts) == (2000.0, False)
    assert metrics.transient_time([3.0, 2.5, 2.0, 1.3], ts) == (8000.0, True)
    assert metrics.transient_time([1.0, 2.0, 2.0, 2.0], ts, tol=1.0) == (500.0, False)
