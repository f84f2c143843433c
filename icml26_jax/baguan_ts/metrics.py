"""Forecast metrics and across-task aggregates (spec §Experiment, "Definitions").

Per task (one series, one origin; numpy on the host, float64):
- :func:`mase`  mean|y - yhat| / s, s = the in-sample seasonal-naive MAE mean_t|y_t - y_{t-m}|;
- :func:`wql`   sum_h sum_q 2 rho_q(y_h - yhat_h^q) / (|Q| sum_h |y_h|),
                rho_q(u) = u (q - 1[u < 0]);
- :func:`sql`   the fev-bench scaled quantile loss: mean_{h,q} 2 rho_q(y_h - yhat_h^q) / s;
- :func:`coverage`, :func:`osi` (oversmoothing index std(diff yhat) / std(diff y)).

Across tasks (``E`` [T, M]: tasks as rows, methods as columns, lower is better):
- :func:`win_rate`, :func:`skill_score` (geometric mean of clipped error ratios),
  :func:`geo_mean_ratio`, and :func:`bootstrap_ci` over tasks (resampled rows).

Degenerate data (not caller bugs) never raise:
- the seasonal-naive scale s of MASE/SQL falls back to lag 1 when the history is too short
  (L <= m) or its seasonal scale is 0, and to 1.0 when the lag-1 scale is 0 as well (a
  constant history; AutoGluon/fev use 1.0 for an undefined scale too), so it is never 0;
- WQL with sum_h |y_h| = 0 and OSI with std(diff y) = 0 are undefined and return NaN, which
  the aggregates below then reject loudly.
Malformed arguments (shapes, levels, indices, NaNs in ``E``) raise ``ValueError`` naming the
argument and what is allowed.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from icml26_jax.baguan_ts.losses import QUANTILES

SKILL_CLIP = (0.01, 100.0)  # the error-ratio clip of the skill score (spec §Experiment)


def _vec(name: str, x, min_len: int = 1) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.ndim != 1 or x.shape[0] < min_len:
        raise ValueError(f"{name} must be a 1-D array of length >= {min_len}, got shape {x.shape}")
    return x


def _same_shape(**arrays) -> None:
    shapes = {k: np.shape(v) for k, v in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"{', '.join(shapes)} must have the same shape, got " +
                         ", ".join(f"{k} {s}" for k, s in shapes.items()))


def _season(m) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (the seasonal lag) must be an int >= 1, got m={m!r}")
    return int(m)


def _levels(qs) -> np.ndarray:
    qs = np.asarray(qs, np.float64)
    if qs.ndim != 1 or qs.size == 0 or np.any((qs <= 0) | (qs >= 1)):
        raise ValueError(f"qs must be a non-empty 1-D array of levels in (0, 1), got {qs!r}")
    return qs


def _quantile_forecast(y, q, qs):
    y = _vec("y", y)
    qs = _levels(qs)
    q = np.asarray(q, np.float64)
    if q.shape != (y.shape[0], qs.shape[0]):
        raise ValueError(f"q must be [H, len(qs)] = {(y.shape[0], qs.shape[0])}, got shape "
                         f"{q.shape}")
    return y, q, qs


def _pinball_x2(y, q, qs) -> np.ndarray:
    """2 rho_q(y_h - q_h) for every (h, q), [H, n_q]."""
    u = y[:, None] - q
    return 2.0 * u * (qs - (u < 0))


def naive_scale(y_train, m: int) -> float:
    """In-sample seasonal-naive MAE, mean_{t >= m} |y_t - y_{t-m}| (the MASE / SQL scale).

    Lag m if the history is longer than m (L > m), else lag 1 (as GluonTS). A zero (or
    all-NaN) seasonal scale falls back to the lag-1 scale, and a zero lag-1 scale to 1.0, so
    the result is always > 0. NaNs in the history are skipped (``nanmean``).

    Args:
      y_train: [L] history, L >= 2.
      m: seasonal lag >= 1.
    """
    y_train = _vec("y_train", y_train, min_len=2)
    m = _season(m)

    def mae(lag):
        d = np.abs(y_train[lag:] - y_train[:-lag])
        d = d[np.isfinite(d)]
        return float(d.mean()) if d.size else 0.0

    s = mae(m) if y_train.shape[0] > m else 0.0
    if not s > 0:
        s = mae(1)
    return s if s > 0 else 1.0


def mase(y, yhat, y_train, m: int) -> float:
    """MASE = mean_h |y_h - yhat_h| / :func:`naive_scale` (y_train, m) (spec §Experiment).

    Args:
      y: [H] actuals.
      yhat: [H] point forecast.
      y_train: [L] history before the origin (L >= 2).
      m: seasonal lag (>= 1; lag 1 is used when L <= m).
    """
    y, yhat = _vec("y", y), _vec("yhat", yhat)
    _same_shape(y=y, yhat=yhat)
    return float(np.mean(np.abs(y - yhat)) / naive_scale(y_train, m))


def wql(y, q, qs=QUANTILES) -> float:
    """WQL = sum_h sum_q 2 rho_q(y_h - yhat_h^q) / (|Q| sum_h |y_h|) (spec §Experiment).

    rho_q(u) = u (q - 1[u < 0]) is the pinball loss. NaN if sum_h |y_h| = 0 (undefined).

    Args:
      y: [H] actuals.
      q: [H, len(qs)] quantile forecasts.
      qs: [n_q] levels in (0, 1); the nine levels 0.1, ..., 0.9 by default.
    """
    y, q, qs = _quantile_forecast(y, q, qs)
    den = qs.shape[0] * np.sum(np.abs(y))
    num = np.sum(_pinball_x2(y, q, qs))
    return float(num / den) if den > 0 else float("nan")


def sql(y, q, y_train, m: int, qs=QUANTILES) -> float:
    """Scaled quantile loss (fev-bench's SQL): mean_{h,q} 2 rho_q(y_h - yhat_h^q) / s.

    s = :func:`naive_scale` (y_train, m), the same in-sample seasonal-naive MAE as MASE; with
    a single level q = 0.5 and q = yhat, SQL = MASE.

    Args:
      y: [H] actuals.
      q: [H, len(qs)] quantile forecasts.
      y_train: [L] history before the origin.
      m: seasonal lag.
      qs: [n_q] levels in (0, 1).
    """
    y, q, qs = _quantile_forecast(y, q, qs)
    return float(np.mean(_pinball_x2(y, q, qs)) / naive_scale(y_train, m))


def coverage(y, lo, hi) -> float:
    """Fraction of actuals inside the closed interval [lo, hi] (same shapes, any rank)."""
    y, lo, hi = (np.asarray(a, np.float64) for a in (y, lo, hi))
    _same_shape(y=y, lo=lo, hi=hi)
    if y.size == 0:
        raise ValueError("y must be non-empty, got size 0")
    return float(np.mean((y >= lo) & (y <= hi)))


def osi(yhat, y) -> float:
    """Oversmoothing index OSI = std(diff yhat) / std(diff y) over the horizon (spec §Experiment).

    1 when the forecast is as rough as the actuals, 0 for a straight line; NaN when the
    actuals' first differences are constant (std 0). Note the argument order (forecast first).

    Args:
      yhat: [H] point forecast, H >= 3 (two differences at least).
      y: [H] actuals.
    """
    yhat, y = _vec("yhat", yhat, min_len=3), _vec("y", y, min_len=3)
    _same_shape(yhat=yhat, y=y)
    den = np.std(np.diff(y))
    return float(np.std(np.diff(yhat)) / den) if den > 0 else float("nan")


def _errors(E, min_methods: int = 1) -> np.ndarray:
    E = np.asarray(E, np.float64)
    if E.ndim != 2 or E.shape[0] < 1 or E.shape[1] < min_methods:
        raise ValueError(f"E must be [T, M] (tasks x methods) with T >= 1 and M >= {min_methods}, "
                         f"got shape {E.shape}")
    if np.any(np.isnan(E)):
        raise ValueError(f"E must not contain NaN (an undefined metric), got NaN at (task, "
                         f"method) {np.argwhere(np.isnan(E)).tolist()}")
    return E


def win_rate(E) -> np.ndarray:
    """Pairwise win rates, W_j = sum_t sum_{k != j} [1(E_jt < E_kt) + 1/2 1(E_jt = E_kt)]
    / (|T| (M - 1)) (spec §Experiment; lower error wins, ties count one half).

    Args:
      E: [T, M] errors, tasks as rows, methods as columns, M >= 2, no NaN.

    Returns:
      [M] win rates in [0, 1]; they average to 1/2.
    """
    E = _errors(E, min_methods=2)
    T, M = E.shape
    a, b = E[:, :, None], E[:, None, :]  # [T, j, k]
    score = (a < b) + 0.5 * (a == b)
    score = score.sum(axis=(0, 2)) - 0.5 * T  # drop the k = j diagonal (a tie each)
    return score / (T * (M - 1))


def skill_score(E, baseline: int) -> np.ndarray:
    """Skill vs a baseline, S_j = 1 - (prod_t clip(E_jt / E_bt, 0.01, 100))^(1/|T|).

    The geometric mean is taken in log space. A ratio 0/0 counts as 1 and x/0 (x > 0) as
    +inf, which the clip turns into 100 (spec §Experiment).

    Args:
      E: [T, M] non-negative finite errors (tasks x methods).
      baseline: column of the baseline (seasonal naive in the spec), 0 <= baseline < M.

    Returns:
      [M] skill scores in [-99, 0.99]; the baseline's is 0.
    """
    E = _errors(E)
    M = E.shape[1]
    if isinstance(baseline, bool) or not isinstance(baseline, (int, np.integer)) \
            or not 0 <= baseline < M:
        raise ValueError(f"baseline must be a column index in [0, {M}), got baseline={baseline!r}")
    if np.any(E < 0) or not np.all(np.isfinite(E)):
        raise ValueError("E must be non-negative and finite (errors), got "
                         f"{E[(E < 0) | ~np.isfinite(E)].tolist()}")
    eb = E[:, baseline:baseline + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where((E == 0) & (eb == 0), 1.0, E / eb)
    r = np.clip(r, *SKILL_CLIP)
    return 1.0 - np.exp(np.mean(np.log(r), axis=0))


def geo_mean_ratio(a, b) -> float:
    """Geometric mean of a_t / b_t, exp(mean_t log(a_t / b_t)), for positive finite a, b [T]."""
    a, b = _vec("a", a), _vec("b", b)
    _same_shape(a=a, b=b)
    for name, x in (("a", a), ("b", b)):
        if not np.all(np.isfinite(x) & (x > 0)):
            raise ValueError(f"{name} must be positive and finite, got {x.tolist()}")
    return float(np.exp(np.mean(np.log(a) - np.log(b))))


def bootstrap_ci(stat_fn: Callable[[np.ndarray], object], E, key: jax.Array, n: int = 1000,
                 level: float = 0.95):
    """Percentile bootstrap CI of ``stat_fn(E)`` over tasks (rows resampled with replacement).

    The n x T row indices come from ``jax.random.randint(key, ...)``, so the interval is a
    deterministic function of ``key``.

    Args:
      stat_fn: numpy function of a resampled ``E`` [T, ...] returning a scalar or an array
        (e.g. ``win_rate`` -> [M]).
      E: [T, ...] per-task values, T >= 1.
      key: a typed key, ``jax.random.key(seed)``.
      n: number of bootstrap replicates, >= 1.
      level: confidence level in (0, 1).

    Returns:
      ``(lo, hi)``: the (1 - level)/2 and (1 + level)/2 percentiles of the replicates, each
      with the shape of ``stat_fn``'s output (float64).
    """
    E = np.asarray(E)
    if E.ndim < 1 or E.shape[0] < 1:
        raise ValueError(f"E must be [T, ...] with T >= 1 rows (tasks), got shape {E.shape}")
    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
            and key.shape == ()):
        raise ValueError(f"key must be a single typed key from jax.random.key(seed), got {key!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got n={n!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got level={level!r}")
    T = E.shape[0]
    idx = np.asarray(jax.random.randint(key, (n, T), 0, T))  # [n, T]
    stats = np.stack([np.asarray(stat_fn(E[i]), np.float64) for i in idx])  # [n, ...]
    lo, hi = np.percentile(stats, [50.0 * (1 - level), 50.0 * (1 + level)], axis=0)
    return lo, hi
