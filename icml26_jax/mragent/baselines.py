"""Passive retrieval primitives of the baselines (spec §Baselines and peers).

In progress: the scoring cores that the graph-level baselines (``dense_topk``, ``bm25_topk``,
``graph_expand``, ``ppr_retrieve``, ``full_context``) will wrap once the memory graph exists:

* :func:`topk_ids` -- the top k by score, ties broken by the smaller id (every method uses
  it, so equal scores never reorder between methods);
* :class:`BM25` -- Okapi BM25 (k1 = 1.5, b = 0.75) with rank-bm25's idf
  ``log((N - n + 0.5) / (n + 0.5))`` and its floor for negative idfs (``epsilon`` x the mean
  idf), so scores equal ``rank_bm25.BM25Okapi``;
* :func:`personalized_pagerank` -- power iterations in jnp on an undirected weighted graph,
  teleporting to the seed distribution, dangling mass returned to the seeds (networkx's
  convention); damping 0.85, 50 iterations by default (HippoRAG-lite).
"""

from __future__ import annotations

import collections
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Retrieval(NamedTuple):
    """What a passive method read: content ids (best first) and its cost counters."""

    ids: tuple[int, ...]
    cost: dict


def topk_ids(scores, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first; equal scores: smaller index first."""
    s = np.asarray(scores, np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if isinstance(k, bool) or int(k) < 0:
        raise ValueError(f"k must be an integer >= 0, got {k!r}")
    order = np.lexsort((np.arange(s.size), -s))  # primary: -score, secondary: index
    return order[: int(k)]


class BM25:
    """Okapi BM25 over tokenised documents (rank-bm25's ``BM25Okapi`` formula)."""

    def __init__(self, docs: list[list[str]], k1: float = 1.5, b: float = 0.75,
                 epsilon: float = 0.25):
        if not docs:
            raise ValueError("BM25 needs at least one document")
        self.k1, self.b, self.epsilon = float(k1), float(b), float(epsilon)
        self.tf = [collections.Counter(d) for d in docs]
        self.dl = np.asarray([len(d) for d in docs], np.float64)
        self.avgdl = float(self.dl.mean()) if self.dl.sum() > 0 else 1.0
        df = collections.Counter(w for d in docs for w in set(d))
        n = len(docs)
        idf = {w: math.log(n - c + 0.5) - math.log(c + 0.5) for w, c in df.items()}
        mean_idf = sum(idf.values()) / max(len(idf), 1)
        floor = self.epsilon * mean_idf
        self.idf = {w: (v if v >= 0 else floor) for w, v in idf.items()}

    def scores(self, query: list[str]) -> np.ndarray:
        """[n_docs] BM25 score of every document for the query tokens."""
        out = np.zeros(len(self.tf))
        norm = self.k1 * (1.0 - self.b + self.b * self.dl / self.avgdl)
        for w in query:
            if w not in self.idf:
                continue
            f = np.asarray([t.get(w, 0) for t in self.tf], np.float64)
            out += self.idf[w] * f * (self.k1 + 1.0) / (f + norm)
        return out


@functools.partial(jax.jit, static_argnames=("iters",))
def _ppr(W, p, damping, iters):
    deg = W.sum(axis=1)
    P = jnp.where(deg[:, None] > 0, W / jnp.where(deg > 0, deg, 1.0)[:, None], 0.0)
    dangling = deg == 0

    def step(x, _):
        lost = jnp.sum(jnp.where(dangling, x, 0.0))
        return damping * (x @ P + lost * p) + (1.0 - damping) * p, None

    x, _ = jax.lax.scan(step, p, None, length=iters)
    return x


def personalized_pagerank(weights, seeds, damping: float = 0.85, iters: int = 50) -> np.ndarray:
    """Personalised PageRank of every node.

    Args:
      weights: [n, n] symmetric non-negative edge weights (an undirected graph).
      seeds: [n] non-negative seed weights (normalised here), e.g. 1 on the question's cues.
      damping: probability of following an edge (networkx ``alpha``).
      iters: power iterations (the error shrinks as ``damping ** iters``).

    Returns:
      [n] float64 scores summing to 1.
    """
    W = np.asarray(weights, np.float64)
    p = np.asarray(seeds, np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or p.shape != (W.shape[0],):
        raise ValueError(f"weights must be [n, n] and seeds [n], got {W.shape} and {p.shape}")
    if np.any(W < 0) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError("weights and seeds must be non-negative, with at least one seed > 0")
    if not 0.0 < damping < 1.0:
        raise ValueError(f"damping must be in (0, 1), got {damping}")
    x = _ppr(jnp.asarray(W, jnp.float32), jnp.asarray(p / p.sum(), jnp.float32),
             jnp.float32(damping), int(iters))
    x = np.asarray(x, np.float64)
    return x / x.sum()
