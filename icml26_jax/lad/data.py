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
NUM_CLASSES = 10
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
    pos_probs = _check_probs(pos_probs, n_cand)
    ids = np.flatnonzero(pool.split == SPLITS.index(split))
    labels = pool.labels[ids]
    unit = _unit_rows(pool.images[ids])
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
            distract = _nearest_distinct(unit, labels, [a], n_cand - 1)[0]
            if np.any(distract < 0):
                raise ValueError(f"split {split!r} has fewer than n_cand - 1 = {n_cand - 1} "
                                 f"classes besides class {c}: no adversarial episode")
            distract = rng.permutation(distract)
        row = np.insert(distract, gts[e], a)
        out_ids[e] = ids[row]
    return Episodes(pool.images[out_ids], out_ids, pool.labels[out_ids[np.arange(n), gts]],
                    gts.astype(np.int32))


def _unit_rows(images) -> np.ndarray:
    """[P, 8, 8] -> [P, 64] rows of unit norm (the pixel-cosine geometry of hard negatives)."""
    flat = images.reshape(len(images), -1)
    return flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)


def _nearest_distinct(unit, labels, anchors, count: int) -> np.ndarray:
    """[A, count] split positions of the images most pixel-cosine-similar to each anchor, one
    per class other than the anchor's, nearest first (the adversarial distractors before
    their shuffle); -1 past the classes the split has. Each class's pick is its most similar
    image (the lowest position among ties) and the picks are ordered by similarity, then
    position: the first image of each new class in the stably sorted similarities, so a
    shorter list is a prefix of a longer one."""
    anchors = np.asarray(anchors, np.int64)
    # One matrix-vector product per anchor, as make_episodes has always computed it: a
    # matrix product could round differently and reorder near ties.
    sim = np.stack([unit @ unit[a] for a in anchors]).reshape(len(anchors), len(labels))
    own = labels[anchors]
    best = np.zeros((len(anchors), NUM_CLASSES), np.int64)
    val = np.full((len(anchors), NUM_CLASSES), -np.inf)
    for c in range(NUM_CLASSES):
        if np.any(labels == c):
            best[:, c] = np.argmax(np.where(labels == c, sim, -np.inf), axis=1)
            val[:, c] = np.where(own == c, -np.inf, np.take_along_axis(sim, best[:, c:c + 1],
                                                                        1)[:, 0])
    by = np.lexsort((best, -val), axis=-1)[:, :count]  # similarity descending, then position
    return np.where(np.take_along_axis(val, by, 1) > -np.inf,
                    np.take_along_axis(best, by, 1), -1)


# --------------------------------------------------------------------------- episodes in bulk
#
# Training draws ~14 small groups of episodes per step from a fresh generator per step;
# ``make_episodes`` spends its time in a Python loop over episodes. The functions below make
# exactly its random draws (the same generator calls on the same bit stream, in its order,
# one call per kind of draw instead of one per episode) and build the episodes of many
# groups at once, vectorized; tests/lad/test_data.py checks the result against
# ``make_episodes`` itself, array for array.

MAX_DRAWS = 2 * MAX_N - 3  # a random episode of MAX_N: Floyd's MAX_N - 1, shuffle's MAX_N - 2


class SplitTables(NamedTuple):
    """Lookup tables of one split for :func:`episodes_from_draws` (P images in the split).

    Attributes:
      ids: [P] pool indices of the split's images.
      labels: [P] their classes.
      others: [10, P] row c: split positions of the images not of class c, ascending (the
        population ``make_episodes`` samples random distractors from), -1 padded.
      n_others: [10] the valid length of each row of ``others``.
      nearest: [P, 9] the adversarial distractors of every anchor (``_nearest_distinct``),
        -1 where the split has fewer other classes.
    """

    ids: np.ndarray
    labels: np.ndarray
    others: np.ndarray
    n_others: np.ndarray
    nearest: np.ndarray


def split_tables(pool: DigitPool, split: str) -> SplitTables:
    """The :class:`SplitTables` of ``split`` (build once: ~0.1 s for the 1200 training
    images)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got split={split!r}")
    ids = np.flatnonzero(pool.split == SPLITS.index(split))
    labels = pool.labels[ids]
    P = len(ids)
    others = np.full((NUM_CLASSES, P), -1, np.int64)
    n_others = np.zeros((NUM_CLASSES,), np.int64)
    for c in range(NUM_CLASSES):
        o = np.flatnonzero(labels != c)
        others[c, :len(o)], n_others[c] = o, len(o)
    nearest = _nearest_distinct(_unit_rows(pool.images[ids]), labels, np.arange(P),
                                NUM_CLASSES - 1)
    return SplitTables(ids, labels, others, n_others, nearest)


def draw_episodes(rng: np.random.Generator, tables: SplitTables, n_cand: int, n: int,
                  mode: str, pos_probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The random draws of ``make_episodes(pool, split, n_cand, n, mode, pos_probs, rng)``,
    leaving ``rng`` in the same state, without building the episodes.

    NumPy's ``Generator.choice(..., replace=False)`` on a population under 10,000 is Floyd's
    sample (one Lemire-bounded integer in [0, j] per j) and then a shuffle (one in [0, i] per
    i, descending); ``Generator.permutation`` swaps with masked rejection (legacy
    ``randint``'s method). An array of bounds draws the same integers, in order, from the
    same 32-bit stream in one call (the legacy generator shares ``rng``'s bit generator).

    Returns:
      gts [n] (the ground-truth positions), anchors [n] (split positions of the matching
      images) and draws [n, d]: random mode, Floyd's n_cand - 1 integers then the shuffle's
      n_cand - 2; adversarial mode, the permutation's n_cand - 2 swap partners.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
    _check_n(n_cand)
    cdf = _check_probs(pos_probs, n_cand).cumsum()  # Generator.choice(p=...)'s inversion
    cdf /= cdf[-1]
    gts = cdf.searchsorted(rng.random(n), side="right")
    anchors = rng.integers(0, len(tables.ids), size=n)
    m = n_cand - 1
    swaps = np.arange(m - 1, 0, -1)  # the Fisher-Yates bounds i = m - 1, ..., 1
    if mode == "adversarial":
        return gts, anchors, np.random.RandomState(rng.bit_generator).randint(
            0, swaps + 1, size=(n, m - 1))
    bounds = np.empty((n, 2 * m - 1), np.int64)
    bounds[:, :m] = (tables.n_others[tables.labels[anchors]] - m)[:, None] + np.arange(m)
    bounds[:, m:] = swaps  # Floyd's j = pop - m, ..., pop - 1, then the shuffle's
    return gts, anchors, rng.integers(0, bounds, endpoint=True)


def episodes_from_draws(pool: DigitPool, tables: SplitTables, n_cand, adversarial, gts,
                        anchors, draws) -> Episodes:
    """E episodes of mixed N and mode from their :func:`draw_episodes` draws, vectorized.

    Args:
      pool: the digits.
      tables: the split's tables.
      n_cand: [E] candidates per episode.
      adversarial: [E] bool, the episode's mode.
      gts, anchors: [E] from :func:`draw_episodes`.
      draws: [E, >= d] each episode's draws in its first d columns.

    Returns:
      :class:`Episodes` padded to ``MAX_N`` candidates: ``image_ids`` -1 and ``images`` 0
      after an episode's ``n_cand``.
    """
    n_cand, gts, anchors = (np.asarray(x, np.int64) for x in (n_cand, gts, anchors))
    adversarial = np.asarray(adversarial, bool)
    draws = np.asarray(draws, np.int64)
    E = len(n_cand)
    rows = np.arange(E)
    m = n_cand - 1
    w = max(int(m.max(initial=1)), 1)
    draws = np.pad(draws, ((0, 0), (0, max(0, 2 * w - draws.shape[1]))))
    # Random mode: Floyd's sample of m positions of the population 0..pop-1, where a repeat
    # of an earlier pick takes j instead; then the shuffle.
    pop = tables.n_others[tables.labels[anchors]]
    pick = np.zeros((E, w), np.int64)
    for t in range(w):
        v = draws[:, t]
        seen = np.any(pick[:, :t] == v[:, None], axis=1)
        pick[:, t] = np.where(seen, pop - m + t, v)
    perm_col = np.where(adversarial, 0, m)  # where each episode's swap partners start
    pick = _swap_desc(pick, m, draws, perm_col)
    # (Columns past m, and every column of an adversarial row, are unused: clipped in range.)
    rand = tables.others[tables.labels[anchors][:, None], np.minimum(pick, pop[:, None] - 1)]
    # Adversarial mode: the nearest distinct classes, permuted.
    near = tables.nearest[anchors, :w]
    if np.any(adversarial[:, None] & (near < 0) & (np.arange(w) < m[:, None])):
        raise ValueError(f"the split has fewer than max(n_cand) - 1 = {w} classes besides "
                         f"some anchor's: no adversarial episode of n_cand={n_cand.max()}")
    near = _swap_desc(near, m, draws, perm_col)
    distract = np.where(adversarial[:, None], near, rand)  # [E, w]
    # The matching image inserted at the ground-truth position.
    k = np.arange(MAX_N)[None, :]
    d_idx = np.clip(np.where(k < gts[:, None], k, k - 1), 0, w - 1)
    row = np.where(k == gts[:, None], anchors[:, None], distract[rows[:, None], d_idx])
    valid = k < n_cand[:, None]
    image_ids = np.where(valid, tables.ids[np.where(valid, row, 0)], -1)
    images = np.where(valid[..., None, None], pool.images[np.maximum(image_ids, 0)], 0)
    return Episodes(images.astype(pool.images.dtype), image_ids,
                    tables.labels[anchors].astype(pool.labels.dtype), gts.astype(np.int32))


def _swap_desc(x, m, draws, col0):
    """Fisher-Yates as NumPy runs it, per row: for i = m - 1 down to 1, swap x[i] with
    x[draws[col0 + (m - 1 - i)]]; x [E, w], m and col0 [E]."""
    x = x.copy()
    rows = np.arange(len(x))
    for q in range(x.shape[1] - 1):
        i = m - 1 - q
        live = i >= 1
        r, i = rows[live], i[live]
        j = draws[r, col0[live] + q]
        x[r, i], x[r, j] = x[r, j], x[r, i]
    return x


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


def tokenize_mixed(ep: Episodes, n_cand, t_max: int = T_MAX) -> Batch:
    """:func:`tokenize` of episodes of different N at once: ``ep`` padded to ``MAX_N``
    candidates (as :func:`episodes_from_draws` gives them), ``n_cand`` [E] each episode's N.
    Row e equals ``tokenize`` of episode e alone, right padded to ``t_max``; ``spans`` is
    None (it differs per row)."""
    n = np.asarray(n_cand, np.int64)
    E = len(n)
    if E and (n.min() < 1 or n.max() > MAX_N):
        raise ValueError(f"n_cand must be in [1, {MAX_N}], got {n.min()}..{n.max()}")
    if E and t_max < seq_len(int(n.max())):
        raise ValueError(f"t_max={t_max} is shorter than the {seq_len(int(n.max()))} tokens "
                         f"of N={int(n.max())}")
    # The layout of every N, from tokenize itself (query 0), then each row's query.
    blank = [tokenize(Episodes(np.zeros((1, k, 8, 8), np.float32), np.zeros((1, k), np.int64),
                               np.zeros((1,), np.int32), np.zeros((1,), np.int32)), t_max)
             for k in range(1, MAX_N + 1)]
    tok = np.stack([b.tokens[0] for b in blank])[n - 1]  # [E, t_max]
    rows = np.arange(E)
    tok[rows, seq_len(n) - 3] += np.asarray(ep.query, np.int32)  # the caption's <c>
    is_p = np.stack([b.is_patch[0] for b in blank])[n - 1]
    # Image k's patches sit at 2 + 6 k .. 5 + 6 k whatever N is; images past N are dropped.
    p = patches_of(ep.images)  # [E, MAX_N, 4, 16]
    p = np.where((np.arange(p.shape[1]) < n[:, None])[..., None, None], p, np.float32(0))
    slots = (2 + TOKENS_PER_IMAGE * np.arange(p.shape[1])[:, None] + np.arange(4)).ravel()
    pat = np.zeros((E, t_max, 16), np.float32)
    pat[:, slots] = p.reshape(E, -1, 16)
    return Batch(tok, pat, is_p, (seq_len(n) - 1).astype(np.int32), None)


def index_token_ids(n: int) -> np.ndarray:
    """Token ids [n] of the answers "1".."n"."""
    _check_n(n)
    return INDEX0 + np.arange(n, dtype=np.int32)


def _check_probs(pos_probs, n_cand: int) -> np.ndarray:
    pos_probs = np.asarray(pos_probs, np.float64)
    if pos_probs.shape != (n_cand,) or np.any(pos_probs < 0) or abs(pos_probs.sum() - 1) > 1e-6:
        raise ValueError(f"pos_probs must be a distribution over {n_cand} positions, got "
                         f"{pos_probs}")
    return pos_probs


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_N:
        raise ValueError(f"N (candidates per episode) must be an integer in [1, {MAX_N}], "
                         f"got {n!r}")
