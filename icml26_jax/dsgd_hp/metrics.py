"""High-probability statistics over independent runs, in float64 NumPy.

HP claims are about quantiles ``q_{1-delta}`` of a metric over R independent runs (never the
mean): how they scale with n and t (log–log slopes with bootstrap CIs), how they grow with
``log(1/delta)`` (light tails: linearly), and when a graph catches up with centralized SGD.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TailFit(NamedTuple):
    """r2 of the ``q_{1-delta}`` vs ``log(1/delta)`` line; ``q_0.999 / q_0.5``; the log–log
    slope ``d log q / d log(1/delta)`` (about 1/alpha for a tail ``P(X > x) ~ x^-alpha``,
    small for light tails)."""

    r2: float
    ratio_999_50: float
    loglog_slope: float


def quantiles(samples, probs):
    """Quantiles over the leading (runs) axis: [R, ...] -> [len(probs), ...] (or [...])."""
    return np.quantile(np.asarray(samples, dtype=np.float64), probs, axis=0)


def _lstsq_slope(x, Y):
    """Least-squares slopes of each row of Y [B, M] against x [M]."""
    xc = x - x.mean()
    return (Y - Y.mean(-1, keepdims=True)) @ xc / (xc @ xc)


def slope_ci(xs, samples, prob: float, n_boot: int = 1000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
    """Slope of ``log q_prob(samples[m])`` against ``log xs[m]`` with a bootstrap CI.

    Args:
      xs: [M] positive abscissae (n or t).
      samples: [M, R] per-point samples over R runs (paired or independent across m).
      prob: quantile level, e.g. 0.9.
      n_boot: bootstrap resamples of the runs (the same run indices for every m).
      seed: bootstrap seed.

    Returns:
      (slope, lo, hi).
    """
    xs = np.log(np.asarray(xs, dtype=np.float64))
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[0] != xs.shape[0] or xs.shape[0] < 2:
        raise ValueError(f"slope_ci needs samples [M, R] with M = len(xs) >= 2, got "
                         f"{samples.shape} for {xs.shape[0]} abscissae")
    slope = float(_lstsq_slope(xs, np.log(np.quantile(samples, prob, axis=1))[None])[0])
    idx = np.random.default_rng(seed).integers(0, samples.shape[1], (n_boot, samples.shape[1]))
    q = np.quantile(samples[:, idx], prob, axis=2)  # [M, B]
    boot = _lstsq_slope(xs, np.log(q).T)
    alpha = (1.0 - level) / 2
    return slope, float(np.quantile(boot, alpha)), float(np.quantile(boot, 1 - alpha))


def tail_fit(samples, deltas) -> TailFit:
    """How ``q_{1-delta}`` grows with ``log(1/delta)`` over R samples.

    Light (sub-exponential) tails give a straight line (r2 near 1) and a small
    ``q_0.999 / q_0.5``; heavy tails bend upwards.
    """
    samples = np.asarray(samples, dtype=np.float64)
    deltas = np.asarray(deltas, dtype=np.float64)
    # At least 8 runs beyond the most extreme quantile (R = 8192 for q_0.999, as the spec's
    # tails sweep uses); fewer would make that quantile an order statistic of noise.
    if samples.ndim != 1 or samples.size < 8 / deltas.min():
        raise ValueError(f"tail_fit needs R >= 8 / min(delta) = {8 / deltas.min():.0f} runs, "
                         f"got {samples.size}")
    q = np.quantile(samples, 1.0 - deltas)
    x = np.log(1.0 / deltas)
    slope = _lstsq_slope(x, q[None])[0]
    resid = q - (q.mean() + slope * (x - x.mean()))
    r2 = 1.0 - float(resid @ resid) / float(((q - q.mean()) ** 2).sum())
    loglog = float(_lstsq_slope(x, np.log(q)[None])[0])
    ratio = float(np.quantile(samples, 0.999) / np.quantile(samples, 0.5))
    return TailFit(float(r2), ratio, loglog)


def transient_time(ratio, ts, tol: float = 1.25) -> tuple[float, bool]:
    """First checkpoint with ``ratio <= tol``; ``(2 * ts[-1], True)`` (censored) if none."""
    ratio, ts = np.asarray(ratio), np.asarray(ts)
    hit = np.flatnonzero(ratio <= tol)
    if hit.size == 0:
        return float(2 * ts[-1]), True
    return float(ts[hit[0]]), False
