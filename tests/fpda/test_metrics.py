"""FPDA spec §Tests 8: metrics against scikit-learn and scipy, boundary F1 by hand."""

import numpy as np
import pytest
import scipy.ndimage
from sklearn.metrics import f1_score, roc_auc_score

from icml26_jax.fpda import metrics as M


def _case(seed=0, n=12, s=16):
    rng = np.random.default_rng(seed)
    masks = np.zeros((n, s, s), bool)
    labels = (np.arange(n) % 2).astype(np.int32)
    for i in np.flatnonzero(labels):
        y, x = rng.integers(0, s - 6, 2)
        masks[i, y:y + 6, x:x + 5] = True
    prob = np.clip(masks * 0.7 + rng.random((n, s, s)) * 0.45, 0, 1).astype(np.float32)
    return prob, masks, labels


def test_pixel_f1_and_iou_match_sklearn_per_image():
    prob, masks, labels = _case()
    ref = np.mean([f1_score(masks[i].ravel(), prob[i].ravel() > 0.5)
                   for i in np.flatnonzero(labels)])
    assert M.pixel_f1(prob, masks, labels) == pytest.approx(ref, rel=1e-12)
    from sklearn.metrics import jaccard_score
    ref = np.mean([jaccard_score(masks[i].ravel(), prob[i].ravel() > 0.5)
                   for i in np.flatnonzero(labels)])
    assert M.iou(prob, masks, labels) == pytest.approx(ref, rel=1e-12)
    # authentic images are ignored by the localisation scores
    prob2 = prob.copy()
    prob2[labels == 0] = 1.0
    assert M.pixel_f1(prob2, masks, labels) == M.pixel_f1(prob, masks, labels)
    # an empty prediction on a forged image scores 0
    assert M.per_image_f1(np.zeros((1, 4, 4)), np.ones((1, 4, 4), bool))[0] == 0.0


def test_aucs_and_balanced_accuracy_match_sklearn():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200)
    s = np.round(y * 0.3 + rng.random(200), 1)  # rounding creates ties
    assert M.image_auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    prob, masks, _ = _case(2)
    assert M.pixel_auc(prob, masks) == pytest.approx(roc_auc_score(masks.ravel(), prob.ravel()),
                                                     abs=1e-12)
    from sklearn.metrics import balanced_accuracy_score
    assert M.balanced_acc(s, y) == pytest.approx(balanced_accuracy_score(y, s > 0.5), abs=1e-12)
    with pytest.raises(ValueError, match="both classes"):
        M.image_auc(s, np.ones_like(y))


def test_component_counts_match_scipy_label():
    _, masks, labels = _case(3, n=8, s=20)
    masks[1, 0, 0] = True  # an extra isolated pixel
    masks[3, 19, 19] = masks[3, 18, 18] = True  # diagonal pair: one 8-connected component
    for m in masks:
        assert M.n_components(m) == scipy.ndimage.label(m, structure=np.ones((3, 3)))[1]
    assert M.n_components(masks[1]) == 2 and M.n_components(masks[3]) == 2
    pred = masks.copy()
    pred[1, 0, 0] = False  # fixes image 1
    pred[5, 0, 10] = True  # adds one component to image 5
    # forged images 1, 3, 5, 7: errors 1 (GT has the extra pixel), 0, 1, 0
    assert M.cc_error(pred, masks, labels) == pytest.approx(0.5)


def test_boundary_f1_hand_worked():
    gt = np.zeros((8, 8), bool)
    gt[2:6, 2:6] = True  # a 4x4 square: 12 boundary pixels
    assert M.boundary(gt).sum() == 12
    assert M.boundary_f1_one(gt, gt) == 1.0
    shifted = np.roll(gt, 1, axis=1)  # one pixel right: every boundary pixel within 1 px
    assert M.boundary_f1_one(shifted, gt, tol=1) == 1.0
    # tol = 0: both boundaries have 12 pixels (rows 2 and 5 over 4 columns, plus 2 side
    # columns over rows 3-4). They share only rows 2 and 5 at columns 3-5 (6 pixels): the
    # side columns (2, 5 for the GT; 3, 6 for the prediction) differ. P = R = 1/2, F1 = 1/2.
    assert M.boundary_f1_one(shifted, gt, tol=0) == pytest.approx(0.5)
    assert M.boundary_f1_one(np.zeros_like(gt), gt) == 0.0
    assert M.boundary_f1_one(np.zeros_like(gt), np.zeros_like(gt)) == 1.0
