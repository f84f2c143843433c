"""Accuracy metrics of a Shapley estimate against the exact values (spec §Experiment)."""

from __future__ import annotations

import math

import numpy as np


def mse(phi_hat, phi) -> np.ndarray:
    """Mean squared error over players: ``[...]`` for ``[..., n]`` inputs."""
    d = np.asarray(phi_hat, np.float64) - np.asarray(phi, np.float64)
    return np.mean(d * d, axis=-1)


def precision_at_k(phi_hat, phi, k: int = 5) -> np.ndarray:
    """Share of the true top-``k`` players by ``|phi|`` found in the estimate's top-``k``."""
    phi_hat, phi = np.asarray(phi_hat), np.asarray(phi)
    k = min(int(k), phi.shape[-1])
    top_t = np.argsort(-np.abs(phi), axis=-1)[..., :k]
    top_h = np.argsort(-np.abs(phi_hat), axis=-1)[..., :k]
    hit = (top_t[..., :, None] == top_h[..., None, :]).any(-1)
    return hit.mean(-1)


def kendall_tau(phi_hat, phi) -> np.ndarray:
    """Kendall's tau-a between the two rankings (``[..., n]`` -> ``[...]``)."""
    a, b = np.asarray(phi_hat), np.asarray(phi)
    da = np.sign(a[..., :, None] - a[..., None, :])
    db = np.sign(b[..., :, None] - b[..., None, :])
    n = a.shape[-1]
    return (da * db).sum((-1, -2)) / (n * (n - 1))


def mean_ci95(x) -> tuple[float, float]:
    """``(mean, half-width of the normal 95 % interval of the mean)``."""
    x = np.asarray(x, np.float64).ravel()
    if x.size < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(1.96 * x.std(ddof=1) / math.sqrt(x.size))


def geomean(x) -> float:
    x = np.asarray(x, np.float64)
    return float(np.exp(np.mean(np.log(x))))


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)
