"""Synthetic tasks of the AdaRoPE experiment: MQAR (T1, T1-distance) and passkey (T2).

All generators are deterministic functions of a ``np.random.Generator``; the experiment
draws training batches from ``np.random.default_rng((seed, step))`` and fixes evaluation
sets by ``np.random.default_rng(10_000 + length)``.

Token layout of MQAR with K keys and V values: keys are ids ``[0, K)``, values ``[K, K+V)``,
``?`` is ``K+V`` and pad ``K+V+1`` (``vocab_size = K + V + 2``).
"""

from __future__ import annotations

import numpy as np

DISTANCE_BUCKETS = ((0, 64), (64, 128), (128, 256))


def mqar_vocab_size(num_keys: int, num_values: int, num_filler: int = 0) -> int:
    """Vocabulary of :func:`mqar_batch`: keys, values, ``?``, pad and filler tokens."""
    return num_keys + num_values + 2 + num_filler


def mqar_num_pairs(length: int, num_queries: int = 8) -> int:
    """n = (T - 2Q) / 2 key-value pairs in a sequence of length T."""
    return (length - 2 * num_queries) // 2


def mqar_batch(rng: np.random.Generator, batch: int, length: int, num_keys: int,
               num_values: int, num_queries: int = 8,
               distance_bucket: tuple[int, int] | None = None, num_pairs: int | None = None,
               num_filler: int = 0) -> dict[str, np.ndarray]:
    """Multi-query associative recall: ``k1 v1 ... kn vn ? q1 ? q2 ... ? qQ``.

    Keys are unique within a sequence; each q_j is one of them (distinct queries); the target
    at the position of q_j is the value bound to that key, and the loss mask is 1 only there.
    Solving it needs a previous-token head (a value token learns its key) and a
    content-retrieval head (q_j finds the value whose key matches), so it cannot be solved
    from a bag of tokens.

    Args:
      rng: NumPy generator.
      batch: B.
      length: T; ``T - 2Q`` must be even and give ``Q <= n <= num_keys`` pairs.
      num_keys, num_values: K and V.
      num_queries: Q.
      distance_bucket: ``(lo, hi)``: every queried key sits at distance ``lo <= t_q - t_k <
        hi`` from its query token (T1-distance); None: uniform over the pairs.
      num_pairs: if set (``Q <= num_pairs <= n``), only that many of the n two-token slots
        hold key-value pairs (a random ordered subset); the other slots hold two filler
        tokens drawn uniformly from ``num_filler`` ids ``[K+V+2, K+V+2+num_filler)``. The
        pairs then spread over a context that grows with T, with filler as distractors.
      num_filler: size of the filler vocabulary (needed with ``num_pairs < n``).

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
    n = mqar_num_pairs(length, num_queries)
    if num_pairs is None and n > num_keys:
        raise ValueError(f"length={length} needs n={n} unique keys but num_keys={num_keys}; "
                         "use more keys or a shorter length")
    if num_values < 2:
        raise ValueError(f"num_values must be >= 2, got {num_values}")
    slots = n
    if num_pairs is not None:
        if not num_queries <= num_pairs <= slots:
            raise ValueError(f"num_pairs={num_pairs} must be in [num_queries={num_queries}, "
                             f"{slots}] at length={length}")
        if num_pairs < slots and num_filler < 1:
            raise ValueError("num_pairs < (length - 2 num_queries) / 2 needs num_filler >= 1")
        n = num_pairs
        if n > num_keys:
            raise ValueError(f"num_pairs={n} exceeds num_keys={num_keys}")
    query_pos = 2 * slots + 2 * np.arange(num_queries) + 1  # position of q_j; `?` precedes it
    # The queried pairs' slots first (each in its distance bucket, if any), then the other
    # pairs' slots uniformly among the remaining ones.
    dist = query_pos[:, None] - 2 * np.arange(slots)[None, :]  # [Q, slots]
    if distance_bucket is None:
        ok = np.ones_like(dist, bool)
    else:
        lo, hi = distance_bucket
        ok = (dist >= lo) & (dist < hi)
        if ok.sum(1).min() < num_queries:
            raise ValueError(f"distance_bucket={distance_bucket} holds fewer than "
                             f"num_queries={num_queries} pairs at length={length}")
    used = np.zeros((batch, slots), bool)
    qslot = np.zeros((batch, num_queries), np.int64)
    for j in range(num_queries):
        score = np.where(ok[j][None, :] & ~used, rng.random((batch, slots)), -1.0)
        qslot[:, j] = np.argmax(score, axis=1)
        used[np.arange(batch), qslot[:, j]] = True
    score = np.where(used, -1.0, rng.random((batch, slots)))
    others = np.argsort(-score, axis=1)[:, :n - num_queries]
    # slot_of[b, p]: the slot of pair p (sorted, so pairs keep their order in the text).
    slot_of = np.sort(np.concatenate([qslot, others], axis=1), axis=1)
    pairs = np.argmax(slot_of[:, None, :] == qslot[:, :, None], axis=2)  # [B, Q]
    keys = np.argsort(rng.random((batch, num_keys)), axis=1)[:, :n]  # unique per row
    values = rng.integers(0, num_values, (batch, n))
    rows = np.arange(batch)[:, None]
    tokens = np.empty((batch, length), np.int32)
    filler0 = num_keys + num_values + 2
    tokens[:, :2 * slots] = filler0 + rng.integers(0, max(num_filler, 1), (batch, 2 * slots))
    kpos = 2 * slot_of  # [B, n]
    tokens[rows, kpos] = keys
    tokens[rows, kpos + 1] = num_keys + values
    tokens[:, 2 * slots::2] = num_keys + num_values  # `?`
    tokens[:, query_pos] = keys[rows, pairs]
    targets = np.full((batch, length), num_keys + num_values + 1, np.int32)  # pad
    targets[:, query_pos] = num_keys + values[rows, pairs]
    mask = np.zeros((batch, length), np.float32)
    mask[:, query_pos] = 1.0
    return {"tokens": tokens, "targets": targets, "mask": mask,
            "query_pos": np.broadcast_to(query_pos, (batch, num_queries)).astype(np.int32),
            "key_pos": kpos[rows, pairs].astype(np.int32)}


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
