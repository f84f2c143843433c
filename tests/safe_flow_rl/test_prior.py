"""The flow prior's loss on a hand case, and its behaviour: weights move the flow's mass onto
the heavily weighted actions while the unweighted term keeps the rest covered."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from icml26_jax.safe_flow_rl.model import ConditionalRealNVP
from icml26_jax.safe_flow_rl.prior import flow_optimizer, make_flow_step, prior_loss


def test_prior_loss_hand_case():
    lp = jnp.asarray([-1.0, -3.0])
    w = jnp.asarray([3.0, 1.0])
    want = -(3 * -1.0 + 1 * -3.0) / 4 - 0.1 * (-2.0)
    assert float(prior_loss(lp, w)) == pytest.approx(want)
    assert float(prior_loss(lp, jnp.ones(2), 0.0)) == pytest.approx(2.0)


def _train(w_good, steps=300):
    key = jax.random.key(0)
    n = 512
    s = jnp.zeros((n, 3))
    half = n // 2
    good = jnp.asarray([0.5, 0.5]) + 0.05 * jax.random.normal(key, (half, 2))
    bad = jnp.asarray([-0.5, -0.5]) + 0.05 * jax.random.normal(jax.random.fold_in(key, 1),
                                                                (half, 2))
    act = jnp.concatenate([good, bad])
    w = jnp.concatenate([jnp.full((half,), w_good), jnp.ones(half)])
    flow = ConditionalRealNVP(2, 3, hidden=(32, 32), n_coupling=4, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(flow, nnx.Param)
    tx = flow_optimizer(3e-3)
    opt = tx.init(params)
    step = jax.jit(make_flow_step(graphdef, tx))
    for _ in range(steps):
        params, opt, loss = step(params, opt, s, act, w)
    f = nnx.merge(graphdef, params)
    return (float(jnp.mean(f.log_prob(good, s[:half]))),
            float(jnp.mean(f.log_prob(bad, s[:half]))))


def test_weights_move_mass_to_the_weighted_actions():
    good_w, bad_w = _train(20.0)
    good_u, bad_u = _train(1.0)
    assert good_w > good_u + 0.3  # more density on the favoured cluster ...
    assert bad_w < bad_u  # ... taken from the other one,
    assert bad_w > -3.0  # which stays covered by the unweighted term
