"""Target-space retrieval of support windows: Y-space RBfcst and naive contexts.

Spec §Method "Inference", steps 1-3. A forecast at origin ``L`` with horizon ``H`` uses a
window of length ``M``. The query window covers ``[L - M + H, L + H)``: its first ``M - H``
steps are known history and its last ``H`` target steps are forecast slots (NaN). A support
window with start ``s`` covers ``[s, s + M)`` with ``s + M <= L``, so all of it, including its
last ``H`` steps (its in-context labels), is observed history.

Conventions shared by every function here:

* ``y`` is a 1-D target series of length ``>= L``. Only ``y[:L]`` is ever read (it is sliced
  statically first), so entries at index ``>= L`` (the future, NaN or junk) cannot influence
  any output.
* ``X`` is ``[T, F]`` with ``T >= L + H`` and any ``F >= 0``; future covariates are known, so
  the query window reads ``X`` up to ``L + H``. Covariates never enter the scoring.
* ``L, M, H, K, period`` are static Python ints (jit with ``static_argnames``). Every function
  is pure ``jnp`` and works under ``jax.vmap`` over a batch of equal-length series.
* Padding: when fewer than ``K`` valid supports exist, the missing ones get ``mask=False``,
  ``starts=-1`` and a *copy* of the first chosen valid support (content and similarity), so a
  padded support is finite and does not move min-max statistics; exclude them from the
  mean/std stage with :func:`forecast_slot_mask`. If no valid support exists at all (only
  possible for ``nonoverlap_contexts(..., anchor="official")``), the copy is the window
  ``[0, M)``.

Reference: L. Yang et al., "Baguan-TS", ICML 2026, and the official ``src/utils/rag.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# z-normalisation guard: z(x) = (x - mean) / (std + Z_EPS), the official constant; a constant
# window therefore has z = 0 and 's' similarity 0.
Z_EPS = 1e-8
# Cosine guard: <a, b> / (max(|a|, COS_EPS) * max(|b|, COS_EPS)); an all-zero window scores 0.
COS_EPS = 1e-8
# 's' is divided by max(range over candidates, RANGE_EPS). The official guard is 1e-8, which in
# float32 blows 's' up to ~1e8 when all candidates are equally correlated (a linear trend, or a
# single candidate) and then rounds 'c' and 'l' away. With 1e-4, 's' stays <= 1e4 in magnitude
# (resolution ~1e-3) and, when its spread is below 1e-4, simply stops dominating the ranking.
RANGE_EPS = 1e-4


class Contexts(NamedTuple):
    """Support windows plus the query window (last).

    Attributes:
      feat: ``[K + 1, M, F]`` covariates; the query's covariates are known on all ``M`` steps.
      targ: ``[K + 1, M, 1]`` target; the query's last ``H`` steps are NaN.
      starts: ``[K]`` int32 support starts ``s`` (window ``[s, s + M)``); ``-1`` for padding.
      sims: ``[K]`` float32 :func:`similarities` at the supports' starts (padding: a copy).
      mask: ``[K]`` bool, False for padded supports.
    """

    feat: jax.Array
    targ: jax.Array
    starts: jax.Array
    sims: jax.Array
    mask: jax.Array


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a static Python int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")
    return int(value)


def _validate(L, M, H, K=1, period=1):
    L = _check_int("L", L, 1)
    M = _check_int("M", M, 2)
    H = _check_int("H", H, 1)
    K = _check_int("K", K, 1)
    period = _check_int("period", period, 1)
    if H >= M:
        raise ValueError(f"H must be < M (the query needs known history), got H={H}, M={M}")
    if L < M:
        raise ValueError(
            f"L must be >= M so that at least one support window [s, s+M) fits before the "
            f"origin, got L={L}, M={M}"
        )
    return L, M, H, K, period


def _check_series(y, X, L, H):
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D [T], got shape {y.shape}")
    if y.shape[0] < L:
        raise ValueError(f"y must have length >= L, got len(y)={y.shape[0]}, L={L}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [T, F], got shape {X.shape}")
    if X.shape[0] < L + H:
        raise ValueError(
            f"X must cover the horizon: X.shape[0] >= L + H, got {X.shape[0]} < {L}+{H}"
        )


def _windows(y: jax.Array, L: int, M: int, H: int) -> jax.Array:
    """``[L - M + 2, M - H]``: candidates ``c_s = y[s : s+M-H]`` for ``s = 0..L-M``, then the
    query history ``q = y[L-M+H : L]`` as the last row (it is the window at ``s = L-M+H``)."""
    hist = jnp.asarray(y, jnp.float32)[:L]  # the future never enters
    starts = np.append(np.arange(L - M + 1), L - M + H).astype(np.int32)
    return hist[starts[:, None] + np.arange(M - H, dtype=np.int32)]


def similarity_components(
    y: jax.Array, L: int, M: int, H: int, l_on_znorm: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The three raw-value similarities ('s', 'c', 'l') of every candidate to the query.

    Args:
      y: ``[T]`` target series, ``T >= L``; only ``y[:L]`` is read.
      L, M, H: origin, window length and horizon (static ints).
      l_on_znorm: compute 'l' on z-normalised instead of raw windows.

    Returns:
      ``(s, c, l)``, each ``[L - M + 1]`` float32, indexed by the candidate start ``s``.
      's' = mean_t z(c_s)_t z(q)_t (the Pearson correlation) divided by its range over
      candidates; 'c' = cosine similarity; 'l' = tanh(-||c_s - q||_2).
    """
    L, M, H, _, _ = _validate(L, M, H)
    w = _windows(y, L, M, H)  # [n_cand + 1, M - H], query last
    wc = w - jnp.mean(w, axis=-1, keepdims=True)
    # Population std, as the official z_normalize.
    wz = wc / (jnp.sqrt(jnp.mean(wc * wc, axis=-1, keepdims=True)) + Z_EPS)
    # The official code sums over time instead of averaging; the range division makes the
    # two identical (up to the degenerate-range guard).
    s = jnp.mean(wz[:-1] * wz[-1], axis=-1)
    finite = ~jnp.isnan(s)  # a NaN candidate must not poison the range of the others
    s_range = jnp.max(jnp.where(finite, s, -jnp.inf)) - jnp.min(jnp.where(finite, s, jnp.inf))
    s = s / jnp.maximum(s_range, RANGE_EPS)
    norms = jnp.maximum(jnp.sqrt(jnp.sum(w * w, axis=-1)), COS_EPS)  # [n_cand + 1]
    cos = jnp.sum(w[:-1] * w[-1], axis=-1) / (norms[:-1] * norms[-1])
    a = wz if l_on_znorm else w
    diff = a[:-1] - a[-1]
    l2 = jnp.tanh(-jnp.sqrt(jnp.sum(diff * diff, axis=-1)))
    return s, cos, l2


def similarities(
    y: jax.Array, L: int, M: int, H: int, l_on_znorm: bool = False
) -> jax.Array:
    """RBfcst score of every candidate start (spec Inference step 2, official 'Yscl').

    Candidates are ``s = 0..L-M`` with ``c_s = y[s : s+M-H]``; the query is
    ``q = y[L-M+H : L]``. The score is the mean of the three similarities of
    :func:`similarity_components`. Covariates are not used.

    Args:
      y: ``[T]`` target, ``T >= L``; entries at index ``>= L`` are never read.
      L, M, H: origin, window length (``L >= M``) and horizon (``1 <= H < M``); static.
      l_on_znorm: 'l' on z-normalised values (avoids tanh saturation at large scales).

    Returns:
      ``[L - M + 1]`` float32. A candidate overlapping a NaN in the history scores NaN
      (retrieval ranks it last).
    """
    s, c, l2 = similarity_components(y, L, M, H, l_on_znorm)
    return (s + c + l2) / 3.0


def _assemble(y, X, L, M, H, starts, mask, sims_all) -> Contexts:
    """Gathers supports at ``starts`` ([K] int32, padded entries arbitrary) and the query."""
    fallback = jnp.where(jnp.any(mask), starts[jnp.argmax(mask)], 0)
    src = jnp.where(mask, starts, fallback).astype(jnp.int32)  # always a valid start
    hist = jnp.asarray(y, jnp.float32)[:L]
    Xf = jnp.asarray(X, jnp.float32)
    F = Xf.shape[1]
    sup_t = jax.vmap(lambda s: jax.lax.dynamic_slice(hist, (s,), (M,)))(src)  # [K, M]
    sup_x = jax.vmap(lambda s: jax.lax.dynamic_slice(Xf, (s, 0), (M, F)))(src)  # [K, M, F]
    q_t = jnp.concatenate([hist[L - M + H : L], jnp.full((H,), jnp.nan, jnp.float32)])
    q_x = Xf[L - M + H : L + H]
    feat = jnp.concatenate([sup_x, q_x[None]], axis=0)
    targ = jnp.concatenate([sup_t, q_t[None]], axis=0)[..., None]
    return Contexts(
        feat=feat,
        targ=targ,
        starts=jnp.where(mask, starts, -1).astype(jnp.int32),
        sims=sims_all[src],
        mask=mask,
    )


def rbfcst(
    y: jax.Array,
    X: jax.Array,
    L: int,
    M: int,
    H: int,
    K: int,
    period: int,
    l_on_znorm: bool = False,
) -> Contexts:
    """Y-space RBfcst contexts (spec Inference steps 1-3).

    Scores every candidate with :func:`similarities`, groups candidates by
    ``floor(s / period)``, keeps the best start per group (lowest ``s`` on ties), and takes
    the ``K`` best groups in descending score (lower group first on ties). NaN scores rank
    last. With fewer than ``K`` groups the rest is padded (see module docstring).

    Args:
      y: ``[T]`` target, ``T >= L``; entries at index ``>= L`` are never read.
      X: ``[T', F]`` covariates, ``T' >= L + H``; not used for scoring.
      L, M, H, K, period: static ints with ``L >= M``, ``1 <= H < M``, ``K, period >= 1``.
      l_on_znorm: see :func:`similarities`.

    Returns:
      :class:`Contexts` with supports ordered by decreasing score and the query last.
    """
    L, M, H, K, period = _validate(L, M, H, K, period)
    _check_series(y, X, L, H)
    sims_all = similarities(y, L, M, H, l_on_znorm)
    rank = jnp.where(jnp.isnan(sims_all), -jnp.inf, sims_all)
    n_cand = L - M + 1
    n_groups = (L - M) // period + 1
    pad = n_groups * period - n_cand
    grid = jnp.pad(rank, (0, pad), constant_values=-jnp.inf).reshape(n_groups, period)
    best_val = jnp.max(grid, axis=1)
    best_start = (
        jnp.arange(n_groups, dtype=jnp.int32) * period
        + jnp.argmax(grid, axis=1).astype(jnp.int32)  # first maximum = lowest s
    )
    k_eff = min(K, n_groups)
    _, top = jax.lax.top_k(best_val, k_eff)
    starts = jnp.concatenate(
        [best_start[top], jnp.zeros((K - k_eff,), jnp.int32)]
    )
    mask = jnp.asarray(np.arange(K) < k_eff)
    return _assemble(y, X, L, M, H, starts, mask, sims_all)


def recent_contexts(
    y: jax.Array, X: jax.Array, L: int, M: int, H: int, K: int, period: int
) -> Contexts:
    """The ``K`` most recent candidates, stepping back by ``period``: ``s = L-M-k*period``.

    Supports with ``s < 0`` are masked (padding). Arguments as in :func:`rbfcst`.
    """
    L, M, H, K, period = _validate(L, M, H, K, period)
    _check_series(y, X, L, H)
    s = L - M - period * np.arange(K)
    return _assemble(
        y, X, L, M, H, jnp.asarray(np.maximum(s, 0), jnp.int32), jnp.asarray(s >= 0),
        similarities(y, L, M, H),
    )


def random_contexts(
    key: jax.Array,
    y: jax.Array,
    X: jax.Array,
    L: int,
    M: int,
    H: int,
    K: int,
    period: int,
) -> Contexts:
    """``K`` distinct uniformly random valid starts in ``[0, L-M]`` (random order).

    Args:
      key: typed PRNG key (``jax.random.key``); the same key gives the same starts.
      y, X, L, M, H, K, period: as in :func:`rbfcst` (``period`` is unused, kept so every
        context kind shares one signature). With fewer than ``K`` candidates, the rest is
        padded.
    """
    L, M, H, K, period = _validate(L, M, H, K, period)
    _check_series(y, X, L, H)
    n_cand = L - M + 1
    k_eff = min(K, n_cand)
    perm = jax.random.permutation(key, n_cand).astype(jnp.int32)[:k_eff]
    starts = jnp.concatenate([perm, jnp.zeros((K - k_eff,), jnp.int32)])
    mask = jnp.asarray(np.arange(K) < k_eff)
    return _assemble(y, X, L, M, H, starts, mask, similarities(y, L, M, H))


def nonoverlap_contexts(
    y: jax.Array,
    X: jax.Array,
    L: int,
    M: int,
    H: int,
    K: int,
    period: int,
    anchor: str = "origin",
) -> Contexts:
    """Non-overlapping windows of length ``M``, most recent first (the official 'NA').

    Args:
      y, X, L, M, H, K, period: as in :func:`rbfcst` (``period`` is unused).
      anchor: ``"origin"`` steps back from the origin, ``s = L-M, L-2M, ...`` (the default,
        our shared convention; the first support overlaps the query's history). ``"official"``
        reproduces ``rag.py`` exactly: with ``n = (L+H-M) // M`` it uses
        ``s = (n-1)M, (n-2)M, ..., 0``, i.e. windows tiled from 0 that do not overlap the
        query window ``[L-M+H, L+H)`` (the official code keeps all ``n``; we keep the ``K``
        most recent).

    Supports with ``s < 0`` (or beyond ``n``) are masked.
    """
    L, M, H, K, period = _validate(L, M, H, K, period)
    _check_series(y, X, L, H)
    k = np.arange(K)
    if anchor == "origin":
        s = L - M * (k + 1)
    elif anchor == "official":
        s = ((L + H - M) // M - 1 - k) * M
    else:
        raise ValueError(f"anchor must be 'origin' or 'official', got anchor={anchor!r}")
    return _assemble(
        y, X, L, M, H, jnp.asarray(np.maximum(s, 0), jnp.int32), jnp.asarray(s >= 0),
        similarities(y, L, M, H),
    )


def forecast_slot_mask(contexts: Contexts, H: int) -> jax.Array:
    """Exclusion mask for :func:`icml26_jax.baguan_ts.normalize.fit`.

    Args:
      contexts: :class:`Contexts`, optionally with leading batch axes.
      H: horizon (static int).

    Returns:
      ``[..., K + 1, M]`` bool, True on the query's last ``H`` steps (the forecast slots) and
      on every step of a padded support.
    """
    n, m = contexts.targ.shape[-3], contexts.targ.shape[-2]
    H = _check_int("H", H, 1)
    query_slots = (np.arange(n) == n - 1)[:, None] & (np.arange(m) >= m - H)[None, :]
    mask = contexts.mask
    padded = jnp.concatenate([~mask, jnp.zeros(mask.shape[:-1] + (1,), bool)], axis=-1)
    return padded[..., None] | jnp.asarray(query_slots)  # [..., K + 1, M]
