"""FML's CNN: im2col convolution equals ``lax.conv_general_dilated``; strided-max pooling
equals ``reduce_window``; the one-pass GroupNorm equals the textbook one (values and gradients)
and is per sample; 79.8k parameters at 16x16x3."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.fml import model


@pytest.mark.parametrize("ci,co", [(3, 16), (16, 32)])
def test_im2col_conv_equals_lax_conv(ci, co):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k1, (3, 8, 8, ci))
    w = jax.random.normal(k2, (3, 3, ci, co))
    b = jax.random.normal(k3, (co,))
    ref = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
    np.testing.assert_allclose(np.asarray(model.conv3x3(x, w, b)), np.asarray(ref), rtol=1e-5,
                               atol=1e-4)


def test_max_pool_equals_reduce_window():
    x = jax.random.normal(jax.random.key(1), (2, 8, 6, 5))
    ref = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    np.testing.assert_array_equal(np.asarray(model.max_pool2(x)), np.asarray(ref))


def _group_norm_ref(x, groups, scale, bias, eps=1e-5):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    g = (g - g.mean(axis=(1, 2, 4), keepdims=True)) / jnp.sqrt(
        g.var(axis=(1, 2, 4), keepdims=True) + eps)
    return g.reshape(b, h, w, c) * scale + bias


def test_group_norm_equals_the_two_pass_reference_with_gradients():
    k1, k2, k3 = jax.random.split(jax.random.key(3), 3)
    x = jax.random.normal(k1, (2, 4, 4, 16)) * 3.0 + 1.5
    s, b = jax.random.normal(k2, (16,)), jax.random.normal(k3, (16,))
    np.testing.assert_allclose(np.asarray(model.group_norm(x, 8, s, b)),
                               np.asarray(_group_norm_ref(x, 8, s, b)), rtol=1e-4, atol=1e-4)
    f = lambda fn: jax.jit(jax.grad(lambda x, s, b: jnp.sum(jnp.sin(fn(x, 8, s, b))), (0, 1, 2)))(
        x, s, b)
    for got, ref in zip(f(model.group_norm), f(_group_norm_ref)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-3, atol=1e-3)


def test_group_norm_is_per_sample_and_normalises_each_group():
    x = jax.random.normal(jax.random.key(2), (3, 4, 4, 16)) * 5.0 + 2.0
    out = model.group_norm(x, 8, jnp.ones(16), jnp.zeros(16))
    g = np.asarray(out).reshape(3, 4, 4, 8, 2)
    np.testing.assert_allclose(g.mean(axis=(1, 2, 4)), 0.0, atol=1e-5)
    np.testing.assert_allclose(g.var(axis=(1, 2, 4)), 1.0, atol=1e-3)
    # changing another sample leaves sample 0 unchanged (no batch statistics)
    x2 = x.at[1:].multiply(-3.0)
    np.testing.assert_array_equal(np.asarray(model.group_norm(x2, 8, jnp.ones(16),
                                                              jnp.zeros(16))[0]),
                                  np.asarray(out[0]))


def test_cnn_shapes_parameter_count_and_errors():
    net = model.CNN(rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(net, nnx.Param)
    assert sum(a.size for a in jax.tree.leaves(params)) == 79_754  # spec: 79.8k
    x = jnp.zeros((5, 16, 16, 3))
    h, logits = jax.jit(model.forward, static_argnums=0)(graphdef, params, x)
    assert h.shape == (5, 64) and logits.shape == (5, 10)
    np.testing.assert_allclose(np.asarray(nnx.jit(lambda n, x: n(x))(net, x)),
                               np.asarray(logits), rtol=1e-6)
    net32 = model.CNN(image_size=32, rngs=nnx.Rngs(0))
    out32 = nnx.eval_shape(lambda: net32(jnp.zeros((1, 32, 32, 3))))
    assert out32.shape == (1, 10)
    with pytest.raises(ValueError, match="groups"):
        model.CNN(channels=(12, 32), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="image_size"):
        model.CNN(image_size=18, rngs=nnx.Rngs(0))
