"""Metrics of TRACE (numpy float64): latent MCC, trajectory correlation and the W(t)
metrics, including the corrected ``w_r2`` and the paper's flawed full-W correlation.

Shapes: ``alpha`` arrays are ``[T, K_a]`` with columns ordered like the active list;
``W(t) = W_lag1 + sum_k alpha_k(t) dW_{active[k]}`` is ``[T, d, d]``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import rankdata

from icml26_jax.trace.data import MechParams

_CORR_METHODS = ("pearson", "spearman")


def _is_constant(v: np.ndarray) -> bool:
    """True when a series has (numerically) zero spread, so its correlation is undefined."""
    scale = max(1.0, float(np.max(np.abs(v)))) if v.size else 1.0
    return bool(np.ptp(v) <= 1e-12 * scale)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two 1-D series; 0 when either has zero variance."""
    if _is_constant(a) or _is_constant(b):
        return 0.0
    a = a - a.mean()
    b = b - b.mean()
    return float(np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b)))


def _check_pair(pred, true, name_pred: str = "pred", name_true: str = "true"):
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    if pred.shape != true.shape or pred.ndim != 2:
        raise ValueError(f"{name_pred} and {name_true} must both be [T, K]; got {pred.shape} "
                         f"and {true.shape}")
    return pred, true


def mcc(z, y, method: str = "pearson") -> float:
    """Mean correlation coefficient after Hungarian matching (Hyvarinen & Morioka).

    ``|corr(z_i, y_j)|`` over all pairs, the assignment maximising the total, then the mean
    over matched pairs. Pearson (the paper's setting) is 1 for permuted affine maps of y;
    Spearman (ranks, as the release also offers) is 1 for any permuted strictly monotone map.

    Args:
      z: ``[N, d_z]`` estimates (e.g. encoder means).
      y: ``[N, d_y]`` true latents.
      method: ``'pearson'`` or ``'spearman'``.

    Returns:
      MCC in [0, 1] (a zero-variance column correlates 0 with everything).
    """
    if method not in _CORR_METHODS:
        raise ValueError(f"method must be one of {_CORR_METHODS}, got {method!r}")
    z, y = np.asarray(z, np.float64), np.asarray(y, np.float64)
    if z.ndim != 2 or y.ndim != 2 or z.shape[0] != y.shape[0]:
        raise ValueError(f"z and y must be [N, d] with the same N; got {z.shape} and {y.shape}")
    if method == "spearman":
        z, y = rankdata(z, axis=0), rankdata(y, axis=0)
    zc, yc = z - z.mean(0), y - y.mean(0)
    zn, yn = np.sqrt((zc * zc).sum(0)), np.sqrt((yc * yc).sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (zc.T @ yc) / np.outer(zn, yn)  # [d_z, d_y]
    corr = np.abs(np.nan_to_num(corr, nan=0.0, posinf=0.0, neginf=0.0))
    rows, cols = linear_sum_assignment(-corr)
    return float(corr[rows, cols].mean())


def traj_corr(pred, true) -> float:
    """Trajectory correlation: Pearson over t per column, averaged over the K columns.

    A column where ``pred`` or ``true`` has zero variance scores 0 (a constant estimate
    carries no trajectory).

    Args:
      pred: ``[T, K]`` estimated alpha.
      true: ``[T, K]`` true alpha.

    Returns:
      The mean per-column correlation.
    """
    pred, true = _check_pair(pred, true)
    return float(np.mean([_pearson(pred[:, k], true[:, k]) for k in range(pred.shape[1])]))


def w_of(alpha, mp: MechParams, active: Sequence[int]) -> np.ndarray:
    """Mixed lag-1 transition ``W(t) = W_lag1 + sum_k alpha_k(t) dW_{active[k]}``.

    Args:
      alpha: ``[T, K_a]`` weights, columns ordered like ``active``.
      mp: mechanism parameters.
      active: the ``K_a`` active domain indices.

    Returns:
      ``[T, d, d]``.
    """
    alpha = np.asarray(alpha, np.float64)
    active = np.asarray(active, np.int64)
    if alpha.ndim != 2 or alpha.shape[1] != active.size:
        raise ValueError(f"alpha must be [T, len(active)={active.size}], got {alpha.shape}")
    return mp.w_lag1[None] + np.tensordot(alpha, mp.delta_w[active], axes=1)


def w_r2(alpha_hat, alpha, mp: MechParams, active: Sequence[int]) -> float:
    """Corrected W metric: ``1 - sum_t ||W_hat(t) - W(t)||_F^2 / sum_t ||W(t) - W_bar||_F^2``.

    ``W_bar`` is the time mean of the true W(t). Any constant guess scores <= 0 (the mean
    minimises the sum of squares); for distinct single-edge dW_k it equals the pooled R^2 of
    alpha. Scale-sensitive: compressed or one-hot estimates lose.

    Args:
      alpha_hat: ``[T, K_a]`` estimate.
      alpha: ``[T, K_a]`` truth.
      mp: mechanism parameters.
      active: the ``K_a`` active domain indices.

    Returns:
      The R^2 (nan if the true W(t) is constant in time).
    """
    alpha_hat, alpha = _check_pair(alpha_hat, alpha, "alpha_hat", "alpha")
    w_hat, w = w_of(alpha_hat, mp, active), w_of(alpha, mp, active)
    total = float(np.sum((w - w.mean(0, keepdims=True)) ** 2))
    if total <= 0.0:
        return float("nan")
    return 1.0 - float(np.sum((w_hat - w) ** 2)) / total


def w_corr_full(alpha_hat, alpha, mp: MechParams, active: Sequence[int]) -> float:
    """The paper's full-W metric: Pearson of the flattened ``W_hat(t)`` and ``W(t)`` over all t.

    Flawed: W_lag1 dominates both, so a constant guess already scores >= 0.99. Reported,
    never used as evidence.

    Args:
      alpha_hat: ``[T, K_a]`` estimate.
      alpha: ``[T, K_a]`` truth.
      mp: mechanism parameters.
      active: the ``K_a`` active domain indices.

    Returns:
      The correlation.
    """
    alpha_hat, alpha = _check_pair(alpha_hat, alpha, "alpha_hat", "alpha")
    return _pearson(w_of(alpha_hat, mp, active).ravel(), w_of(alpha, mp, active).ravel())


def dw_centred_corr(alpha_hat, alpha, mp: MechParams, active: Sequence[int]) -> float:
    """Pearson of the time-centred W(t) (i.e. of dW(t) minus its time mean), flattened.

    Args:
      alpha_hat: ``[T, K_a]`` estimate.
      alpha: ``[T, K_a]`` truth.
      mp: mechanism parameters.
      active: the ``K_a`` active domain indices.

    Returns:
      The correlation (0 for a constant estimate).
    """
    alpha_hat, alpha = _check_pair(alpha_hat, alpha, "alpha_hat", "alpha")
    w_hat, w = w_of(alpha_hat, mp, active), w_of(alpha, mp, active)
    return _pearson((w_hat - w_hat.mean(0)).ravel(), (w - w.mean(0)).ravel())


def interior_mae(pred, true, margin: float = 0.1) -> float:
    """Mean ``|pred - true|`` over the rows whose true ``max_k alpha_k <= 1 - margin``.

    These are intermediate mechanism states that pure-domain training never saw.

    Args:
      pred: ``[T, K]`` estimate.
      true: ``[T, K]`` truth.
      margin: distance below 1 that the largest true weight must keep.

    Returns:
      The mean absolute error over all entries of those rows (nan if there is none).
    """
    pred, true = _check_pair(pred, true)
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    rows = true.max(axis=1) <= 1.0 - margin
    if not rows.any():
        return float("nan")
    return float(np.mean(np.abs(pred[rows] - true[rows])))


def permutation_control(pred, true, seed: int = 0, n: int = 20) -> float:
    """Mean ``|traj_corr|`` of ``pred`` with its time axis shuffled ``n`` times.

    A negative control: an estimate that tracks time scores near 0 once time is shuffled.

    Args:
      pred: ``[T, K]`` estimate.
      true: ``[T, K]`` truth.
      seed: seed of ``np.random.default_rng``.
      n: number of permutations, >= 1.

    Returns:
      The mean absolute correlation over the permutations.
    """
    pred, true = _check_pair(pred, true)
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    rng = np.random.default_rng(seed)
    T = pred.shape[0]
    return float(np.mean([abs(traj_corr(pred[rng.permutation(T)], true))
                          for _ in range(int(n))]))


def nearest_vertex(true) -> np.ndarray:
    """Row-wise nearest simplex vertex: one-hot of ``argmax_k alpha_k``.

    It is the best one-hot approximation of every row in L1 and L2 (the L1 distance to
    vertex j is ``2 (1 - alpha_j)``), so its ``interior_mae`` lower-bounds that of any
    one-hot (discrete-switching) output.

    Args:
      true: ``[T, K]`` simplex rows.

    Returns:
      ``[T, K]`` one-hot float64.
    """
    true = np.asarray(true, np.float64)
    if true.ndim != 2:
        raise ValueError(f"true must be [T, K], got {true.shape}")
    out = np.zeros_like(true)
    out[np.arange(true.shape[0]), np.argmax(true, axis=1)] = 1.0
    return out
