"""Retrieval metrics in percent (spec §Module API, metrics): accuracy (mean and std over
shuffles), RStd (std of per-position recall, ddof = 1 as the LAD code; PriDe's uses ddof 0),
consistency on image ids and the confusion matrix."""

from __future__ import annotations

import numpy as np


def accuracy(pred, gt) -> tuple[float, float]:
    """``(mean, std over shuffles)`` of accuracy in % for pred, gt [E, T]."""
    pred, gt = np.asarray(pred), np.asarray(gt)
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred and gt must both be [E, T], got {pred.shape} and {gt.shape}")
    per = 100.0 * (pred == gt).mean(0)  # [T]
    return float(per.mean()), float(per.std(ddof=1) if per.size > 1 else 0.0)


def recall_by_position(pred, gt, n: int) -> np.ndarray:
    """Recall [n] in % of the episodes whose ground truth sits at each position (NaN if none)."""
    pred, gt = np.asarray(pred).ravel(), np.asarray(gt).ravel()
    out = np.full(n, np.nan)
    for i in range(n):
        m = gt == i
        if m.any():
            out[i] = 100.0 * np.mean(pred[m] == i)
    return out


def rstd(pred, gt, n: int, ddof: int = 1) -> float:
    """RStd: the standard deviation (``ddof``) of per-position recall, in %."""
    r = recall_by_position(pred, gt, n)
    return float(np.nanstd(r, ddof=ddof))


def consistency(pred_image_id) -> float:
    """% of episodes whose chosen image id is the same in all T shuffles ([E, T])."""
    p = np.asarray(pred_image_id)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"consistency needs [E, T] with T >= 2 shuffles, got {p.shape}")
    return float(100.0 * np.mean(np.all(p == p[:, :1], axis=1)))


def confusion(gt, pred, n: int) -> np.ndarray:
    """[n, n] row-normalised confusion (rows: ground-truth position, columns: prediction)."""
    m = np.zeros((n, n))
    np.add.at(m, (np.asarray(gt).ravel(), np.asarray(pred).ravel()), 1)
    return m / np.maximum(m.sum(1, keepdims=True), 1)


def summary(pred, gt, image_ids, n: int) -> dict:
    """``{acc, acc_std, rstd, cons}`` of predictions [E, T] (positions), ground truth [E, T]
    and the candidates' image ids [E, T, N] (consistency is on the chosen image)."""
    pred = np.asarray(pred)
    chosen = np.take_along_axis(np.asarray(image_ids), pred[..., None], -1)[..., 0]
    acc, acc_std = accuracy(pred, gt)
    return {"acc": acc, "acc_std": acc_std, "rstd": rstd(pred, gt, n),
            "cons": consistency(chosen)}
