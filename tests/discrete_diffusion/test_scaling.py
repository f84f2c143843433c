"""IsoFLOP fits recover a planted parabola, power laws and compute multipliers, and the
bootstrap CI covers the truth (spec §Tests)."""

import numpy as np
import pytest

from icml26_jax.discrete_diffusion import scaling


def test_isoflop_fit_recovers_a_synthetic_parabola():
    n = np.geomspace(2e4, 1e6, 5)
    n_star, l_star = 1.5e5, 3.2
    loss = l_star + 0.05 * (np.log(n) - np.log(n_star)) ** 2
    fit = scaling.fit_isoflop(n, loss)
    assert fit.n_star == pytest.approx(n_star, rel=1e-6)
    assert fit.l_star == pytest.approx(l_star, abs=1e-9) and fit.interior
    mono = scaling.fit_isoflop(n, 3.0 - 0.1 * np.log(n))  # no interior minimum
    assert not mono.interior
    with pytest.raises(ValueError, match=">= 3"):
        scaling.fit_isoflop(n[:2], loss[:2])


def test_power_law_and_compute_multiplier():
    c = np.geomspace(3e11, 1e13, 4)
    fit = scaling.fit_power_law(c, 2.0 * c ** 0.5)
    assert fit.slope == pytest.approx(0.5) and fit.r2 == pytest.approx(1.0)
    floor, gamma = 2.0, 0.1
    l_nelbo = floor + 40.0 * c ** -gamma
    l_lowvar = floor + 40.0 * (1.12 * c) ** -gamma  # low-var = NELBO with 12 % more compute
    k = scaling.compute_multiplier(c, l_nelbo, c, l_lowvar, floor)
    assert k == pytest.approx(1.12, rel=1e-6)
    with pytest.raises(ValueError, match="fewer points"):
        scaling.fit_power_law(c[:2], c[:2])


def test_bootstrap_ci_covers_the_mean():
    rng0 = np.random.default_rng(0)
    x = rng0.normal(1.0, 1.0, size=200)

    def stat(rng):
        return float(rng.choice(x, size=x.size).mean())

    lo, hi = scaling.bootstrap_ci(stat, n=500)
    assert lo < x.mean() < hi and lo < 1.0 < hi and hi - lo < 0.4
