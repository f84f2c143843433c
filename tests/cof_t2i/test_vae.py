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


def test_joint_temporal_ae_shares_one_latent_between_f2_and_f3():
    """The optional ablation's encoder: 3 frames -> 2 latent frames; F1 alone, (F2, F3)
    together, so changing F3 moves the shared latent and F1's latent stays put."""
    ae = vae.JointTemporalAE(8, rngs=nnx.Rngs(0))
    x = jax.random.uniform(jax.random.key(0), (2, 3, 32, 32, 3))
    z = ae.encode_clip(x)
    assert z.shape == (2, 2, 8, 8, 8)
    x2 = x.at[:, 2].set(1.0 - x[:, 2])
    z2 = ae.encode_clip(x2)
    np.testing.assert_array_equal(np.asarray(z2[:, 0]), np.asarray(z[:, 0]))
    assert not np.allclose(np.asarray(z2[:, 1]), np.asarray(z[:, 1]))
    rec = ae.decode_clip(z)
    assert rec.shape == x.shape
    # F2 and F3 are decoded from the same latent: moving it moves both, not F1
    moved = ae.decode_clip(z.at[:, 1].add(1.0))
    np.testing.assert_array_equal(np.asarray(moved[:, 0]), np.asarray(rec[:, 0]))
    for f in (1, 2):
        assert not np.allclose(np.asarray(moved[:, f]), np.asarray(rec[:, f]))
    assert float(vae.joint_ae_loss(ae, x)) > 0
    with pytest.raises(ValueError, match="x must be"):
        ae.encode_clip(x[:, :2])
    with pytest.raises(ValueError, match=r"x must be \[B, 32, 32, 6\]"):
        ae.pair.encode(x[:, 0])


def test_joint_scaled_encode_decode_use_one_scale_per_latent_frame():
    ae = vae.JointTemporalAE(8, rngs=nnx.Rngs(1))
    ae.first.latent_scale[...] = jnp.asarray(2.0)
    ae.pair.latent_scale[...] = jnp.asarray(0.5)
    x = jax.random.uniform(jax.random.key(1), (2, 3, 32, 32, 3))
    raw = ae.encode_clip(x)
    z = vae.encode_joint(ae, x)
    np.testing.assert_allclose(z[:, 0], raw[:, 0] / 2.0, rtol=1e-6)
    np.testing.assert_allclose(z[:, 1], raw[:, 1] / 0.5, rtol=1e-6)
    rec = vae.decode_joint(ae, z)
    np.testing.assert_allclose(rec, jnp.clip(ae.decode_clip(raw), 0, 1), atol=1e-5)
    assert rec.shape == x.shape and float(rec.min()) >= 0 and float(rec.max()) <= 1
    with pytest.raises(ValueError, match=r"z must be \[B, 2, 8, 8, 8\]"):
        vae.decode_joint(ae, jnp.zeros((1, 3, 8, 8, 8)))
