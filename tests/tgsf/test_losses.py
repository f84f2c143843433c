"""Tests of icml26_jax.tgsf.losses: photometric metrics, SSI depth, flow, lifted scene flow."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import losses


def _smooth_image(seed, h=24, w=20, c=3):
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    img = np.stack([0.5 + 0.3 * np.sin(6 * xx + k) * np.cos(4 * yy - k) for k in range(c)], -1)
    img = img + 0.05 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


# ----------------------------------------------------------------------------- SSIM / PSNR


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_ssim_identity_and_monotone_in_noise(padding):
    x = _smooth_image(0)
    assert float(losses.ssim(x, x, padding=padding)) == pytest.approx(1.0, abs=1e-5)
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(x.shape).astype(np.float32)
    vals = [float(losses.ssim(x, np.clip(x + s * noise, 0, 1), padding=padding))
            for s in (0.02, 0.05, 0.1, 0.2)]
    assert all(a > b for a, b in zip(vals, vals[1:])), vals
    assert vals[-1] < 0.9


def _ssim_bruteforce(x, y):
    """'valid' SSIM in float64, window by window."""
    r = np.arange(11) - 5.0
    g = np.exp(-(r**2) / (2 * 1.5**2))
    g /= g.sum()
    win = np.outer(g, g)
    h, w, c = x.shape
    out = np.zeros((h - 10, w - 10, c))
    for i in range(h - 10):
        for j in range(w - 10):
            px, py = x[i:i + 11, j:j + 11], y[i:i + 11, j:j + 11]
            mx = np.einsum("ab,abc->c", win, px)
            my = np.einsum("ab,abc->c", win, py)
            vx = np.einsum("ab,abc->c", win, (px - mx) ** 2)
            vy = np.einsum("ab,abc->c", win, (py - my) ** 2)
            cxy = np.einsum("ab,abc->c", win, (px - mx) * (py - my))
            c1, c2 = 0.01**2, 0.03**2
            out[i, j] = ((2 * mx * my + c1) * (2 * cxy + c2)
                         / ((mx**2 + my**2 + c1) * (vx + vy + c2)))
    return out.mean()


def test_ssim_valid_matches_bruteforce():
    x = _smooth_image(2, 15, 14)
    y = _smooth_image(3, 15, 14)
    ref = _ssim_bruteforce(x.astype(np.float64), y.astype(np.float64))
    # float32 E[x^2] - mu^2 cancellation: ~1e-5 absolute is the float32 floor here.
    assert float(losses.ssim(x, y, padding="valid")) == pytest.approx(ref, abs=1e-4)


def test_ssim_errors():
    x = np.zeros((8, 8, 3), np.float32)
    with pytest.raises(ValueError, match="valid"):
        losses.ssim(x, x, padding="valid")
    with pytest.raises(ValueError, match="padding"):
        losses.ssim(x, x, padding="reflect")
    with pytest.raises(ValueError, match="same shape"):
        losses.ssim(x, x[:4])


def test_psnr_reference_values():
    x = np.full((8, 8, 3), 0.5, np.float32)
    assert float(losses.psnr(x, x + np.float32(0.1))) == pytest.approx(20.0, abs=1e-4)
    assert float(losses.psnr(x, x + np.float32(0.01))) == pytest.approx(40.0, abs=1e-3)
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 10, 12, 3))
    ref = -10 * np.log10(np.mean((a - b) ** 2))
    got = losses.psnr(a.astype(np.float32), b.astype(np.float32))
    assert float(got) == pytest.approx(ref, abs=1e-4)
    mask = rng.random((10, 12)) > 0.5
    ref_m = -10 * np.log10(np.mean(((a - b) ** 2)[mask]))
    got_m = losses.psnr(a.astype(np.float32), b.astype(np.float32), mask)
    assert float(got_m) == pytest.approx(ref_m, abs=1e-4)
    assert float(losses.psnr(x, x)) == pytest.approx(losses.PSNR_MAX_DB)


def test_masked_psnr_uses_dilated_mask():
    h = w = 16
    fg = np.zeros((h, w), bool)
    fg[8, 8] = True
    dil = np.asarray(losses.dilate_mask(fg, 3))
    expect = np.zeros((h, w), bool)
    expect[5:12, 5:12] = True
    np.testing.assert_array_equal(dil, expect)
    corner = np.zeros((h, w), bool)
    corner[0, 0] = True
    assert int(np.asarray(losses.dilate_mask(corner, 3)).sum()) == 16  # clipped at the border
    gt = np.full((h, w, 3), 0.5, np.float32)
    pred = gt + np.float32(0.5)  # error 0.5 (6.02 dB) outside the dilated 7x7 square
    pred[5:12, 5:12] = gt[5:12, 5:12] + np.float32(0.1)  # error 0.1 (20 dB) inside it
    assert float(losses.masked_psnr(pred, gt, fg)) == pytest.approx(20.0, abs=1e-4)
    assert float(losses.masked_psnr(pred, gt, fg, dilate=0)) == pytest.approx(20.0, abs=1e-4)
    # dilate = 4 reaches the 0.5 ring: 49 px at 0.01 and 32 px at 0.25 squared error.
    ref = -10 * np.log10((49 * 0.01 + 32 * 0.25) / 81)
    assert float(losses.masked_psnr(pred, gt, fg, dilate=4)) == pytest.approx(ref, abs=1e-4)


def test_l1_mask():
    x = np.zeros((4, 4, 3), np.float32)
    y = np.ones((4, 4, 3), np.float32)
    y[:2] = 5.0
    mask = np.zeros((4, 4), bool)
    mask[2:] = True
    assert float(losses.l1(x, y)) == pytest.approx(3.0)
    assert float(losses.l1(x, y, mask)) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- depth


def test_ssi_depth_loss_scale_shift_invariant():
    rng = np.random.default_rng(0)
    pred = (2 + rng.random((2, 12, 10))).astype(np.float32)
    target = (1 + rng.random((2, 12, 10))).astype(np.float32)
    valid = rng.random((2, 12, 10)) > 0.3
    loss = jax.jit(losses.ssi_depth_loss)  # one compile per shape, reused below
    base = float(loss(pred, target, valid))
    assert base > 0.05
    for a, b in ((3.0, -1.0), (0.25, 7.0), (-2.0, 0.5)):
        got = loss(np.float32(a) * pred + np.float32(b), target, valid)
        assert float(got) == pytest.approx(base, rel=1e-4)
    # Zero when the prediction is an affine function of the target (on valid pixels).
    aff = np.float32(0.3) * target + np.float32(2.0)
    assert float(loss(aff, target, valid)) == pytest.approx(0.0, abs=1e-5)
    # Batched == per-image mean.
    per = [float(loss(pred[i], target[i], valid[i])) for i in range(2)]
    assert base == pytest.approx(np.mean(per), rel=1e-5)


def test_ssi_depth_loss_degenerate_cases():
    target = np.arange(12, dtype=np.float32).reshape(3, 4)
    const = np.full((3, 4), 2.0, np.float32)
    valid = np.ones((3, 4), bool)
    loss = jax.jit(losses.ssi_depth_loss)
    grad = jax.jit(jax.grad(losses.ssi_depth_loss))
    got = float(loss(const, target, valid))
    assert got == pytest.approx(np.mean(np.abs(target - target.mean())), rel=1e-5)
    assert float(loss(target, target, np.zeros((3, 4), bool))) == 0.0
    one = np.zeros((3, 4), bool)
    one[1, 1] = True
    assert float(loss(target, target, one)) == pytest.approx(0.0, abs=1e-6)
    for v in (valid, one, np.zeros((3, 4), bool)):
        g = grad(const, target, v)
        assert np.all(np.isfinite(np.asarray(g)))


def test_align_depth_stops_gradient_on_rendered():
    rng = np.random.default_rng(0)
    rendered = (2 + rng.random((6, 5))).astype(np.float32)
    pseudo = np.float32(0.5) * rendered + np.float32(3.0)
    valid = np.ones((6, 5), bool)
    np.testing.assert_allclose(losses.align_depth(pseudo, rendered, valid), rendered,
                               rtol=1e-5, atol=1e-5)
    g = jax.grad(lambda r: jnp.sum(losses.align_depth(pseudo, r, valid)))(rendered)
    np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_gradients_finite():
    x = jnp.asarray(_smooth_image(0, 16, 16))
    y = jnp.asarray(_smooth_image(1, 16, 16))
    rng = np.random.default_rng(0)
    pred = jnp.asarray(2 + rng.random((8, 8)), jnp.float32)
    target = jnp.asarray(1 + rng.random((8, 8)), jnp.float32)
    valid = jnp.asarray(rng.random((8, 8)) > 0.2)

    @jax.jit
    def grads(x, y, pred, target, valid):
        return (jax.grad(losses.ssim)(x, y), jax.grad(losses.ssim)(x, x),
                jax.grad(losses.ssi_depth_loss)(pred, target, valid),
                # Affine pred: the loss is at its minimum (|0| kink); still finite.
                jax.grad(losses.ssi_depth_loss)(2 * target + 1, target, valid))

    out = [np.asarray(g) for g in grads(x, y, pred, target, valid)]
    assert all(np.all(np.isfinite(g)) for g in out)
    assert np.abs(out[0]).sum() > 0 and np.abs(out[2]).sum() > 0


# ----------------------------------------------------------------------------- flow


def test_flow_loss_hand_case():
    h, w = 4, 6
    pred = np.zeros((h, w, 2), np.float32)
    target = np.zeros((h, w, 2), np.float32)
    target[..., 0], target[..., 1] = 1.0, -2.0
    valid = np.zeros((h, w), bool)
    valid[:2] = True
    target[2:] = 100.0  # invalid pixels must not count
    assert float(losses.flow_loss(pred, target, valid, h)) == pytest.approx(3.0 / 4)
    assert float(losses.flow_loss(pred, target, np.zeros((h, w), bool), h)) == 0.0
    with pytest.raises(ValueError, match="height"):
        losses.flow_loss(pred, target, valid, 0)


def test_motion_epe_and_second_difference():
    pred = np.zeros((3, 3, 3), np.float32)
    gt = np.zeros((3, 3, 3), np.float32)
    gt[0] = (3.0, 4.0, 0.0)
    gt[1:] = 50.0
    mask = np.zeros((3, 3), bool)
    mask[0] = True
    mask[1, 0] = True  # error sqrt(3) * 50
    assert float(losses.motion_epe(pred, gt, mask)) == pytest.approx(
        (3 * 5.0 + 50 * np.sqrt(3)) / 4, rel=1e-6)
    assert np.isnan(float(losses.motion_epe(pred, gt, np.zeros((3, 3), bool))))


def test_second_difference_recovers_acceleration():
    rng = np.random.default_rng(0)
    p0, v, a = rng.standard_normal((3, 7, 3))
    t, d = 0.4, 0.05

    def pos(s):
        return p0 + v * s + 0.5 * a * s**2

    # float64: exact up to rounding (|p| ~ 1, so ~1e-16 / d^2 ~ 1e-13).
    np.testing.assert_allclose(losses.second_difference(pos(t - d), pos(t), pos(t + d), d),
                               a, atol=1e-9)
    # float32 jnp: rounding of positions ~6e-8 amplified by 4 / d^2 = 1600 -> ~1e-4.
    got = losses.second_difference(*(jnp.asarray(pos(s), jnp.float32)
                                     for s in (t - d, t, t + d)), d)
    np.testing.assert_allclose(np.asarray(got), a, atol=2e-3)


# ----------------------------------------------------------------------------- lifted flow


@functools.lru_cache(maxsize=None)
def _plane_scene(h=24, w=32, vel=(0.12, -0.07, 0.25), depth2=3.5):
    """A plane fronto-parallel to cam_t2 at z-depth ``depth2`` at time t2; every material
    point moves by ``vel`` from t to t2. Returns exact depths, flow and cameras."""
    cams = camlib.arc_cameras(5, height=h, width=w, arc_deg=12.0)
    cam_t, cam_t2 = camlib.index(cams, 1), camlib.index(cams, 2)
    vel = jnp.asarray(vel, jnp.float32)
    n = cam_t2.R[2]  # optical axis of cam_t2 in world coordinates
    c = jnp.float32(depth2) - cam_t2.T[2]  # plane at t2: n . X = c
    o, d = camlib.rays(cam_t)
    # Plane at t: n . (X + vel) = c; intersect with the rays of cam_t.
    depth_t = (c - jnp.dot(n, vel) - o @ n) / (d @ n)  # [H, W]
    x_t = o + depth_t[..., None] * d
    uv2, z2 = camlib.project(x_t + vel, cam_t2)
    flow = uv2 - camlib.pixel_centers(h, w)
    depth_t2 = jnp.full((h, w), depth2, jnp.float32)
    np.testing.assert_allclose(np.asarray(z2), depth2, rtol=1e-5)  # the scene is consistent
    return depth_t, depth_t2, flow, cam_t, cam_t2, vel


def test_lifted_scene_flow_exact_on_plane():
    depth_t, depth_t2, flow, cam_t, cam_t2, vel = _plane_scene()
    mask = jnp.ones((24, 32), bool)
    exact = jnp.broadcast_to(vel, (24, 32, 3))
    off = exact + jnp.asarray([0.1, 0.0, -0.2], jnp.float32)

    @jax.jit
    def run(depth_t, depth_t2, flow, cam_t, cam_t2):
        sf, valid = losses.lift_scene_flow(depth_t, depth_t2, flow, cam_t, cam_t2)
        args = (depth_t, depth_t2, flow, mask, cam_t, cam_t2)
        return (sf, valid, losses.lifted_sceneflow_loss(exact, *args),
                losses.lifted_sceneflow_loss(off, *args),
                jax.grad(losses.lifted_sceneflow_loss)(off, *args))

    sf, valid, loss_exact, loss_off, g = run(depth_t, depth_t2, flow, cam_t, cam_t2)
    sf, valid = np.asarray(sf), np.asarray(valid)
    assert 0.5 < valid.mean() < 1.0  # the motion pushes some pixels out of view
    # The expected invalid set: targets outside the hull of pixel centres.
    q = np.asarray(camlib.pixel_centers(24, 32) + flow)
    inside = (q[..., 0] >= 0.5) & (q[..., 0] <= 31.5) & (q[..., 1] >= 0.5) & (q[..., 1] <= 23.5)
    np.testing.assert_array_equal(valid, inside)
    # float32 with depths ~3.5: ~1e-6 relative rounding -> 1e-4 absolute leaves margin.
    np.testing.assert_allclose(sf[valid], np.broadcast_to(vel, (valid.sum(), 3)), atol=1e-4)
    np.testing.assert_array_equal(sf[~valid], 0.0)
    # The loss of the exact displacement is ~0; a wrong one costs its L1 norm.
    assert float(loss_exact) < 1e-4
    assert float(loss_off) == pytest.approx(0.3, abs=1e-4)
    assert np.all(np.isfinite(np.asarray(g))) and np.abs(np.asarray(g)).sum() > 0


def test_lifted_scene_flow_errors():
    depth_t, depth_t2, flow, cam_t, cam_t2, _ = _plane_scene()
    with pytest.raises(ValueError, match="flow"):
        losses.lift_scene_flow(depth_t, depth_t2, flow[..., :1], cam_t, cam_t2)
    with pytest.raises(ValueError, match="depths"):
        losses.lift_scene_flow(depth_t[:-1], depth_t2, flow, cam_t, cam_t2)
