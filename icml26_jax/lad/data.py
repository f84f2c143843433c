"""Digit retrieval episodes: the offline substitute of the paper's COCO benchmarks (spec §Data).

An episode is N candidate 8x8 digit images (``sklearn.datasets.load_digits``, shipped inside
scikit-learn) and the caption "find digit c"; exactly one candidate has class c and the
answer is its 1-based index. Images are split by id into train / calibration / test pools
(1200 / 100 / 497, seeded), so no image crosses splits.

* *Random* mode: distractors are images of the other classes, drawn uniformly.
* *Adversarial* mode (the analogue of CLIP hard negatives): same-class images dropped, the
  rest ranked by pixel cosine similarity to the anchor, the N-1 nearest of distinct classes.
* Training draws the ground-truth position from a skewed distribution (:data:`POS_SKEW`):
  the source of the position bias. Test episodes draw it uniformly.

Token layout of one sequence (right padded to ``t_max``)::

    <bos> (<img> p p p p </img>) x N  find digit <c> answer :

where the 4 ``p`` slots carry the image's 2x2 grid of 4x4 patches (16 values each); every
image uses the same delimiters, so an index is known only from absolute position. The answer
is one of N index tokens, separate from the 10 class tokens of the caption.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Vocabulary.
PAD, BOS, IMG, IMG_END, PATCH, FIND, DIGIT, ANSWER, COLON = range(9)
CLASS0 = 9  # class tokens CLASS0 + c, c in 0..9
INDEX0 = 19  # index tokens INDEX0 + k for answer k + 1, k in 0..MAX_N-1
MAX_N = 8
VOCAB = INDEX0 + MAX_N
TOKENS_PER_IMAGE = 6  # <img>, 4 patches, </img>
CAPTION = 5  # find digit <c> answer :
MODES = ("random", "adversarial")
SPLITS = ("train", "cal", "test")
SPLIT_SIZES = (1200, 100)  # train, cal; the rest is test
POS_SKEW = {4: (0.40, 0.08, 0.07, 0.45),
            8: (0.30, 0.04, 0.03, 0.02, 0.03, 0.08, 0.30, 0.20)}


def seq_len(n: int) -> int:
    """Tokens of an episode with n candidates: 1 + 6 n + 5 (54 for n = 8)."""
    return 1 + TOKENS_PER_IMAGE * n + CAPTION


T_MAX = seq_len(MAX_N)


class DigitPool(NamedTuple):
    """All 1797 digits: images [n, 8, 8] float32 in [0, 1], labels [n] int32, split [n] int32
    (index into :data:`SPLITS`)."""

    images: np.ndarray
    labels: np.ndarray
    split: np.ndarray


class Episodes(NamedTuple):
    """E episodes of N candidates: images [E, N, 8, 8], image_ids [E, N] (pool indices),
    query [E] (the caption's class), gt [E] (0-based position of the matching image)."""

    images: np.ndarray
    image_ids: np.ndarray
    query: np.ndarray
    gt: np.ndarray


class Batch(NamedTuple):
    """Model inputs: tokens [B, T] int32, patches [B, T, 16] float32 (zero off patch slots),
    is_patch [B, T] bool, last_idx [B] int32 (the token that predicts the index), spans
    [N, 2] int32 (start, end) of every image including its delimiters."""

    tokens: np.ndarray
    patches: np.ndarray
    is_patch: np.ndarray
    last_idx: np.ndarray
    spans: np.ndarray


def load_pool(seed: int = 0) -> DigitPool:
    """The digits, split by image id with ``default_rng(seed)``: 1200 train, 100 calibration,
    497 test."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(images))
    split = np.full(len(images), 2, np.int32)
    split[order[:SPLIT_SIZES[0]]] = 0
    split[order[SPLIT_SIZES[0]:sum(SPLIT_SIZES)]] = 1
    return DigitPool(images, d.target.astype(np.int32), split)


def position_probs(n: int, pos_skew: str = "default") -> np.ndarray:
    """Training distribution [n] of the ground-truth position.

    ``"none"``: uniform. ``"default"``: the tables of :data:`POS_SKEW` for n = 4 and 8; other
    n interpolate a table over relative position (k / (n - 1)): the n = 4 profile below 4, the
    n = 8 profile above.
    """
    if pos_skew not in ("default", "none"):
        raise ValueError(f"pos_skew must be 'default' or 'none', got pos_skew={pos_skew!r}")
    _check_n(n)
    if pos_skew == "none" or n == 1:
        return np.full(n, 1.0 / n)
    if n in POS_SKEW:
        return np.asarray(POS_SKEW[n], np.float64)
    table = np.asarray(POS_SKEW[4] if n < 4 else POS_SKEW[8])
    p = np.interp(np.arange(n) / (n - 1), np.linspace(0, 1, len(table)), table)
    return p / p.sum()


def make_episodes(pool: DigitPool, split: str, n_cand: int, n: int, mode: str,
                  pos_probs, rng: np.random.Generator) -> Episodes:
    """``n`` episodes of ``n_cand`` candidates from the images of ``split``.

    Args:
      pool: the digits.
      split: ``"train"``, ``"cal"`` or ``"test"``.
      n_cand: candidates per episode (N, 2..8).
      n: number of episodes.
      mode: ``"random"`` or ``"adversarial"`` distractors.
      pos_probs: [N] distribution of the ground-truth position.
      rng: the generator (all randomness).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got split={split!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
    _check_n(n_cand)
    pos_probs = np.asarray(pos_probs, np.float64)
    if pos_probs.shape != (n_cand,) or np.any(pos_probs < 0) or abs(pos_probs.sum() - 1) > 1e-6:
        raise ValueError(f"pos_probs must be a distribution over {n_cand} positions, got "
                         f"{pos_probs}")
    ids = np.flatnonzero(pool.split == SPLITS.index(split))
    labels = pool.labels[ids]
    flat = pool.images[ids].reshape(len(ids), -1)
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)
    out_ids = np.empty((n, n_cand), np.int64)
    gts = rng.choice(n_cand, size=n, p=pos_probs)
    anchors = rng.integers(0, len(ids), size=n)
    for e in range(n):
        a = anchors[e]
        c = labels[a]
        if mode == "random":
            others = np.flatnonzero(labels != c)
            distract = rng.choice(others, size=n_cand - 1, replace=False)
        else:
            sim = unit @ unit[a]
            sim[labels == c] = -np.inf
            distract, seen = [], set()
            for j in np.argsort(-sim, kind="stable"):
                if labels[j] not in seen:
                    seen.add(labels[j])
                    distract.append(j)
                    if len(distract) == n_cand - 1:
                        break
            distract = rng.permutation(np.asarray(distract))
        row = np.insert(distract, gts[e], a)
        out_ids[e] = ids[row]
    return Episodes(pool.images[out_ids], out_ids, pool.labels[out_ids[np.arange(n), gts]],
                    gts.astype(np.int32))


def _take(ep, rows, perms):
    """Episodes ``rows`` with candidates reordered by ``perms`` (new slot j = old perms[j]).

    Generic over the episode type (:class:`Episodes` here, ``realdata.CaptionEpisodes`` for
    the real benchmarks): every field shaped [E, N, ...] is reordered, ``gt`` follows its
    image, every other field is taken by row."""
    E, N = ep.image_ids.shape
    out = {}
    for name, x in zip(ep._fields, ep):
        x = np.asarray(x)
        if name == "gt":
            out[name] = np.argmax(perms == x[rows][:, None], axis=1).astype(np.int32)
        elif x.shape[:2] == (E, N):
            p = perms.reshape(perms.shape + (1,) * (x.ndim - 2))
            out[name] = np.take_along_axis(x[rows], p, 1)
        else:
            out[name] = x[rows]
    return type(ep)(**out)


def shuffle(ep, num_shuffles: int, rng: np.random.Generator):
    """Each episode under ``num_shuffles`` orders: [E * T], episode-major (row e T + t).
    Shuffle 0 is the identity; the others are distinct random permutations (per episode).
    The ground truth moves with its image."""
    E, N = ep.image_ids.shape
    if num_shuffles < 1:
        raise ValueError(f"num_shuffles must be >= 1, got num_shuffles={num_shuffles}")
    if num_shuffles > np.prod(np.arange(1, N + 1)):
        raise ValueError(f"num_shuffles={num_shuffles} exceeds the {N}! orders of N={N}")
    perms = np.empty((E, num_shuffles, N), np.int64)
    for e in range(E):
        seen = {tuple(range(N))}
        perms[e, 0] = np.arange(N)
        t = 1
        while t < num_shuffles:
            p = rng.permutation(N)
            if tuple(p) not in seen:
                seen.add(tuple(p))
                perms[e, t] = p
                t += 1
    rows = np.repeat(np.arange(E), num_shuffles)
    return _take(ep, rows, perms.reshape(E * num_shuffles, N))


def cyclic_variants(ep):
    """The N cyclic left shifts of every episode, [E * N] episode-major (row e N + s): variant
    s puts old candidate (j + s) mod N at slot j, so the ground truth visits every position
    once and moves with its image (gt_s = (gt - s) mod N)."""
    E, N = ep.image_ids.shape
    perms = (np.arange(N)[None, :] + np.arange(N)[:, None]) % N  # [s, j]
    rows = np.repeat(np.arange(E), N)
    return _take(ep, rows, np.tile(perms, (E, 1)))


def spans(n: int) -> np.ndarray:
    """[n, 2] (start, end) token span of every image, delimiters included."""
    s = 1 + TOKENS_PER_IMAGE * np.arange(n)
    return np.stack([s, s + TOKENS_PER_IMAGE], 1).astype(np.int32)


def patches_of(images) -> np.ndarray:
    """[..., 8, 8] -> [..., 4, 16]: the 2x2 grid of 4x4 patches, row-major."""
    x = np.asarray(images, np.float32)
    x = x.reshape(x.shape[:-2] + (2, 4, 2, 4))
    x = np.moveaxis(x, -3, -2)  # [..., 2, 2, 4, 4]
    return x.reshape(x.shape[:-4] + (4, 16))


def tokenize(ep: Episodes, t_max: int = T_MAX) -> Batch:
    """Model inputs of episodes (one N per batch), right padded to ``t_max``."""
    E, N = ep.image_ids.shape
    T = seq_len(N)
    if t_max < T:
        raise ValueError(f"t_max={t_max} is shorter than the {T} tokens of N={N}")
    tok = np.full((E, t_max), PAD, np.int32)
    pat = np.zeros((E, t_max, 16), np.float32)
    is_p = np.zeros((E, t_max), bool)
    tok[:, 0] = BOS
    sp = spans(N)
    p = patches_of(ep.images)  # [E, N, 4, 16]
    for k, (s, _) in enumerate(sp):
        tok[:, s] = IMG
        tok[:, s + 1:s + 5] = PATCH
        tok[:, s + 5] = IMG_END
        pat[:, s + 1:s + 5] = p[:, k]
        is_p[:, s + 1:s + 5] = True
    c0 = 1 + TOKENS_PER_IMAGE * N
    tok[:, c0] = FIND
    tok[:, c0 + 1] = DIGIT
    tok[:, c0 + 2] = CLASS0 + ep.query
    tok[:, c0 + 3] = ANSWER
    tok[:, c0 + 4] = COLON
    return Batch(tok, pat, is_p, np.full((E,), T - 1, np.int32), sp)


def index_token_ids(n: int) -> np.ndarray:
    """Token ids [n] of the answers "1".."n"."""
    _check_n(n)
    return INDEX0 + np.arange(n, dtype=np.int32)


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_N:
        raise ValueError(f"N (candidates per episode) must be an integer in [1, {MAX_N}], "
                         f"got {n!r}")
