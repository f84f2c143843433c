"""Evaluation data (spec §Data): statsmodels' bundled real series, the synthetic held-out set,
the ``synthetic_energy`` generator (not in the prior) and a CSV path for users.

Every evaluation series is a :class:`RealTask` with three rolling origins ``L`` spaced by ``H``
and ending at ``T - H`` (``origins = (T - 3H, T - 2H, T - H)``): the forecaster sees
``y[:L]``, ``X[:L + H]`` and predicts ``y[L:L + H]``.

Short series. Retrieval needs candidate windows ``s + M <= L``; when the first origin is
below ``2 M`` (fewer than ``M + 1`` candidate starts) the window is halved (``M = 32`` from
64) and ``K_max = 6`` instead of 8; this is logged. In the table this hits ``nile`` (first
origin 76) and ``interest_inflation`` (83). A series whose first origin is still below
``M + H`` raises ``ValueError``.

Real-task transforms: growth rates are ``100 * diff(log(.))`` (quarterly log-growth in
percent); covariates are aligned in time with the target (the value at t is observed at t), so
for the four macro / interest tasks the future covariates are *oracle* values
(``oracle_covariates=True``). Calendar covariates (co2, elnino) are truly known ahead.

``RealTask.X`` is [T, F] with the task's true F (baselines such as SARIMAX need it unpadded);
``RealTask.n_feat`` is F and :meth:`RealTask.padded_X` zero-pads to [T, F_MAX] for the model.
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd
from absl import logging

from icml26_jax.baguan_ts import prior

REAL_TASKS = ("co2", "elnino", "sunspots", "nile", "macro_realcons", "macro_infl",
              "macro_realinv", "interest_inflation")
N_ORIGINS = 3
K_MAX, K_MAX_SHORT = 8, 6
EVAL_H, EVAL_M = 16, 64
N_EVAL_PER_FAMILY = 8
EVAL_T = 512  # length of the held-out generic-covariate and spike tasks
ENERGY_T = 720
EVAL_SPIKE_PERIODS = (7, 12)  # <= H = 16, so every forecast window holds a spike slot


class RealTask(NamedTuple):
    """One evaluation series.

    Attributes:
      name: task name ('co2', 'syn_cov_0', the CSV's stem, ...).
      y: [T] float32 target.
      X: [T, F] float32 covariates (F = 0 allowed; unpadded).
      m: season (MASE / seasonal-naive period).
      H: horizon.
      M: window length for retrieval / the model (64, or 32 for short series).
      oracle_covariates: the covariates are observed values, not known in advance.
      origins: the 3 forecast origins L (T - 3H, T - 2H, T - H).
      K_max: most supports (8; 6 for short series).
      family: 'real', or the held-out family 'covariate' | 'spike' | 'synthetic_energy'
        (spike tasks are the ones OSI is measured on).
    """

    name: str
    y: np.ndarray
    X: np.ndarray
    m: int
    H: int
    M: int
    oracle_covariates: bool
    origins: tuple[int, ...]
    K_max: int
    family: str = "real"

    @property
    def n_feat(self) -> int:
        return int(self.X.shape[1])

    def padded_X(self, f_max: int = prior.F_MAX) -> np.ndarray:
        """X zero-padded to [T, f_max] float32."""
        out = np.zeros((self.X.shape[0], f_max), np.float32)
        out[:, :self.n_feat] = self.X
        return out


def make_real_task(name: str, y, X, *, m: int, H: int, M: int = EVAL_M,
                   oracle_covariates: bool = False, family: str = "real") -> RealTask:
    """Validates a series and attaches its origins, window and support count.

    Args:
      name: task name.
      y: [T] target (finite).
      X: [T, F] covariates, F <= F_MAX (finite).
      m: season >= 1.
      H: horizon >= 1.
      M: requested window; halved (K_max 6) when the first origin is < 2 M.
      oracle_covariates: see RealTask.
      family: see RealTask.

    Returns:
      RealTask.
    """
    y = np.asarray(y, np.float32)
    X = np.asarray(X, np.float32)
    if y.ndim != 1 or X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{name}: y must be [T] and X [T, F]; got y {y.shape}, X {X.shape}")
    if X.shape[1] > prior.F_MAX:
        raise ValueError(f"{name}: {X.shape[1]} covariates, at most F_MAX={prior.F_MAX}")
    if not (np.isfinite(y).all() and np.isfinite(X).all()):
        raise ValueError(f"{name}: y and X must be finite (interpolate missing values first)")
    if m < 1 or H < 1 or M < 2:
        raise ValueError(f"{name}: need m >= 1, H >= 1, M >= 2; got m={m}, H={H}, M={M}")
    T = y.shape[0]
    origins = tuple(T - k * H for k in range(N_ORIGINS, 0, -1))
    K_max = K_MAX
    if origins[0] < 2 * M:
        logging.info("%s: first origin %d < 2 M = %d; short series: M %d -> %d, K_max %d",
                     name, origins[0], 2 * M, M, M // 2, K_MAX_SHORT)
        M, K_max = M // 2, K_MAX_SHORT
    if origins[0] < M + H:
        raise ValueError(f"{name}: T={T} is too short for 3 origins with H={H} and a window "
                         f"M={M}: need T >= M + {N_ORIGINS + 1} H = {M + (N_ORIGINS + 1) * H}")
    return RealTask(name, y, X, int(m), int(H), int(M), bool(oracle_covariates), origins, K_max,
                    family)


# --------------------------------------------------------------------------- real series

def _growth(v: pd.Series | np.ndarray) -> np.ndarray:
    """Log-growth in percent: 100 * diff(log v) [len - 1]."""
    return 100.0 * np.diff(np.log(np.asarray(v, np.float64)))


def _season_sincos(phase: np.ndarray) -> np.ndarray:
    """[T, 2] sin / cos of a phase in cycles."""
    return np.stack([np.sin(2 * np.pi * phase), np.cos(2 * np.pi * phase)], axis=1)


def _load_raw(name: str) -> tuple[np.ndarray, np.ndarray, dict]:
    import statsmodels.api as sm  # heavy; only the real tasks need it

    if name == "co2":
        df = sm.datasets.co2.load_pandas().data  # weekly, DatetimeIndex, 59 NaNs
        y = df["co2"].interpolate(method="linear", limit_direction="both").to_numpy()
        # week-of-year as a continuous phase (day of year / 365.25)
        X = _season_sincos((df.index.day_of_year.to_numpy() - 1) / 365.25)
        return y, X, dict(m=52, H=16)
    if name == "elnino":
        df = sm.datasets.elnino.load_pandas().data  # 61 years x (YEAR, JAN..DEC)
        y = df.drop(columns="YEAR").to_numpy().reshape(-1)  # row-major: month order
        X = _season_sincos(np.tile(np.arange(12), len(df)) / 12.0)
        return y, X, dict(m=12, H=8)
    if name == "sunspots":
        y = sm.datasets.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy()
        return y, np.zeros((len(y), 0)), dict(m=11, H=8)
    if name == "nile":
        y = sm.datasets.nile.load_pandas().data["volume"].to_numpy()
        return y, np.zeros((len(y), 0)), dict(m=1, H=8)  # short: M 32 by the rule
    if name.startswith("macro_"):
        df = sm.datasets.macrodata.load_pandas().data  # quarterly 1959Q1-2009Q3, 203 rows
        if name == "macro_realcons":
            y = _growth(df["realcons"])
            X = np.stack([_growth(df["realdpi"]), df["unemp"].to_numpy()[1:],
                          df["tbilrate"].to_numpy()[1:]], axis=1)
        elif name == "macro_infl":
            y, X = df["infl"].to_numpy(), df[["tbilrate"]].to_numpy()
        else:  # macro_realinv
            y, X = _growth(df["realinv"]), _growth(df["realgdp"])[:, None]
        return y, X, dict(m=4, H=8, oracle_covariates=True)
    if name == "interest_inflation":
        df = sm.datasets.interest_inflation.load_pandas().data  # quarterly 1972Q2-1998Q4
        return (df["Dp"].to_numpy(), df[["R"]].to_numpy(),
                dict(m=4, H=8, oracle_covariates=True))
    raise AssertionError(name)


def load_task(name: str) -> RealTask:
    """One real task of the spec's table, from statsmodels' bundled data (offline).

    Args:
      name: one of REAL_TASKS.

    Returns:
      RealTask with the table's m and H (M 64, or 32 / K_max 6 for short series).
    """
    if name not in REAL_TASKS:
        raise ValueError(f"unknown real task {name!r}; allowed: {', '.join(REAL_TASKS)}")
    y, X, kw = _load_raw(name)
    return make_real_task(name, y, X, **kw)


def load_csv(path: str | os.PathLike, target: str, covariates: Sequence[str] = (),
             time_col: str | None = None, season: int = 1, H: int = 8,
             M: int = 64) -> RealTask:
    """A user's series from a CSV file (the real-data path).

    Rows are sorted by ``time_col`` when given (parsed as datetimes when possible);
    missing target / covariate values are linearly interpolated (ends held).

    Args:
      path: CSV file.
      target: target column.
      covariates: covariate columns (at most F_MAX), aligned in time with the target.
      time_col: optional time column to sort by.
      season: m.
      H: horizon.
      M: window (halved for short series).

    Returns:
      RealTask named after the file's stem, oracle_covariates False.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"CSV file {path!r} does not exist")
    df = pd.read_csv(path)
    covariates = list(covariates)
    wanted = [target, *covariates] + ([time_col] if time_col is not None else [])
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: column(s) {missing} not found; available columns: "
                         f"{list(df.columns)}")
    if len(covariates) > prior.F_MAX:
        raise ValueError(f"at most F_MAX={prior.F_MAX} covariates, got {covariates}")
    if time_col is not None:
        key = pd.to_datetime(df[time_col], errors="coerce")
        df = df.assign(_key=key if key.notna().all() else df[time_col]).sort_values(
            "_key", kind="stable").reset_index(drop=True)
    cols = {}
    for c in [target, *covariates]:
        v = pd.to_numeric(df[c], errors="coerce")
        if v.notna().sum() < 2:
            raise ValueError(f"{path}: column {c!r} has fewer than 2 numeric values")
        cols[c] = v.interpolate(method="linear", limit_direction="both").to_numpy()
    X = (np.stack([cols[c] for c in covariates], axis=1) if covariates
         else np.zeros((len(df), 0)))
    name = os.path.splitext(os.path.basename(path))[0]
    return make_real_task(name, cols[target], X, m=season, H=H, M=M)


# --------------------------------------------------------------------------- synthetic

def synthetic_energy(rng: np.random.Generator, T: int = ENERGY_T) -> prior.Task:
    """An hourly electricity-load series with weather and holidays (spec §Data; not in the
    prior).

    Temperature (deg C) = climate base U[0, 20] + annual cycle (8 deg amplitude, random day
    of year) + daily cycle (3-7 deg, peak ~15 h) + weather (RBF GP path, sd 2.5, length-scale
    24-72 h). Load = base * (1 + daily profile (morning and evening peaks) - weekend dip) *
    (1 - holiday dip 15-30 %) + base * (a_h * max(15 - temp, 0) + a_c * max(temp - 22, 0))
    + AR(1) noise (2 % of base), a_h, a_c in [1.5 %, 3 %] of base per degree. 1-3 whole-day
    holidays on weekdays. No sign flip (load is positive).

    Args:
      rng: numpy generator.
      T: hours (default 720 = 30 days).

    Returns:
      prior.Task with X [T, 3] = [temperature, holiday flag, sin(2 pi hour / 24)], y [T] load,
      family SYNTHETIC_ENERGY, period 24.
    """
    if T < 48:
        raise ValueError(f"synthetic_energy needs T >= 48 hours, got {T}")
    t = np.arange(T, dtype=np.float64)
    hour = t % 24
    day = (t // 24).astype(np.int64)
    dow = (day + rng.integers(7)) % 7  # 5, 6 = weekend
    doy0 = rng.uniform(0, 365)
    temp = (rng.uniform(0.0, 20.0)
            + 8.0 * np.sin(2 * np.pi * (doy0 + t / 24) / 365.25)
            + rng.uniform(3.0, 7.0) * np.cos(2 * np.pi * (hour - 15) / 24)
            + 2.5 * prior.rff_path(rng, T, rng.uniform(24.0, 72.0), 64))
    n_days = int(day[-1]) + 1
    weekdays = np.flatnonzero(np.bincount(day, weights=dow < 5, minlength=n_days) > 0)
    holidays = rng.choice(weekdays, size=min(int(rng.integers(1, 4)), weekdays.size),
                          replace=False)
    holiday = np.isin(day, holidays).astype(np.float64)
    profile = (0.12 * np.exp(-0.5 * ((hour - 8) / 2.0) ** 2)
               + 0.18 * np.exp(-0.5 * ((hour - 19) / 2.5) ** 2) - 0.08 * (hour < 6))
    weekly = -0.1 * (dow >= 5)
    base = rng.uniform(50.0, 150.0)
    weather = (rng.uniform(0.015, 0.03) * np.maximum(15.0 - temp, 0.0)
               + rng.uniform(0.015, 0.03) * np.maximum(temp - 22.0, 0.0))
    noise = prior._ar1(rng, np.full(T, 0.02), rng.uniform(0.3, 0.8))
    load = base * ((1.0 + profile + weekly) * (1.0 - rng.uniform(0.15, 0.3) * holiday)
                   + weather + noise)
    X = np.stack([temp, holiday, np.sin(2 * np.pi * hour / 24)], axis=1)
    return prior.Task(X.astype(np.float32), load.astype(np.float32), prior.SYNTHETIC_ENERGY, 24)


def synthetic_eval_set(seed: int = 0, cfg: prior.PriorConfig = prior.PriorConfig()
                       ) -> list[RealTask]:
    """The synthetic held-out set: 24 tasks x 3 origins, H = 16, M = 64, K_max = 8.

    8 generic covariate tasks ('syn_cov_i', T = 512), 8 periodic-with-spikes tasks
    ('syn_spike_i', T = 512, spike period in {7, 12} so every 16-step window holds a spike
    slot; family 'spike': OSI is measured on them) and 8 ``synthetic_energy`` tasks
    ('syn_energy_i', T = 720). Task j draws from ``prior.task_rng(seed, j,
    prior.EVAL_STREAM)``: a SeedSequence spawn key disjoint from every bank's
    (``BANK_STREAM``), whatever the two seeds. ``m`` is the task's dominant period.

    Args:
      seed: integer seed.
      cfg: prior configuration of the covariate and spike generators.

    Returns:
      list of 24 RealTask (covariate, spike, energy in that order).
    """
    spike_cfg = dataclasses.replace(cfg, periods=EVAL_SPIKE_PERIODS)
    gens = (("syn_cov", "covariate", lambda r: prior.sample_covariate_task(r, cfg, EVAL_T)),
            ("syn_spike", "spike", lambda r: prior.sample_spike_task(r, spike_cfg, EVAL_T)),
            ("syn_energy", "synthetic_energy", lambda r: synthetic_energy(r, ENERGY_T)))
    out = []
    for g, (prefix, family, gen) in enumerate(gens):
        for i in range(N_EVAL_PER_FAMILY):
            task = gen(prior.task_rng(seed, g * N_EVAL_PER_FAMILY + i, prior.EVAL_STREAM))
            out.append(make_real_task(f"{prefix}_{i}", task.y, task.X, m=task.period,
                                      H=EVAL_H, M=EVAL_M, family=family))
    return out
