"""Synthetic tasks of the AdaRoPE experiment: MQAR (T1, T1-distance) and passkey (T2).

All generators are deterministic functions of a ``np.random.Generator``; the experiment
draws training batches from ``np.random.default_rng((seed, step))`` and fixes evaluation
sets by ``np.random.default_rng(10_000 + length)``.

Token layout of MQAR with K keys and V values: keys are ids ``[0, K)``, values ``[K, K+V)``,
``?`` is ``K+V`` and pad ``K+V+1`` (``vocab_size = K + V + 2``).
"""

from __future__ import annotations

import numpy as np

def distance_buckets(length: int) -> tuple[tuple[int, int], ...]:
    """T1-distance buckets at context ``length`` D: [0, D/4), [D/4, D/2), [D/2, D).

    At D = 256 these are the spec's [0, 64), [64, 128), [128, 256).
    """
    if length < 4 or length % 4:
        raise ValueError(f"distance length must be a positive multiple of 4, got {length}")
    q = length // 4
    return ((0, q), (q, 2 * q), (2 * q, length))


DISTANCE_BUCKETS = distance_buckets(256)


def mqar_vocab_size(num_keys: int, num_values: int) -> int:
    """Vocabulary of :func:`mqar_batch`: keys, values, ``?`` and pad."""
    return num_keys + num_values + 2


def mqar_num_pairs(length: int, num_queries: int = 8) -> int:
    """n = (T - 2Q) / 2 key-value pairs in a sequence of length T."""
    return (length - 2 * num_queries) // 2


def mqar_batch(rng: np.random.Generator, batch: int, length: int, num_keys: int,
               num_values: int, num_queries: int = 8,
               distance_bucket: tuple[int, int] | None = None,
               repeat_distractors: bool = False) -> dict[str, np.ndarray]:
    """Multi-query associative recall: ``k1 v1 ... kn vn ? q1 ? q2 ... ? qQ``.

    Every one of the n = (T - 2Q)/2 slots holds a key-value pair; each q_j is the key of a
    distinct pair (the queried pairs), and the target at the position of q_j is that pair's
    value (the loss mask is 1 only there). Solving it needs a previous-token head (a value
    token learns its key) and a content-retrieval head (q_j finds the value whose key
    matches), so it cannot be solved from a bag of tokens.

    Args:
      rng: NumPy generator.
      batch: B.
      length: T; ``T - 2Q`` must be even and give ``n >= Q`` pairs.
      num_keys, num_values: K and V.
      num_queries: Q.
      distance_bucket: ``(lo, hi)``: every queried key sits at distance ``lo <= t_q - t_k <
        hi`` from its query token (T1-distance); None: the queried pairs are uniform over the
        slots.
      repeat_distractors: False (the spec's MQAR): all n keys of a sequence are distinct,
        which needs ``n <= K``. True: the Q queried keys are distinct and occur once; the
        other n - Q pairs (the distractors) draw their keys with replacement from the
        ``K - Q`` keys that are not queried, so any length works with a small key set and
        every answer stays unambiguous.

    Returns:
      ``tokens``, ``targets`` int32 ``[B, T]``; ``mask`` float32 ``[B, T]``; ``query_pos``
      and ``key_pos`` int32 ``[B, Q]`` (positions of q_j and of its key).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if num_queries < 1:
        raise ValueError(f"num_queries must be >= 1, got {num_queries}")
    if (length - 2 * num_queries) % 2 or length < 4 * num_queries:
        raise ValueError(f"length={length} must be even and >= 4 num_queries="
                         f"{4 * num_queries} (n = (T - 2Q)/2 pairs, n >= Q)")
    if num_values < 2:
        raise ValueError(f"num_values must be >= 2, got {num_values}")
    n = mqar_num_pairs(length, num_queries)
    if repeat_distractors:
        if num_keys <= num_queries and n > num_queries:
            raise ValueError(f"repeat_distractors needs num_keys={num_keys} > num_queries="
                             f"{num_queries} (distractor keys are the non-queried ones)")
    elif n > num_keys:
        raise ValueError(f"length={length} needs n={n} unique keys but num_keys={num_keys}; "
                         "use more keys, a shorter length or repeat_distractors=True")
    query_pos = 2 * n + 2 * np.arange(num_queries) + 1  # position of q_j; `?` precedes it
    dist = query_pos[:, None] - 2 * np.arange(n)[None, :]  # [Q, n]
    if distance_bucket is None:
        ok = np.ones_like(dist, bool)
    else:
        lo, hi = distance_bucket
        ok = (dist >= lo) & (dist < hi)
        if ok.sum(1).min() < num_queries:
            raise ValueError(f"distance_bucket={distance_bucket} holds fewer than "
                             f"num_queries={num_queries} pairs at length={length}")
    # The queried pairs' slots, each in its distance bucket (if any).
    rows = np.arange(batch)[:, None]
    used = np.zeros((batch, n), bool)
    qslot = np.zeros((batch, num_queries), np.int64)
    for j in range(num_queries):
        score = np.where(ok[j][None, :] & ~used, rng.random((batch, n)), -1.0)
        qslot[:, j] = np.argmax(score, axis=1)
        used[np.arange(batch), qslot[:, j]] = True
    perm = np.argsort(rng.random((batch, num_keys)), axis=1)  # a random key order per row
    qkeys = perm[:, :num_queries]
    keys = np.empty((batch, n), np.int64)  # the key of every slot
    if repeat_distractors:
        pool = perm[:, num_queries:]
        pick = rng.integers(0, max(num_keys - num_queries, 1), (batch, n))
        keys[:] = np.take_along_axis(pool, pick, axis=1) if pool.shape[1] else 0
    else:
        # Distinct keys: the non-queried slots take the next keys of the permutation in order.
        other = np.argsort(used, axis=1, kind="stable")[:, :n - num_queries]
        keys[rows, other] = perm[:, num_queries:n]
    keys[rows, qslot] = qkeys
    values = rng.integers(0, num_values, (batch, n))
    tokens = np.empty((batch, length), np.int32)
    tokens[:, 0:2 * n:2] = keys
    tokens[:, 1:2 * n:2] = num_keys + values
    tokens[:, 2 * n::2] = num_keys + num_values  # `?`
    tokens[:, query_pos] = qkeys
    targets = np.full((batch, length), num_keys + num_values + 1, np.int32)  # pad
    targets[:, query_pos] = num_keys + values[rows, qslot]
    mask = np.zeros((batch, length), np.float32)
    mask[:, query_pos] = 1.0
    return {"tokens": tokens, "targets": targets, "mask": mask,
            "query_pos": np.broadcast_to(query_pos, (batch, num_queries)).astype(np.int32),
            "key_pos": (2 * qslot).astype(np.int32)}


def passkey_batch(rng: np.random.Generator, filler: np.ndarray, depth: float,
                  num_digits: int = 4) -> dict[str, np.ndarray]:
    """Passkey retrieval (T2): filler text with ``P d1..d4`` at a depth and ``Q`` at the end.

    Args:
      rng: NumPy generator (draws the digits).
      filler: int ``[B, T]`` filler tokens with ids ``>= 12`` (e.g. HMM text offset by 12);
        ids 0-9 are digits, 10 is ``P`` and 11 is ``Q``.
      depth: where the passkey starts, as a fraction of the room before the question.
      num_digits: passkey length.

    Returns:
      ``tokens``, ``targets``, ``mask`` as :func:`mqar_batch`; the answer digits are the
      targets at the last ``num_digits`` positions (predicted after ``Q`` and the earlier
      answer digits, teacher-forced).
    """
    B, T = filler.shape
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    if filler.min() < 12:
        raise ValueError("filler ids must be >= 12 (0-11 are digits, P and Q)")
    room = T - 2 * (num_digits + 1) - 1
    if room < 0:
        raise ValueError(f"filler length {T} too short for a {num_digits}-digit passkey")
    digits = rng.integers(0, 10, (B, num_digits)).astype(np.int32)
    start = int(round(depth * room))
    tokens = filler.astype(np.int32).copy()
    tokens[:, start] = 10
    tokens[:, start + 1:start + 1 + num_digits] = digits
    q = T - num_digits - 1
    tokens[:, q] = 11
    tokens[:, q + 1:] = digits[:, :num_digits]
    targets = np.zeros_like(tokens)
    mask = np.zeros((B, T), np.float32)
    # Position q + j predicts digit j (positions q .. q + num_digits - 1).
    targets[:, q:q + num_digits] = digits
    mask[:, q:q + num_digits] = 1.0
    return {"tokens": tokens, "targets": targets, "mask": mask}
