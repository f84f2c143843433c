"""Detection and localisation metrics (spec §Claims conventions), on the host in NumPy.

* ``image_auc``: image-level ROC AUC (needs both classes), ties counted half.
* ``balanced_acc``: mean of the true-positive and true-negative rates at threshold 0.5.
* ``pixel_f1`` / ``iou``: per-image scores at threshold 0.5, averaged over *forged* images
  (an image with an empty prediction and a non-empty mask scores 0).
* ``pixel_auc``: ROC AUC of all pixels of all images pooled.
* ``n_components``: 8-connected component count (``scipy.ndimage.label``); ``cc_error`` is
  mean |#CC(pred) - #CC(GT)| over forged images.
* ``boundary_f1``: F1 of boundary pixels matched within a tolerance of ``tol`` pixels
  (Chebyshev distance), averaged over forged images.
"""

from __future__ import annotations

import numpy as np

CONVENTIONS = {
    "image_auc": "ROC AUC of the image score over test images (both classes), ties = 1/2",
    "balanced_acc": "mean of TPR and TNR of round(image score)",
    "pixel_f1": "per-image F1 of sigmoid(mask logit) > 0.5 against the GT mask, mean over forged "
                "images (empty prediction on a forged image = 0)",
    "iou": "per-image IoU at 0.5, mean over forged images",
    "pixel_auc": "ROC AUC of all pixels of all test images pooled",
    "cc_error": "mean |#CC(pred) - #CC(GT)| over forged images, 8-connectivity, threshold 0.5",
    "boundary_f1": "F1 of boundary pixels matched within 1 px (Chebyshev), mean over forged",
}

_EIGHT = np.ones((3, 3), bool)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank statistic (Mann-Whitney U), ties counted 1/2."""
    from scipy.stats import rankdata

    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).ravel().astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs both classes among the labels "
                         f"(got {n_pos} positives, {n_neg} negatives)")
    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def image_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Image-level ROC AUC of detection scores ``[N]`` against labels ``[N]``."""
    return auc(scores, labels)


def balanced_acc(scores: np.ndarray, labels: np.ndarray, th: float = 0.5) -> float:
    """Mean of TPR and TNR of ``scores > th``."""
    y = np.asarray(labels).astype(bool)
    p = np.asarray(scores) > th
    if y.all() or (~y).all():
        raise ValueError("balanced_acc needs both classes among the labels")
    return float(0.5 * ((p & y).sum() / y.sum() + (~p & ~y).sum() / (~y).sum()))


def _binary(pred: np.ndarray, th: float) -> np.ndarray:
    p = np.asarray(pred)
    return p if p.dtype == bool else p > th


def per_image_f1(pred: np.ndarray, masks: np.ndarray, th: float = 0.5) -> np.ndarray:
    """F1 of every image ``[N]`` (pred probabilities or booleans ``[N, H, W]``); an image
    where both prediction and mask are empty scores 1."""
    p = _binary(pred, th).reshape(len(masks), -1)
    m = np.asarray(masks, bool).reshape(len(masks), -1)
    tp = (p & m).sum(1)
    denom = p.sum(1) + m.sum(1)
    return np.where(denom > 0, 2.0 * tp / np.maximum(denom, 1), 1.0)


def pixel_f1(pred: np.ndarray, masks: np.ndarray, labels: np.ndarray, th: float = 0.5) -> float:
    """Mean per-image pixel F1 at ``th`` over forged images (``labels == 1``)."""
    forged = np.asarray(labels).astype(bool)
    if not forged.any():
        raise ValueError("pixel_f1 needs at least one forged image")
    return float(per_image_f1(np.asarray(pred)[forged], np.asarray(masks)[forged], th).mean())


def iou(pred: np.ndarray, masks: np.ndarray, labels: np.ndarray, th: float = 0.5) -> float:
    """Mean per-image IoU at ``th`` over forged images."""
    forged = np.asarray(labels).astype(bool)
    if not forged.any():
        raise ValueError("iou needs at least one forged image")
    p = _binary(np.asarray(pred)[forged], th).reshape(int(forged.sum()), -1)
    m = np.asarray(masks, bool)[forged].reshape(int(forged.sum()), -1)
    inter, union = (p & m).sum(1), (p | m).sum(1)
    return float(np.where(union > 0, inter / np.maximum(union, 1), 1.0).mean())


def pixel_auc(pred: np.ndarray, masks: np.ndarray) -> float:
    """ROC AUC of all pixels pooled over the images."""
    return auc(np.asarray(pred, np.float32).ravel(), np.asarray(masks, bool).ravel())


def n_components(mask: np.ndarray) -> int:
    """8-connected components of one binary mask ``[H, W]``."""
    from scipy import ndimage

    return int(ndimage.label(np.asarray(mask, bool), structure=_EIGHT)[1])


def cc_error(pred: np.ndarray, masks: np.ndarray, labels: np.ndarray, th: float = 0.5) -> float:
    """Mean |#CC(pred > th) - #CC(GT)| over forged images."""
    forged = np.flatnonzero(np.asarray(labels).astype(bool))
    if forged.size == 0:
        raise ValueError("cc_error needs at least one forged image")
    p = _binary(np.asarray(pred)[forged], th)
    m = np.asarray(masks, bool)[forged]
    return float(np.mean([abs(n_components(a) - n_components(b)) for a, b in zip(p, m)]))


def boundary(mask: np.ndarray) -> np.ndarray:
    """Boundary pixels of a binary mask: foreground pixels with a 4-neighbour outside it
    (the image border counts as outside)."""
    m = np.pad(np.asarray(mask, bool), 1, constant_values=False)
    inner = m[1:-1, 1:-1]
    interior = m[:-2, 1:-1] & m[2:, 1:-1] & m[1:-1, :-2] & m[1:-1, 2:]
    return inner & ~interior


def _dilate(mask: np.ndarray, tol: int) -> np.ndarray:
    from scipy import ndimage

    if tol <= 0:
        return mask
    return ndimage.binary_dilation(mask, structure=_EIGHT, iterations=tol)


def boundary_f1_one(pred: np.ndarray, mask: np.ndarray, tol: int = 1) -> float:
    """Boundary F1 of one image: precision = predicted boundary pixels within ``tol`` of the
    GT boundary; recall = GT boundary pixels within ``tol`` of the predicted one."""
    bp, bg = boundary(pred), boundary(mask)
    if not bp.any() and not bg.any():
        return 1.0
    if not bp.any() or not bg.any():
        return 0.0
    precision = (bp & _dilate(bg, tol)).sum() / bp.sum()
    recall = (bg & _dilate(bp, tol)).sum() / bg.sum()
    if precision + recall == 0:
        return 0.0
    return float(2.0 * precision * recall / (precision + recall))


def boundary_f1(pred: np.ndarray, masks: np.ndarray, labels: np.ndarray, th: float = 0.5,
                tol: int = 1) -> float:
    """Mean boundary F1 over forged images."""
    forged = np.flatnonzero(np.asarray(labels).astype(bool))
    if forged.size == 0:
        raise ValueError("boundary_f1 needs at least one forged image")
    p = _binary(np.asarray(pred)[forged], th)
    m = np.asarray(masks, bool)[forged]
    return float(np.mean([boundary_f1_one(a, b, tol) for a, b in zip(p, m)]))
