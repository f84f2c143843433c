"""Wall-clock timing for benchmarks: the median of repeated, synchronised calls."""

from __future__ import annotations

import time

import jax
import numpy as np


def median_seconds(fn, *args, repeats: int, warmup: int = 1) -> float:
    """Median seconds of ``fn(*args)`` over ``repeats`` calls after ``warmup`` untimed ones
    (compilation); every call waits for its device results (``jax.block_until_ready``)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
