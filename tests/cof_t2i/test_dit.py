"""CoF-T2I spec §Tests 6 and 9 (DiT half): joint denoising across frames, frame embeddings
matter, CFG with w = 1 is the conditional velocity, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.cof_t2i import dit


def _model(frames=3, seed=0):
    m = dit.VideoDiT(frames, d=32, depth=2, heads=4, rngs=nnx.Rngs(seed))
    # adaLN-zero and the zero output layer make an untrained model output exactly 0: give
    # every zero-initialised layer small random weights so the tests see the mixing.
    key = jax.random.key(seed + 1)
    for path, v in nnx.iter_graph(m):
        if isinstance(v, nnx.Param) and not jnp.any(v[...]):
            key, k = jax.random.split(key)
            v[...] = 0.05 * jax.random.normal(k, v[...].shape)
    return m


@pytest.fixture(scope="module")
def inputs():
    k = jax.random.split(jax.random.key(0), 3)
    z = jax.random.normal(k[0], (2, 3, 8, 8, 8))
    t = jnp.array([0.3, 0.8])
    ids = jnp.array([[1, 3, 4, 1, 20, 9, 0, 0, 0, 0, 0, 0]] * 2, jnp.int32)
    return z, t, ids, ids != 0


def test_output_shape_and_zero_init():
    m = dit.VideoDiT(3, d=32, depth=2, heads=4, rngs=nnx.Rngs(0))
    z = jnp.ones((2, 3, 8, 8, 8))
    v = m(z, jnp.array([0.1, 0.9]), jnp.zeros((2, 12), jnp.int32), jnp.zeros((2, 12), bool))
    assert v.shape == z.shape
    np.testing.assert_array_equal(v, 0.0)  # adaLN-zero + zero output layer


def test_frames_are_denoised_jointly(inputs):
    z, t, ids, mask = inputs
    m = _model()
    v = m(z, t, ids, mask)
    z2 = z.at[:, 0].add(1.0)  # change frame 1 only
    v2 = m(z2, t, ids, mask)
    assert float(jnp.abs(v2[:, 2] - v[:, 2]).max()) > 1e-4  # frame 3's output moves


def test_frame_embeddings_matter(inputs):
    z, t, ids, mask = inputs
    m = _model()
    v = m(z, t, ids, mask)
    m.frame_emb[...] = m.frame_emb[...][jnp.array([2, 1, 0])]  # swap F1 and F3 embeddings
    v2 = m(z, t, ids, mask)
    assert float(jnp.abs(v2 - v).max()) > 1e-4


def test_caption_conditions_and_cfg_w1_is_conditional(inputs):
    z, t, ids, mask = inputs
    m = _model()
    v_c = m(z, t, ids, mask)
    v_u = m(z, t, jnp.zeros_like(ids), jnp.zeros_like(mask))
    assert float(jnp.abs(v_c - v_u).max()) > 1e-4  # the caption changes the velocity
    assert np.all(np.isfinite(np.asarray(v_u)))  # an empty caption still attends (null token)
    np.testing.assert_allclose(dit.cfg_velocity(m, z, t, ids, mask, 1.0), v_c, atol=1e-5)
    np.testing.assert_allclose(dit.cfg_velocity(m, z, t, ids, mask, 0.0), v_u, atol=1e-5)
    w3 = dit.cfg_velocity(m, z, t, ids, mask, 3.0)
    np.testing.assert_allclose(w3, v_u + 3.0 * (v_c - v_u), atol=1e-4)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="num_frames must be 1, 2 or 3"):
        dit.VideoDiT(4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="not divisible by patch=3"):
        dit.VideoDiT(3, patch=3, rngs=nnx.Rngs(0))
    m = dit.VideoDiT(1, d=32, depth=1, heads=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"z must be \[B, 1, 8, 8, 8\]"):
        m(jnp.zeros((1, 3, 8, 8, 8)), jnp.zeros(1), jnp.zeros((1, 12), jnp.int32),
          jnp.zeros((1, 12), bool))
