"""Sparse covariance assembly (spec §Method "Assembly").

``assemble`` evaluates the kernel on every pair of a ``neighbors.Pattern`` in one vectorised
pass and returns ``A = K + V`` as a ``jax.experimental.sparse.BCSR`` (the fast CPU format;
BCOO mat-mats are ~20x slower). Pass the pattern's arrays *as arguments* of the jitted
function that calls this (never close over them: XLA would constant-fold the indices).

Kernel 2 is matrix-free [R]: ``BumpOperator(S, G)`` is ``A = S + G G^T`` with ``S`` the
Wendland part plus noise (sparse) and ``G = [f(X), g(X)] [N, 2]``; the outer products are
never stored.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from icml26_jax.gp2scale import kernels
from icml26_jax.gp2scale.neighbors import Pattern


@functools.partial(jax.jit, static_argnames=("kind", "order"))
def pattern_values(kind: str, params, x: jax.Array, pattern: Pattern, *,
                   order: int | None = None) -> jax.Array:
    """``[C]`` stored values of ``A``'s sparse part: kernel values on the pattern's pairs,
    the noise on the diagonal, exactly 0 on padding."""
    n = pattern.indptr.shape[0] - 1
    if x.shape[0] != n:
        raise ValueError(f"x has N={x.shape[0]} points but the pattern is for N={n}")
    vals = kernels.pair_values(kind, params, x, pattern.rows, pattern.cols, order=order)
    valid = jnp.arange(vals.shape[0], dtype=jnp.int32) < pattern.nnz
    vals = jnp.where(valid, vals, 0.0)
    return vals.at[pattern.diag].add(jnp.broadcast_to(params.noise, (n,)).astype(vals.dtype))


def to_bcsr(data: jax.Array, pattern: Pattern) -> sparse.BCSR:
    n = pattern.indptr.shape[0] - 1
    return sparse.BCSR((data, pattern.cols, pattern.indptr), shape=(n, n))


class BumpOperator(NamedTuple):
    """``A = S + G G^T`` (kernel 2): ``S`` sparse (Wendland + noise), ``G [N, 2]``."""
    S: sparse.BCSR
    G: jax.Array
    s_diag: jax.Array  # [N] diagonal of S

    def matmat(self, b: jax.Array) -> jax.Array:
        return self.S @ b + self.G @ (self.G.T @ b)

    def diag(self) -> jax.Array:
        return self.s_diag + jnp.sum(self.G * self.G, axis=1)


class SparseOperator(NamedTuple):
    """``A`` stored as one BCSR (kernels 1 and 3)."""
    A: sparse.BCSR
    a_diag: jax.Array  # [N]

    def matmat(self, b: jax.Array) -> jax.Array:
        return self.A @ b

    def diag(self) -> jax.Array:
        return self.a_diag


def operator(kind: str, params, x: jax.Array, pattern: Pattern, *, order: int | None = None):
    """The covariance operator ``A = K + V`` of kernel ``kind``: a ``SparseOperator`` or, for
    ``"bump"``, a ``BumpOperator``. Differentiable in ``params``."""
    data = pattern_values(kind, params, x, pattern, order=order)
    if kind == "bump":
        return BumpOperator(to_bcsr(data, pattern), kernels.bump_features(params, x),
                            data[pattern.diag])
    return SparseOperator(to_bcsr(data, pattern), data[pattern.diag])


def assemble(kind: str, params, x: jax.Array, pattern: Pattern, *,
             order: int | None = None):
    """``A = K + V`` as a ``BCSR`` (kernels 1 and 3) or a ``BumpOperator`` (kernel 2)."""
    op = operator(kind, params, x, pattern, order=order)
    return op if kind == "bump" else op.A


def to_scipy(a: sparse.BCSR):
    """The same matrix as a ``scipy.sparse.csr_array`` (padding entries kept as zeros)."""
    import scipy.sparse as ss

    return ss.csr_array((np.asarray(a.data), np.asarray(a.indices), np.asarray(a.indptr)),
                        shape=a.shape)
