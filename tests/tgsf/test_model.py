"""The feed-forward FF-TGsF network and the offset-head baseline (spec §Tests, §Baselines).

Every forward pass goes through one jitted ``nnx.merge`` apply (graphdef static), so each
architecture compiles once for the whole module.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import gaussians as G
from icml26_jax.tgsf import model, render

S, B, F, WIDTH = 16, 2, 3, 16
N = F * S * S


@functools.partial(jax.jit, static_argnums=0)
def _apply(graphdef, params, *args):
    return nnx.merge(graphdef, params)(*args)


def _perturb(params, seed):
    """params + 0.05 N(0, 1), drawn on the host (no per-shape compiles)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(
        np.asarray(x) + 0.05 * rng.standard_normal(x.shape).astype(np.float32)), params)


def _np_rays(cams):
    """Pixel rays (origins, z-unit directions) [B, F, S, S, 3] in numpy, written from the
    camera convention (x_c = R x + T, u = f x / z + c) rather than with ``camera.rays``."""
    K, R, T = (np.asarray(x, np.float64) for x in (cams.K, cams.R, cams.T))
    v, u = np.meshgrid(np.arange(S) + 0.5, np.arange(S) + 0.5, indexing="ij")
    d_cam = np.stack([(u - K[..., 0, 2, None, None]) / K[..., 0, 0, None, None],
                      (v - K[..., 1, 2, None, None]) / K[..., 1, 1, None, None],
                      np.ones((B, F, S, S))], -1)  # [B, F, S, S, 3]
    d = np.einsum("bfji,bfhwj->bfhwi", R, d_cam)  # R^T d_cam
    o = -np.einsum("bfji,bfj->bfi", R, T)[:, :, None, None]
    return np.broadcast_to(o, d.shape), d


def _np_zdepth(points, cams):
    """z-depth [B, F, S, S] of world points [B, F, S, S, 3] in their source cameras."""
    R, T = np.asarray(cams.R, np.float64), np.asarray(cams.T, np.float64)
    return np.einsum("bfj,bfhwj->bfhw", R[:, :, 2], points) + T[:, :, 2, None, None]


@pytest.fixture(scope="module")
def clip():
    cams = C.arc_cameras(F, height=S, width=S, arc_deg=20.0)
    cams = jax.tree.map(lambda x: jnp.stack([x] * B), cams)  # leaves [B, F, ...]
    frames = jnp.asarray(np.random.default_rng(0).uniform(size=(B, F, S, S, 3)), jnp.float32)
    times = jnp.array([[0.0, 0.2, 0.4], [0.1, 0.3, 0.5]], jnp.float32)
    return frames, cams, times


@pytest.fixture(scope="module")
def ff(clip):
    """(graphdef, params, Gaussians) of an untrained order-2 model."""
    gd, p = nnx.split(model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(0)), nnx.Param)
    return gd, p, _apply(gd, p, *clip)


def test_output_shapes_and_dtypes(ff):
    g = ff[2]
    shapes = dict(mean=(3,), vel=(3,), acc=(3,), t_anchor=(), log_tscale=(), log_scale=(3,),
                  quat=(4,), opacity_logit=(), rgb=(3,))
    for name, tail in shapes.items():
        x = getattr(g, name)
        assert x.shape == (B, N) + tail, name
        assert x.dtype == jnp.float32, name
        assert np.all(np.isfinite(np.asarray(x))), name


def test_gaussians_are_pixel_aligned_and_anchored_at_their_source_frame(clip, ff):
    frames, cams, times = clip
    g = ff[2]
    np.testing.assert_array_equal(g.t_anchor.reshape(B, F, S * S), np.broadcast_to(
        np.asarray(times)[..., None], (B, F, S * S)))
    o, d = _np_rays(cams)
    m = np.asarray(g.mean, np.float64).reshape(B, F, S, S, 3)
    cross = np.cross(m - o, d / np.linalg.norm(d, axis=-1, keepdims=True))
    # float32 means of length ~5: a few float32 ulps (~5e-7) of error.
    np.testing.assert_allclose(cross, 0.0, atol=1e-5)
    z = _np_zdepth(m, cams)
    assert z.min() > 2.0 - 1e-4 and z.max() < 8.0 + 1e-4  # the documented range (2, 8)
    # z-depth, not distance: the mean is o + z d with d's camera-z component 1.
    np.testing.assert_allclose(m, o + z[..., None] * d, atol=1e-5)


def test_untrained_model_is_static_with_the_documented_init(clip, ff):
    frames, cams, _ = clip
    g = ff[2]
    np.testing.assert_array_equal(g.vel, 0.0)
    np.testing.assert_array_equal(g.acc, 0.0)
    np.testing.assert_allclose(g.log_tscale, np.log(0.7), atol=1e-6)
    # Image shortcut: the head's kernel is 0.01 x lecun-normal, so colours start within
    # 0.5 tanh(|x|) << 0.05 of the input.
    np.testing.assert_allclose(g.rgb.reshape(B, F, S, S, 3), frames, atol=0.05)
    q = np.asarray(g.quat)
    assert (q[..., 0] / np.linalg.norm(q, axis=-1)).min() > 0.99  # near identity
    # log-scale ~ one pixel footprint log(D / f_x) at the predicted z-depth.
    z = _np_zdepth(np.asarray(g.mean, np.float64).reshape(B, F, S, S, 3), cams).reshape(B, N)
    fx = float(cams.K[0, 0, 0, 0])
    np.testing.assert_allclose(g.log_scale, np.broadcast_to(np.log(z / fx)[..., None],
                                                          (B, N, 3)), atol=0.1)


def test_order1_is_the_same_network_with_zero_acceleration(clip):
    n2 = model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(1))
    n1 = model.FFTGsF(image_size=S, width=WIDTH, order=1, rngs=nnx.Rngs(1))
    gd2, p2 = nnx.split(n2, nnx.Param)
    gd1, p1 = nnx.split(n1, nnx.Param)
    assert jax.tree.structure(p1) == jax.tree.structure(p2)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(a, b)
    # Perturb the (zero-initialised) motion head so v and a are non-zero, identically.
    p = _perturb(p2, 2)
    g2 = _apply(gd2, p, *clip)
    g1 = _apply(gd1, p, *clip)
    assert np.abs(g2.acc).max() > 1e-3 and np.abs(g2.vel).max() > 1e-3
    np.testing.assert_array_equal(g1.acc, 0.0)
    np.testing.assert_array_equal(g1.vel, g2.vel)
    np.testing.assert_array_equal(g1.mean, g2.mean)


def test_same_rngs_same_outputs(clip, ff):
    gd, p = nnx.split(model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(0)), nnx.Param)
    for a, b in zip(jax.tree.leaves(ff[1]), jax.tree.leaves(p)):
        np.testing.assert_array_equal(a, b)
    g = _apply(gd, p, *clip)
    for a, b in zip(jax.tree.leaves(ff[2]), jax.tree.leaves(g)):
        np.testing.assert_array_equal(a, b)
    other = nnx.split(model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(7)), nnx.Param)[1]
    assert not np.array_equal(other["backbone"]["conv1"]["kernel"][...],
                              p["backbone"]["conv1"]["kernel"][...])


def test_bad_arguments_raise(clip):
    with pytest.raises(ValueError, match="image_size"):
        model.FFTGsF(image_size=15, tokens=8, rngs=nnx.Rngs(0))
    for order in (0, 3):
        with pytest.raises(ValueError, match="order"):
            model.FFTGsF(order=order, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="heads"):
        model.FFTGsF(width=30, heads=4, rngs=nnx.Rngs(0))
    frames, cams, times = clip
    net = model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="times"):
        net(frames, cams, times[:, :2])
    with pytest.raises(ValueError, match="image_size"):
        net(frames[:, :, :8, :8], cams, times)


def test_offset_model_matches_parameters_and_moves_with_query_time(clip):
    ref = model.param_count(model.FFTGsF(image_size=S, width=WIDTH, rngs=nnx.Rngs(0)))
    off = model.matched_offset_model(S, F, WIDTH, rngs=nnx.Rngs(0))
    assert abs(model.param_count(off) - ref) <= 0.05 * ref
    gd, p = nnx.split(off, nnx.Param)
    g0 = _apply(gd, p, *clip, jnp.array([0.6, 0.6], jnp.float32))
    np.testing.assert_array_equal(g0.vel, 0.0)
    np.testing.assert_array_equal(g0.acc, 0.0)
    p = _perturb(p, 3)  # make the zero-initialised offset head non-zero
    ga = _apply(gd, p, *clip, jnp.array([0.6, 0.7], jnp.float32))
    gb = _apply(gd, p, *clip, jnp.array([0.8, 0.9], jnp.float32))
    assert np.abs(np.asarray(ga.mean) - np.asarray(gb.mean)).max() > 1e-3
    np.testing.assert_array_equal(ga.rgb, gb.rgb)  # only the motion head sees query_t
    for i, t in enumerate((0.6, 0.7)):
        gi = jax.tree.map(lambda x: x[i], ga)
        np.testing.assert_allclose(G.positions_at(gi, t, 2), gi.mean)
        np.testing.assert_allclose(G.opacity_at(gi, t), jax.nn.sigmoid(gi.opacity_logit))


def test_offset_parameter_count_matched_at_the_default_width():
    width = 32  # the default; WIDTH = 16 is covered above
    ref = model.param_count(nnx.eval_shape(
        lambda: model.FFTGsF(image_size=S, width=width, rngs=nnx.Rngs(0))))
    off = nnx.eval_shape(lambda: model.matched_offset_model(S, F, width, rngs=nnx.Rngs(0)))
    assert abs(model.param_count(off) - ref) <= 0.05 * ref


def test_rendered_loss_has_finite_nonzero_backbone_gradients(clip, ff):
    frames, cams, times = clip
    gd, p = ff[0], ff[1]
    cam = C.index(C.arc_cameras(1, height=S, width=S), 0)
    one = (frames[:1], jax.tree.map(lambda x: x[:1], cams), times[:1])

    def loss(p):  # pure: merges the split parameters
        g = jax.tree.map(lambda x: x[0], nnx.merge(gd, p)(*one))
        return jnp.mean(render.render(g, cam, 0.3)["rgb"])

    grads = jax.jit(jax.grad(loss))(p)
    for path in (("conv1", "kernel"), ("embed", "kernel"), ("time", "kernel"),
                 ("block1", "attn", "query", "kernel"), ("block2", "fc2", "kernel"),
                 ("unembed", "kernel")):
        x = grads["backbone"]
        for k in path:
            x = x[k]
        x = np.asarray(jax.tree.leaves(x)[0])
        assert np.all(np.isfinite(x)) and np.abs(x).max() > 0, path
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(grads))
