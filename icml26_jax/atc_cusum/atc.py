"""Anytime Tracking CUSUM (ATC): online mean tracking under multiple change points.

Observations ``X_t = mu_t + eps_t`` (t = 1, 2, ...), ``eps_t`` sigma-sub-Gaussian with known
sigma, ``mu_t`` piecewise constant with S unknown changes. Before seeing ``X_t`` the learner
outputs ``mu_hat_t`` from ``X_1..X_{t-1}``; dynamic regret ``R_T = sum_t (mu_hat_t - mu_t)^2``.

ATC [R: reconstructed from the abstract, consistent with every stated property] keeps a
restart index r (the current segment is ``X_{r+1..t}``) and prefix sums ``P_t``:

1. predict the segment mean ``mu_hat_t = (P_{t-1} - P_r) / (t - 1 - r)``; after a restart at
   ``t - 1`` (empty segment) the last observation; ``mu_hat_1 = prior``;
2. after ``X_t``, the Gaussian GLR scan over split points ``s`` in ``C_t`` within ``(r, t)``::

       G_t = max_s (s - r)(t - s)/(t - r) * (mean(X_{r+1..s}) - mean(X_{s+1..t}))^2 / sigma^2

   (each term is chi^2_1 without a change); ``scan="full"`` uses every s, ``scan="geom"``
   the split points at geometric distances ``k_j = ceil(ratio^j)`` from both ends;
3. alarm when ``G_t > beta_t = c log t`` (anytime: no horizon anywhere); restart at the
   maximising split (``restart="argmax"``, keeps the post-change samples) or at t. Shifts
   whose evidence stays below ``c log t`` are ignored on purpose (selective detection).

Everything here is a pure function of one series ``x [T]``; callers ``jax.vmap`` over runs.
Prefix sums need float64 for long series: enable ``jax_enable_x64`` in the entry script.

References:
  Gafni, Iyengar, Zeevi, "The Cost of Learning under Multiple Change Points", ICML 2026
  (arXiv:2602.11406).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

RESTARTS = ("argmax", "t")
SCANS = ("geom", "full")
# Streaming state keeps the r + k_j prefix sums for offsets up to this length (int32 time).
_MAX_OFFSET = 2**31 - 1


class ATCParams(NamedTuple):
    """Hyper-parameters of ATC; hashable, so pass them as a static argument under ``jit``.

    There is deliberately no horizon field: the threshold ``c log t`` needs no T.

    Attributes:
      sigma: the noise scale (known, or estimated by ``envs.sigma_hat`` on real series).
      c: threshold constant; 3 with known sigma, 4 with estimated sigma [R].
      restart: ``"argmax"`` (new segment after the maximising split) or ``"t"``.
      scan: ``"geom"`` (geometric candidate grid, ~80 splits at T = 16000) or ``"full"``.
      ratio: growth factor of the geometric offsets ``k_j = ceil(ratio^j)``.
      prior: the prediction before any data, ``mu_hat_1``.
    """

    sigma: float
    c: float = 3.0
    restart: str = "argmax"
    scan: str = "geom"
    ratio: float = 1.25
    prior: float = 0.0


class ATCOutput(NamedTuple):
    """Per-step outputs of :func:`atc_predict` (each ``[T]``).

    Attributes:
      pred: ``mu_hat_t``, computed from ``X_1..X_{t-1}`` only.
      alarm: whether ``G_t > beta_t`` after observing ``X_t``.
      seg_start: r after step t: the 0-based index into ``x`` of the first sample of the
        current segment (the segment is ``x[seg_start : t]``).
    """

    pred: jax.Array
    alarm: jax.Array
    seg_start: jax.Array


class ATCState(NamedTuple):
    """Streaming state of :func:`atc_update` (one series).

    Attributes:
      t: number of observations seen.
      r: restart index (segment = ``X_{r+1..t}``).
      p_t: ``P_t``.
      ring: ``[capacity]`` ring buffer, ``ring[i % capacity] = P_i`` for the last indices.
      p_r: ``P_r``.
      p_rk: ``[K]`` ``P_{r + k_j}`` once ``t >= r + k_j``.
      p_rk_ok: ``[K]`` whether ``p_rk`` holds a value.
    """

    t: jax.Array
    r: jax.Array
    p_t: jax.Array
    ring: jax.Array
    p_r: jax.Array
    p_rk: jax.Array
    p_rk_ok: jax.Array


def validate_params(params: ATCParams) -> None:
    """Raises ``ValueError`` naming the field for an invalid :class:`ATCParams`."""
    if not isinstance(params, ATCParams):
        raise ValueError(f"params must be ATCParams, got {type(params).__name__}")
    if isinstance(params.sigma, (int, float)) and not params.sigma > 0:
        raise ValueError(f"sigma must be > 0, got {params.sigma!r}")
    if isinstance(params.c, (int, float)) and not params.c > 0:
        raise ValueError(f"c must be > 0, got {params.c!r}")
    if params.restart not in RESTARTS:
        raise ValueError(f"restart must be one of {RESTARTS}, got {params.restart!r}")
    if params.scan not in SCANS:
        raise ValueError(f"scan must be one of {SCANS}, got {params.scan!r}")
    if not params.ratio > 1:
        raise ValueError(f"ratio must be > 1, got {params.ratio!r}")


def geom_offsets(max_len: int, ratio: float = 1.25) -> np.ndarray:
    """The distinct offsets ``k_j = ceil(ratio^j) <= max_len``, j >= 0, ascending (int64).

    Args:
      max_len: the largest offset kept (a series length).
      ratio: growth factor > 1.
    """
    if not ratio > 1:
        raise ValueError(f"ratio must be > 1, got {ratio!r}")
    if max_len < 1:
        return np.zeros((0,), np.int64)
    out, j = [], 0
    while True:
        k = math.ceil(ratio**j)
        if k > max_len:
            return np.asarray(sorted(set(out)), np.int64)
        out.append(k)
        j += 1


def _glr(p_s, p_r, p_t, s, r, t, sigma):
    """``(s - r)(t - s)/(t - r) (mean_left - mean_right)^2 / sigma^2`` (any broadcast)."""
    n1 = (s - r).astype(p_t.dtype)
    n2 = (t - s).astype(p_t.dtype)
    m1 = (p_s - p_r) / jnp.maximum(n1, 1)
    m2 = (p_t - p_s) / jnp.maximum(n2, 1)
    return n1 * n2 / (t - r).astype(p_t.dtype) * (m1 - m2) ** 2 / sigma**2


def tracking_cusum(x: jax.Array, *, sigma, threshold, restart: str = "argmax",
                   scan: str = "geom", ratio: float = 1.25, prior: float = 0.0) -> ATCOutput:
    """The detect-and-restart segment-mean learner shared by ATC and fixed-confidence CUSUM.

    One ``lax.scan`` over t; the carry holds r and the last observation; the prefix sums are
    precomputed and read only at indices <= t. Candidates outside ``(r, t)`` are clipped to
    valid indices and masked with -inf (an empty side would give 0/0 = NaN, and
    ``NaN > beta`` is False: a change would be missed silently).

    Args:
      x: ``[T]`` observations.
      sigma: noise scale.
      threshold: callable ``t (int array, 1-based) -> beta_t``.
      restart, scan, ratio, prior: as in :class:`ATCParams`.

    Returns:
      :class:`ATCOutput`.
    """
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D series [T] (vmap over runs), got shape {x.shape}")
    T = x.shape[0]
    P = jnp.concatenate([jnp.zeros((1,), x.dtype), jnp.cumsum(x)])  # [T + 1], P[i] = X_1..X_i
    if scan == "full":
        cand = lambda r, t: jnp.arange(1, max(T, 2), dtype=jnp.int32)  # noqa: E731  masked to (r, t)
    else:
        k = jnp.asarray(geom_offsets(T, ratio), jnp.int32)
        cand = lambda r, t: jnp.concatenate([t - k, r + k])  # noqa: E731
    prior = jnp.asarray(prior, x.dtype)

    def step(carry, inp):
        r, last = carry
        t, x_t = inp
        n = t - 1 - r
        pred = jnp.where(n > 0, (P[t - 1] - P[r]) / jnp.maximum(n, 1).astype(x.dtype), last)
        s = cand(r, t)
        valid = (s > r) & (s < t)
        s = jnp.clip(s, 0, T)
        g = jnp.where(valid, _glr(P[s], P[r], P[t], s, r, t, sigma), -jnp.inf)
        j = jnp.argmax(g)
        alarm = g[j] > threshold(t)
        new_r = jnp.where(alarm, s[j] if restart == "argmax" else t, r)
        return (new_r, x_t), (pred, alarm, new_r)

    ts = jnp.arange(1, T + 1, dtype=jnp.int32)
    _, (pred, alarm, seg) = jax.lax.scan(step, (jnp.int32(0), prior), (ts, x))
    return ATCOutput(pred, alarm, seg.astype(jnp.int32))


def atc_threshold(c):
    """``beta_t = c log t`` (the anytime threshold; no horizon)."""
    return lambda t: c * jnp.log(t.astype(jnp.result_type(float)))


def atc_predict(params: ATCParams, x: jax.Array) -> ATCOutput:
    """Runs ATC over one series (steps 1-3 of the module docstring).

    Args:
      params: :class:`ATCParams` (static under ``jit``).
      x: ``[T]`` observations; vmap over runs.

    Returns:
      :class:`ATCOutput` with ``pred[t-1] = mu_hat_t`` (depends on ``x[:t-1]`` only).
    """
    validate_params(params)
    return tracking_cusum(x, sigma=params.sigma, threshold=atc_threshold(params.c),
                          restart=params.restart, scan=params.scan, ratio=params.ratio,
                          prior=params.prior)


def atc_init(params: ATCParams, capacity: int = 65536, dtype=None) -> ATCState:
    """The streaming state before any observation (``mu_hat_1 = params.prior``).

    Args:
      params: :class:`ATCParams`.
      capacity: ring-buffer length; the ``t - k_j`` (and, for ``scan="full"``, all)
        candidates older than ``capacity`` steps are dropped, the ``r + k_j`` ones are kept.
      dtype: float dtype of the prefix sums (default: the JAX default float).
    """
    validate_params(params)
    if capacity < 2:
        raise ValueError(f"capacity must be >= 2, got {capacity!r}")
    dtype = dtype or jnp.result_type(float)
    K = len(geom_offsets(_MAX_OFFSET, params.ratio))
    z = jnp.zeros((), dtype)
    return ATCState(t=jnp.int32(0), r=jnp.int32(0), p_t=z, ring=jnp.zeros((capacity,), dtype),
                    p_r=z, p_rk=jnp.zeros((K,), dtype), p_rk_ok=jnp.zeros((K,), bool))


def atc_update(params: ATCParams, state: ATCState, x_t) -> tuple[ATCState, jax.Array, jax.Array]:
    """Feeds one observation; returns ``(state, mu_hat_{t+1}, alarm_t)``. O(K) per step for
    ``scan="geom"`` (O(capacity) for ``"full"``), memory O(capacity)."""
    cap = state.ring.shape[0]
    k = jnp.asarray(geom_offsets(_MAX_OFFSET, params.ratio), jnp.int32)
    t = state.t + 1
    r = state.r
    p_t = state.p_t + x_t
    ring = state.ring.at[t % cap].set(p_t)
    fill = r + k == t
    p_rk = jnp.where(fill, p_t, state.p_rk)
    ok = state.p_rk_ok | fill

    if params.scan == "full":
        s = t - jnp.arange(1, cap, dtype=jnp.int32)
        valid = s > r
        p_s = ring[s % cap]
    else:
        s1, s2 = t - k, r + k
        v1 = (s1 > r) & (k < cap)
        v2 = (s2 < t) & ok
        s = jnp.concatenate([s1, s2])
        valid = jnp.concatenate([v1, v2]) & (s > r) & (s < t)
        p_s = jnp.concatenate([ring[s1 % cap], p_rk])
    g = jnp.where(valid, _glr(p_s, state.p_r, p_t, s, r, t, params.sigma), -jnp.inf)
    j = jnp.argmax(g)
    alarm = g[j] > atc_threshold(params.c)(t)

    if params.restart == "argmax":
        new_r, new_p_r = s[j], p_s[j]
    else:
        new_r, new_p_r = t, p_t
    # After a restart the r + k_j sums are re-read from the ring where it still holds them.
    pos = new_r + k
    in_ring = (pos <= t) & (t - pos < cap)
    re_rk = jnp.where(in_ring, ring[pos % cap], 0.0)
    p_rk = jnp.where(alarm, re_rk, p_rk)
    ok = jnp.where(alarm, in_ring, ok)
    r = jnp.where(alarm, new_r, r)
    p_r = jnp.where(alarm, new_p_r, state.p_r)

    n = t - r
    pred = jnp.where(n > 0, (p_t - p_r) / jnp.maximum(n, 1).astype(p_t.dtype), x_t)
    return ATCState(t, r, p_t, ring, p_r, p_rk, ok), pred, alarm


def atc_reference(params: ATCParams, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plain NumPy float64 ATC (a Python loop over t, the candidate set built explicitly as
    a set union): the test oracle of :func:`atc_predict` and :func:`atc_update`.

    Returns:
      ``(pred [T], alarm [T] bool, seg_start [T])`` as in :class:`ATCOutput`.
    """
    validate_params(params)
    x = np.asarray(x, np.float64)
    T = len(x)
    P = np.concatenate([[0.0], np.cumsum(x)])
    ks = geom_offsets(T, params.ratio)
    pred, alarm, seg = np.zeros(T), np.zeros(T, bool), np.zeros(T, np.int64)
    r, last = 0, float(params.prior)
    for t in range(1, T + 1):
        pred[t - 1] = (P[t - 1] - P[r]) / (t - 1 - r) if t - 1 > r else last
        if params.scan == "full":
            cands = np.arange(r + 1, t)
        else:
            cands = np.union1d(t - ks, r + ks)
            cands = cands[(cands > r) & (cands < t)]
        best, best_s = -math.inf, None
        if len(cands):  # every split's GLR in float64; the first maximiser wins
            m1 = (P[cands] - P[r]) / (cands - r)
            m2 = (P[t] - P[cands]) / (t - cands)
            g = (cands - r) * (t - cands) / (t - r) * (m1 - m2) ** 2 / params.sigma**2
            i = int(np.argmax(g))
            best, best_s = float(g[i]), int(cands[i])
        if best > params.c * math.log(t):
            alarm[t - 1] = True
            r = best_s if params.restart == "argmax" else t
        seg[t - 1] = r
        last = x[t - 1]
    return pred, alarm, seg


def atc_numpy(params: ATCParams, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ATC in NumPy, a Python loop over t vectorised over runs and candidates (float64).

    The benchmark's CPU baseline for the jitted ``lax.scan``; same semantics as
    :func:`atc_predict`.

    Args:
      params: :class:`ATCParams` (``scan="geom"`` only).
      x: ``[R, T]`` observations.

    Returns:
      ``(pred [R, T], alarm [R, T] bool)``.
    """
    validate_params(params)
    if params.scan != "geom":
        raise ValueError(f"atc_numpy implements scan='geom' only, got {params.scan!r}")
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"x must be [R, T], got shape {x.shape}")
    R, T = x.shape
    P = np.concatenate([np.zeros((R, 1)), np.cumsum(x, axis=1)], axis=1)
    k = geom_offsets(T, params.ratio)
    rows = np.arange(R)[:, None]
    pred, alarm = np.empty((R, T)), np.zeros((R, T), bool)
    r = np.zeros(R, np.int64)
    last = np.full(R, float(params.prior))
    for t in range(1, T + 1):
        n = t - 1 - r
        pred[:, t - 1] = np.where(n > 0, (P[:, t - 1] - P[rows[:, 0], r]) / np.maximum(n, 1),
                                  last)
        s = np.concatenate([np.broadcast_to(t - k, (R, len(k))), r[:, None] + k], axis=1)
        valid = (s > r[:, None]) & (s < t)
        s = np.clip(s, 0, T)
        p_r = P[rows[:, 0], r][:, None]
        n1, n2 = s - r[:, None], t - s
        with np.errstate(divide="ignore", invalid="ignore"):
            g = (n1 * n2 / (t - r[:, None]) * ((P[rows, s] - p_r) / n1
                                               - (P[:, t][:, None] - P[rows, s]) / n2) ** 2
                 / params.sigma**2)
        g = np.where(valid, g, -np.inf)
        j = np.argmax(g, axis=1)
        a = g[rows[:, 0], j] > params.c * math.log(t)
        alarm[:, t - 1] = a
        r = np.where(a, s[rows[:, 0], j] if params.restart == "argmax" else t, r)
        last = x[:, t - 1]
    return pred, alarm
