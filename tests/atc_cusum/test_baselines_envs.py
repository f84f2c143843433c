"""Baselines against direct formulas, generators, real-data loaders, metrics."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.atc_cusum import baselines, envs, metrics


def test_sliding_window_direct():
    x = np.random.default_rng(0).standard_normal(50)
    for w in (1, 3, 10, 100):
        got = np.asarray(baselines.sliding_window(jnp.asarray(x), w, prior=0.5))
        want = [0.5] + [x[max(0, t - w):t].mean() for t in range(1, 50)]
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_discounted_mean_direct():
    x = np.random.default_rng(1).standard_normal(40)
    g = 0.9
    got = np.asarray(baselines.discounted_mean(jnp.asarray(x), g))
    want = [0.0]
    for t in range(1, 40):
        wts = g ** np.arange(t)[::-1]  # gamma^k on X_{t-1-k}
        want.append(np.sum(wts * x[:t]) / np.sum(wts))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_fixed_conf_threshold():
    assert baselines.fixed_conf_threshold(0.01) == pytest.approx(9.2103, abs=1e-4)
    with pytest.raises(ValueError, match="delta"):
        baselines.fixed_conf_threshold(1.5)


def _page_reference(x, sigma, k, h, ref, M):
    n, total, m, sp, sm, last = 0, 0.0, 0.0, 0.0, 0.0, 0.0
    pred, alarm = [], []
    for v in x:
        pred.append(total / n if n else last)
        if n:
            z = (v - m) / sigma
            sp, sm = max(0.0, sp + z - k), max(0.0, sm - z - k)
        n, total = n + 1, total + v
        if ref == "running" or n <= M:
            m = total / n
        a = max(sp, sm) > h
        alarm.append(a)
        if a:
            n, total, m, sp, sm = 0, 0.0, 0.0, 0.0, 0.0
        last = v
    return np.asarray(pred), np.asarray(alarm)


@pytest.mark.parametrize("ref", baselines.PAGE_REFS)
def test_page_cusum_reference_and_resets(ref):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(300), rng.standard_normal(300) + 1.5,
                        rng.standard_normal(300) - 1.0])
    out = baselines.page_cusum(jnp.asarray(x), 1.0, 0.25, 8.0, ref, 50)
    pred, alarm = _page_reference(x, 1.0, 0.25, 8.0, ref, 50)
    np.testing.assert_allclose(np.asarray(out.pred), pred, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(out.alarm), alarm)
    a = np.flatnonzero(alarm)
    assert len(a) >= 2
    # Everything restarts after an alarm at t: the next prediction is X_t (empty segment),
    # the one after the mean of the new segment only.
    t = a[0]
    assert pred[t + 1] == x[t] and pred[t + 2] == pytest.approx(x[t + 1])


def test_oracle_segment_mean():
    mu = np.repeat([0.0, 2.0, -1.0], [5, 4, 3])
    x = mu + np.random.default_rng(3).standard_normal(12)
    got = np.asarray(baselines.oracle_segment_mean(jnp.asarray(x), jnp.asarray(mu)))
    assert got[0] == 0.0
    np.testing.assert_allclose(got[5], x[:5].mean())  # previous segment's mean
    np.testing.assert_allclose(got[7], x[5:7].mean())
    np.testing.assert_allclose(got[9], x[5:9].mean())


def test_baseline_errors():
    with pytest.raises(ValueError, match="ref"):
        baselines.page_cusum(jnp.zeros(5), 1.0, ref="median")
    with pytest.raises(ValueError, match="sigma"):
        baselines.page_cusum(jnp.zeros(5), 0.0)
    with pytest.raises(ValueError, match="gamma"):
        baselines.discounted_mean(jnp.zeros(5), 1.0)
    with pytest.raises(ValueError, match="w must"):
        baselines.sliding_window(jnp.zeros(5), 0)
    with pytest.raises(ValueError, match="mu"):
        baselines.oracle_segment_mean(jnp.zeros(5), jnp.zeros(4))


def test_adwin_wrapper_uses_estimation_before_update():
    drift = pytest.importorskip("river.drift")
    x = np.random.default_rng(4).standard_normal(200)
    got = baselines.adwin_predict(x)
    det = drift.ADWIN()
    for i, v in enumerate(x):
        if i:
            assert got[i] == det.estimation
        det.update(v)
    assert got[0] == 0.0


def test_random_jumps_exact_changes_and_determinism():
    mu = envs.random_jumps(np.random.default_rng(5), 32, 1000, 16)
    np.testing.assert_array_equal(envs.num_changes(mu), 16)
    assert np.all(mu[:, 0] == 0)
    again = envs.random_jumps(np.random.default_rng(5), 32, 1000, 16)
    np.testing.assert_array_equal(mu, again)
    assert not np.array_equal(mu, envs.random_jumps(np.random.default_rng(6), 32, 1000, 16))
    # No minimum spacing: adjacent change times do occur over many draws.
    mu = envs.random_jumps(np.random.default_rng(7), 200, 50, 20)
    gaps = [np.diff(np.flatnonzero(np.diff(m) != 0)).min() for m in mu]
    assert min(gaps) == 1
    with pytest.raises(ValueError, match="S must"):
        envs.random_jumps(np.random.default_rng(0), 1, 10, 10)


def test_other_generators():
    sq = envs.square_wave(32000)
    assert envs.num_changes(sq) == 159 and sq[0] == 0 and sq[200] == 1 and sq[399] == 1
    st = envs.staircase(1000)
    np.testing.assert_allclose(np.unique(st), [0, 0.25, 0.5, 0.75, 1.0])
    assert st[199] == 0 and st[200] == 0.25
    g2 = envs.single_change(100, [0.0, 0.5])
    assert g2.shape == (2, 100) and g2[1, 49] == 0 and g2[1, 50] == 0.5 and not g2[0].any()


def test_real_loaders():
    years, nile = envs.load_nile()
    assert len(nile) == 100 and years[0] == 1871 and years[-1] == 1970
    q, ri = envs.load_realint()
    assert len(ri) == 103 and q[0] == "1961Q1" and q[-1] == "1986Q3"
    q_all, _ = envs.load_realint(None, None)
    assert q_all[0] == "1959Q1" and q_all[-1] == "2009Q3"
    assert envs.sigma_hat(nile) == pytest.approx(115.3, abs=0.1)
    assert envs.sigma_hat(ri) == pytest.approx(1.651, abs=1e-3)
    with pytest.raises(ValueError, match="start"):
        envs.load_realint("1950Q1")


def test_sigma_hat_floor():
    const = np.full(100, 3.0)
    assert envs.sigma_hat(const) == envs.sigma_floor(const) > 0
    quantised = np.repeat([0.0, 1.0, 0.0, 2.0], 50)  # median |diff| = 0
    assert envs.sigma_hat(quantised) == pytest.approx(1.0)  # the quantisation step
    noisy = np.random.default_rng(8).standard_normal(20000)
    assert envs.sigma_hat(noisy) == pytest.approx(1.0, rel=0.05)


def test_load_csv(tmp_path):
    p = tmp_path / "ec2_cpu.csv"
    p.write_text("timestamp,value\n2014-02-14 14:30:00,0.132\n2014-02-14 14:35:00,0.134\n")
    t, x = envs.load_csv(p)
    assert t.tolist() == ["2014-02-14 14:30:00", "2014-02-14 14:35:00"]
    np.testing.assert_allclose(x, [0.132, 0.134])
    with pytest.raises(ValueError, match="value_col"):
        envs.load_csv(p, value_col="cpu")


def test_ls_segmentation_brute_force():
    rng = np.random.default_rng(9)
    for T in (5, 12, 30):
        x = rng.standard_normal(T) + np.repeat(rng.normal(0, 2, 3), [T // 3, T // 3, T - 2 * (T // 3)])
        for k in (0, 1, 2):
            best = min(itertools.combinations(range(1, T), k),
                       key=lambda b: np.sum((x - metrics.segment_means(x, b)) ** 2))
            np.testing.assert_array_equal(metrics.ls_segmentation(x, k), best)


def test_metrics():
    pred, mu = np.array([[0.0, 1.0, 2.0]]), np.array([[1.0, 1.0, 0.0]])
    np.testing.assert_allclose(metrics.regret(pred, mu), [5.0])
    np.testing.assert_allclose(metrics.prefix_regret(pred, mu, [1, 3]), [[1.0, 5.0]])
    np.testing.assert_allclose(metrics.one_step_mse([9.0, 1.0, 1.0], [0.0, 2.0, 3.0], 1), 2.5)
    assert metrics.lower_bound_curve(4, 1000) == pytest.approx(5 * np.log(200))
    alarm = np.zeros((4, 10), bool)
    alarm[0, 2] = alarm[1, 7] = True
    assert metrics.detection_rate(alarm, 5) == 0.25
    with pytest.raises(ValueError, match="ts"):
        metrics.prefix_regret(pred, mu, [4])
