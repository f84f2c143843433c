"""Exact Walsh spectra of scikit-learn trees by depth-first search (spec §Method "Proxy").

A regression tree is a sum over leaves of ``value * prod_{splits on the path} 1[z_j = side]``
and ``1[z_j = 0] = (1 + chi_j) / 2``, ``1[z_j = 1] = (1 - chi_j) / 2`` (``fourier``'s
convention: ``chi_T(S) = (-1)^{|S cap T|}``, a present player is a set bit, absent = +1). A
DFS therefore builds the spectrum bottom-up: at a split on ``j`` whose absent child has
spectrum ``g_A`` and present child ``g_P`` (neither depends on ``z_j``; eq. P1)::

    g(U)       += (g_A(U) + g_P(U)) / 2
    g(U + {j}) += (g_A(U) - g_P(U)) / 2

Two modes, one DFS:

* **proxy** (``x = xbar = None``): the tree was fitted on ``z in {0, 1}^n`` itself; a split
  "``z_j <= thr``" sends the absent value 0 and the present value 1 down their own branches
  (for ``0 <= thr < 1``: absent left, present right).
* **tree game** (``x``, ``xbar`` given): ``nu(z) = t(where(z, x, xbar))``; the value at a
  split on ``j`` is ``x_j`` if ``j`` is present, else ``xbar_j``.

In both, a split that sends both values the same way does not depend on ``z_j`` (``g`` = the
spectrum of that child), and a feature split a second time on a path is already determined by
the first split: the DFS follows the branch consistent with the path and adds no variable.
The spectrum is exact (no truncation); its size is at most ``sum_leaves 2^{d_leaf}`` with
``d_leaf`` the number of distinct ``z``-dependent features on the leaf's path. The DFS recurses
only at ``z``-dependent splits of distinct features (``<= n`` deep, whatever the tree depth)
and walks the other splits in a loop.

scikit-learn compares float32 features with float64 thresholds (``predict`` casts ``X`` to
float32), so ``x`` and ``xbar`` are cast to float32 before every comparison: the spectrum
reproduces ``predict`` exactly, ties included.
"""

from __future__ import annotations

import numpy as np

from icml26_jax.oddshap import fourier

_LEAF = -1  # sklearn.tree._tree.TREE_LEAF


def tree_ensemble(model) -> tuple[list, np.ndarray, float]:
    """The additive form ``f(X) = base + sum_k weights[k] * tree_k(X)`` of a fitted model.

    Supported: ``DecisionTreeRegressor`` / ``ExtraTreeRegressor`` (single output),
    ``GradientBoostingRegressor``, binary ``GradientBoostingClassifier`` (``f`` =
    ``decision_function``, the log-odds), ``RandomForestRegressor`` / ``ExtraTreesRegressor``
    (single output; ``f`` = the mean of the trees).

    Returns:
      ``(trees, weights f64 [k], base)`` with ``trees`` the low-level ``sklearn.tree._tree.Tree``
      objects.

    Raises:
      ValueError: for an unfitted or unsupported model (classifier trees, multi-output,
        multi-class boosting, histogram boosting).
    """
    from sklearn import ensemble, tree

    name = type(model).__name__
    if isinstance(model, tree.BaseDecisionTree):
        if not hasattr(model, "tree_"):
            raise ValueError(f"model: the {name} is not fitted")
        if not isinstance(model, tree.DecisionTreeRegressor):
            raise ValueError(f"model: only regression trees are supported, got a {name} "
                             "(wrap classification as a GradientBoostingClassifier)")
        if model.n_outputs_ != 1:
            raise ValueError(f"model: needs a single output, got n_outputs_={model.n_outputs_}")
        return [model.tree_], np.ones(1), 0.0
    if isinstance(model, (ensemble.GradientBoostingRegressor,
                          ensemble.GradientBoostingClassifier)):
        if not hasattr(model, "estimators_"):
            raise ValueError(f"model: the {name} is not fitted")
        stages = np.asarray(model.estimators_)
        if stages.ndim != 2 or stages.shape[1] != 1:
            raise ValueError(f"model: multi-class boosting is not supported ({name} with "
                             f"{stages.shape[1]} trees per stage); use a regressor or a binary "
                             "classifier")
        trees = [est.tree_ for est in stages[:, 0]]
        weights = np.full(len(trees), float(model.learning_rate))
        x0 = np.zeros((1, model.n_features_in_), np.float32)
        # The init estimator's raw prediction is a constant (mean, log-odds, quantile, ...);
        # _raw_predict_init is what predict itself starts from.
        base = float(np.asarray(model._raw_predict_init(x0)).reshape(-1)[0])
        return trees, weights, base
    if isinstance(model, (ensemble.RandomForestRegressor, ensemble.ExtraTreesRegressor)):
        if not hasattr(model, "estimators_"):
            raise ValueError(f"model: the {name} is not fitted")
        if model.n_outputs_ != 1:
            raise ValueError(f"model: needs a single output, got n_outputs_={model.n_outputs_}")
        trees = [est.tree_ for est in model.estimators_]
        return trees, np.full(len(trees), 1.0 / len(trees)), 0.0
    raise ValueError(f"model: unsupported type {name}; expected a fitted DecisionTreeRegressor, "
                     "GradientBoostingRegressor, binary GradientBoostingClassifier or a "
                     "random-forest / extra-trees regressor")


def model_function(model):
    """``X [m, d] -> f64 [m]``: the function whose spectrum ``sklearn_tree_spectrum`` returns
    (``decision_function`` for a boosted classifier, else ``predict``)."""
    tree_ensemble(model)  # validates
    from sklearn import ensemble

    if isinstance(model, ensemble.GradientBoostingClassifier):
        return lambda x: np.asarray(model.decision_function(x), np.float64).reshape(-1)
    return lambda x: np.asarray(model.predict(x), np.float64).reshape(-1)


def _tree_spectrum(tree, x32: np.ndarray, xbar32: np.ndarray, acc: dict, weight: float) -> None:
    """Adds ``weight *`` the spectrum of one tree to ``acc`` (``{mask int: coef}``)."""
    left, right = tree.children_left, tree.children_right
    feature, threshold = tree.feature, tree.threshold
    leaf_value = tree.value[:, 0, 0].astype(np.float64)
    internal = left != _LEAF
    f_safe = np.where(internal, feature, 0)
    # child taken when the feature is present (x) / absent (xbar); leaves keep -1
    go_present = np.where(x32[f_safe] <= threshold, left, right)
    go_absent = np.where(xbar32[f_safe] <= threshold, left, right)
    go_present = np.where(internal, go_present, _LEAF).tolist()
    go_absent = np.where(internal, go_absent, _LEAF).tolist()
    feature = feature.tolist()
    leaf_value = leaf_value.tolist()
    fixed: dict[int, bool] = {}  # features already split on along the current path

    def visit(node: int) -> dict:
        while True:
            cp, ca = go_present[node], go_absent[node]
            if cp == _LEAF:
                return {0: leaf_value[node]}
            if cp == ca:  # both values go the same way: no dependence on z_j here
                node = cp
                continue
            j = feature[node]
            if j in fixed:  # determined by the first split on j along this path
                node = cp if fixed[j] else ca
                continue
            break
        fixed[j] = False
        g_a = visit(ca)
        fixed[j] = True
        g_p = visit(cp)
        del fixed[j]
        bit = 1 << j
        out: dict = {}
        for u, a in g_a.items():
            p = g_p.pop(u, 0.0)
            out[u] = 0.5 * (a + p)
            out[u | bit] = 0.5 * (a - p)
        for u, p in g_p.items():  # sets only in the present child
            out[u] = 0.5 * p
            out[u | bit] = -0.5 * p
        return out

    for u, c in visit(0).items():
        acc[u] = acc.get(u, 0.0) + weight * c


def sklearn_tree_spectrum(model, n: int, x=None, xbar=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact Walsh spectrum of a fitted scikit-learn tree model (host numpy, DFS; eq. P1).

    Args:
      model: a fitted tree model accepted by :func:`tree_ensemble`; its function is
        ``base + sum_k w_k tree_k`` (``predict``, or ``decision_function`` for a binary
        ``GradientBoostingClassifier``).
      n: number of players = the model's ``n_features_in_`` (``1 <= n <= 128``).
      x: ``[n]`` explicand (tree-game mode) or None (proxy mode).
      xbar: ``[n]`` baseline (tree-game mode) or None (proxy mode).

    Returns:
      ``(masks uint32 [K, W], coefs f64 [K])``, ``W = ceil(n / 32)``: the sets (bit ``i`` =
      player ``i``) with non-zero coefficient, duplicates merged, sorted by the set's integer
      value (the empty set first). Proxy mode: ``model(z) = sum_k coefs[k] chi_{masks[k]}(z)``
      for every ``z in {0, 1}^n``; tree-game mode: the same for
      ``model(where(z, x, xbar))``.

    Raises:
      ValueError: for an unsupported model, ``n`` not matching the model, or ``x`` / ``xbar``
        not both None or both ``[n]``.
    """
    trees, weights, base = tree_ensemble(model)
    n = fourier.check_players(n)
    if getattr(model, "n_features_in_", n) != n:
        raise ValueError(f"n must equal the model's n_features_in_={model.n_features_in_}, "
                         f"got n={n}")
    if (x is None) != (xbar is None):
        raise ValueError("x and xbar must both be given (tree-game mode) or both be None "
                         "(proxy mode)")
    if x is None:  # proxy mode: the model reads z itself, present = 1, absent = 0
        x32, xbar32 = np.ones(n, np.float32), np.zeros(n, np.float32)
    else:
        x32, xbar32 = np.asarray(x, np.float32), np.asarray(xbar, np.float32)
        if x32.shape != (n,) or xbar32.shape != (n,):
            raise ValueError(f"x and xbar must be [n={n}], got {x32.shape} and {xbar32.shape}")
    acc: dict = {0: base} if base != 0.0 else {}
    for t, w in zip(trees, weights):
        _tree_spectrum(t, x32, xbar32, acc, float(w))
    return _to_arrays(acc, n)


def _to_arrays(acc: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``{mask int: coef}`` -> sorted ``(uint32 [K, W], f64 [K])`` without exact zeros."""
    keys = sorted(u for u, c in acc.items() if c != 0.0)
    w = fourier.num_words(n)
    masks = np.zeros((len(keys), w), np.uint32)
    for k in range(w):
        masks[:, k] = [(u >> (32 * k)) & 0xFFFFFFFF for u in keys]
    coefs = np.asarray([acc[u] for u in keys], np.float64).reshape(-1)
    return masks, coefs


def spectrum_values(masks: np.ndarray, coefs: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``f64 [m]``: ``sum_k coefs[k] chi_{masks[k]}(z)`` on ``z bool [m, n]`` (host numpy, for
    checks; multi-word)."""
    z = np.asarray(z, bool)
    n = z.shape[1]
    bits = np.zeros((masks.shape[0], n), bool)
    for i in range(n):
        bits[:, i] = (masks[:, i // 32] >> np.uint32(i % 32)) & np.uint32(1)
    inter = z.astype(np.int64) @ bits.T.astype(np.int64)  # [m, K]
    return (1 - 2 * (inter & 1)).astype(np.float64) @ coefs
