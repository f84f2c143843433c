"""AUTOC, policy value, the DR-approximate AUTOC and rank correlations against hand
computations and independent references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from icml26_jax.rank_learner import metrics


def test_autoc_hand_computed():
    score = jnp.array([0.9, 0.1, 0.5, 0.3])
    tau = jnp.array([2.0, -1.0, 1.0, 0.0])
    # ranked tau: 2, 1, 0, -1; top-k means 2, 1.5, 1, 0.5; ATE 0.5
    want = np.mean([2 - 0.5, 1.5 - 0.5, 1 - 0.5, 0.5 - 0.5])
    assert float(metrics.autoc(score, tau)) == pytest.approx(want)


def test_autoc_ties_average_and_constant_is_zero():
    tau = jnp.array([3.0, -1.0, 0.5, 2.0])
    assert float(metrics.autoc(jnp.zeros(4), tau)) == 0.0
    # Tie between units 0 and 1 (top): both count as their mean tau (1.0).
    score = jnp.array([1.0, 1.0, 0.0, -1.0])
    ranked = np.array([1.0, 1.0, 0.5, 2.0])
    want = np.mean(np.cumsum(ranked) / np.arange(1, 5) - tau.mean())
    assert float(metrics.autoc(score, tau)) == pytest.approx(want)


def test_oracle_ranking_beats_permutations_and_random_is_near_zero():
    rng = np.random.default_rng(0)
    tau = jnp.asarray(rng.normal(size=1000) * 1.3)
    best = float(metrics.autoc(tau, tau))
    perms = jax.vmap(lambda k: metrics.autoc(jax.random.permutation(k, tau), tau))(
        jax.random.split(jax.random.key(0), 100))
    assert best >= float(perms.max())
    rand = metrics.autoc(jax.random.normal(jax.random.key(7), (1000,)), tau)
    assert abs(float(rand)) < 0.05


def test_policy_value_hand_computed():
    score = jnp.array([0.2, 0.9, 0.5])
    mu0 = jnp.array([1.0, 0.0, 2.0])
    mu1 = jnp.array([3.0, 1.0, 2.5])
    # order: unit 1, unit 2, unit 0
    pv = [(1.0 + 2.0 + 1.0) / 3, (1.0 + 2.5 + 1.0) / 3, (1.0 + 2.5 + 3.0) / 3]
    assert float(metrics.policy_value(score, mu0, mu1)) == pytest.approx(np.mean(pv))


def _approx_autoc_reference(score, phi):
    """Spec §Method, by explicit loops: top round(q n) units, ties split fractionally."""
    n = len(score)
    q = np.linspace(0.05, 1.0, 21)
    a = phi - phi.mean()
    tocs = []
    for qk in q:
        target = int(np.round(qk * n))
        iq = np.zeros(n)
        for v in np.unique(score):
            members = np.flatnonzero(score == v)
            higher = int(np.sum(score > v))
            take = min(max(target - higher, 0), len(members))
            iq[members] = take / len(members)
        tocs.append(np.mean(a * (iq / max(iq.mean(), 1e-12) - 1)))
    return float(np.sum(np.asarray(tocs)[:-1] * np.diff(q)))


def test_approx_autoc_matches_hand_computation_with_ties():
    rng = np.random.default_rng(3)
    score = np.round(rng.normal(size=20), 0)  # heavy ties
    phi = rng.normal(size=20) + score
    assert len(np.unique(score)) < 10
    got = float(metrics.approx_autoc_dr(jnp.asarray(score), jnp.asarray(phi)))
    assert got == pytest.approx(_approx_autoc_reference(score, phi), rel=1e-5, abs=1e-6)


def test_approx_autoc_small_case_by_hand():
    # n = 4, no ties: q=0.05 -> round(0.2)=0 units: I = 0, mean clamped, TOC = -mean(a) = 0.
    score = np.array([4.0, 3.0, 2.0, 1.0])
    phi = np.array([3.0, 1.0, 0.0, -4.0])
    got = float(metrics.approx_autoc_dr(jnp.asarray(score), jnp.asarray(phi)))
    assert got == pytest.approx(_approx_autoc_reference(score, phi), rel=1e-6)
    # Constant score: every I_q is the constant q -> TOC = 0.
    assert float(metrics.approx_autoc_dr(jnp.zeros(4), jnp.asarray(phi))) == pytest.approx(0.0,
                                                                                            abs=1e-7)


def test_rank_correlations_match_scipy():
    rng = np.random.default_rng(4)
    a = np.round(rng.normal(size=60), 1)
    b = a + rng.normal(size=60)
    np.testing.assert_allclose(metrics.average_ranks(jnp.asarray(a)), stats.rankdata(a))
    assert float(metrics.spearman(jnp.asarray(a), jnp.asarray(b))) == pytest.approx(
        stats.spearmanr(a, b)[0], rel=1e-5)
    assert float(metrics.kendall_tau(jnp.asarray(a), jnp.asarray(b))) == pytest.approx(
        stats.kendalltau(a, b)[0], rel=1e-5)


def test_pehe():
    assert float(metrics.pehe(jnp.array([1.0, 2.0]), jnp.array([0.0, 4.0]))) == pytest.approx(
        np.sqrt(2.5))
