"""Partition of a labelled data set over simulated users (pure NumPy, no TFDS)."""

from __future__ import annotations

import numpy as np

SPLITS = ("iid", "label_skew")


def partition(labels, num_users: int, split: str, seed: int = 0) -> np.ndarray:
    """Row indices of each user's equal share of the samples.

    ``split="iid"`` shuffles the rows with ``np.random.default_rng(seed).permutation(N)``;
    ``split="label_skew"`` orders them by label (``np.argsort(labels, kind="stable")``, so
    ``seed`` is unused) and most users then see a single label. Either order is cut into
    ``num_users`` contiguous shards of ``m = N // num_users`` rows; the last ``N % num_users``
    rows of the order are dropped so every user holds the same number of samples.

    Args:
      labels: ``[N]`` labels (only their order matters for ``label_skew``).
      num_users: number of users, in ``[1, N]``.
      split: ``"iid"`` or ``"label_skew"``.
      seed: seed of the ``iid`` permutation.

    Returns:
      ``[num_users, m]`` int64 row indices into ``labels``, pairwise disjoint.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    n = labels.shape[0]
    if isinstance(num_users, bool) or not isinstance(num_users, (int, np.integer)):
        raise ValueError(f"num_users must be an integer, got num_users={num_users!r}")
    if not 1 <= num_users <= n:
        raise ValueError(f"num_users must be in [1, {n}] (the number of samples), "
                         f"got num_users={num_users}")
    if split == "iid":
        order = np.random.default_rng(seed).permutation(n)
    elif split == "label_skew":
        order = np.argsort(labels, kind="stable")
    else:
        raise ValueError(f"split must be one of {SPLITS}, got split={split!r}")
    m = n // num_users
    return order[: num_users * m].astype(np.int64).reshape(num_users, m)
