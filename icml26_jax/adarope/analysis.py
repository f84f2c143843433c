"""Head-role analysis: which heads attend to the previous token, which retrieve by content.

A previous-token head puts its attention on position t - 1 (needs a precise local offset:
high frequencies); a retrieval head, at a query q_j, puts its attention on the pair (key,
value) whose key equals q_j wherever it is (distance-invariant: low frequencies).
"""

from __future__ import annotations

import numpy as np


def head_scores(attn, batch: dict) -> dict[str, np.ndarray]:
    """Per-(layer, head) scores from attention maps of an MQAR batch.

    Args:
      attn: ``[L, B, H, T, T]`` attention weights (rows = queries, sum to 1).
      batch: an ``mqar_batch`` with ``query_pos`` and ``key_pos`` ``[B, Q]``.

    Returns:
      ``prev_token`` (mean weight on t - 1 over t >= 1), ``retrieval`` (mean weight, at the
      query positions, on the queried pair's key and value positions) and ``mean_distance``
      (mean over t of the attention-weighted distance sum_s w[t, s] (t - s)), each ``[L, H]``.
    """
    a = np.asarray(attn, np.float64)
    if a.ndim != 5 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"attn must be [L, B, H, T, T], got shape {a.shape}")
    T = a.shape[-1]
    t = np.arange(T)
    prev = a[..., t[1:], t[1:] - 1].mean(axis=(1, 3))
    dist = (a * (t[:, None] - t[None, :])).sum(-1).mean(axis=(1, 3))
    qp, kp = np.asarray(batch["query_pos"]), np.asarray(batch["key_pos"])
    b = np.arange(qp.shape[0])[:, None]
    at_q = a[:, b, :, qp, :]  # [B, Q, L, H, T] (advanced indices first)
    on_key = np.take_along_axis(at_q, kp[..., None, None, None], axis=-1)[..., 0]
    on_val = np.take_along_axis(at_q, kp[..., None, None, None] + 1, axis=-1)[..., 0]
    retrieval = (on_key + on_val).mean(axis=(0, 1))
    return {"prev_token": prev, "retrieval": retrieval, "mean_distance": dist}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def spearman(x, y) -> float:
    """Spearman's rank correlation (Pearson correlation of average ranks); NaN if constant."""
    x, y = np.ravel(x), np.ravel(y)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must have the same size >= 2, got {x.shape} and {y.shape}")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = np.sqrt((rx ** 2).sum() * (ry ** 2).sum())
    return float((rx * ry).sum() / den) if den > 0 else float("nan")
