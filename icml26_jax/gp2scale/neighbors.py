"""Sparsity patterns of compactly supported kernels (spec §Method "Sparsity pattern").

The pattern is where the kernel *can* be non-zero: every pair within whitened distance 1
(``||(x - x') / ls_eff|| <= 1``), the diagonal, and (kernels 2 / 3) every pair of points under
one common bump group. Nothing is dropped: entries of the pattern beyond the current support
hold exact zeros (phi and its first three derivatives vanish at d = 1), so a pattern built at
the length-scale upper bound (``pattern_mode="fixed"``) serves every smaller support exactly.

Host-side numpy/scipy (the pattern is data, like fvGP's block assembly), built once per
support; ``Pattern`` is a NamedTuple of arrays so it can be passed to jitted functions as an
argument. Its length ``C`` is padded to a capacity bucket (a power of two by default; four
buckets per octave with ``"pow2_4"``) so a likelihood compiles once per bucket; padding
entries sit at ``(n - 1, n - 1)`` as the last entries of the last row and carry data exactly
0.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np


class Pattern(NamedTuple):
    rows: np.ndarray  # int32 [C] row of each stored entry (CSR order: row-major, sorted cols)
    cols: np.ndarray  # int32 [C]
    indptr: np.ndarray  # int32 [n + 1]; indptr[-1] == C (padding belongs to the last row)
    diag: np.ndarray  # int32 [n] position of (i, i) in rows / cols
    nnz: np.ndarray  # int32 [] number of real entries (positions >= nnz are padding)

    @property
    def n(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def capacity(self) -> int:
        return int(self.rows.shape[0])

    def valid(self) -> np.ndarray:
        """``bool [C]``: real entries (not padding)."""
        return np.arange(self.capacity) < int(self.nnz)


def morton_order(x: np.ndarray, bits: int | None = None) -> np.ndarray:
    """Permutation sorting points ``x [N, D]`` along a Morton (Z-order) curve: neighbours in
    space become neighbours in index, so the matrix is near-banded."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"x must be [N, D], got shape {x.shape}")
    d = x.shape[1]
    bits = bits or max(1, min(21, 63 // d))
    lo, hi = x.min(0), x.max(0)
    q = ((x - lo) / np.where(hi > lo, hi - lo, 1.0) * (2 ** bits - 1)).astype(np.uint64)
    code = np.zeros(len(x), np.uint64)
    for b in range(bits):
        for k in range(d):
            code |= ((q[:, k] >> np.uint64(b)) & np.uint64(1)) << np.uint64(b * d + k)
    return np.argsort(code, kind="stable")


def _whiten(x: np.ndarray, ls_eff) -> np.ndarray:
    ls = np.broadcast_to(np.asarray(ls_eff, np.float64), (x.shape[1],))
    if not np.all(ls > 0):
        raise ValueError(f"ls_eff must be > 0, got {ls}")
    return np.asarray(x, np.float64) / ls


def pairs_kdtree(xw: np.ndarray) -> np.ndarray:
    """``int64 [P, 2]`` pairs ``i < j`` with ``||xw_i - xw_j|| <= 1`` (scipy cKDTree)."""
    from scipy.spatial import cKDTree

    return cKDTree(xw).query_pairs(1.0, output_type="ndarray").astype(np.int64)


def pairs_cells(xw: np.ndarray) -> np.ndarray:
    """The same pairs from a numpy cell list (unit cells in whitened space, 3^D neighbours)."""
    n, d = xw.shape
    cell = np.floor(xw - xw.min(0)).astype(np.int64)
    dims = cell.max(0) + 3
    strides = np.cumprod(np.concatenate([[1], dims[:-1]]))
    key = (cell + 1) @ strides
    order = np.argsort(key, kind="stable")
    skey = key[order]
    out = []
    for off in itertools.product((-1, 0, 1), repeat=d):
        nkey = key + np.asarray(off, np.int64) @ strides
        lo = np.searchsorted(skey, nkey, "left")
        hi = np.searchsorted(skey, nkey, "right")
        cnt = hi - lo
        i = np.repeat(np.arange(n), cnt)
        start = np.repeat(lo - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        j = order[start + np.arange(cnt.sum())]
        keep = i < j
        i, j = i[keep], j[keep]
        dist2 = np.sum((xw[i] - xw[j]) ** 2, axis=1)
        keep = dist2 <= 1.0
        out.append(np.stack([i[keep], j[keep]], 1))
    return np.concatenate(out) if out else np.zeros((0, 2), np.int64)


def _capacity(nnz: int, capacity) -> int:
    """``"pow2"``: the next power of two; ``"pow2_4"``: the next of four geometric buckets per
    octave (2^(k/4), at most 19 % padding instead of 100 %); ``"exact"``; or an int."""
    if capacity == "pow2":
        return 1 << max(0, int(np.ceil(np.log2(max(nnz, 1)))))
    if capacity == "pow2_4":
        k = int(np.ceil(4 * np.log2(max(nnz, 1)) - 1e-9))
        return max(nnz, int(np.ceil(2.0 ** (k / 4))))
    if capacity == "exact":
        return nnz
    cap = int(capacity)
    if cap < nnz:
        raise ValueError(f"capacity={cap} is smaller than the pattern's {nnz} entries")
    return cap


def from_pairs(n: int, pairs: np.ndarray, capacity="pow2") -> Pattern:
    """Symmetric CSR pattern with diagonal from upper pairs ``[P, 2]`` (i < j, unique)."""
    i, j = pairs[:, 0], pairs[:, 1]
    diag = np.arange(n, dtype=np.int64)
    r = np.concatenate([i, j, diag])
    c = np.concatenate([j, i, diag])
    order = np.argsort(r * n + c, kind="stable")
    r, c = r[order], c[order]
    nnz = len(r)
    cap = _capacity(nnz, capacity)
    rows = np.full(cap, n - 1, np.int32)
    cols = np.full(cap, n - 1, np.int32)
    rows[:nnz], cols[:nnz] = r, c
    counts = np.bincount(r, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indptr[-1] = cap
    dpos = np.flatnonzero(r == c)
    return Pattern(rows, cols, indptr.astype(np.int32), dpos.astype(np.int32),
                   np.asarray(nnz, np.int32))


def _group_pairs(groups) -> np.ndarray:
    out = []
    for g in groups:
        g = np.unique(np.asarray(g, np.int64))
        if len(g) > 1:
            a, b = np.triu_indices(len(g), 1)
            out.append(np.stack([g[a], g[b]], 1))
    return np.concatenate(out) if out else np.zeros((0, 2), np.int64)


def build_pattern(x: np.ndarray, ls_eff, *, capacity="pow2", method: str = "kdtree",
                  groups=()) -> Pattern:
    """The pattern of a kernel with local support ``ls_eff`` (``[D]`` or scalar) on ``x [N, D]``
    plus all pairs inside each index array of ``groups`` (points under one bump group:
    kernel 3's far-field pairs). ``method``: ``"kdtree"`` (scipy ``cKDTree.query_pairs``
    with ``output_type="ndarray"``) or ``"cells"`` (numpy cell list, no scipy)."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"x must be [N, D], got shape {x.shape}")
    xw = _whiten(x, ls_eff)
    if method == "kdtree":
        pairs = pairs_kdtree(xw)
    elif method == "cells":
        pairs = pairs_cells(xw)
    else:
        raise ValueError(f"method must be 'kdtree' or 'cells', got {method!r}")
    gp = _group_pairs(groups)
    if len(gp):
        pairs = np.unique(np.concatenate([pairs, gp]), axis=0)
    return from_pairs(len(x), pairs, capacity)


def check_covers(pattern: Pattern, x: np.ndarray, ls_eff) -> None:
    """Raises ``ValueError`` if some pair within the support ``ls_eff`` is not in
    ``pattern`` (a pattern built for a smaller support would drop non-zeros)."""
    need = pairs_kdtree(_whiten(np.asarray(x, np.float64), ls_eff))
    if pattern.n != len(x):
        raise ValueError(f"pattern is for N={pattern.n} points, x has N={len(x)}")
    if not len(need):
        return
    valid = pattern.valid()
    have = pattern.rows[valid].astype(np.int64) * pattern.n + pattern.cols[valid]
    missing = ~np.isin(need[:, 0] * pattern.n + need[:, 1], have)
    if missing.any():
        raise ValueError(f"pattern was built for a smaller support: {int(missing.sum())} of "
                         f"{len(need)} pairs within ls_eff={np.asarray(ls_eff)} are missing; "
                         "rebuild it at the current (or the upper-bound) support")


def cross_pattern(xs: np.ndarray, x: np.ndarray, ls_eff) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` int32 of all test-train pairs ``(s, i)`` with
    ``||(xs_s - x_i) / ls_eff|| <= 1``, sorted by test row."""
    from scipy.spatial import cKDTree

    a, b = _whiten(np.asarray(xs, np.float64), ls_eff), _whiten(np.asarray(x, np.float64),
                                                                ls_eff)
    m = cKDTree(a).sparse_distance_matrix(cKDTree(b), 1.0, output_type="ndarray")
    order = np.lexsort((m["j"], m["i"]))
    return m["i"][order].astype(np.int32), m["j"][order].astype(np.int32)


def grid_neighbor_count(shape: tuple[int, ...], ls_px) -> int:
    """Exact number of ordered pairs (diagonal included) of a full pixel grid ``shape`` within
    whitened distance < 1 of each other, for support ``ls_px`` (pixels, per axis or scalar):
    ``sum over offsets o with ||o / ls|| < 1 of prod_k (shape_k - |o_k|)``."""
    shape = tuple(int(s) for s in shape)
    ls = np.broadcast_to(np.asarray(ls_px, np.float64), (len(shape),))
    if not np.all(ls > 0):
        raise ValueError(f"ls_px must be > 0, got {ls}")
    ranges = [np.arange(-min(int(np.floor(l)), s - 1), min(int(np.floor(l)), s - 1) + 1)
              for l, s in zip(ls, shape)]
    grids = np.meshgrid(*ranges, indexing="ij")
    d2 = sum((g / l) ** 2 for g, l in zip(grids, ls))
    mult = np.ones_like(d2)
    for g, s in zip(grids, shape):
        mult = mult * (s - np.abs(g))
    return int(np.sum(mult[d2 < 1.0]))
