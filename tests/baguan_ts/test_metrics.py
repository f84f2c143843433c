"""Forecast metrics and aggregates on hand-computed cases (spec §Tests, "Metrics")."""

import jax
import numpy as np
import pytest

from icml26_jax.baguan_ts import metrics
from icml26_jax.baguan_ts.losses import QUANTILES

# ------------------------------------------------------------------------------------------
# Per-task metrics


def test_mase_hand_case():
    # Seasonal (m = 2) in-sample diffs |2-1|, |6-3|, |3-2|, |5-6| = 1, 3, 1, 1 -> scale 1.5;
    # errors |6-5|, |5-8| = 1, 3 -> MAE 2 -> MASE 4/3.
    y_train = [1.0, 3.0, 2.0, 6.0, 3.0, 5.0]
    assert metrics.naive_scale(y_train, 2) == pytest.approx(1.5)
    assert metrics.mase([6.0, 5.0], [5.0, 8.0], y_train, 2) == pytest.approx(4.0 / 3.0)
    # m = 1: diffs 2, 1, 4, 3, 2 -> scale 2.4.
    assert metrics.mase([6.0, 5.0], [5.0, 8.0], y_train, 1) == pytest.approx(2.0 / 2.4)


def test_naive_scale_fallbacks():
    # L <= m: lag 1 (diffs 1, 2 -> 1.5).
    assert metrics.naive_scale([1.0, 2.0, 4.0], 5) == pytest.approx(1.5)
    assert metrics.naive_scale([1.0, 2.0, 4.0], 3) == pytest.approx(1.5)
    # Perfectly periodic history: the seasonal scale is 0 -> lag 1 (all diffs 1).
    assert metrics.naive_scale([1.0, 2.0, 1.0, 2.0, 1.0, 2.0], 2) == pytest.approx(1.0)
    # Constant history: lag 1 is 0 too -> 1.0 (MASE becomes the plain MAE).
    assert metrics.naive_scale([3.0] * 6, 2) == 1.0
    assert metrics.mase([4.0, 5.0], [3.0, 3.0], [3.0] * 6, 2) == pytest.approx(1.5)
    # NaNs in the history are skipped: lag-2 diffs |3-1| (the pair with NaN dropped) -> 2.
    assert metrics.naive_scale([1.0, np.nan, 3.0, 0.0], 2) == pytest.approx(2.0)


def test_wql_and_sql_hand_case():
    qs = np.array([0.1, 0.5, 0.9])
    y = np.array([2.0, -1.0])
    q = np.array([[1.0, 2.0, 3.0], [-2.0, 0.0, 1.0]])
    # h=0: u = 1, 0, -1 -> rho = 0.1, 0, 0.1; h=1: u = 1, -1, -2 -> rho = 0.1, 0.5, 0.2.
    # sum 2 rho = 2 * 1.0 = 2.0; |Q| sum|y| = 3 * 3 = 9.
    assert metrics.wql(y, q, qs) == pytest.approx(2.0 / 9.0)
    # SQL: mean over the 6 (h, q) of 2 rho = 1/3, over the scale of [0, 2, 6] (m=1: 2, 4 -> 3).
    assert metrics.sql(y, q, [0.0, 2.0, 6.0], 1, qs) == pytest.approx(1.0 / 9.0)


def test_wql_default_levels_against_loop():
    rng = np.random.default_rng(0)
    y = rng.normal(size=5) + 3.0
    q = np.sort(rng.normal(size=(5, 9)) + 3.0, axis=1)
    num = 0.0
    for h in range(5):
        for j, lev in enumerate(QUANTILES):
            u = y[h] - q[h, j]
            num += 2 * (lev * u if u >= 0 else (lev - 1) * u)
    assert metrics.wql(y, q) == pytest.approx(num / (9 * np.abs(y).sum()))
    # A perfect median at every level costs nothing only when all levels are exact.
    assert metrics.wql(y, np.repeat(y[:, None], 9, 1)) == 0.0


def test_sql_at_the_median_alone_is_mase():
    rng = np.random.default_rng(1)
    y, yhat, y_train = rng.normal(size=4), rng.normal(size=4), rng.normal(size=20)
    assert metrics.sql(y, yhat[:, None], y_train, 3, qs=[0.5]) == pytest.approx(
        metrics.mase(y, yhat, y_train, 3))


def test_wql_of_an_all_zero_horizon_is_nan():
    assert np.isnan(metrics.wql(np.zeros(3), np.ones((3, 9))))


def test_coverage_hand_case():
    # 1 in [0, 2]; 2 not in [2.5, 3]; 3 in [3, 3] (closed); 4 not in [5, 6].
    assert metrics.coverage([1.0, 2.0, 3.0, 4.0], [0.0, 2.5, 3.0, 5.0], [2.0, 3.0, 3.0, 6.0]) == 0.5


def test_osi_hand_cases():
    y = np.array([0.0, 1.0, 0.0, 1.0, 3.0])
    assert metrics.osi(0.5 * y + 7.0, y) == pytest.approx(0.5)
    assert metrics.osi(np.linspace(0.0, 1.0, 5), y) == 0.0  # a straight line is fully smooth
    assert metrics.osi(-2.0 * y, y) == pytest.approx(2.0)
    assert np.isnan(metrics.osi(y, np.arange(5.0)))  # std(diff y) = 0: undefined


# ------------------------------------------------------------------------------------------
# Aggregates


def test_win_rate_with_ties():
    E = np.array([[1.0, 2.0, 3.0],
                  [2.0, 2.0, 1.0]])
    # Task 0: m0 beats both (2), m1 beats m2 (1), m2 (0). Task 1: m0 ties m1 and loses to m2
    # (0.5), m1 the same (0.5), m2 beats both (2). Totals 2.5, 1.5, 2 over T (M - 1) = 4.
    np.testing.assert_allclose(metrics.win_rate(E), [0.625, 0.375, 0.5])
    # All tied: everyone gets 1/2.
    np.testing.assert_allclose(metrics.win_rate(np.ones((3, 4))), 0.5)


def test_win_rate_against_loop():
    E = np.round(np.random.default_rng(2).uniform(size=(7, 4)), 1)  # rounding makes ties
    T, M = E.shape
    ref = np.zeros(M)
    for j in range(M):
        for t in range(T):
            for k in range(M):
                if k != j:
                    ref[j] += (E[t, j] < E[t, k]) + 0.5 * (E[t, j] == E[t, k])
    np.testing.assert_allclose(metrics.win_rate(E), ref / (T * (M - 1)))


def test_skill_score_with_the_clip():
    E = np.array([[1.0, 0.5, 0.001],
                  [1.0, 2.0, 4.0]])
    # m1: ratios 0.5, 2 -> geometric mean 1 -> skill 0.
    # m2: ratios 0.001 -> clipped to 0.01, and 4 -> sqrt(0.04) = 0.2 -> skill 0.8
    #     (without the clip it would be 1 - sqrt(0.004) = 0.937).
    np.testing.assert_allclose(metrics.skill_score(E, 0), [0.0, 0.0, 0.8], atol=1e-12)
    # The upper clip: a ratio of 1e4 counts as 100.
    np.testing.assert_allclose(metrics.skill_score([[1.0, 1e4]], 0), [0.0, -99.0])
    # 0 / 0 counts as 1, x / 0 as 100.
    np.testing.assert_allclose(metrics.skill_score([[0.0, 0.0, 1.0]], 0), [0.0, 0.0, -99.0])
    # Skill against another column.
    np.testing.assert_allclose(metrics.skill_score(E, 1)[0], 0.0, atol=1e-12)


def test_geo_mean_ratio():
    assert metrics.geo_mean_ratio([1.0, 4.0], [2.0, 2.0]) == pytest.approx(1.0)
    assert metrics.geo_mean_ratio([1.0, 8.0], [1.0, 2.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="b must be positive"):
        metrics.geo_mean_ratio([1.0, 2.0], [0.0, 1.0])


def test_bootstrap_ci_deterministic_and_contains_estimate():
    E = np.random.default_rng(3).normal(size=30) + 1.0
    key = jax.random.key(0)
    lo, hi = metrics.bootstrap_ci(np.mean, E, key, n=300)
    lo2, hi2 = metrics.bootstrap_ci(np.mean, E, key, n=300)
    assert (lo, hi) == (lo2, hi2)  # same key, same interval, bit for bit
    assert lo < E.mean() < hi
    # Roughly the normal-theory interval mean +- 1.96 sd / sqrt(T) (loose: 300 replicates).
    half = 1.96 * E.std() / np.sqrt(E.size)
    assert hi - lo == pytest.approx(2 * half, rel=0.3)
    lo3, hi3 = metrics.bootstrap_ci(np.mean, E, jax.random.key(1), n=300)
    assert (lo3, hi3) != (lo, hi)
    # A narrower level gives a nested interval.
    lo5, hi5 = metrics.bootstrap_ci(np.mean, E, key, n=300, level=0.5)
    assert lo < lo5 < hi5 < hi


def test_bootstrap_ci_of_win_rates_is_per_method():
    # T = 30 and n = 300 as above: the index draw compiles once per (n, T).
    E = np.random.default_rng(4).uniform(size=(30, 3)) + np.array([0.0, 0.3, 0.6])
    lo, hi = metrics.bootstrap_ci(metrics.win_rate, E, jax.random.key(5), n=300)
    w = metrics.win_rate(E)
    assert lo.shape == hi.shape == (3,)
    assert np.all(lo <= w) and np.all(w <= hi)
    # A constant statistic has a degenerate interval.
    lo_c, hi_c = metrics.bootstrap_ci(lambda e: 7.0, E, jax.random.key(5), n=300)
    assert lo_c == hi_c == 7.0


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"q must be \[H, len\(qs\)\] = \(3, 9\)"):
        metrics.wql(np.ones(3), np.ones((3, 8)))
    with pytest.raises(ValueError, match=r"qs must be .* in \(0, 1\)"):
        metrics.wql(np.ones(3), np.ones((3, 2)), qs=[0.5, 1.0])
    with pytest.raises(ValueError, match="M >= 2"):
        metrics.win_rate(np.ones((4, 1)))
    with pytest.raises(ValueError, match="E must not contain NaN"):
        metrics.win_rate(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"baseline must be a column index in \[0, 2\)"):
        metrics.skill_score(np.ones((3, 2)), 2)
    with pytest.raises(ValueError, match="E must be non-negative"):
        metrics.skill_score(np.array([[1.0, -1.0]]), 0)
    with pytest.raises(ValueError, match="m .* must be an int >= 1"):
        metrics.mase(np.ones(2), np.ones(2), np.arange(5.0), 0)
    with pytest.raises(ValueError, match="y_train must be a 1-D array of length >= 2"):
        metrics.mase(np.ones(2), np.ones(2), [1.0], 1)
    with pytest.raises(ValueError, match="y, yhat must have the same shape"):
        metrics.mase(np.ones(2), np.ones(3), np.arange(5.0), 1)
    with pytest.raises(ValueError, match="yhat must be a 1-D array of length >= 3"):
        metrics.osi(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="y, lo, hi must have the same shape"):
        metrics.coverage(np.ones(3), np.zeros(3), np.ones(2))
    with pytest.raises(ValueError, match="key must be a single typed key"):
        metrics.bootstrap_ci(np.mean, np.ones(4), jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        metrics.bootstrap_ci(np.mean, np.ones(4), jax.random.key(0), level=95)


def test_mase_scale_matches_fev():
    # Parity with fev's seasonal error (the MASE / SQL denominator), NaNs skipped.
    fev_metrics = pytest.importorskip("fev.metrics")
    arrays = [np.array([1.0, 2.0, np.nan, 4.0, 5.0, 7.0]),
              np.array([10.0, 20.0, 35.0, 40.0, 50.0, 61.0, 70.0, 80.0, 90.0])]
    ref = fev_metrics._seasonal_error_per_item(arrays, 2, np.abs)
    ours = [metrics.naive_scale(a, 2) for a in arrays]
    np.testing.assert_allclose(ours, ref, rtol=1e-12)
