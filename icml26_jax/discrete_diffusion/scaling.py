"""IsoFLOP analysis (spec §Analysis; Chinchilla approach 2, Hoffmann et al. 2022).

Per budget a quadratic in log N through the IsoFLOP points gives N*(C) and L*(C); across
budgets log N* = a log C + b and L*(C) - H = A C^-gamma with the floor H fixed (known from
the HMM, not fitted). The compute multiplier of one objective over another is
k = C_1(L) / C_2(L) averaged over the loss range both fitted envelopes cover; its CI comes
from a bootstrap over points and seeds. All NumPy float64.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class IsoFlopFit(NamedTuple):
    """Quadratic L = c2 (log N)^2 + c1 log N + c0 through one budget's points."""

    n_star: float  # argmin (exp(-c1 / (2 c2))); nan without positive curvature
    l_star: float  # fitted minimum
    curvature: float  # c2
    interior: bool  # positive curvature and N* inside the sampled N range


def fit_isoflop(n, loss) -> IsoFlopFit:
    """Fits one IsoFLOP curve: points (N [k], L [k]) with k >= 3."""
    n, loss = np.asarray(n, np.float64), np.asarray(loss, np.float64)
    if n.shape != loss.shape or n.size < 3 or np.any(n <= 0):
        raise ValueError(f"fit_isoflop needs >= 3 points with N > 0, got N={n}, L={loss}")
    x = np.log(n)
    c2, c1, c0 = np.polyfit(x, loss, 2)
    if c2 <= 0:
        return IsoFlopFit(float("nan"), float(loss.min()), float(c2), False)
    xs = -c1 / (2 * c2)
    return IsoFlopFit(float(np.exp(xs)), float(c0 - c1 * c1 / (4 * c2)), float(c2),
                      bool(x.min() < xs < x.max()))


class PowerLaw(NamedTuple):
    """log y = slope log C + intercept (least squares), with its R^2."""

    slope: float
    intercept: float
    r2: float

    def __call__(self, c):
        return np.exp(self.intercept) * np.asarray(c, np.float64) ** self.slope


def fit_power_law(c, y) -> PowerLaw:
    """Least-squares line through (log C, log y) for >= 3 positive points."""
    c, y = np.asarray(c, np.float64), np.asarray(y, np.float64)
    if c.shape != y.shape or c.size < 3 or np.any(c <= 0) or np.any(y <= 0):
        raise ValueError("fit_power_law needs >= 3 points with C > 0 and y > 0 (a scaling "
                         f"law from fewer points is not one), got C={c}, y={y}")
    lx, ly = np.log(c), np.log(y)
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    r2 = 1.0 - resid.var() / ly.var() if ly.var() > 0 else 1.0
    return PowerLaw(float(slope), float(intercept), float(r2))


def compute_multiplier(c1, l1, c2, l2, floor: float, points: int = 50) -> float:
    """k = C_1(L) / C_2(L) averaged (geometrically) over the overlapping loss range.

    Each objective's envelope L*(C) - floor = A C^-gamma is fitted to its (C, L*) points and
    inverted, C(L) = ((L - floor) / A)^(-1/gamma). k > 1 means objective 2 reaches the same
    loss with less compute (k = 1.12: 12 % more FLOPs-efficient).
    """
    f1 = fit_power_law(c1, np.asarray(l1) - floor)
    f2 = fit_power_law(c2, np.asarray(l2) - floor)
    lo = max(np.min(l1), np.min(l2))
    hi = min(np.max(l1), np.max(l2))
    if not hi > lo:
        raise ValueError(f"the two envelopes do not overlap in loss ([{np.min(l1)}, "
                         f"{np.max(l1)}] vs [{np.min(l2)}, {np.max(l2)}])")
    grid = np.linspace(lo, hi, points) - floor

    def c_of(f, y):  # invert log y = slope log C + intercept
        return np.exp((np.log(y) - f.intercept) / f.slope)

    return float(np.exp(np.mean(np.log(c_of(f1, grid) / c_of(f2, grid)))))


def bootstrap_ci(stat: Callable[[np.random.Generator], float], n: int = 1000,
                 level: float = 0.9, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of ``stat(rng)`` over ``n`` bootstrap draws (``stat`` resamples its own
    points and seeds with the generator it is given)."""
    if n < 2 or not 0 < level < 1:
        raise ValueError(f"need n >= 2 and 0 < level < 1, got n={n}, level={level}")
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng) for _ in range(n)], np.float64)
    vals = vals[np.isfinite(vals)]
    q = (1 - level) / 2
    return float(np.quantile(vals, q)), float(np.quantile(vals, 1 - q))
