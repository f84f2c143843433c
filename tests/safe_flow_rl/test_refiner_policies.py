"""Radial clipping holds the latent budget exactly; the refiner losses on hand cases; the
selection rule and its fallback (spec §Tests "Bounds", "Selection")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.safe_flow_rl import policies, refiner


def test_shift_never_exceeds_the_budget_and_inf_is_unclipped():
    key = jax.random.key(0)
    z0 = jax.random.normal(key, (1000, 2))
    s = jnp.zeros((1000, 3))

    def g(scale):
        return lambda s_, z: scale * jnp.sin(3.0 * z) + scale  # large, state-independent pushes

    for eh, er in ((0.25, 0.25), (0.05, 0.45), (0.0, 0.0)):
        z2, aux = refiner.refine(g(5.0), g(7.0), s, z0, eh, er)
        assert np.all(np.asarray(aux["shift_norm"]) <= eh + er + 1e-6)
        assert np.all(np.linalg.norm(np.asarray(aux["z1"] - z0), axis=-1) <= eh + 1e-6)
    z2, aux = refiner.refine(g(5.0), g(7.0), s, z0, jnp.inf, jnp.inf)
    assert float(jnp.max(aux["shift_norm"])) > 5.0
    # small pushes (|u| < 1) are not rescaled: the step is eps * u
    z2, aux = refiner.refine(lambda s_, z: 0.5 * jnp.ones_like(z) / jnp.sqrt(2.0),
                             lambda s_, z: jnp.zeros_like(z), s, z0, 0.4, 0.4)
    np.testing.assert_allclose(aux["shift_norm"], 0.2, rtol=1e-5)


def test_refiner_losses_hand_cases():
    qh = jnp.asarray([0.5, -0.5, 0.1])
    vh = jnp.asarray([1.0, -1.0, -1.0])
    # infeasible: Q_h itself; feasible: beta relu(Q_h + m)
    want = (0.5 + 10 * max(-0.5 + 0.05, 0) + 10 * (0.1 + 0.05)) / 3
    assert float(refiner.safety_loss(qh, vh, 10.0, 0.05)) == pytest.approx(want)
    qr = jnp.asarray([2.0, 4.0, 1.0])
    want = (0 * -2.0 - 4.0 / 2 - 1.0 / 2 + 10 * ((0.5 + 0.05) + 0 + (0.1 + 0.05))) / 3
    assert float(refiner.reward_loss(qh, qr, vh, 2.0, 10.0, 0.05)) == pytest.approx(want)


def test_selection_prefers_feasible_reward_then_falls_back_to_min_qh():
    acts = jnp.arange(8.0).reshape(4, 2)
    qh = jnp.asarray([0.3, -0.1, -0.2, 0.5])
    qr = jnp.asarray([9.0, 1.0, 2.0, 5.0])
    assert int(policies.select_index(qh, qr)) == 2  # best Q_r among Q_h <= 0
    np.testing.assert_array_equal(policies.select_action(acts, qh, qr), [4.0, 5.0])
    qh_bad = jnp.asarray([0.3, 0.2, 0.9, 0.25])
    assert int(policies.select_index(qh_bad, qr)) == 1  # no feasible candidate: argmin Q_h
    np.testing.assert_array_equal(policies.select_min_qh(acts, qh), [4.0, 5.0])
    # batched
    b = policies.select_index(jnp.stack([qh, qh_bad]), jnp.stack([qr, qr]))
    np.testing.assert_array_equal(b, [2, 1])
    # a margin: feasible means Q_h <= -m (only candidate 2 at m = 0.15; none at m = 0.3)
    qr2 = jnp.asarray([9.0, 3.0, 2.0, 5.0])
    assert int(policies.select_index(qh, qr2)) == 1
    assert int(policies.select_index(qh, qr2, 0.15)) == 2
    assert int(policies.select_index(qh, qr2, 0.3)) == 2  # fallback: argmin Q_h
    b = policies.select_index(jnp.stack([qh, qh]), jnp.stack([qr2, qr2]), jnp.asarray([0., .15]))
    np.testing.assert_array_equal(b, [1, 2])
