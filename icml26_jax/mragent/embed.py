"""Deterministic text embedders (spec §Method "Embedders"); a run uses one for every method.

``HashEmbedder`` [R] (the default):

* features of a text: stemmed word unigrams and bigrams, and character 3-5-grams of each
  word (padded ``<word>``), hashed with blake2b (never Python's salted ``hash``) into
  ``2**18`` signed buckets; per bucket a sublinear tf ``sign * (1 + log|count|)``;
* ``fit(texts)`` learns, from the benchmark's *contents* only (never questions or answers),
  the idf of each bucket and a 128-dim LSA basis: a randomized SVD (fixed seed, 2 power
  iterations) of the tf-idf matrix restricted to the buckets the contents use;
* ``encode(state, texts)`` -> ``[n, 640]`` float32, unit norm:
  ``[sqrt(1/2) * count-sketch(tf-idf) to 512 dims ; sqrt(1/2) * LSA projection to 128 dims]``
  (each half unit-normalised first; an all-zero half stays zero and the whole is
  renormalised). The sketch keeps exact word overlap, the LSA part carries co-occurrence
  synonymy ("moved to" ~ "lives in" when the contents use both with the same places).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from icml26_jax.mragent.metrics import stem

N_BUCKETS = 1 << 18
SKETCH_DIM = 512
LSA_DIM = 128
DIM = SKETCH_DIM + LSA_DIM
_WORD = re.compile(r"[a-z0-9]+")


def _h64(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")


def features(text: str) -> dict[int, float]:
    """Signed hashed feature counts of one text: ``{bucket: signed count}``."""
    words = [stem(w) for w in _WORD.findall(str(text).lower())]
    grams = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for w in words:
        p = f"<{w}>"
        grams += [f"c:{p[i:i + n]}" for n in (3, 4, 5) for i in range(len(p) - n + 1)]
    out: dict[int, float] = {}
    for g in grams:
        h = _h64(g)
        b = h % N_BUCKETS
        out[b] = out.get(b, 0.0) + (1.0 if (h >> 63) & 1 else -1.0)
    return out


def tf_matrix(texts) -> sp.csr_matrix:
    """``[n, N_BUCKETS]`` sublinear signed tf (CSR, float64)."""
    rows, cols, vals = [], [], []
    for i, t in enumerate(texts):
        for b, c in features(t).items():
            if c != 0.0:
                rows.append(i)
                cols.append(b)
                vals.append(math.copysign(1.0 + math.log(abs(c)), c))
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), N_BUCKETS))


@functools.lru_cache(maxsize=None)
def sketch_matrix() -> sp.csr_matrix:
    """The fixed count-sketch [N_BUCKETS, SKETCH_DIM]: bucket b goes to one dimension with a
    sign, both from blake2b of the bucket index."""
    h = np.array([_h64(f"sketch:{b}") for b in range(N_BUCKETS)], dtype=np.uint64)
    dims = (h % np.uint64(SKETCH_DIM)).astype(np.int64)
    signs = np.where((h >> np.uint64(63)) & np.uint64(1), 1.0, -1.0)
    return sp.csr_matrix((signs, (np.arange(N_BUCKETS), dims)), shape=(N_BUCKETS, SKETCH_DIM))


class HashState(NamedTuple):
    """A fitted :class:`HashEmbedder`: idf per bucket [N_BUCKETS], the active buckets [A]
    and the LSA basis [A, LSA_DIM] over them."""

    idf: np.ndarray
    active: np.ndarray
    basis: np.ndarray


class HashEmbedder:
    """Hashed tf-idf count-sketch + LSA embedder (see the module docstring)."""

    dim = DIM

    def __init__(self, seed: int = 0, power_iters: int = 2):
        self.seed, self.power_iters = int(seed), int(power_iters)

    def fit(self, texts) -> HashState:
        """idf and LSA basis from ``texts`` (the contents; never questions or answers)."""
        texts = list(texts)
        if not texts:
            raise ValueError("HashEmbedder.fit needs at least one text")
        tf = tf_matrix(texts)
        n = tf.shape[0]
        df = np.asarray((tf != 0).sum(axis=0)).ravel()
        idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        X = (tf @ sp.diags(idf)).tocsc()
        active = np.flatnonzero(df)
        Xa = X[:, active].tocsr()  # [n, A]
        k = min(LSA_DIM, max(1, min(Xa.shape) - 1))
        rng = np.random.default_rng(self.seed)
        omega = rng.standard_normal((Xa.shape[1], k + 10))
        Y = Xa @ omega
        for _ in range(self.power_iters):
            Y = Xa @ (Xa.T @ np.linalg.qr(Y)[0])
        Q = np.linalg.qr(Y)[0]  # [n, k + 10]
        B = (Xa.T @ Q).T  # [k + 10, A]
        _, _, vt = np.linalg.svd(B, full_matrices=False)
        basis = np.zeros((active.size, LSA_DIM))
        basis[:, :k] = vt[:k].T
        # Fix the SVD's sign ambiguity: the largest-|.| entry of each direction is positive.
        piv = np.argmax(np.abs(basis), axis=0)
        sgn = np.sign(basis[piv, np.arange(LSA_DIM)])
        basis *= np.where(sgn == 0, 1.0, sgn)
        return HashState(idf.astype(np.float64), active.astype(np.int64), basis)

    def encode(self, state: HashState, texts) -> np.ndarray:
        """``[n, 640]`` float32 unit vectors."""
        texts = list(texts)
        X = (tf_matrix(texts) @ sp.diags(state.idf)).tocsr()
        sk = np.asarray((X @ sketch_matrix()).todense())
        lsa = np.asarray(X[:, state.active] @ state.basis)
        parts = []
        for p in (sk, lsa):
            nrm = np.linalg.norm(p, axis=1, keepdims=True)
            parts.append(np.sqrt(0.5) * np.where(nrm > 0, p / np.where(nrm > 0, nrm, 1.0), 0.0))
        v = np.concatenate(parts, axis=1)
        nrm = np.linalg.norm(v, axis=1, keepdims=True)
        return (v / np.where(nrm > 0, nrm, 1.0)).astype(np.float32)


class Fitted:
    """A fitted :class:`HashEmbedder` bound to its state: ``encode(texts) -> [n, 640]``.

    Repeated texts (tags, cues, a content embedded for clustering and again for the graph)
    are served from a per-object cache, so every method sees bit-identical vectors.
    """

    def __init__(self, embedder: HashEmbedder, state: HashState):
        self.embedder, self.state = embedder, state
        self.dim = embedder.dim
        self._cache: dict[str, np.ndarray] = {}

    @classmethod
    def fit(cls, texts, seed: int = 0) -> "Fitted":
        emb = HashEmbedder(seed=seed)
        return cls(emb, emb.fit(texts))

    def encode(self, texts) -> np.ndarray:
        texts = [str(t) for t in texts]
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if todo:
            for t, v in zip(todo, self.embedder.encode(self.state, todo)):
                self._cache[t] = v
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._cache[t] for t in texts])


def __getattr__(name):
    """``embed.MiniLMEmbedder``, imported on first use (an optional extra, spec "Embedders")."""
    if name == "MiniLMEmbedder":
        from icml26_jax.mragent.minilm import MiniLMEmbedder
        return MiniLMEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
