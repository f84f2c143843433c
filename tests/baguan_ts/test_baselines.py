"""Baselines and peers: exact cases, shapes/dtypes, skill on series built for each method."""

import sys

import jax
import numpy as np
import pytest

from icml26_jax.baguan_ts import baselines as B
from icml26_jax.baguan_ts import peers
from icml26_jax.baguan_ts.losses import QUANTILES

KEY = jax.random.key(0)


def _mae(a, b):
    return float(np.mean(np.abs(np.asarray(a, np.float64) - b)))


def _seasonal(seed, T, m, noise):
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    return 10.0 + 3.0 * np.sin(2 * np.pi * t / m) + noise * rng.normal(size=T)


# ----------------------------------------------------------------------------- naive family


def test_seasonal_naive_exact_on_periodic_series():
    m, L, H = 12, 120, 20
    pattern = np.random.default_rng(0).normal(size=m)
    y = np.tile(pattern, (L + H) // m + 1)[: L + H]
    mean, q = B.seasonal_naive(y[:L], None, None, H, m, KEY)
    np.testing.assert_array_equal(mean, y[L:].astype(np.float32))  # the repeated last season
    np.testing.assert_array_equal(q, np.repeat(mean[:, None], 9, axis=1))  # errors are all 0


def test_seasonal_naive_quantiles_scale_with_seasons_ahead():
    m, L, H = 4, 80, 12
    y = np.random.default_rng(1).normal(size=L).cumsum()
    mean, q = B.seasonal_naive(y, np.zeros((L, 0)), np.zeros((H, 0)), H, m, KEY)
    base = np.quantile(y[m:] - y[:-m], QUANTILES)  # the h <= m offsets
    dev = q.astype(np.float64) - mean[:, None]
    np.testing.assert_allclose(dev[:m], np.broadcast_to(base, (m, 9)), rtol=1e-5, atol=1e-5)
    # h = 5..8 is ⌈h/m⌉ = 2 seasons ahead, h = 9..12 is 3: offsets grow by √2 and √3.
    np.testing.assert_allclose(dev[m:2 * m], np.sqrt(2) * dev[:m], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dev[2 * m:], np.sqrt(3) * dev[:m], rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(q, axis=1) >= 0)


def test_naive_and_drift_exact():
    L, H = 30, 6
    const = np.full(L, 5.0)
    mean, q = B.naive(const, None, None, H, 1, KEY)
    np.testing.assert_array_equal(mean, np.full(H, 5.0, np.float32))
    np.testing.assert_array_equal(q, np.full((H, 9), 5.0, np.float32))

    t = np.arange(L + H, dtype=np.float64)
    line = 2.0 + 0.5 * t
    mean, q = B.drift(line[:L], None, None, H, 1, KEY)
    np.testing.assert_allclose(mean, line[L:], rtol=1e-6)
    np.testing.assert_allclose(q, np.repeat(line[L:, None], 9, axis=1), rtol=1e-6)
    # naive on the line is off by h·slope; its one-step errors are all 0.5, so the interval
    # is mean + 0.5·√h at every level.
    mean, q = B.naive(line[:L], None, None, H, 1, KEY)
    np.testing.assert_allclose(q[:, 0] - mean, 0.5 * np.sqrt(np.arange(1, H + 1)), rtol=1e-5)


def test_naive_quantiles_scale_with_sqrt_h():
    y = np.random.default_rng(2).normal(size=50).cumsum()
    mean, q = B.naive(y, None, None, 9, 1, KEY)
    dev = q - mean[:, None]
    np.testing.assert_allclose(dev[8], 3.0 * dev[0], rtol=1e-5, atol=1e-6)  # √9 = 3
    np.testing.assert_allclose(dev[0], np.quantile(np.diff(y), QUANTILES), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- every method


@pytest.mark.parametrize("name", sorted(B.METHODS))
def test_every_method_shapes_dtypes_sorted(name):
    fn = B.METHODS[name]
    L, H = 72, 8
    rng = np.random.default_rng(3)
    for F in (0, 2):
        for m in (1, 12):
            X = rng.normal(size=(L + H, F))
            y = _seasonal(4, L, 12, 0.3) + (X[:L].sum(axis=1) if F else 0.0)
            mean, q = fn(y, X[:L], X[L:], H, m, KEY)
            assert mean.shape == (H,) and q.shape == (H, 9), (name, F, m)
            assert mean.dtype == np.float32 and q.dtype == np.float32
            assert np.all(np.isfinite(mean)) and np.all(np.isfinite(q))
            assert np.all(np.diff(q, axis=1) >= 0), (name, F, m)


def test_methods_registry():
    assert set(B.METHODS) == {"seasonal_naive", "naive", "drift", "retrieval_average",
                              "tabular_qr", "ets", "sarimax_exog"}


# ------------------------------------------------------------------------------ tabular QR


def test_tabular_qr_uses_known_future_covariate_and_is_calibrated():
    """y = 3x + N(0, 0.5²) with x known ahead: the median tracks 3x, the 10-90 % band ~80 %."""
    L, H = 200, 16
    hits, ratios = [], []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        x = rng.normal(size=(L + H, 1))
        y = 3.0 * x[:, 0] + 0.5 * rng.normal(size=L + H)
        mean, q = B.tabular_qr(y[:L], x[:L], x[L:], H, 1, KEY)
        snaive, _ = B.seasonal_naive(y[:L], x[:L], x[L:], H, 1, KEY)
        ratios.append(_mae(mean, y[L:]) / _mae(snaive, y[L:]))
        hits.append((y[L:] >= q[:, 0]) & (y[L:] <= q[:, -1]))
    # Seasonal naive errs by ~3·|x_{L+h} − x_L| (≈ 2-4 per step), the oracle median by ~0.4.
    assert np.mean(ratios) < 0.3 and max(ratios) < 0.45, ratios
    coverage = float(np.mean(hits))  # 48 held-out points; nominal 0.8
    assert 0.6 <= coverage <= 0.97, coverage


def test_tabular_qr_deterministic():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(80, 2))
    y = _seasonal(6, 72, 12, 0.3) + x[:72, 0]
    a = B.tabular_qr(y, x[:72], x[72:], 8, 12, jax.random.key(1))
    b = B.tabular_qr(y, x[:72], x[72:], 8, 12, jax.random.key(1))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


# ---------------------------------------------------------------------------- statsmodels


def test_ets_and_sarimax_beat_naive_on_noisy_seasonal_series():
    L, H, m = 144, 12, 12
    y = _seasonal(7, L + H, m, 0.5)
    naive_mae = _mae(B.naive(y[:L], None, None, H, m, KEY)[0], y[L:])
    ets_mae = _mae(B.ets(y[:L], None, None, H, m, KEY)[0], y[L:])
    sar_mae = _mae(B.sarimax_exog(y[:L], None, None, H, m, KEY)[0], y[L:])
    # Naive misses the ±3 season (MAE ~2); both models recover it (MAE ~ noise, 0.4).
    assert ets_mae < 0.5 * naive_mae, (ets_mae, naive_mae)
    assert sar_mae < 0.5 * naive_mae, (sar_mae, naive_mae)


def test_sarimax_uses_exog():
    """y = 2x + AR(1) noise with x known ahead: only SARIMAX-exog can use x's future."""
    L, H = 150, 12
    rng = np.random.default_rng(8)
    x = rng.normal(size=(L + H, 1))
    e = np.zeros(L + H)
    for t in range(1, L + H):
        e[t] = 0.6 * e[t - 1] + 0.3 * rng.normal()
    y = 2.0 * x[:, 0] + e
    sar_mae = _mae(B.sarimax_exog(y[:L], x[:L], x[L:], H, 1, KEY)[0], y[L:])
    ets_mae = _mae(B.ets(y[:L], x[:L], x[L:], H, 1, KEY)[0], y[L:])
    assert sar_mae < 0.5 * ets_mae, (sar_mae, ets_mae)


def test_sarimax_drops_collinear_exog():
    # A constant covariate and a duplicate of the Fourier cosine would make the regression
    # singular; they are dropped and the forecast stays finite and accurate.
    L, H, m = 120, 12, 12
    t = np.arange(L + H)
    y = _seasonal(9, L + H, m, 0.3)
    X = np.stack([np.ones(L + H), np.cos(2 * np.pi * t / m)], axis=1)
    kept = B._independent_columns(np.concatenate([X, B._fourier(t.astype(float), m)], axis=1)[:L])
    assert 0 not in kept and len(kept) == 4  # the constant and one of the two cosines go
    mean, _ = B.sarimax_exog(y[:L], X[:L], X[L:], H, m, KEY)
    assert _mae(mean, y[L:]) < 0.6


# ------------------------------------------------------------------------ retrieval average


# Both sinusoid tests share (L, H, F) so the jitted retrieval compiles once; L = 320 leaves
# >= 8 exact phase matches among the 257 candidate starts (one per 24 steps).
def test_retrieval_average_reproduces_sinusoid():
    L, H, m = 320, 16, 24
    t = np.arange(L + H)
    y = 4.0 + 2.0 * np.sin(2 * np.pi * t / m)
    mean, q = B.retrieval_average(y[:L], None, None, H, m, KEY)
    np.testing.assert_allclose(mean, y[L:], atol=0.05)
    assert np.all(q[:, -1] - q[:, 0] < 0.05)  # the supports agree


def test_retrieval_average_rescales_supports_to_query():
    # The amplitude grows 3x over the history: supports from early on are mapped to the
    # query's scale, so the forecast follows the current (large) amplitude.
    L, H, m = 320, 16, 24
    t = np.arange(L + H)
    y = (1.0 + 2.0 * t / L) * np.sin(2 * np.pi * t / m)
    mean, _ = B.retrieval_average(y[:L], None, None, H, m, KEY)
    raw_mae = _mae(np.sin(2 * np.pi * t[L:] / m), y[L:])  # an unscaled early cycle
    assert _mae(mean, y[L:]) < 0.3 * raw_mae


def test_retrieval_average_short_history_fallback():
    y = np.sin(np.arange(30) / 3.0)
    mean, q = B.retrieval_average(y, None, None, 8, 1, KEY)  # L = 30 < M + H = 72
    assert mean.shape == (8,) and np.all(np.isfinite(q))
    assert B._feasible_window(30, 8, 64) == 22 and B._feasible_window(12, 8, 64) == 12
    with pytest.raises(ValueError, match="retrieval_average needs len\\(y_train\\) >= 10"):
        B.retrieval_average(y[:9], None, None, 8, 1, KEY)


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("kwargs, match", [
    (dict(H=0), "H must be an integer >= 1"),
    (dict(m=0), "m must be an integer >= 1"),
    (dict(H=2.0), "H must be an integer"),
    (dict(y_train=np.zeros((40, 1))), "y_train must be a 1-D"),
    (dict(X_train=np.zeros((39, 2))), "X_train must have shape \\[L=40, F\\]"),
    (dict(X_test=np.zeros((4, 3))), "X_test must have shape \\[H=4, F=2\\]"),
    (dict(y_train=np.r_[np.zeros(39), np.nan]), "y_train must be finite"),
])
def test_input_validation(kwargs, match):
    args = dict(y_train=np.zeros(40), X_train=np.zeros((40, 2)), X_test=np.zeros((4, 2)),
                H=4, m=1, key=KEY)
    args.update(kwargs)
    for fn in (B.naive, B.tabular_qr, B.ets):
        with pytest.raises(ValueError, match=match):
            fn(**args)


def test_too_short_history_errors():
    with pytest.raises(ValueError, match="seasonal_naive needs len\\(y_train\\) >= 13"):
        B.seasonal_naive(np.zeros(12), None, None, 4, 12, KEY)
    with pytest.raises(ValueError, match="tabular_qr needs len\\(y_train\\) >= 6"):
        B.tabular_qr(np.zeros(5), None, None, 4, 1, KEY)
    with pytest.raises(ValueError, match="M must be >= H \\+ 2"):
        B.retrieval_average(np.zeros(100), None, None, 16, 1, KEY, M=16)


# ---------------------------------------------------------------------------------- peers


def test_as_forecaster_conforms_to_protocol():
    fc = peers.as_forecaster(B.drift, "drift")
    assert isinstance(fc, peers.Forecaster) and fc.name == "drift"
    y = np.arange(20.0)
    out, ref = fc.forecast(y, None, None, 3, 1, KEY), B.drift(y, None, None, 3, 1, KEY)
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])
    assert peers.as_forecaster(B.ets).name == "ets"
    with pytest.raises(ValueError, match="callable"):
        peers.as_forecaster(3)


@pytest.mark.parametrize("cls, module, pip_name", [
    (peers.ChronosForecaster, "chronos", "pip install chronos-forecasting"),
    (peers.TimesFMForecaster, "timesfm", "pip install timesfm"),
    (peers.TabPFNTSForecaster, "tabpfn_time_series", "pip install tabpfn-time-series"),
])
def test_peer_adapters_explain_missing_package(monkeypatch, cls, module, pip_name):
    monkeypatch.setitem(sys.modules, module, None)  # hidden whether installed or not
    with pytest.raises(ImportError, match=pip_name):
        cls()
