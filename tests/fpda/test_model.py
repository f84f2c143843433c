"""FPDA spec §Tests 4, 5 and 9: routing changes the computation and equals a subset
reference, the refiner and deep-supervision weights, the reliability gate, and the losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.fpda import model as Mo
from icml26_jax.fpda import prompts as P

S, W = 32, 16


@pytest.fixture(scope="module")
def net():
    return Mo.FPDANet(W, img_size=S, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def x():
    return jnp.asarray(np.random.default_rng(0).random((4, S, S, 3)), jnp.float32)


def test_shapes_and_modes(net, x):
    route = jnp.asarray(P.ROUTES[[0, 3, 7, 14]])
    out = net(x, route, jnp.array([0, 1, 2, 3]))
    assert out.mask_logits.shape == (4, 4, S, S) and out.y_logit.shape == (4,)
    assert out.s_bar.shape == (4, 12) and out.f_bar.shape == (4, W)
    for mode, k in (("fixed", 1), ("none", 0)):
        m = Mo.FPDANet(W, img_size=S, mode=mode, rngs=nnx.Rngs(0))
        o = m(x, route, jnp.zeros((4,), jnp.int32))
        assert o.s_bar.shape == (4, k) and o.mask_logits.shape == (4, 4, S, S)
        if mode == "none":
            np.testing.assert_array_equal(o.context, 0.0)


def test_masked_routing_equals_the_subset_reference(net, x):
    enc = net.encode(x)
    for ridx in (0, 5, 9, 14):
        rho = P.ROUTES[ridx]
        out = net.decode(enc, jnp.asarray(np.repeat(rho[None], 4, 0)), jnp.zeros(4, jnp.int32))
        subset = [k for k in range(12) if P.PROMPT_GROUP[k] < 0 or rho[P.PROMPT_GROUP[k]]]
        sb = np.asarray(enc.s_bar)[:, subset]
        p = np.exp(sb - sb.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        c_ref = p @ np.asarray(enc.prompt_emb)[subset]
        np.testing.assert_allclose(np.asarray(out.context), c_ref, rtol=1e-5, atol=1e-6)


def test_unrouted_maps_do_not_reach_the_decoder(net, x):
    """Changing the evidence maps of prompts outside the route leaves the mask unchanged;
    changing a routed one changes it."""
    enc = net.encode(x)
    rho = P.ROUTES[0]  # noise group only (+ the authentic prompts)
    route = jnp.asarray(np.repeat(rho[None], 4, 0))
    r = jnp.zeros(4, jnp.int32)
    base = net.decode(enc, route, r).mask_logits
    k_off = P.PROMPT_GROUP.tolist().index(P.BLENDING)
    k_on = P.PROMPT_GROUP.tolist().index(P.NOISE)
    bumped = enc._replace(maps=enc.maps.at[..., k_off].add(5.0))
    np.testing.assert_allclose(net.decode(bumped, route, r).mask_logits, base, atol=1e-6)
    bumped = enc._replace(maps=enc.maps.at[..., k_on].add(5.0))
    assert np.abs(np.asarray(net.decode(bumped, route, r).mask_logits - base)).max() > 1e-3


def test_two_routes_give_different_masks(net, x):
    r = jnp.zeros(4, jnp.int32)
    a = net(x, jnp.asarray(np.repeat(P.ROUTES[:1], 4, 0)), r).mask_logits
    b = net(x, jnp.asarray(np.repeat(P.ROUTES[14:15], 4, 0)), r).mask_logits
    assert np.abs(np.asarray(a - b)).max() > 1e-3


def test_refiner_r0_is_m0_and_steps_chain():
    m = Mo.FPDANet(W, img_size=S, rngs=nnx.Rngs(1))
    # give the (zero-initialised) refiner output a non-zero kernel so that steps differ
    m.refiner.conv2.kernel[...] = 0.1 * jax.random.normal(jax.random.key(0),
                                                          m.refiner.conv2.kernel.shape)
    xx = jnp.asarray(np.random.default_rng(1).random((2, S, S, 3)), jnp.float32)
    route = jnp.asarray(P.ROUTES[[14, 14]])
    full = m(xx, route, jnp.array([0, 3]))
    zero = m(xx, route, jnp.array([0, 0]), num_steps=0)
    assert zero.mask_logits.shape == (2, 1, S, S)
    np.testing.assert_allclose(zero.mask_logits[:, 0], full.mask_logits[:, 0], atol=1e-6)
    assert np.abs(np.asarray(full.mask_logits[:, 1] - full.mask_logits[:, 0])).max() > 1e-4
    # r selects M_r for detection: the r = 0 image's score equals the 0-step program's
    np.testing.assert_allclose(zero.y_logit[0], full.y_logit[0], atol=1e-5)
    with pytest.raises(ValueError, match="num_steps"):
        m(xx, route, jnp.array([0, 0]), num_steps=4)


def test_deep_supervision_weights():
    w = np.asarray(Mo.refine_weights(jnp.array([0, 2, 3]), 4, 0.8))
    np.testing.assert_allclose(w[0], [1, 0, 0, 0])
    np.testing.assert_allclose(w[1], [0.64, 0.8, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(w[2], [0.512, 0.64, 0.8, 1], rtol=1e-6)


def test_gate_zero_without_text_and_open_interval_with(net, x):
    enc = net.encode(x)
    route = jnp.asarray(np.repeat(P.ROUTES[14:15], 4, 0))
    r = jnp.zeros(4, jnp.int32)
    assert np.all(np.asarray(net.decode(enc, route, r).gate) == 0.0)
    ids = jnp.asarray(np.stack([P.tokenize("the left region looks spliced")] * 4))
    out = net.decode(enc, route, r, ids, jnp.array([1, 0, 1, 0]))
    g = np.asarray(out.gate)
    assert np.all((g[[0, 2]] > 0) & (g[[0, 2]] < 1)) and np.all(g[[1, 3]] == 0)
    # with the gate closed, the text does not change the context
    no_text = net.decode(enc, route, r)
    np.testing.assert_allclose(out.context[1], no_text.context[1], atol=1e-6)
    assert np.abs(np.asarray(out.context[0] - no_text.context[0])).max() > 0


def test_supervised_loss_against_numpy(net, x):
    enc = net.encode(x)
    route = jnp.asarray(np.repeat(P.ROUTES[14:15], 4, 0))
    r = jnp.array([0, 1, 2, 3])
    out = net.decode(enc, route, r)
    masks = np.zeros((4, S, S), bool)
    masks[1, 4:12, 4:20] = True
    masks[3, 10:30, 0:8] = True
    labels = np.array([0, 1, 0, 1])
    loss, parts = Mo.supervised_loss(net, enc, out, masks, labels, r)
    lg = np.asarray(out.mask_logits, np.float64)
    p = 1 / (1 + np.exp(-lg))
    mk = masks[:, None].astype(np.float64)
    bce = -(mk * np.log(p) + (1 - mk) * np.log(1 - p)).mean((-2, -1))
    dice = 1 - (2 * (p * mk).sum((-2, -1)) + 1) / (p.sum((-2, -1)) + mk.sum((-2, -1)) + 1)
    dice *= labels[:, None]
    w = np.array([[0.8 ** (ri - j) if j <= ri else 0 for j in range(4)] for ri in [0, 1, 2, 3]])
    np.testing.assert_allclose(parts["mask"], np.mean((w * (bce + dice)).sum(1)), rtol=1e-4)
    yl = np.asarray(out.y_logit, np.float64)
    py = 1 / (1 + np.exp(-yl))
    np.testing.assert_allclose(parts["det"], np.mean(-(labels * np.log(py) + (1 - labels)
                                                       * np.log(1 - py))), rtol=1e-4)
    assert "align" in parts and np.isfinite(parts["align"])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode must be one of"):
        Mo.FPDANet(W, mode="clip", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="img_size must be a positive multiple of 16"):
        Mo.FPDANet(W, img_size=40, rngs=nnx.Rngs(0))
    m = Mo.FPDANet(W, img_size=S, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"x must be \[B, 32, 32, 3\]"):
        m.encode(jnp.zeros((1, 64, 64, 3)))
    xx = jnp.zeros((1, S, S, 3))
    with pytest.raises(ValueError, match=r"r must be in \[0, 3\]"):
        m(xx, jnp.asarray(P.ROUTES[:1]), jnp.array([4]))
    with pytest.raises(ValueError, match="empty route"):
        m(xx, jnp.zeros((1, 4), jnp.int32), jnp.array([0]))
