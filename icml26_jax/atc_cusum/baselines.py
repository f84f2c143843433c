"""Baselines and peers for online mean tracking (spec §Baselines and peers).

JAX learners (pure, causal, one series ``x [T] -> pred [T]``; vmap over runs):
``sliding_window``, ``discounted_mean``, ``fixed_conf_cusum`` (ATC's scan with the constant
single-change delta-PAC threshold), ``page_cusum`` (two-sided Page CUSUM against an estimated
reference: the confounded classical scheme) and ``oracle_segment_mean``.

Peers from their own libraries (NumPy loops; imported lazily, they are an optional extra):
``adwin_predict`` (``river.drift.ADWIN``) and ``focus_predict`` (``changepoint_online.Focus``
inside a restart-and-refeed learner with ATC's anytime threshold).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.atc_cusum import atc

PAGE_REFS = ("running", "frozen")


class PageOutput(NamedTuple):
    """``pred [T]`` and ``alarm [T]`` of :func:`page_cusum`."""

    pred: jax.Array
    alarm: jax.Array


def _check_1d(x, name="x"):
    if x.ndim != 1:
        raise ValueError(f"{name} must be a 1-D series [T] (vmap over runs), got shape {x.shape}")


def sliding_window(x: jax.Array, w: int, prior: float = 0.0) -> jax.Array:
    """Mean of the last ``w`` observations (fewer at the start); ``prior`` at t = 1.

    ``pred_t = (P_{t-1} - P_{max(0, t-1-w)}) / min(w, t-1)`` from prefix sums (causal).
    """
    _check_1d(x)
    if isinstance(w, int) and w < 1:  # a traced w (a vmapped grid) is the caller's job
        raise ValueError(f"w must be >= 1, got {w!r}")
    T = x.shape[0]
    P = jnp.concatenate([jnp.zeros((1,), x.dtype), jnp.cumsum(x)])
    t = jnp.arange(1, T + 1, dtype=jnp.int32)
    lo = jnp.maximum(t - 1 - jnp.asarray(w, jnp.int32), 0)
    n = (t - 1 - lo).astype(x.dtype)
    return jnp.where(t > 1, (P[t - 1] - P[lo]) / jnp.maximum(n, 1), jnp.asarray(prior, x.dtype))


def discounted_mean(x: jax.Array, gamma, prior: float = 0.0) -> jax.Array:
    """``sum_k gamma^k X_{t-1-k} / sum_k gamma^k`` (a ``lax.scan``); ``prior`` at t = 1."""
    _check_1d(x)
    if isinstance(gamma, (int, float)) and not 0 < gamma < 1:
        raise ValueError(f"gamma must be in (0, 1), got {gamma!r}")
    gamma = jnp.asarray(gamma, x.dtype)

    def step(carry, x_t):
        num, den = carry
        pred = jnp.where(den > 0, num / jnp.where(den > 0, den, 1), prior)
        return (gamma * num + x_t, gamma * den + 1), pred

    z = jnp.zeros((), x.dtype)
    return jax.lax.scan(step, (z, z), x)[1]


def fixed_conf_threshold(delta: float) -> float:
    """``2 log(1/delta)``: the single-change delta-PAC CUSUM threshold (9.21 at 0.01)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return 2.0 * math.log(1.0 / delta)


def fixed_conf_cusum(x: jax.Array, sigma, delta: float = 0.01, *, restart: str = "argmax",
                     scan: str = "geom", ratio: float = 1.25, prior: float = 0.0) -> atc.ATCOutput:
    """ATC's scan and restart with a constant threshold ``2 log(1/delta)``: the classical
    single-change detector applied repeatedly (its false alarms grow linearly in T)."""
    atc.validate_params(atc.ATCParams(sigma, 1.0, restart, scan, ratio, prior))
    beta = fixed_conf_threshold(delta)
    return atc.tracking_cusum(x, sigma=sigma, threshold=lambda t: jnp.asarray(beta, x.dtype),
                              restart=restart, scan=scan, ratio=ratio, prior=prior)


def page_cusum(x: jax.Array, sigma, k: float = 0.25, h: float = 8.0, ref: str = "running",
               M: int = 50, prior: float = 0.0) -> PageOutput:
    """Two-sided Page CUSUM against an estimated reference, restarted at every alarm.

    Reference m: the running mean since the last restart (``ref="running"``) or the mean of
    the first ``M`` samples after it (``ref="frozen"``, CUSUM-UCB style; the running mean
    until M samples). ``z_t = (X_t - m_{t-1})/sigma``, ``S+ = max(0, S+ + z - k)``,
    ``S- = max(0, S- - z - k)``, no update on the first sample after a restart; alarm when
    ``max(S+, S-) > h``: the statistics, the reference and the segment restart after t.
    Prediction: the mean since the restart (the last observation right after one).
    """
    _check_1d(x)
    if ref not in PAGE_REFS:
        raise ValueError(f"ref must be one of {PAGE_REFS}, got {ref!r}")
    if isinstance(sigma, (int, float)) and not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    if not k >= 0 or not h > 0:
        raise ValueError(f"need k >= 0 and h > 0, got k={k!r}, h={h!r}")
    if int(M) < 1:
        raise ValueError(f"M must be >= 1, got {M!r}")
    dt = x.dtype
    z0 = jnp.zeros((), dt)

    def step(carry, x_t):
        n, total, m, sp, sm, last = carry
        pred = jnp.where(n > 0, total / jnp.maximum(n, 1).astype(dt), last)
        z = (x_t - m) / sigma
        upd = n > 0
        sp = jnp.where(upd, jnp.maximum(0.0, sp + z - k), sp)
        sm = jnp.where(upd, jnp.maximum(0.0, sm - z - k), sm)
        n, total = n + 1, total + x_t
        m = total / n.astype(dt) if ref == "running" else jnp.where(n <= M, total / n.astype(dt), m)
        alarm = jnp.maximum(sp, sm) > h
        keep = lambda v: jnp.where(alarm, jnp.zeros_like(v), v)  # noqa: E731
        return (keep(n), keep(total), keep(m), keep(sp), keep(sm), x_t), (pred, alarm)

    init = (jnp.int32(0), z0, z0, z0, z0, jnp.asarray(prior, dt))
    pred, alarm = jax.lax.scan(step, init, x)[1]
    return PageOutput(pred, alarm)


def oracle_segment_mean(x: jax.Array, mu: jax.Array, prior: float = 0.0) -> jax.Array:
    """Knows the change times (where ``mu`` changes): predicts the mean of the current true
    segment so far; at a segment's first step, the previous segment's mean. Reported only."""
    _check_1d(x)
    if mu.shape != x.shape:
        raise ValueError(f"mu must have the shape of x {x.shape}, got {mu.shape}")
    change = jnp.concatenate([jnp.zeros((1,), bool), mu[1:] != mu[:-1]])
    dt = x.dtype

    def step(carry, inp):
        n, total = carry
        x_t, ch = inp
        # At a change the running sums still hold the previous segment: predict its mean.
        pred = jnp.where(n > 0, total / jnp.maximum(n, 1).astype(dt), jnp.asarray(prior, dt))
        n = jnp.where(ch, 0, n)
        total = jnp.where(ch, 0.0, total)
        return (n + 1, total + x_t), pred

    init = (jnp.int32(0), jnp.zeros((), dt))
    return jax.lax.scan(step, init, (x, change))[1]


# ---------------------------------------------------------------- peers (NumPy loops)


def _require(module: str, extra: str = "atc_cusum_peers"):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed; pip install 'icml26_jax[{extra}]'") from e


def peers_available() -> dict[str, str | None]:
    """``{"adwin": None | reason, "focus": None | reason}``: None when the peer can run."""
    out = {}
    for name, module in (("adwin", "river.drift"), ("focus", "changepoint_online")):
        try:
            _require(module)
            out[name] = None
        except ImportError as e:
            out[name] = str(e)
    return out


def adwin_predict(x: np.ndarray, prior: float = 0.0, **adwin_kwargs) -> np.ndarray:
    """``river.drift.ADWIN`` (defaults, delta = 0.002): prediction = ``.estimation`` before
    ``.update(x_t)``; ``prior`` before the first observation."""
    drift = _require("river.drift")
    x = np.asarray(x, np.float64)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D series, got shape {x.shape}")
    det = drift.ADWIN(**adwin_kwargs)
    pred = np.empty_like(x)
    for i, v in enumerate(x):
        pred[i] = det.estimation if i > 0 else prior
        det.update(float(v))
    return pred


def focus_predict(x: np.ndarray, sigma: float, c: float = 3.0,
                  prior: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """FOCuS (exact GLR scan, O(log t) per step) as an ATC-style learner.

    ``Focus(Gaussian(loc=None))`` runs on ``X/sigma`` since the last restart; its statistic is
    on the log-likelihood-ratio scale, ``1/2 max_s G_t(s)``, so the alarm rule is
    ``statistic > (c/2) log t``. On an alarm the learner restarts at FOCuS's changepoint and
    re-feeds the post-change samples; it predicts the segment mean (the last observation
    right after a restart with no post-change samples).

    Returns:
      ``(pred [T], alarm [T] bool)``.
    """
    co = _require("changepoint_online")
    x = np.asarray(x, np.float64)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D series, got shape {x.shape}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    T = len(x)
    pred, alarm = np.empty(T), np.zeros(T, bool)
    det = co.Focus(co.Gaussian(loc=None))
    r, total = 0, 0.0  # segment x[r:t], its sum
    for t in range(1, T + 1):
        n = t - 1 - r
        pred[t - 1] = total / n if n > 0 else (x[t - 2] if t > 1 else prior)
        det.update(x[t - 1] / sigma)
        total += x[t - 1]
        if det.statistic() > 0.5 * c * math.log(t):
            alarm[t - 1] = True
            r += int(det.changepoint()["changepoint"])
            det = co.Focus(co.Gaussian(loc=None))
            for v in x[r:t]:
                det.update(v / sigma)
            total = float(np.sum(x[r:t]))
    return pred, alarm
