"""Metrics of online mean tracking: regret, one-step error, alarms, the lower-bound curve
and the exact offline least-squares segmentation used as the reference on real series."""

from __future__ import annotations

import numpy as np


def regret(pred, mu) -> np.ndarray:
    """Dynamic regret ``sum_t (mu_hat_t - mu_t)^2`` per run: ``[..., T] -> [...]``."""
    pred, mu = np.asarray(pred, np.float64), np.asarray(mu, np.float64)
    return np.sum((pred - mu) ** 2, axis=-1)


def prefix_regret(pred, mu, ts) -> np.ndarray:
    """Regret of the first ``t`` steps for each ``t`` in ``ts``: ``[..., T] -> [..., len(ts)]``."""
    pred, mu = np.asarray(pred, np.float64), np.asarray(mu, np.float64)
    ts = np.asarray(ts, np.int64)
    if ts.size and (ts.min() < 1 or ts.max() > pred.shape[-1]):
        raise ValueError(f"ts must lie in [1, T={pred.shape[-1]}], got {ts.min()}..{ts.max()}")
    return np.cumsum((pred - mu) ** 2, axis=-1)[..., ts - 1]


def one_step_mse(pred, x, burn_in: int = 5) -> np.ndarray:
    """``1/(T - b) sum_{t > b} (X_t - mu_hat_t)^2`` (the first step has no data: mu_hat_1 is
    the prior, so the burn-in keeps it out)."""
    pred, x = np.asarray(pred, np.float64), np.asarray(x, np.float64)
    if not 0 <= burn_in < x.shape[-1]:
        raise ValueError(f"burn_in must be in [0, T={x.shape[-1]}), got {burn_in!r}")
    return np.mean((x[..., burn_in:] - pred[..., burn_in:]) ** 2, axis=-1)


def lower_bound_curve(S, T, sigma: float = 1.0):
    """The order of the lower bound for any learner, ``sigma^2 (S+1) log(T/(S+1))``."""
    S, T = np.asarray(S, np.float64), np.asarray(T, np.float64)
    return sigma**2 * (S + 1) * np.log(T / (S + 1))


def detection_rate(alarm, after: int) -> float:
    """Fraction of runs with at least one alarm at 1-based times ``t > after``."""
    alarm = np.asarray(alarm, bool)
    return float(np.mean(np.any(alarm[..., after:], axis=-1)))


def alarm_times(alarm) -> np.ndarray:
    """1-based times of the alarms of one series."""
    return np.flatnonzero(np.asarray(alarm, bool)) + 1


def ls_segmentation(x, k: int) -> np.ndarray:
    """Exact least-squares segmentation of ``x`` into ``k + 1`` constant pieces.

    Dynamic programming over the last break, O(k T^2) time and O(k T) memory.

    Returns:
      ``[k]`` sorted 0-based start indices of the pieces 2..k+1 (``x[b:]`` starts a piece).
    """
    x = np.asarray(x, np.float64)
    T = len(x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D series, got shape {x.shape}")
    if not 0 <= int(k) <= T - 1:
        raise ValueError(f"k must be in [0, T-1] = [0, {T - 1}], got {k!r}")
    s1 = np.concatenate([[0.0], np.cumsum(x)])
    s2 = np.concatenate([[0.0], np.cumsum(x * x)])
    i = np.arange(T + 1)[:, None]
    j = np.arange(T + 1)[None, :]
    n = np.maximum(j - i, 1)
    cost = s2[j] - s2[i] - (s1[j] - s1[i]) ** 2 / n  # SSE of x[i:j]
    cost = np.where(j > i, cost, np.inf)
    best = cost[0].copy()  # best[j]: SSE of x[:j] in m + 1 pieces
    back = []
    for _ in range(int(k)):
        tot = best[:, None] + cost  # [i, j]: pieces of x[:i], then x[i:j]
        arg = np.argmin(tot, axis=0)
        best = tot[arg, np.arange(T + 1)]
        back.append(arg)
    breaks, j = [], T
    for arg in reversed(back):
        j = int(arg[j])
        breaks.append(j)
    return np.asarray(sorted(breaks), np.int64)


def segment_means(x, breaks) -> np.ndarray:
    """The piecewise-constant least-squares fit of ``x`` for the given starts ``breaks``."""
    x = np.asarray(x, np.float64)
    edges = [0, *[int(b) for b in breaks], len(x)]
    out = np.empty_like(x)
    for a, b in zip(edges[:-1], edges[1:]):
        out[a:b] = x[a:b].mean()
    return out
