"""ATC against its NumPy oracle, causality, the anytime property, streaming == batch, FOCuS."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.atc_cusum import atc, baselines, envs, metrics


def _series(seed, T=2000, S=4, runs=1):
    rng = np.random.default_rng(seed)
    mu = envs.random_jumps(rng, runs, T, S)
    return mu, envs.observe(rng, mu)


@pytest.mark.parametrize("scan", atc.SCANS)
@pytest.mark.parametrize("restart", atc.RESTARTS)
def test_atc_equals_reference(scan, restart):
    p = atc.ATCParams(1.0, scan=scan, restart=restart)
    f = jax.jit(jax.vmap(lambda v: atc.atc_predict(p, v)))
    _, x = _series(0, runs=5, S=8)
    out = f(jnp.asarray(x))
    total = 0
    for i in range(5):
        pred, alarm, seg = atc.atc_reference(p, x[i])
        # Both sides are float64 sums of the same prefix sums; 1e-12 allows the
        # summation-order difference of jnp.cumsum vs np.cumsum.
        np.testing.assert_allclose(np.asarray(out.pred[i]), pred, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(out.alarm[i]), alarm)
        np.testing.assert_array_equal(np.asarray(out.seg_start[i]), seg)
        total += alarm.sum()
    assert total >= 5  # the comparison covers restarts, not only pooling


@pytest.mark.parametrize("restart", atc.RESTARTS)
def test_numpy_runs_loop_equals_jax(restart):
    p = atc.ATCParams(1.0, restart=restart)
    _, x = _series(11, T=1200, S=6, runs=4)
    pred, alarm = atc.atc_numpy(p, x)
    out = jax.vmap(lambda v: atc.atc_predict(p, v))(jnp.asarray(x))
    np.testing.assert_allclose(pred, np.asarray(out.pred), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(alarm, np.asarray(out.alarm))
    assert alarm.sum() >= 4


def test_prediction_is_the_segment_mean():
    """mu_hat_t is the mean of x[seg_start(t-1) : t-1]; mu_hat_1 is the prior."""
    p = atc.ATCParams(1.0, prior=0.7)
    _, x = _series(1)
    out = atc.atc_predict(p, jnp.asarray(x[0]))
    pred, seg = np.asarray(out.pred), np.asarray(out.seg_start)
    assert pred[0] == 0.7
    for t in (2, 50, 700, 1999):  # 1-based t
        r = seg[t - 2]
        want = x[0, r:t - 1].mean() if t - 1 > r else x[0, t - 2]
        np.testing.assert_allclose(pred[t - 1], want, rtol=1e-12)


def _learners(mu):
    p = atc.ATCParams(1.0)
    return {
        "atc": lambda v: np.asarray(atc.atc_predict(p, jnp.asarray(v)).pred),
        "window": lambda v: np.asarray(baselines.sliding_window(jnp.asarray(v), 30)),
        "discount": lambda v: np.asarray(baselines.discounted_mean(jnp.asarray(v), 0.95)),
        "fixed_conf": lambda v: np.asarray(baselines.fixed_conf_cusum(jnp.asarray(v), 1.0).pred),
        "page_running": lambda v: np.asarray(baselines.page_cusum(jnp.asarray(v), 1.0).pred),
        "page_frozen": lambda v: np.asarray(
            baselines.page_cusum(jnp.asarray(v), 1.0, ref="frozen").pred),
        "oracle": lambda v: np.asarray(baselines.oracle_segment_mean(jnp.asarray(v),
                                                                     jnp.asarray(mu))),
    }


@pytest.mark.parametrize("name", ["atc", "window", "discount", "fixed_conf", "page_running",
                                  "page_frozen", "oracle"])
def test_causal(name):
    """Perturbing X_t..X_T leaves pred[:t] bit-identical (pred[t-1] uses X_1..X_{t-1})."""
    mu, x = _series(2, T=600)
    fn = _learners(mu[0])[name]
    base = fn(x[0])
    for t in (1, 100, 333):
        y = x[0].copy()
        y[t - 1:] += np.random.default_rng(t).normal(0, 5, len(y) - t + 1)
        got = fn(y)
        np.testing.assert_array_equal(got[:t], base[:t])
        assert not np.array_equal(got, base) or name == "oracle" and t == 600


def test_peers_causal():
    pytest.importorskip("river")
    pytest.importorskip("changepoint_online")
    _, x = _series(3, T=300)
    for fn in (lambda v: baselines.adwin_predict(v),
               lambda v: baselines.focus_predict(v, 1.0, 3.0)[0]):
        base = fn(x[0])
        y = x[0].copy()
        y[150:] += 4.0
        np.testing.assert_array_equal(fn(y)[:151], base[:151])


def test_anytime():
    """No horizon anywhere: no T field or argument, and a prefix run equals the prefix."""
    assert not {"T", "horizon", "n"} & set(atc.ATCParams._fields)
    assert list(inspect.signature(atc.atc_predict).parameters) == ["params", "x"]
    _, x = _series(4, T=3000, S=6)
    p = atc.ATCParams(1.0)
    full = atc.atc_predict(p, jnp.asarray(x[0]))
    for t in (17, 1000, 2222):
        part = atc.atc_predict(p, jnp.asarray(x[0, :t]))
        for a, b in zip(part, full):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[:t])


@pytest.mark.slow
def test_geom_regret_within_10pct_of_full():
    p = atc.ATCParams(1.0)
    for S in (0, 4, 16):
        mu, x = _series(10 + S, T=2000, S=S, runs=64)
        reg = {}
        for scan in atc.SCANS:
            f = jax.jit(jax.vmap(lambda v, s=scan: atc.atc_predict(p._replace(scan=s), v).pred))
            reg[scan] = metrics.regret(f(jnp.asarray(x)), mu).mean()
        assert abs(reg["geom"] / reg["full"] - 1) <= 0.10, (S, reg)


def test_geom_offsets():
    k = atc.geom_offsets(16000, 1.25)
    assert k[0] == 1 and k[-1] <= 16000 and np.all(np.diff(k) > 0)
    assert 35 <= len(k) <= 45  # ~80 candidates from both ends at T = 16000
    np.testing.assert_array_equal(atc.geom_offsets(10, 2.0), [1, 2, 4, 8])


def test_masking_never_nan_and_huge_jump_detected():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(400)
    x[200:] += 1e3
    for restart in atc.RESTARTS:
        out = atc.atc_predict(atc.ATCParams(1.0, restart=restart), jnp.asarray(x))
        pred = np.asarray(out.pred)
        assert np.all(np.isfinite(pred))
        assert bool(out.alarm[200])  # detected right at the first post-jump sample
        if restart == "t":  # the empty segment predicts the last observation
            assert int(out.seg_start[200]) == 201 and pred[201] == x[200]
        else:
            assert int(out.seg_start[200]) == 200
    # t = 1 has no candidate at all (empty (r, t)); t = 2 has one split.
    out = atc.atc_predict(atc.ATCParams(1.0), jnp.asarray([5.0]))
    assert not bool(out.alarm[0]) and float(out.pred[0]) == 0.0
    out = atc.atc_predict(atc.ATCParams(1.0), jnp.asarray([5.0, -3.0]))
    assert np.asarray(out.alarm).tolist() == [False, True]  # G_2 = 32 > 3 log 2
    assert np.asarray(out.pred).tolist() == [0.0, 5.0]


@pytest.mark.parametrize("scan", atc.SCANS)
@pytest.mark.parametrize("restart", atc.RESTARTS)
def test_streaming_equals_batch(scan, restart):
    p = atc.ATCParams(1.0, scan=scan, restart=restart)
    _, x = _series(6, T=1500, S=10)
    x = x[0]
    batch = atc.atc_predict(p, jnp.asarray(x))
    state = atc.atc_init(p, capacity=2048 if scan == "geom" else 1600)
    update = jax.jit(lambda s, v: atc.atc_update(p, s, v))
    preds, alarms = [p.prior], []
    for v in x:
        state, pred, alarm = update(state, v)
        preds.append(float(pred))
        alarms.append(bool(alarm))
    np.testing.assert_allclose(preds[:-1], np.asarray(batch.pred), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(alarms, np.asarray(batch.alarm))
    assert int(state.r) == int(batch.seg_start[-1])


def test_streaming_beyond_capacity_keeps_long_segment_candidates():
    """With a ring shorter than the series, the r + k_j sums still cover the old side."""
    p = atc.ATCParams(1.0)
    x = np.random.default_rng(7).standard_normal(3000)
    x[2500:] += 2.0
    state = atc.atc_init(p, capacity=256)
    update = jax.jit(lambda s, v: atc.atc_update(p, s, v))
    alarms = []
    for v in x:
        state, pred, alarm = update(state, v)
        assert np.isfinite(float(pred))
        alarms.append(bool(alarm))
    first = int(np.flatnonzero(alarms)[0]) if any(alarms) else -1
    assert 2500 <= first < 2600
    assert abs(int(state.r) - 2500) <= 40


def test_focus_statistic_is_half_the_full_glr():
    co = pytest.importorskip("changepoint_online")
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.standard_normal(250), rng.standard_normal(250) + 0.8])
    det = co.Focus(co.Gaussian(loc=None))
    P = np.concatenate([[0.0], np.cumsum(x)])
    for t in range(1, 501):
        det.update(x[t - 1])
        if t < 3:
            continue
        s = np.arange(1, t)
        g = s * (t - s) / t * (P[s] / s - (P[t] - P[s]) / (t - s)) ** 2
        assert abs(det.statistic() - 0.5 * g.max()) <= 1e-9 * max(1.0, g.max())
        if t % 50 == 0:
            assert det.changepoint()["changepoint"] == s[np.argmax(g)]


def test_focus_learner_matches_atc_full_scan():
    """FOCuS is the exact full scan: its learner alarms where ATC(full) does."""
    pytest.importorskip("changepoint_online")
    _, x = _series(9, T=1500, S=4)
    pred, alarm = baselines.focus_predict(x[0], 1.0, 3.0)
    out = atc.atc_predict(atc.ATCParams(1.0, scan="full"), jnp.asarray(x[0]))
    np.testing.assert_array_equal(alarm, np.asarray(out.alarm))
    np.testing.assert_allclose(pred, np.asarray(out.pred), atol=1e-9)


@pytest.mark.parametrize("field,value,match", [
    ("sigma", 0.0, "sigma"), ("sigma", -1.0, "sigma"), ("c", 0.0, "c must"),
    ("restart", "never", "restart"), ("scan", "dense", "scan"), ("ratio", 1.0, "ratio")])
def test_bad_params(field, value, match):
    p = atc.ATCParams(1.0)._replace(**{field: value})
    with pytest.raises(ValueError, match=match):
        atc.atc_predict(p, jnp.zeros(10))
    with pytest.raises(ValueError, match=match):
        atc.atc_reference(p, np.zeros(10))


def test_bad_shapes():
    with pytest.raises(ValueError, match="1-D"):
        atc.atc_predict(atc.ATCParams(1.0), jnp.zeros((2, 10)))
    with pytest.raises(ValueError, match="capacity"):
        atc.atc_init(atc.ATCParams(1.0), capacity=1)
