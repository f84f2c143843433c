"""Evaluation data (spec §Data): statsmodels' real series, synthetic_energy, the synthetic
held-out set and the CSV path."""

import numpy as np
import pandas as pd
import pytest

from icml26_jax.baguan_ts import data_real, prior

# name: (m, H, M, F, oracle covariates, T)
TABLE = {
    "co2": (52, 16, 64, 2, False, 2284),
    "elnino": (12, 8, 64, 2, False, 732),
    "sunspots": (11, 8, 64, 0, False, 309),
    "nile": (1, 8, 32, 0, False, 100),
    "macro_realcons": (4, 8, 64, 3, True, 202),  # growth rates lose the first quarter
    "macro_infl": (4, 8, 64, 1, True, 203),
    "macro_realinv": (4, 8, 64, 1, True, 202),
    "interest_inflation": (4, 8, 32, 1, True, 107),
}


def _check_origins(task):
    T = task.y.shape[0]
    assert len(task.origins) == 3
    assert task.origins[-1] == T - task.H
    assert np.all(np.diff(task.origins) == task.H)
    for L in task.origins:
        assert L + task.H <= T and L >= task.M + task.H  # RBfcst needs L >= M + H


def test_table_matches_spec():
    assert data_real.REAL_TASKS == tuple(TABLE)


@pytest.mark.parametrize("name", data_real.REAL_TASKS)
def test_real_task_loads(name):
    m, H, M, F, oracle, T = TABLE[name]
    task = data_real.load_task(name)
    assert task.name == name and task.family == "real"
    assert (task.m, task.H, task.M, task.oracle_covariates) == (m, H, M, oracle)
    assert task.y.shape == (T,) and task.X.shape == (T, F) and task.n_feat == F
    assert task.y.dtype == np.float32 and task.X.dtype == np.float32
    assert np.isfinite(task.y).all() and np.isfinite(task.X).all()
    assert task.K_max == (6 if M == 32 else 8)
    _check_origins(task)
    padded = task.padded_X()
    assert padded.shape == (T, prior.F_MAX) and not padded[:, F:].any()
    np.testing.assert_array_equal(padded[:, :F], task.X)


def test_real_task_values():
    co2 = data_real.load_task("co2")
    assert 310 < co2.y.min() and co2.y.max() < 380  # ppm; the 59 NaNs were interpolated
    np.testing.assert_allclose(co2.X[:, 0] ** 2 + co2.X[:, 1] ** 2, 1.0, rtol=1e-5)
    elnino = data_real.load_task("elnino")
    np.testing.assert_allclose(elnino.y[:2], [23.11, 24.20], rtol=1e-6)  # JAN, FEB 1950
    np.testing.assert_allclose(elnino.y[12], 24.19, rtol=1e-6)  # JAN 1951: row-major
    np.testing.assert_allclose(elnino.X[12], elnino.X[0])  # same month, same covariates
    cons = data_real.load_task("macro_realcons")
    np.testing.assert_allclose(cons.y[0], 100 * np.log(1733.7 / 1707.4), rtol=1e-5)
    assert abs(np.median(cons.y)) < 2  # quarterly growth in percent


def test_unknown_task_lists_allowed_names():
    with pytest.raises(ValueError, match="allowed: co2, elnino.*interest_inflation"):
        data_real.load_task("airline")


def test_synthetic_energy_responses():
    """Pooled over 8 series with a fixed effect per (series, hour): relative load in very
    cold (< 8 C) and very hot (> 28 C) hours exceeds mild (15-22 C) hours, holidays dip."""
    rows, target = [], []
    for j in range(8):
        task = data_real.synthetic_energy(np.random.default_rng(j))
        T = task.y.shape[0]
        assert task.X.shape == (720, 3) and task.period == 24
        assert task.family == prior.SYNTHETIC_ENERGY and task.y.min() > 0
        temp, holiday, sin_hour = task.X.T.astype(np.float64)
        hour = np.arange(T) % 24
        np.testing.assert_allclose(sin_hour, np.sin(2 * np.pi * hour / 24), atol=1e-6)
        assert holiday.any() and (holiday.reshape(-1, 24) == holiday[::24, None]).all()
        fixed = np.zeros((T, 8 * 24))
        fixed[np.arange(T), j * 24 + hour] = 1.0
        bins = np.stack([temp < 8, (temp >= 8) & (temp < 15), (temp > 22) & (temp <= 28),
                         temp > 28], axis=1)
        rows.append(np.column_stack([fixed, holiday, bins]))
        target.append(task.y / task.y.mean())
    A, y = np.concatenate(rows), np.concatenate(target)
    assert A[:, -4].sum() > 100 and A[:, -1].sum() > 100  # enough very cold / very hot hours
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    holiday_c, cold_c, hot_c = coef[-5], coef[-4], coef[-1]
    assert cold_c > 0.05 and hot_c > 0.05, (cold_c, hot_c)
    assert holiday_c < -0.08, holiday_c


@pytest.fixture(scope="module")
def eval_set():
    return data_real.synthetic_eval_set(0)


def test_synthetic_eval_set_layout(eval_set):
    assert len(eval_set) == 24
    families = [t.family for t in eval_set]
    assert families == ["covariate"] * 8 + ["spike"] * 8 + ["synthetic_energy"] * 8
    assert [t.name for t in eval_set[:2]] == ["syn_cov_0", "syn_cov_1"]
    assert eval_set[-1].name == "syn_energy_7"
    for t in eval_set:
        assert (t.H, t.M, t.K_max, t.oracle_covariates) == (16, 64, 8, False)
        assert t.y.dtype == np.float32 and np.isfinite(t.y).all() and np.isfinite(t.X).all()
        _check_origins(t)
    for t in eval_set[:8]:
        assert 1 <= t.n_feat <= 3 and t.y.shape == (512,)
    for t in eval_set[8:16]:
        assert t.m in data_real.EVAL_SPIKE_PERIODS and t.n_feat <= 1
    for t in eval_set[16:]:
        assert t.m == 24 and t.n_feat == 3 and t.y.shape == (720,)


def test_synthetic_eval_set_deterministic_and_disjoint_from_bank(eval_set):
    again = data_real.synthetic_eval_set(0)
    for a, b in zip(eval_set, again):
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(data_real.synthetic_eval_set(1)[0].y, eval_set[0].y)
    # same integer seed and index, different stream: different draws
    a = prior.task_rng(0, 0, prior.EVAL_STREAM).random(8)
    b = prior.task_rng(0, 0, prior.BANK_STREAM).random(8)
    assert not np.allclose(a, b)


def test_load_csv_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    T = 120
    df = pd.DataFrame({
        "date": pd.date_range("2020-01-01", periods=T, freq="D").astype(str),
        "load": rng.normal(size=T).cumsum() + 50.0,
        "temp": rng.normal(size=T),
        "flag": (np.arange(T) % 7 == 0).astype(float),
    })
    expected = df.copy()
    df.loc[10, "load"] = np.nan
    path = tmp_path / "my_series.csv"
    df.sample(frac=1.0, random_state=0).to_csv(path, index=False)  # shuffled rows
    task = data_real.load_csv(path, "load", ("temp", "flag"), time_col="date", season=7, H=8)
    assert task.name == "my_series" and (task.m, task.H) == (7, 8)
    assert task.X.shape == (T, 2) and task.K_max == 6 and task.M == 32  # first origin 96 < 128
    np.testing.assert_allclose(task.X, expected[["temp", "flag"]].to_numpy(), rtol=1e-6)
    keep = np.arange(T) != 10
    np.testing.assert_allclose(task.y[keep], expected["load"].to_numpy()[keep], rtol=1e-6)
    np.testing.assert_allclose(task.y[10], 0.5 * (expected["load"][9] + expected["load"][11]),
                               rtol=1e-5)  # interpolated
    _check_origins(task)


def test_load_csv_errors(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame({"y": np.arange(200.0), "x": np.ones(200)}).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"\['z'\] not found; available columns: \['y', 'x'\]"):
        data_real.load_csv(path, "y", covariates=("z",))
    with pytest.raises(ValueError, match="does not exist"):
        data_real.load_csv(tmp_path / "missing.csv", "y")
    with pytest.raises(ValueError, match="at most F_MAX"):
        data_real.load_csv(path, "y", covariates=("x", "x", "x", "x"))
    short = tmp_path / "short.csv"
    pd.DataFrame({"y": np.arange(40.0)}).to_csv(short, index=False)
    with pytest.raises(ValueError, match="too short"):
        data_real.load_csv(short, "y", H=8)
    task = data_real.load_csv(path, "y", H=8)  # first origin 176 >= 128: full window
    assert (task.M, task.K_max, task.X.shape) == (64, 8, (200, 0))
