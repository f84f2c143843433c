"""CoF-T2I spec §Tests 7: independent per-frame encoding equals per-frame calls; shapes,
scaling, a few training steps lower the reconstruction loss, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from icml26_jax.cof_t2i import scenes as S
from icml26_jax.cof_t2i import trajectories as T
from icml26_jax.cof_t2i import vae
from icml26_jax.core.optim import promotion_safe


@pytest.fixture(scope="module")
def clips():
    b = T.sample_batch(3, "cof", np.random.default_rng(0))
    return jnp.asarray(b.frames, jnp.float32) / 255.0  # [3, 3, 32, 32, 3]


def test_independent_encoding_equals_per_frame_calls(clips):
    ae = vae.FrameAE(16, rngs=nnx.Rngs(0))
    ae.latent_scale[...] = jnp.asarray(2.0)
    z = vae.encode_frames(ae, clips)
    assert z.shape == (3, 3, 8, 8, 8)
    for f in range(3):
        np.testing.assert_allclose(z[:, f], ae.encode(clips[:, f]) / 2.0, rtol=1e-5, atol=1e-5)
    # a frame's latent does not depend on the other frames of its clip
    other = clips.at[:, 0].set(0.0)
    np.testing.assert_allclose(vae.encode_frames(ae, other)[:, 2], z[:, 2], atol=1e-6)
    rec = vae.decode_frames(ae, z)
    assert rec.shape == clips.shape and float(rec.min()) >= 0.0 and float(rec.max()) <= 1.0
    np.testing.assert_allclose(rec[:, 1], jnp.clip(ae.decode(z[:, 1] * 2.0), 0, 1), atol=1e-5)


def test_training_steps_lower_the_reconstruction_loss(clips):
    ae = vae.FrameAE(16, rngs=nnx.Rngs(1))
    graphdef, params, rest = nnx.split(ae, nnx.Param, ...)
    x = clips.reshape((-1, 32, 32, 3))
    tx = promotion_safe(optax.adam(3e-3))
    opt = tx.init(params)

    @jax.jit
    def step(p, o):
        loss, g = jax.value_and_grad(lambda q: vae.ae_loss(nnx.merge(graphdef, q, rest), x))(p)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    losses = []
    for _ in range(30):
        params, opt, loss = step(params, opt)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_bad_shapes_raise():
    ae = vae.FrameAE(8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"x must be \[B, 32, 32, 3\]"):
        ae.encode(jnp.zeros((1, 64, 64, 3)))
    with pytest.raises(ValueError, match="independently only"):
        vae.encode_frames(ae, jnp.zeros((1, 3, 32, 32, 3)), independent=False)
    with pytest.raises(ValueError, match="width must be"):
        vae.FrameAE(6, rngs=nnx.Rngs(0))
    assert S.RES == vae.RES
