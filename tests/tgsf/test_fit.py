"""Per-scene initialisation and optimiser (spec §Method "Per-scene optimisation")."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import fit
from icml26_jax.tgsf.gaussians import TaylorGaussians

H = W = 8


def test_init_back_projects_pixels_onto_the_depth_and_anchors_at_keyframes():
    cams = C.arc_cameras(3, height=H, width=W)
    depths = 3.0 + 0.1 * jax.random.uniform(jax.random.key(0), (3, H, W))
    frames = jax.random.uniform(jax.random.key(1), (3, H, W, 3))
    g = fit.init_from_frames(frames, depths, cams, [0.0, 0.35, 0.7], 48, jax.random.key(2))
    assert g.mean.shape == (48, 3)
    for k in range(3):
        cam = C.index(cams, k)
        uv, z = C.project(g.mean[16 * k:16 * (k + 1)], cam)
        ij = np.floor(np.asarray(uv)).astype(int)  # the pixel each Gaussian came from
        np.testing.assert_allclose(uv - (ij + 0.5), 0.0, atol=1e-3)
        np.testing.assert_allclose(z, np.asarray(depths[k])[ij[:, 1], ij[:, 0]], rtol=1e-5)
        np.testing.assert_allclose(g.rgb[16 * k:16 * (k + 1)],
                                   np.asarray(frames[k])[ij[:, 1], ij[:, 0]], atol=1e-6)
        np.testing.assert_allclose(g.t_anchor[16 * k:16 * (k + 1)], [0.0, 0.35, 0.7][k])
    np.testing.assert_array_equal(g.vel, 0.0)
    np.testing.assert_array_equal(g.acc, 0.0)
    np.testing.assert_array_equal(g.log_tscale, 0.0)
    padded = fit.init_from_frames(frames, depths, cams, [0.0, 0.35, 0.7], 50,
                                  jax.random.key(2))
    assert padded.mean.shape == (50, 3)
    np.testing.assert_array_equal(padded.opacity_logit[48:], fit.PAD_LOGIT)
    np.testing.assert_allclose(padded.mean[:48], g.mean)
    with pytest.raises(ValueError, match="at least"):
        fit.init_from_frames(frames, depths, cams, [0.0, 0.35, 0.7], 2, jax.random.key(2))


def test_optimizer_uses_the_per_field_learning_rates():
    n = 4
    params = TaylorGaussians(*[jnp.zeros(s, jnp.float32) for s in
                               ((n, 3), (n, 3), (n, 3), (n,), (n,), (n, 3), (n, 4), (n,),
                                (n, 3))])
    grads = jax.tree.map(jnp.ones_like, params)
    for learn_anchor in (True, False):
        tx = fit.optimizer(learn_anchor=learn_anchor)
        upd, _ = tx.update(grads, tx.init(params), params)
        for name in TaylorGaussians._fields:
            want = 0.0 if (name == "t_anchor" and not learn_anchor) else \
                -fit.LEARNING_RATES[name]
            np.testing.assert_allclose(getattr(upd, name), want, rtol=1e-4)
    assert isinstance(fit.optimizer(), optax.GradientTransformation)
