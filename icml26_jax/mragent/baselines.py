"""Passive baselines (spec §Baselines and peers): what a retrieve-then-reason pipeline reads.

Every method returns a :class:`Retrieval` (content ids, best first, and the cost counters
:func:`cost` counts the same way as :func:`icml26_jax.mragent.agent.reconstruct`), and every
method's evidence goes through the same
:func:`~icml26_jax.mragent.reasoner.extractive_answer`:

* :func:`dense_topk` -- the top k contents by cos(e_q, e_content);
* :func:`bm25_topk` -- Okapi BM25 (k1 = 1.5, b = 0.75) over the stemmed content words; the
  scorer :class:`BM25` equals rank-bm25's ``BM25Okapi`` (idf ``log((N - n + .5) / (n + .5))``
  with its epsilon floor);
* :func:`graph_expand` -- every content of every tag of every question cue (1 hop), plus the
  contents of all cues of those contents (2 hops); no pruning (A-Mem / GraphRAG-lite); capped
  at ``READ_CAP`` reads, and the cap is reported;
* :func:`ppr_retrieve` -- personalised PageRank on the undirected cue-content graph seeded by
  the question cues, damping 0.85, 50 power iterations in jnp (:func:`personalized_pagerank`
  equals ``networkx.pagerank`` with a personalisation; HippoRAG-lite);
* :func:`full_context` -- the latest contents that fit a token budget.

:func:`topk_ids` breaks equal scores by the smaller id, so ties never reorder between methods.
"""

from __future__ import annotations

import collections
import functools
import math
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.core import mesh as mesh_lib


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
    """Power iterations for seed distributions ``p`` [..., n] (a batch shares ``W``)."""
    deg = W.sum(axis=1)
    P = jnp.where(deg[:, None] > 0, W / jnp.where(deg > 0, deg, 1.0)[:, None], 0.0)
    dangling = deg == 0

    def step(x, _):
        lost = jnp.sum(jnp.where(dangling, x, 0.0), axis=-1, keepdims=True)
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


# ----------------------------------------------------------------------------- graph level

READ_CAP = 5000  # spec Pitfalls: the speakers' cues own hundreds of contents


def shown_chars(graph, ids) -> int:
    """Characters shown to a reasoner for these contents: id, date and text (the same count
    for every method)."""
    return sum(len(graph.content_text[i]) + len(graph.content_id[i]) + 14 for i in ids)


def cost(graph, question: str, ids, *, tool_calls: int = 1, cap_hit: bool = False) -> dict:
    """The cost counters of a passive method that shows ``ids`` once."""
    return {"contents_read": len(ids), "tags_read": 0,
            "tokens": (len(question) + shown_chars(graph, ids)) / 4.0,
            "tool_calls": tool_calls, "rounds": 1, "cap_hit": bool(cap_hit)}


def _retrieval(graph, question, ids, **kw) -> Retrieval:
    ids = tuple(int(i) for i in ids)
    return Retrieval(ids, cost(graph, question, ids, **kw))


def dense_topk(graph, plan, k: int) -> Retrieval:
    """The top ``k`` contents by cos(e_q, e_content)."""
    return _retrieval(graph, plan.question, topk_ids(graph.content_emb @ plan.q_emb, k))


def bm25_tokens(text: str) -> list[str]:
    """BM25's tokens: lowercased, stemmed words (:func:`icml26_jax.mragent.metrics.stem`)."""
    from icml26_jax.mragent.metrics import stem
    return [stem(w) for w in _WORDS.findall(str(text).lower())]


_WORDS = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=64)
def _bm25_index(graph_key, texts: tuple[str, ...]) -> BM25:
    return BM25([bm25_tokens(t) for t in texts])


def bm25_topk(graph, plan, k: int) -> Retrieval:
    """The top ``k`` contents by Okapi BM25 of the question's tokens."""
    index = _bm25_index(graph.sample_id, graph.content_text)
    return _retrieval(graph, plan.question, topk_ids(index.scores(bm25_tokens(plan.question)), k))


def graph_expand(graph, plan, hops: int) -> Retrieval:
    """All contents of all tags of all question cues (``hops`` = 1), plus the contents of all
    cues of those contents (``hops`` = 2). No pruning; capped at ``READ_CAP`` reads."""
    if hops not in (1, 2):
        raise ValueError(f"hops must be 1 or 2, got {hops!r}")
    seen: dict[int, None] = {}
    for c in plan.cues:
        for i in graph.contents_of(c):
            seen.setdefault(int(i))
    if hops == 2:
        cues = dict.fromkeys(q for i in list(seen) for q in graph.content_cues[i])
        for c in cues:
            for i in graph.contents_of(c):
                seen.setdefault(int(i))
    ids = list(seen)
    cap_hit = len(ids) > READ_CAP
    # Best first (the answerer does not care; the order only matters at the cap).
    ids = [ids[j] for j in topk_ids(graph.content_emb[ids] @ plan.q_emb, READ_CAP)] if ids else []
    return _retrieval(graph, plan.question, ids, tool_calls=1 + hops, cap_hit=cap_hit)


def ppr_scores(graph, seed_sets, damping: float = 0.85, iters: int = 50,
               mesh=None) -> np.ndarray:
    """[len(seed_sets), n_contents] personalised PageRank of the contents, one row per
    question, on the undirected cue-content graph (nodes: contents then cues; padded to a
    multiple of 256 so conversations share one program). Empty seed sets give zeros.

    With a ``mesh`` (``core.mesh.data_mesh``) the question rows are sharded over its devices
    (``core.mesh.batched``: rows padded to a multiple of the device count, gathered on every
    process); without one they run on one device."""
    C, Q = graph.n_contents, graph.n_cues
    n = C + Q
    n_pad = 256 * math.ceil(n / 256)
    W = np.zeros((n_pad, n_pad), np.float32)
    e = graph.edges
    W[e[:, 2], C + e[:, 0]] = 1.0
    W[C + e[:, 0], e[:, 2]] = 1.0
    P = np.zeros((len(seed_sets), n_pad), np.float32)
    for r, seeds in enumerate(seed_sets):
        for c in seeds:
            P[r, C + int(c)] = 1.0
    live = P.sum(1) > 0
    P[live] /= P[live].sum(1, keepdims=True)
    if not live.any():
        return np.zeros((len(seed_sets), C))
    if mesh is None:
        x = np.array(_ppr(jnp.asarray(W), jnp.asarray(P), jnp.float32(damping), int(iters)))
    else:  # question rows over every device, the graph replicated
        Wd = mesh_lib.replicate(W, mesh)
        x = np.array(mesh_lib.batched(lambda Pb: _ppr(Wd, Pb, jnp.float32(damping), int(iters)),
                                      len(P), len(P), P, mesh=mesh))
    x[~live] = 0.0
    return x[:, :C]


def ppr_retrieve(graph, plan, k: int, scores: np.ndarray | None = None) -> Retrieval:
    """The top ``k`` contents by personalised PageRank seeded by the question's cues
    (``scores``: this question's precomputed row of :func:`ppr_scores`)."""
    if scores is None:
        scores = ppr_scores(graph, [plan.cues])[0]
    if not plan.cues:
        return _retrieval(graph, plan.question, [])
    return _retrieval(graph, plan.question, topk_ids(scores, k))


def full_context(graph, plan, token_budget: int) -> Retrieval:
    """The latest contents (by conversation order) whose text fits ``token_budget`` tokens."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    ids, used = [], len(plan.question) / 4.0
    for i in range(graph.n_contents - 1, -1, -1):
        t = shown_chars(graph, [i]) / 4.0
        if used + t > token_budget:
            break
        ids.append(i)
        used += t
    return _retrieval(graph, plan.question, ids)
