"""The dense rasteriser (spec §Tests "Rasteriser") and the Taylor-Gaussians ("TGs")."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import gaussians as G
from icml26_jax.tgsf import render as R

H = W = 16


def _cam(dtype=jnp.float32):
    K = C.intrinsics(H, W, 50.0)
    cam = C.Camera(K, jnp.eye(3), jnp.zeros(3), H, W)
    return jax.tree.map(lambda x: x.astype(dtype), cam)


def _gauss(n, key, z=3.0, spread=0.6, dtype=jnp.float32):
    k = jax.random.split(key, 6)
    mean = jnp.concatenate([spread * jax.random.normal(k[0], (n, 2)),
                            z + 0.3 * jax.random.normal(k[1], (n, 1))], -1)
    return G.TaylorGaussians(
        mean=mean, vel=0.2 * jax.random.normal(k[2], (n, 3)),
        acc=0.3 * jax.random.normal(k[3], (n, 3)), t_anchor=jnp.zeros(n),
        log_tscale=jnp.zeros(n), log_scale=jnp.log(0.08) + 0.3 * jax.random.normal(k[4], (n, 3)),
        quat=jax.random.normal(k[5], (n, 4)), opacity_logit=jnp.full((n,), 1.0),
        rgb=jax.random.uniform(k[0], (n, 3)))


def test_one_gaussian_matches_the_analytic_profile_with_dilation():
    cam = _cam()
    mean = jnp.array([[0.2, -0.1, 2.5]])
    cov = jnp.array([[[0.02, 0.005, 0.0], [0.005, 0.01, 0.002], [0.0, 0.002, 0.03]]])
    out = R.rasterize(mean, cov, jnp.array([0.8]), jnp.ones((1, 1)), cam, jnp.zeros(1))
    # independent numpy reference
    K = np.asarray(cam.K, np.float64)
    x, y, z = 0.2, -0.1, 2.5
    fx, fy = K[0, 0], K[1, 1]
    J = np.array([[fx / z, 0, -fx * x / z ** 2], [0, fy / z, -fy * y / z ** 2]])
    S2 = J @ np.asarray(cov[0], np.float64) @ J.T + 0.3 * np.eye(2)
    u0 = np.array([fx * x / z + K[0, 2], fy * y / z + K[1, 2]])
    jj, ii = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
    d = np.stack([jj - u0[0], ii - u0[1]], -1)
    a = 0.8 * np.exp(-0.5 * np.einsum("hwi,ij,hwj->hw", d, np.linalg.inv(S2), d))
    a = np.where(a < 1 / 255, 0.0, np.minimum(a, 0.99))
    np.testing.assert_allclose(out["alpha"], a, atol=1e-4)
    np.testing.assert_allclose(out["feats"][..., 0], a, atol=1e-4)
    np.testing.assert_allclose(np.asarray(out["depth"])[a > 0], 2.5, rtol=1e-5)


def test_front_to_back_order():
    cam = _cam()
    cov = jnp.broadcast_to(0.05 * jnp.eye(3), (2, 3, 3))
    red, blue = jnp.array([1.0, 0, 0]), jnp.array([0, 0, 1.0])
    for z_red, z_blue, want in ((2.0, 3.0, 0), (3.0, 2.0, 2)):
        means = jnp.array([[0.0, 0.0, z_red], [0.0, 0.0, z_blue]])
        img = R.rasterize(means, cov, jnp.array([0.95, 0.95]), jnp.stack([red, blue]), cam,
                          jnp.zeros(3))["feats"]
        assert int(jnp.argmax(img[H // 2, W // 2])) == want


def test_gradients_match_finite_differences_in_float64():
    with jax.enable_x64(True):
        cam = _cam(jnp.float64)
        g = jax.tree.map(lambda x: x.astype(jnp.float64), _gauss(3, jax.random.key(0)))
        target = jax.random.uniform(jax.random.key(1), (H, W, 3), jnp.float64)

        def loss(mean, log_scale, logit, rgb):
            gg = g._replace(mean=mean, log_scale=log_scale, opacity_logit=logit, rgb=rgb)
            out = R.rasterize(gg.mean, G.covariances(gg), jax.nn.sigmoid(gg.opacity_logit),
                              gg.rgb, cam, jnp.zeros(3, jnp.float64))
            return jnp.sum((out["feats"] - target) ** 2)

        loss = jax.jit(loss)
        args = (g.mean, g.log_scale, g.opacity_logit, g.rgb)
        grads = jax.grad(loss, argnums=(0, 1, 2, 3))(*args)
        h = 1e-6
        for k, (x, gx) in enumerate(zip(args, grads)):
            flat = np.asarray(x).ravel()
            for idx in (0, flat.size - 1):
                e = np.zeros_like(flat)
                e[idx] = h
                plus = list(args)
                minus = list(args)
                plus[k] = jnp.asarray((flat + e).reshape(x.shape))
                minus[k] = jnp.asarray((flat - e).reshape(x.shape))
                fd = (float(loss(*plus)) - float(loss(*minus))) / (2 * h)
                an = float(np.asarray(gx).ravel()[idx])
                assert abs(fd - an) <= 1e-2 * max(abs(fd), 1e-3), (k, idx, fd, an)


def test_uniform_translation_renders_flow_f_delta_over_z():
    cam = _cam()
    g = _gauss(64, jax.random.key(2), z=3.0, spread=0.5)
    z = 3.0
    g = g._replace(mean=g.mean.at[:, 2].set(z), vel=jnp.zeros_like(g.vel).at[:, 0].set(0.1),
                   acc=jnp.zeros_like(g.acc), opacity_logit=jnp.full((64,), 3.0))
    flow, A = R.render_flow(g, cam, 0.0, cam, 1.0, order=2)
    m = np.asarray(A) > 0.5
    assert m.sum() > 20
    np.testing.assert_allclose(np.asarray(flow)[m][:, 0], float(cam.K[0, 0]) * 0.1 / z,
                               atol=1e-3)
    np.testing.assert_allclose(np.asarray(flow)[m][:, 1], 0.0, atol=1e-3)


def test_fronto_parallel_plane_renders_its_depth():
    cam = _cam()
    n = 400
    xy = jax.random.uniform(jax.random.key(3), (n, 2), minval=-1.5, maxval=1.5)
    means = jnp.concatenate([xy, jnp.full((n, 1), 2.0)], -1)
    covs = jnp.broadcast_to(jnp.diag(jnp.array([0.02, 0.02, 1e-6])), (n, 3, 3))
    out = R.rasterize(means, covs, jnp.full((n,), 0.9), jnp.ones((n, 1)), cam, jnp.zeros(1))
    m = np.asarray(out["alpha"]) > 0.5
    assert m.mean() > 0.9
    np.testing.assert_allclose(np.asarray(out["depth"])[m], 2.0, rtol=1e-2)


def test_faint_gaussians_contribute_nothing_and_chunking_is_exact():
    cam = _cam()
    g = _gauss(32, jax.random.key(4))
    covs, op = G.covariances(g), jax.nn.sigmoid(g.opacity_logit)
    base = R.rasterize(g.mean, covs, op, g.rgb, cam, jnp.zeros(3))
    faint = R.rasterize(jnp.concatenate([g.mean, jnp.array([[0.0, 0.0, 1.0]])]),
                        jnp.concatenate([covs, 0.05 * jnp.eye(3)[None]]),
                        jnp.concatenate([op, jnp.array([0.9 / 255])]),
                        jnp.concatenate([g.rgb, jnp.ones((1, 3))]), cam, jnp.zeros(3))
    for k in base:
        np.testing.assert_allclose(faint[k], base[k], atol=1e-6)
    whole = R.rasterize(g.mean, covs, op, g.rgb, cam, jnp.zeros(3), pixel_chunk=H * W)
    for k in base:
        np.testing.assert_allclose(whole[k], base[k], atol=1e-6)
    with pytest.raises(ValueError, match="pixel_chunk"):
        R.rasterize(g.mean, covs, op, g.rgb, cam, jnp.zeros(3), pixel_chunk=100)


def test_culled_behind_the_camera():
    cam = _cam()
    out = R.rasterize(jnp.array([[0.0, 0.0, -2.0]]), 0.05 * jnp.eye(3)[None], jnp.array([0.9]),
                      jnp.ones((1, 1)), cam, jnp.zeros(1))
    assert float(jnp.max(out["alpha"])) == 0.0


def test_taylor_gaussians_orders_and_opacity():
    g = _gauss(5, jax.random.key(5))._replace(t_anchor=jnp.full((5,), 0.35))
    for t in (0.0, 0.35, 0.8, 1.0):
        dt = t - 0.35
        exact = g.mean + g.vel * dt + 0.5 * g.acc * dt * dt  # a quadratic trajectory
        np.testing.assert_allclose(G.positions_at(g, t, 2), exact, atol=1e-6)
        err = jnp.linalg.norm(G.positions_at(g, t, 1) - exact, axis=-1)
        np.testing.assert_allclose(err, G.taylor_error(g.acc, dt), atol=1e-6)
        np.testing.assert_allclose(G.positions_at(g, t, 0), g.mean)
    ts = jnp.linspace(0, 1, 101)
    op = jax.vmap(lambda t: G.opacity_at(g, t))(ts)  # [T, N]
    assert np.all(np.abs(ts[jnp.argmax(op, 0)] - 0.35) <= 0.005)
    np.testing.assert_allclose(jax.vmap(lambda t: G.opacity_at(g, t, temporal=False))(ts),
                               jnp.broadcast_to(jax.nn.sigmoid(g.opacity_logit), (101, 5)))
    # exp(lambda) = 1: a Gaussian anchored at 0.7 keeps exp(-0.09) = 0.91 of its opacity at 1
    g1 = g._replace(t_anchor=jnp.full((5,), 0.7))
    np.testing.assert_allclose(G.opacity_at(g1, 1.0) / jax.nn.sigmoid(g.opacity_logit),
                               math.exp(-0.09), rtol=1e-5)
    for bad in (3, -1, True):
        with pytest.raises(ValueError, match="order"):
            G.positions_at(g, 0.5, bad)
    np.testing.assert_allclose(G.mask_motion(g, 1).acc, 0.0)


def test_covariances_are_rotated_scales():
    g = _gauss(4, jax.random.key(6))
    cov = G.covariances(g)
    ev = np.sort(np.linalg.eigvalsh(np.asarray(cov, np.float64)), -1)
    np.testing.assert_allclose(ev, np.sort(np.exp(2 * np.asarray(g.log_scale)), -1), rtol=1e-4)
    Rm = G.quat_to_rotmat(g.quat)
    np.testing.assert_allclose(Rm @ jnp.swapaxes(Rm, -1, -2), jnp.broadcast_to(jnp.eye(3),
                                                                              (4, 3, 3)),
                               atol=1e-5)


def test_camera_round_trip_and_plucker():
    cams = C.arc_cameras(3, height=H, width=W)
    for i in range(3):
        cam = C.index(cams, i)
        pts = jax.random.normal(jax.random.key(i), (10, 3)) * 0.5
        uv, z = C.project(pts, cam)
        np.testing.assert_allclose(C.unproject(uv, z, cam), pts, atol=1e-5)
        o, d = C.rays(cam)
        uvr, zr = C.project(o + 2.0 * d, cam)  # z-depth 2 along every ray
        np.testing.assert_allclose(zr, 2.0, rtol=1e-5)
        np.testing.assert_allclose(uvr, C.pixel_centers(H, W), atol=1e-4)
        pl = C.plucker(cam)
        np.testing.assert_allclose(jnp.sum(pl[..., :3] * pl[..., 3:], -1), 0.0, atol=1e-5)
