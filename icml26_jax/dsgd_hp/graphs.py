"""Communication graphs and their Metropolis–Hastings mixing matrices (assumption A1).

Every graph here is undirected and connected; ``W`` is symmetric and doubly stochastic with
``lam = ||W - J||_2 < 1`` (``J = 11^T / n``), computed in float64 with ``numpy.linalg.eigvalsh``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

GRAPHS = ("ring", "torus", "exp", "er", "complete")


class Graph(NamedTuple):
    """A communication graph over ``n`` users.

    Attributes:
      name: one of ``GRAPHS``.
      adjacency: [n, n] bool, symmetric, no self loops.
      W: [n, n] float64 Metropolis–Hastings mixing matrix.
      lam: ``||W - J||_2``, the mixing rate; the spectral gap is ``1 - lam``.
      offsets: for circulant graphs (ring, exp), the neighbour offsets ``j - i mod n`` in
        ``(0, n)``, sorted; ``None`` otherwise.
    """

    name: str
    adjacency: np.ndarray
    W: np.ndarray
    lam: float
    offsets: tuple[int, ...] | None

    @property
    def n(self) -> int:
        return self.adjacency.shape[0]

    @property
    def gap(self) -> float:
        return 1.0 - self.lam


def metropolis_hastings(adj: np.ndarray) -> np.ndarray:
    """``w_ij = 1 / (1 + max(deg_i, deg_j))`` on edges and ``w_ii = 1 - sum_{j != i} w_ij``.

    Args:
      adj: [n, n] symmetric boolean adjacency without self loops.

    Returns:
      [n, n] float64 symmetric doubly stochastic matrix.
    """
    adj = np.asarray(adj, dtype=bool)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be square, got shape {adj.shape}")
    if not np.array_equal(adj, adj.T) or adj.diagonal().any():
        raise ValueError("adjacency must be symmetric with an empty diagonal")
    deg = adj.sum(1)
    W = np.where(adj, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    W[np.diag_indices_from(W)] = 1.0 - W.sum(1)
    return W


def mixing_rate(W: np.ndarray) -> float:
    """``lam = ||W - J||_2`` in float64 (W symmetric, so the largest |eigenvalue|)."""
    W = np.asarray(W, dtype=np.float64)
    n = W.shape[0]
    return float(np.abs(np.linalg.eigvalsh(W - np.full((n, n), 1.0 / n))).max())


def spectral_gap(W: np.ndarray) -> float:
    """``1 - ||W - J||_2``."""
    return 1.0 - mixing_rate(W)


def check_mixing(W: np.ndarray, *, atol: float = 1e-10) -> float:
    """Checks assumption A1 and returns ``lam``; ``ValueError`` naming the violated part."""
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"W must be square, got shape {W.shape}")
    if not np.allclose(W, W.T, atol=atol):
        raise ValueError("W must be symmetric")
    if not np.allclose(W.sum(1), 1.0, atol=atol):
        raise ValueError("rows of W must sum to 1")
    lam = mixing_rate(W)
    if W.shape[0] > 1 and not lam < 1.0 - 1e-12:
        raise ValueError(f"W must mix (||W - J||_2 < 1), got {lam:.6f}: is the graph connected?")
    return lam


def _circulant(n: int, offsets) -> np.ndarray:
    offs = sorted({o % n for o in offsets} - {0})
    adj = np.zeros((n, n), dtype=bool)
    i = np.arange(n)
    for o in offs:
        adj[i, (i + o) % n] = True
    return adj | adj.T


def _connected(adj: np.ndarray) -> bool:
    seen = np.zeros(adj.shape[0], dtype=bool)
    seen[0] = True
    frontier = seen.copy()
    while frontier.any():
        frontier = adj[frontier].any(0) & ~seen
        seen |= frontier
    return bool(seen.all())


def torus_shape(n: int) -> tuple[int, int]:
    """``(r, c)``: r the largest divisor of n not above sqrt(n); ValueError if r < 3."""
    r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    if r < 3:
        raise ValueError(f"graph='torus' needs n = r * c with 3 <= r <= c, got n={n} (r={r})")
    return r, n // r


def make_graph(name: str, n: int, *, p: float | None = None, seed: int = 0) -> Graph:
    """Builds a named graph with Metropolis–Hastings weights.

    Args:
      name: ``ring``, ``torus`` (r x c wrap-around grid), ``exp`` (i ~ i +- 2^k mod n,
        k = 0..ceil(log2 n) - 1), ``er`` (Erdős–Rényi with edge probability p, resampled until
        connected) or ``complete``.
      n: number of users.
      p: ER edge probability; default ``2 ln n / n``.
      seed: ER sampling seed.

    Returns:
      The ``Graph``.
    """
    if name not in GRAPHS:
        raise ValueError(f"unknown graph {name!r}; allowed: {', '.join(GRAPHS)}")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    offsets = None
    if name == "ring":
        if n < 3:
            raise ValueError(f"graph='ring' needs n >= 3, got n={n}")
        adj = _circulant(n, [1])
    elif name == "exp":
        ks = range(math.ceil(math.log2(n))) if n > 1 else []
        adj = _circulant(n, [2**k for k in ks])
    elif name == "complete":
        adj = ~np.eye(n, dtype=bool)
    elif name == "torus":
        r, c = torus_shape(n)
        idx = np.arange(n).reshape(r, c)
        adj = np.zeros((n, n), dtype=bool)
        for shifted in (np.roll(idx, 1, 0), np.roll(idx, 1, 1)):
            adj[idx.ravel(), shifted.ravel()] = True
        adj = adj | adj.T
    else:  # er
        if n < 2:
            raise ValueError(f"graph='er' needs n >= 2, got n={n}")
        p = 2 * math.log(n) / n if p is None else float(p)
        if not 0.0 < p <= 1.0:
            raise ValueError(f"ER edge probability p must be in (0, 1], got p={p}")
        rng = np.random.default_rng(seed)
        for _ in range(100):
            upper = np.triu(rng.random((n, n)) < p, 1)
            adj = upper | upper.T
            if _connected(adj):
                break
        else:
            raise ValueError(f"no connected ER graph with n={n}, p={p:.4f} in 100 tries; raise p")
    if name in ("ring", "exp") and n > 1:
        offsets = tuple(int(o) for o in np.flatnonzero(adj[0]))
    W = metropolis_hastings(adj)
    return Graph(name, adj, W, check_mixing(W), offsets)
