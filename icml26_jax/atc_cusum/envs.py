"""Data for online mean tracking: the synthetic generators G1-G4 and the real series.

Synthetic means are NumPy arrays ``mu [R, T]`` drawn with ``np.random.default_rng`` (the
caller passes the generator, so tuning and evaluation instances come from disjoint seeds).
No generator imposes a minimum spacing or a minimum jump (no detectability assumption).

Real series ship in the statsmodels wheel (nothing is downloaded): the Nile flows and the
US ex-post real interest rate; ``load_csv`` reads user-supplied series such as NAB's
``realAWSCloudwatch`` CPU files.
"""

from __future__ import annotations

import csv
import os

import numpy as np


def _check(T, runs=1):
    if int(T) < 1:
        raise ValueError(f"T must be >= 1, got {T!r}")
    if int(runs) < 1:
        raise ValueError(f"runs must be >= 1, got {runs!r}")


def random_jumps(rng: np.random.Generator, runs: int, T: int, S: int) -> np.ndarray:
    """G1: ``S`` change times uniform without replacement in {2..T}; the levels a random walk
    from ``mu_1 = 0`` with N(0, 1) jumps (tiny jumps included). Returns ``mu [runs, T]``."""
    _check(T, runs)
    if not 0 <= int(S) <= T - 1:
        raise ValueError(f"S must be in [0, T-1] = [0, {T - 1}], got {S!r}")
    mu = np.zeros((runs, T))
    for i in range(runs):
        times = rng.choice(np.arange(2, T + 1), size=S, replace=False)  # 1-based change times
        jumps = rng.standard_normal(S)
        steps = np.zeros(T)
        steps[times - 1] = jumps
        mu[i] = np.cumsum(steps)
    return mu


def num_changes(mu: np.ndarray) -> np.ndarray:
    """Number of t with ``mu_t != mu_{t-1}`` per run (``[R]``)."""
    return np.sum(mu[..., 1:] != mu[..., :-1], axis=-1)


def single_change(T: int, deltas) -> np.ndarray:
    """G2: ``mu_t = Delta * 1[t > T/2]`` for each Delta; ``[len(deltas), T]`` (pair it with
    the same noise for every Delta)."""
    _check(T)
    t = np.arange(1, T + 1)
    return np.asarray(deltas, np.float64)[:, None] * (t > T / 2)[None, :]


def staircase(T: int, step: float = 0.25, width: int = 200) -> np.ndarray:
    """G3: ``mu_t = step * floor((t-1)/width)`` (each step below Page's drift k). ``[T]``."""
    _check(T)
    return step * np.floor(np.arange(T) / width)


def square_wave(T: int, width: int = 200) -> np.ndarray:
    """G4: ``mu_t = floor((t-1)/width) mod 2`` (dense regular changes). ``[T]``."""
    _check(T)
    return (np.arange(T) // width % 2).astype(np.float64)


def observe(rng: np.random.Generator, mu: np.ndarray, sigma: float = 1.0) -> np.ndarray:
    """``X = mu + sigma * N(0, 1)`` noise of ``mu``'s shape."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    return mu + sigma * rng.standard_normal(np.shape(mu))


def load_nile() -> tuple[np.ndarray, np.ndarray]:
    """The annual Nile flow at Aswan, 1871-1970 (100 values; Cobb 1978), from statsmodels.

    Returns:
      ``(years [100] int, volume [100] float64)``.
    """
    from statsmodels.datasets import nile

    d = nile.load().data
    return d["year"].to_numpy().astype(np.int64), d["volume"].to_numpy(np.float64)


def load_realint(start: str | None = "1961Q1", end: str | None = "1986Q3"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """US ex-post real interest rate (``macrodata.realint`` = tbilrate - infl), quarterly.

    The default window is the 103 quarters that Garcia & Perron split into the regimes
    1961-73, 1973-80, 1980-86; ``start=end=None`` gives the full 1959Q1-2009Q3 sample.

    Returns:
      ``(quarters [N] str like "1973Q3", realint [N] float64)``.
    """
    from statsmodels.datasets import macrodata

    d = macrodata.load().data
    labels = np.asarray([f"{int(y)}Q{int(q)}" for y, q in zip(d["year"], d["quarter"])])
    x = d["realint"].to_numpy(np.float64)
    keys = [(int(y), int(q)) for y, q in zip(d["year"], d["quarter"])]

    def key(s, name):
        try:
            y, q = s.upper().split("Q")
            k = (int(y), int(q))
        except ValueError:
            k = None
        if k not in keys:
            raise ValueError(f"{name} must be a quarter like '1961Q1' within "
                             f"{labels[0]}..{labels[-1]}, got {s!r}")
        return keys.index(k)

    i0 = 0 if start is None else key(start, "start")
    i1 = len(x) - 1 if end is None else key(end, "end")
    if i1 < i0:
        raise ValueError(f"end={end!r} is before start={start!r}")
    return labels[i0:i1 + 1], x[i0:i1 + 1]


def load_csv(path: str | os.PathLike, value_col: str = "value",
             time_col: str = "timestamp") -> tuple[np.ndarray, np.ndarray]:
    """Reads one series from a CSV with a header (NAB files: ``timestamp,value``).

    Returns:
      ``(times [N] str, values [N] float64)`` in file order.
    """
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        for name, col in (("value_col", value_col), ("time_col", time_col)):
            if col not in cols:
                raise ValueError(f"{name}={col!r} is not a column of {path}; columns: {cols}")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path} has no rows")
    return (np.asarray([r[time_col] for r in rows]),
            np.asarray([float(r[value_col]) for r in rows], np.float64))


def sigma_floor(x: np.ndarray) -> float:
    """``max(1e-3 (max - min), quantisation step)``; the quantisation step is the smallest
    gap between distinct values. A constant series (range 0, no step) gets
    ``1e-3 max(1, |x|)`` so that the floor stays positive [R]."""
    x = np.asarray(x, np.float64)
    vals = np.unique(x)
    if len(vals) < 2:
        return 1e-3 * max(1.0, float(np.max(np.abs(x))) if len(x) else 1.0)
    return max(1e-3 * float(vals[-1] - vals[0]), float(np.min(np.diff(vals))))


def sigma_hat(x: np.ndarray) -> float:
    """Robust noise scale from first differences, ``median|X_t - X_{t-1}| / (0.6745 sqrt 2)``,
    floored by :func:`sigma_floor` (a flat or quantised series would otherwise give 0 and
    thousands of spurious alarms) [R]."""
    x = np.asarray(x, np.float64)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"x must be a 1-D series of length >= 2, got shape {x.shape}")
    est = float(np.median(np.abs(np.diff(x)))) / (0.6745 * np.sqrt(2.0))
    return max(est, sigma_floor(x))
