"""The proxy: our own oblivious gradient-boosted trees in JAX and their exact Walsh spectrum
(spec §Method "Algorithm" 3, "Proxy — default: our own oblivious GBT in JAX" [R]).

OddSHAP fits a proxy ``g`` to the sampled coalitions ``(z(S), nu(S))``, reads off its exact
Walsh spectrum ``g_hat`` and keeps the singletons plus the odd sets ``|T| >= 3`` with the
largest ``|g_hat(T)|`` as the regression support. The paper uses LightGBM; we use *oblivious*
trees (one split feature per level, shared by all nodes of the level, as in CatBoost) because

* a depth-``D`` oblivious tree is a function of its ``D`` features only, so its ``2^D`` leaf
  table *is* its truth table and ``FWHT(leaves) / 2^D`` is its exact spectrum on the
  ``2^D`` subsets of those features (no tree walk, no approximation);
* every shape is static (``trees``, ``D``, ``M``, ``n``), so the whole boosting loop is a
  ``lax.scan`` that jits once and vmaps over seeds and explicands.

Fitting (squared loss, Newton step = gradient step): start at the mean of the valid ``y``;
each round fits one tree to the residuals ``r``, level ``l`` choosing the unused feature that
maximises the regularised gain (XGBoost's, with unit hessians)

    sum_nodes  S_R^2 / (n_R + lam) + S_L^2 / (n_L + lam) - S^2 / (n + lam)

(``S``: residual sum, ``n``: valid rows in the node, ``R``/``L``: feature present / absent),
ties going to the lowest feature index; leaf values are ``lr * S_leaf / (n_leaf + lam)``.
Leaf index of a row: ``sum_l z[features[t, l]] 2^l`` (level ``l`` = bit ``l``).
Padding rows (``valid = False``) get residual and count 0 and so change nothing.

Level statistics ("histograms"): at level ``l`` the per-(node, feature) sums are needed for
the ``2^l`` nodes; as in LightGBM only the right children (feature present) are summed over
the rows, the left ones are parent minus right. The row sums are one ``jax.ops.segment_sum``
of ``(r, c)`` over (node, byte of ``z``, byte value) per level, turned into per-feature sums
by a ``[256, 8]`` bit matrix (the comment above ``_node_sums`` has the timings that chose it
over a one-hot matmul and a plain per-node segment sum). Scatter-adds on CPU run in row order,
so a fit is bitwise reproducible.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from icml26_jax.oddshap import fourier


class ObliviousGBT(NamedTuple):
    """A boosted ensemble of oblivious trees; ``predict(model, z)`` evaluates it."""
    features: jax.Array  # int32 [trees, D]: split feature of level l of tree t (distinct in t)
    leaves: jax.Array  # f64 [trees, 2^D]: leaf value, index sum_l z[features[t, l]] 2^l
    base: jax.Array  # f64 []: starting prediction, mean of the valid y


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a Python int (static), got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_positive(name: str, value) -> None:
    """Host check of a hyper-parameter that may also be traced (then it is not checked)."""
    if not _is_concrete(value):
        return
    arr = np.asarray(value)
    if arr.shape != () or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be a real scalar, got {value!r}")
    if not (np.isfinite(arr) and arr > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def tree_depth(depth: int, n: int) -> int:
    """The depth actually fitted: ``D = min(depth, n - 1)``, at least 1."""
    return max(1, min(int(depth), int(n) - 1))


def _check_data(z, y, valid):
    z, y, valid = jnp.asarray(z), jnp.asarray(y), jnp.asarray(valid)
    if z.dtype != jnp.bool_ or z.ndim != 2:
        raise ValueError(f"z must be bool [M, n], got {z.dtype} {tuple(z.shape)}")
    m, n = z.shape
    if n < 1 or m < 1:
        raise ValueError(f"z must have M >= 1 rows and n >= 1 players, got {tuple(z.shape)}")
    if not jnp.issubdtype(y.dtype, jnp.floating) or y.shape != (m,):
        raise ValueError(f"y must be a float array [M] = [{m}], got {y.dtype} {tuple(y.shape)}")
    if valid.dtype != jnp.bool_ or valid.shape != (m,):
        raise ValueError(f"valid must be bool [M] = [{m}], got {valid.dtype} "
                         f"{tuple(valid.shape)}")
    return z, y, valid


# Per-level statistics. Candidates timed on the 2 shared CPU cores of the development machine
# (load 2-6, so +-30 %), float64, 100 trees of depth 6, whole fit after compile, seconds:
#                                                   M=16384 n=16  M=10000 n=100  vmap 8x(16384,16)
#   one-hot matmul onehot(node)[M, 2K]^T @ z[M, n]      0.58          1.00           3.56
#   segment_sum of concat(z*r, z*c)[M, 2n] by node      0.095         0.50           2.35
#   segment_sum of (r, c) by (node, byte, value) KEPT   0.07-0.10     0.21-0.32      0.75-0.88
# (kept variant, vmap 8x(10000, 100): 3.9-5.1 s; groups of 4 or 6 bits instead of bytes: no
# faster.) The matmul is a tall-skinny f64 GEMM doing ~5x the arithmetic of a scatter; the
# per-node segment sum streams an [M, 2n] f64 array D times per tree, which stays in cache for
# one problem but not for a vmapped batch (memory bound). The byte histogram scatters 16 bytes
# per (row, byte of z) into a histogram over (node k, byte index g, byte value p); a [256, 8]
# 0/1 matrix turns it into per-feature sums: sum_{p: bit b of p} hist[k, g, p] is the sum over
# the rows of node k that contain player 8g + b.
_BITS = (np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1  # [256, 8]: bit b of byte p


def _coalition_bytes(z: jax.Array) -> jax.Array:
    """``int32 [M, G]``: byte ``g`` (players ``8g..8g+7``, bit ``b`` = player ``8g+b``) of
    each row, ``G = ceil(n / 8)``."""
    m, n = z.shape
    groups = -(-n // 8)
    zpad = jnp.concatenate([z, jnp.zeros((m, 8 * groups - n), bool)], axis=1)
    weights = jnp.left_shift(1, jnp.arange(8, dtype=jnp.int32))
    return jnp.sum(zpad.reshape(m, groups, 8).astype(jnp.int32) * weights, axis=-1,
                   dtype=jnp.int32)


def _node_sums(zbytes, node, rows, num_nodes, rc, n):
    """Per-(node, feature) sums of residuals and counts over the selected rows.

    Args:
      zbytes: ``int32 [M, G]`` from ``_coalition_bytes``.
      node: ``int32 [M]`` node of each row, ``0..num_nodes-1``.
      rows: ``bool [M]`` rows taking part (the others are dropped).
      num_nodes: static number of nodes ``K``.
      rc: ``[M, 2]`` residual and count of each row (both 0 on padding).
      n: number of features.

    Returns:
      ``(SR, NR)``, each ``[K, n]``: ``sum r`` and ``sum c`` over the selected rows of node
      ``k`` in which feature ``f`` is present.
    """
    m, groups = zbytes.shape
    nseg = num_nodes * groups * 256
    gid = jnp.arange(groups, dtype=jnp.int32)[None, :]
    ids = (node[:, None] * groups + gid) * 256 + zbytes  # [M, G]
    ids = jnp.where(rows[:, None], ids, nseg)  # out of range: dropped by segment_sum
    upd = jnp.broadcast_to(rc[:, None, :], (m, groups, 2)).reshape(m * groups, 2)
    hist = jax.ops.segment_sum(upd, ids.reshape(-1), num_segments=nseg)
    hist = hist.reshape(num_nodes, groups, 256, 2)
    bits = jnp.asarray(_BITS, rc.dtype)
    st = jnp.einsum("kgpc,pb->ckgb", hist, bits, precision=lax.Precision.HIGHEST)
    st = st.reshape(2, num_nodes, groups * 8)[:, :, :n]
    return st[0], st[1]


def _fit_tree(z, zbytes, r, c, depth, lam, lr):
    """One oblivious tree on residuals ``r`` (0 on padding, as is the count ``c``).

    Level ``l`` has ``K = 2^l`` nodes; node ``j``'s children are ``j`` (feature absent) and
    ``j + K`` (present). Only the right children's feature sums are scattered over the rows;
    the left ones are parent minus right.

    Returns:
      ``(features int32 [D], leaves [2^D], leaf int32 [M])``.
    """
    m, n = z.shape
    rc = jnp.stack([r, c], axis=1)  # [M, 2]
    node = jnp.zeros((m,), jnp.int32)
    sr, nr = _node_sums(zbytes, node, jnp.ones((m,), bool), 1, rc, n)  # [1, n] each
    s_node, n_node = jnp.sum(r)[None], jnp.sum(c)[None]  # [K]
    used = jnp.zeros((n,), bool)
    feats = []
    for level in range(depth):
        k = 1 << level
        sl, nl = s_node[:, None] - sr, n_node[:, None] - nr
        parent = s_node ** 2 / (n_node + lam)  # [K]
        gain = jnp.sum(sr ** 2 / (nr + lam) + sl ** 2 / (nl + lam) - parent[:, None], axis=0)
        f = jnp.argmax(jnp.where(used, -jnp.inf, gain)).astype(jnp.int32)  # first max
        feats.append(f)
        used = used.at[f].set(True)
        right = z[:, f]  # [M]
        s_right, n_right = sr[:, f], nr[:, f]  # [K]
        if level + 1 < depth:
            sr_right, nr_right = _node_sums(zbytes, node, right, k, rc, n)  # [K, n]
            sr = jnp.concatenate([sr - sr_right, sr_right])  # [2K, n]
            nr = jnp.concatenate([nr - nr_right, nr_right])
        s_node = jnp.concatenate([s_node - s_right, s_right])  # [2K]
        n_node = jnp.concatenate([n_node - n_right, n_right])
        node = node + jnp.where(right, k, 0).astype(jnp.int32)
    leaves = lr * s_node / (n_node + lam)  # [2^D]
    return jnp.stack(feats), leaves, node


def fit_oblivious_gbt(z: jax.Array, y: jax.Array, valid: jax.Array, *, trees: int = 100,
                      depth: int = 6, lr: float = 0.1, lam: float = 1.0) -> ObliviousGBT:
    """Fits boosted oblivious trees to ``(z, y)`` by squared loss (module docstring).

    Pure and deterministic; jit it with ``trees`` and ``depth`` static (they fix the shapes);
    ``lr`` and ``lam`` may be traced. vmap over a leading axis of ``(z, y, valid)``.

    Args:
      z: ``bool [M, n]`` coalitions (rows).
      y: ``float [M]`` targets (the game values).
      valid: ``bool [M]``; rows with ``False`` are padding and influence nothing.
      trees: number of boosting rounds (>= 1).
      depth: requested depth (>= 1); the fitted depth is ``D = min(depth, n - 1)``, >= 1, so
        that a tree never uses every player.
      lr: learning rate (shrinkage), > 0.
      lam: L2 leaf regularisation (added to the leaf row count), > 0.

    Returns:
      ``ObliviousGBT(features int32 [trees, D], leaves [trees, 2^D], base [])`` in ``y``'s
      dtype.

    Raises:
      ValueError: naming the argument, for a non-bool ``z`` or ``valid``, mismatched shapes,
        ``trees < 1``, ``depth < 1``, ``lr <= 0`` or ``lam <= 0``.
    """
    z, y, valid = _check_data(z, y, valid)
    trees = _check_int("trees", trees, 1)
    depth = _check_int("depth", depth, 1)
    _check_positive("lr", lr)
    _check_positive("lam", lam)
    m, n = z.shape
    d = tree_depth(depth, n)
    dt = y.dtype
    lr = jnp.asarray(lr, dt)
    lam = jnp.asarray(lam, dt)
    c = valid.astype(dt)  # [M] row counts, 0 on padding
    y = jnp.where(valid, y, jnp.zeros((), dt))  # padding may hold inf / nan
    base = jnp.sum(y) / jnp.maximum(jnp.sum(c), 1)
    zbytes = _coalition_bytes(z)  # [M, G], constant over the rounds

    def round_(pred, _):
        r = (y - pred) * c
        feats, leaves, leaf = _fit_tree(z, zbytes, r, c, d, lam, lr)
        return pred + leaves[leaf], (feats, leaves)

    pred0 = jnp.broadcast_to(base, (m,))
    _, (features, leaves) = lax.scan(round_, pred0, None, length=trees)
    return ObliviousGBT(features=features, leaves=leaves, base=base)


def _check_model(model: ObliviousGBT):
    features, leaves = jnp.asarray(model.features), jnp.asarray(model.leaves)
    if features.ndim != 2 or not jnp.issubdtype(features.dtype, jnp.integer):
        raise ValueError(f"model.features must be int [trees, D], got {features.dtype} "
                         f"{tuple(features.shape)}")
    t, d = features.shape
    if leaves.shape != (t, 1 << d):
        raise ValueError(f"model.leaves must be [trees, 2^D] = [{t}, {1 << d}], got "
                         f"{tuple(leaves.shape)}")
    if jnp.shape(model.base) != ():
        raise ValueError(f"model.base must be a scalar, got shape {jnp.shape(model.base)}")
    return features, leaves


def leaf_index(features: jax.Array, z: jax.Array) -> jax.Array:
    """``int32 [M, trees]``: leaf of each row in each tree, ``sum_l z[features[t, l]] 2^l``."""
    bits = z[:, features].astype(jnp.int32)  # [M, trees, D]
    weights = jnp.left_shift(1, jnp.arange(features.shape[1], dtype=jnp.int32))
    return jnp.sum(bits * weights, axis=-1, dtype=jnp.int32)


def predict(model: ObliviousGBT, z: jax.Array) -> jax.Array:
    """``[M]``: ``base + sum_t leaves[t, leaf_t(z)]`` for coalitions ``z bool [M, n]``."""
    features, leaves = _check_model(model)
    z = jnp.asarray(z)
    if z.dtype != jnp.bool_ or z.ndim != 2:
        raise ValueError(f"z must be bool [M, n], got {z.dtype} {tuple(z.shape)}")
    idx = leaf_index(features, z)  # [M, T]
    vals = leaves[jnp.arange(features.shape[0])[None, :], idx]  # [M, T]
    return model.base + jnp.sum(vals, axis=1)


def tree_spectrum(model: ObliviousGBT, n: int):
    """The exact Walsh spectrum of ``predict(model, .)`` (eq. W1), duplicates merged.

    Tree ``t`` depends only on its ``D`` features ``f_0..f_{D-1}``; its leaf table indexed
    by ``u = sum_l z[f_l] 2^l`` is its truth table, so ``fwht(leaves[t]) / 2^D`` holds its
    coefficient on ``T = {f_l : bit l of U}`` for every ``U < 2^D`` (features are distinct,
    so ``|u cap U| = |S cap T|``). The base goes on the empty set. Equal sets of different
    trees are merged by a lexicographic sort of the packed masks and a segment sum.

    Args:
      model: a fitted ``ObliviousGBT`` (``features < n``).
      n: number of players (static).

    Returns:
      ``(masks uint32 [K, W], coefs [K], valid bool [K])`` with ``K = trees * 2^D``: the
      distinct sets first (in lexicographic mask order, the empty set first), then
      ``valid = False`` slots with mask 0 and coefficient 0. With ``chi_T(S) =
      (-1)^{|S cap T|}``, ``sum_T coefs_T chi_T(S) = predict(model, z(S))`` for every ``S``.
    """
    n = fourier.check_players(n)
    features, leaves = _check_model(model)
    t, d = features.shape
    if d > n:
        raise ValueError(f"model depth D = {d} exceeds n = {n} players")
    if _is_concrete(features) and features.size and not (
            0 <= int(jnp.min(features)) and int(jnp.max(features)) < n):
        raise ValueError(f"model.features must lie in [0, n = {n}), got range "
                         f"[{int(jnp.min(features))}, {int(jnp.max(features))}]")
    w = fourier.num_words(n)
    size = 1 << d
    coefs = fourier.fwht(leaves) / size  # [T, 2^D]
    coefs = coefs.at[0, 0].add(model.base)
    # Packed mask of feature f_l: bit f % 32 of word f // 32.
    f = features.astype(jnp.uint32)
    word_of = (f // 32)[..., None] == jnp.arange(w, dtype=jnp.uint32)  # [T, D, W]
    bit = jnp.where(word_of, jnp.left_shift(jnp.uint32(1), (f % 32)[..., None]),
                    jnp.uint32(0))  # [T, D, W]
    subset = (np.arange(size)[:, None] >> np.arange(d)[None, :]) & 1  # [2^D, D] numpy
    in_u = jnp.asarray(subset.astype(bool))
    # Features are distinct within a tree, so the OR over levels is a sum.
    masks = jnp.sum(jnp.where(in_u[None, :, :, None], bit[:, None, :, :], jnp.uint32(0)),
                    axis=2, dtype=jnp.uint32)  # [T, 2^D, W]
    return _merge(masks.reshape(t * size, w), coefs.reshape(t * size))


def _merge(masks, coefs):
    """Sums ``coefs`` of equal ``masks`` (``[K, W]``); distinct sets first."""
    k, w = masks.shape
    # lexsort: the last key is the primary one -> most significant word last.
    order = jnp.lexsort(tuple(masks[:, j] for j in range(w)))
    sm, sc = masks[order], coefs[order]
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(sm[1:] != sm[:-1], axis=1)])
    seg = jnp.cumsum(new.astype(jnp.int32)) - 1  # [K]
    out_coefs = jax.ops.segment_sum(sc, seg, num_segments=k)
    out_masks = jnp.zeros_like(masks).at[seg].set(sm)
    out_valid = jnp.arange(k, dtype=jnp.int32) <= seg[-1]
    return out_masks, out_coefs, out_valid


def select_support(masks: jax.Array, coefs: jax.Array, valid: jax.Array, n: int, k: int):
    """OddSHAP's regression support (spec §Algorithm 3): singletons + top odd sets.

    Rows ``0..n-1`` of ``A`` are the singletons ``{i}``; rows ``n..k-1`` the valid odd sets
    with ``|T| >= 3`` in decreasing ``|coef|`` (equal ``|coef|``: lower entry first). Slots
    left without a candidate get mask 0 and ``col_mask = False``. Even sets and size-1 sets
    are never candidates (the singletons are always in). jit-able with ``n``, ``k`` static.

    Args:
      masks: ``uint32 [K, W]`` packed sets (e.g. from ``tree_spectrum``; assumed distinct).
      coefs: ``float [K]`` their proxy coefficients ``g_hat(T)``.
      valid: ``bool [K]`` which entries are real.
      n: number of players (static).
      k: support size (static), ``k >= n``.

    Returns:
      ``(A uint32 [k, W], col_mask bool [k])``.

    Raises:
      ValueError: naming ``k`` and ``n`` for ``k < n``; for inconsistent shapes or dtypes.
    """
    n = fourier.check_players(n)
    k = _check_int("k", k, 0)
    if k < n:
        raise ValueError(f"k (support size) must be >= n (the {n} singletons), got k = {k}, "
                         f"n = {n}")
    masks, coefs, valid = jnp.asarray(masks), jnp.asarray(coefs), jnp.asarray(valid)
    w = fourier.num_words(n)
    if masks.dtype != jnp.uint32 or masks.ndim != 2 or masks.shape[1] != w:
        raise ValueError(f"masks must be uint32 [K, W = {w}], got {masks.dtype} "
                         f"{tuple(masks.shape)}")
    num = masks.shape[0]
    if coefs.shape != (num,) or not jnp.issubdtype(coefs.dtype, jnp.floating):
        raise ValueError(f"coefs must be float [K] = [{num}], got {coefs.dtype} "
                         f"{tuple(coefs.shape)}")
    if valid.shape != (num,) or valid.dtype != jnp.bool_:
        raise ValueError(f"valid must be bool [K] = [{num}], got {valid.dtype} "
                         f"{tuple(valid.shape)}")
    singles = fourier.pack(jnp.eye(n, dtype=bool))  # [n, W]
    extra = k - n
    if extra == 0:
        return singles, jnp.ones((n,), bool)
    size = fourier.popcount(masks)
    cand = valid & (size >= 3) & ((size & 1) == 1)
    key = jnp.where(cand, -jnp.abs(coefs), jnp.inf)
    order = jnp.argsort(key, stable=True)[:extra]  # ascending key = descending |coef|
    take = order.shape[0]
    ok = cand[order]
    chosen = jnp.where(ok[:, None], masks[order], jnp.uint32(0))
    if take < extra:  # fewer entries than slots
        chosen = jnp.concatenate([chosen, jnp.zeros((extra - take, w), jnp.uint32)])
        ok = jnp.concatenate([ok, jnp.zeros((extra - take,), bool)])
    return (jnp.concatenate([singles, chosen]),
            jnp.concatenate([jnp.ones((n,), bool), ok]))
