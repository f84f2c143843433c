"""The analytic ground-truth ray caster and pseudo-labels (spec §Tests "GT ray caster",
"Pseudo-labels", textures)."""

import ast
import inspect
import math
import socket

import numpy as np
import pytest

from icml26_jax.core import photos
from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import scenes as S

H = W = 33  # odd: the centre pixel's centre (16.5, 16.5) lies exactly on the optical axis
TEX = np.random.default_rng(0).uniform(size=(16, 32, 3)).astype(np.float32)


def _axis_cam(h=H, w=W):
    """The camera at (0, 0, -4) looking at the origin (+z)."""
    return C.index(C.arc_cameras(1, height=h, width=w), 0)


def _scene(*objects):
    return S.SceneSpec(kind="test", seed=0, objects=tuple(objects), plane_texture=TEX)


def _project_np(x, cam):
    """Reference projection (float64) for the checks."""
    K, R, T = (np.asarray(a, np.float64) for a in (cam.K, cam.R, cam.T))
    xc = x @ R.T + T
    return np.stack([K[0, 0] * xc[..., 0] / xc[..., 2] + K[0, 2],
                     K[1, 1] * xc[..., 1] / xc[..., 2] + K[1, 2]], -1)


def _unproject_np(uv, z, cam):
    K, R, T = (np.asarray(a, np.float64) for a in (cam.K, cam.R, cam.T))
    xc = np.stack([(uv[..., 0] - K[0, 2]) / K[0, 0] * z, (uv[..., 1] - K[1, 2]) / K[1, 1] * z,
                   z], -1)
    return (xc - T) @ R


def test_sphere_depth_at_centre_pixel_is_analytic():
    r = 0.7
    scene = _scene(S.Sphere(radius=r, texture=TEX, c0=(0.0, 0.0, 0.5)))
    rgb, depth, fg = S.gt_render(scene, _axis_cam(), 0.0)
    assert rgb.shape == (H, W, 3) and depth.shape == (H, W) and fg.dtype == bool
    # camera-to-centre distance 4.5 minus the radius, along the optical axis
    np.testing.assert_allclose(depth[H // 2, W // 2], 4.5 - r, rtol=1e-6)
    assert fg[H // 2, W // 2] and not fg[0, 0]
    np.testing.assert_allclose(depth[0, 0], 4.0 + S.PLANE_Z, rtol=1e-6)  # the back plane
    assert np.all((rgb >= 0) & (rgb <= 1)) and np.isfinite(depth).all()


def test_translating_sphere_flow_equals_projected_displacement():
    r, delta = 0.7, np.array([0.3, -0.2, 0.25])
    scene = _scene(S.Sphere(radius=r, texture=TEX, c0=(0.0, 0.0, 0.0), v0=tuple(delta)))
    cam = _axis_cam()
    flow, valid = S.gt_flow(scene, cam, 0.0, cam, 1.0)
    _, depth, fg = S.gt_render(scene, cam, 0.0)
    f = float(cam.K[0, 0])
    # centre pixel: the front point (0, 0, -r) at z-depth 4 - r moves to (0, 0, -r) + delta
    z2 = 4.0 - r + delta[2]  # the camera z axis is the world z axis here
    dc = np.asarray(cam.R, np.float64) @ delta  # the displacement in camera axes
    np.testing.assert_allclose(flow[H // 2, W // 2], f * dc[:2] / z2, atol=1e-4)
    # general formula on the visible sphere pixels: project(unproject(p, D) + delta) - p
    vv, uu = np.meshgrid(np.arange(H) + 0.5, np.arange(W) + 0.5, indexing="ij")
    p = np.stack([uu, vv], -1)
    want = _project_np(_unproject_np(p, depth.astype(np.float64), cam) + delta, cam) - p
    m = fg & valid
    assert m.sum() > 50
    np.testing.assert_allclose(flow[m], want[m], atol=2e-3)  # depth stored as float32
    disp, dvalid = S.gt_displacement3d(scene, cam, 0.0, 1.0)
    np.testing.assert_allclose(disp[fg], np.broadcast_to(delta, disp[fg].shape), atol=1e-6)
    np.testing.assert_allclose(disp[~fg], 0.0)
    assert dvalid.all()


def test_occlusion_mask_two_spheres():
    back = S.Sphere(radius=0.8, texture=TEX, c0=(0.0, 0.0, 1.0))  # static, depth 4.2
    front = S.Sphere(radius=0.3, texture=TEX, c0=(-2.5, 0.0, -1.0), v0=(2.5, 0.0, 0.0))
    scene = _scene(back, front)
    cam = _axis_cam()
    _, d0, fg0 = S.gt_render(scene, cam, 0.0)
    _, d1, _ = S.gt_render(scene, cam, 1.0)
    flow, valid = S.gt_flow(scene, cam, 0.0, cam, 1.0)
    assert fg0[H // 2, W // 2]  # at t = 0 the centre pixel sees the back sphere ...
    assert not valid[H // 2, W // 2]  # ... which the front sphere hides at t = 1
    # the back sphere is static: its point stays at p and is visible iff p's depth is unchanged
    back_px = fg0 & (np.abs(d0 - (d0[fg0].min())) < 1.0)
    expect = np.isclose(d0, d1, rtol=1e-5)
    assert (back_px & ~expect).sum() > 5 and (back_px & expect).sum() > 20
    np.testing.assert_array_equal(valid[back_px], expect[back_px])
    np.testing.assert_allclose(flow[back_px & valid], 0.0, atol=1e-4)


def test_spinning_sphere_back_side_is_self_occluded():
    """Half a turn about the vertical axis carries the front point to the back."""
    scene = _scene(S.Sphere(radius=0.7, texture=TEX, spin_rate=math.pi))
    cam = _axis_cam()
    _, valid = S.gt_flow(scene, cam, 0.0, cam, 1.0)
    assert not valid[H // 2, W // 2]
    _, valid_q = S.gt_flow(scene, cam, 0.0, cam, 0.1)  # 18 degrees: still in front
    assert valid_q[H // 2, W // 2]


def test_static_camera_static_scene_flow_is_zero():
    scene = _scene(S.Sphere(radius=0.7, texture=TEX, c0=(0.2, 0.1, 0.0)))
    cam = _axis_cam()
    flow, valid = S.gt_flow(scene, cam, 0.0, cam, 0.7)
    assert valid.all()
    np.testing.assert_allclose(flow, 0.0, atol=1e-5)
    # any scene, same camera and time: zero flow everywhere
    moving = S.make_scene("S6", 3)
    cam5 = C.index(C.arc_cameras(5, height=24, width=24), 1)
    flow, valid = S.gt_flow(moving, cam5, 0.4, cam5, 0.4)
    assert valid.all()
    np.testing.assert_allclose(flow, 0.0, atol=1e-5)


def test_camera_motion_flow_matches_reprojection_of_the_static_plane():
    scene = _scene()  # plane only
    cams = C.arc_cameras(5, height=24, width=24)
    c0, c1 = C.index(cams, 1), C.index(cams, 2)
    flow, valid = S.gt_flow(scene, c0, 0.0, c1, 0.5)
    _, depth, _ = S.gt_render(scene, c0, 0.0, supersample=1)
    vv, uu = np.meshgrid(np.arange(24) + 0.5, np.arange(24) + 0.5, indexing="ij")
    p = np.stack([uu, vv], -1)
    want = _project_np(_unproject_np(p, depth.astype(np.float64), c0), c1) - p
    assert valid.all()
    np.testing.assert_allclose(flow, want, atol=2e-3)


@pytest.mark.parametrize("kind", S.KINDS)
def test_make_scene_kinds(kind):
    scene = S.make_scene(kind, 1)
    again = S.make_scene(kind, 1)
    assert scene.kind == kind and 1 <= len(scene.objects) <= 3
    np.testing.assert_array_equal(S.center_at(scene, 0.6), S.center_at(again, 0.6))
    cam = C.index(C.arc_cameras(5, height=32, width=32), 2)
    rgb, depth, fg = S.gt_render(scene, cam, 0.5, supersample=1)
    assert np.isfinite(depth).all()  # the back plane fills the background
    assert fg.mean() >= 0.08  # objects cover >= 8% of the frame
    assert rgb.std() > 0.05  # photo textures, not flat colours
    for o in scene.objects:
        assert o.texture_name in S.TEXTURE_SPLITS["train"]


def test_trajectory_semantics():
    s1 = S.make_scene("S1", 0)
    g = S.acceleration_at(s1, 0.3)[0]
    c = lambda t: S.center_at(s1, t)[0]  # noqa: E731
    np.testing.assert_allclose(c(0.6) - 2 * c(0.5) + c(0.4), g * 0.01, atol=1e-12)
    assert g[1] < 0 and 2.5 < 0.5 * abs(g[1]) * 2 < 3.5 and np.all(S.rotation_at(s1, 0.7) ==
                                                                    np.eye(3))
    s2 = S.make_scene("S2", 0)
    np.testing.assert_allclose(S.center_at(s2, 0.8), S.center_at(s2, 1.0))
    v_end = (S.center_at(s2, 0.8) - S.center_at(s2, 0.8 - 1e-6)) / 1e-6
    np.testing.assert_allclose(v_end, 0.0, atol=1e-5)
    s3 = S.make_scene("S3", 0)
    a0, a1 = S.acceleration_at(s3, 0.0), S.acceleration_at(s3, 0.5)
    assert np.linalg.norm(a0 - a1) > 1.0  # non-polynomial (changing acceleration)
    s5 = S.make_scene("S5", 0)
    assert list(S.exists_at(s5, 0.2)) == [True, False]
    assert list(S.exists_at(s5, 0.5)) == [True, True]
    assert list(S.exists_at(s5, 0.8)) == [True, False]
    s6 = S.make_scene("S6", 0)
    assert len(s6.objects) >= 2 and all(o.spin_rate != 0 for o in s6.objects)


def test_transient_object_flow_is_invalid_after_it_vanishes():
    s5 = S.make_scene("S5", 2)
    cam = C.index(C.arc_cameras(5, height=32, width=32), 2)
    rgb, depth, fg = S.gt_render(s5, cam, 0.5, supersample=1)
    _, valid = S.gt_flow(s5, cam, 0.5, cam, 0.9)
    _, _, fg9 = S.gt_render(s5, cam, 0.9, supersample=1)
    hit_transient = fg & ~S.gt_displacement3d(s5, cam, 0.5, 0.9)[1]
    assert hit_transient.sum() > 10 and not valid[hit_transient].any()


def test_unknown_kind_and_bad_inputs_raise():
    with pytest.raises(ValueError, match="S1"):
        S.make_scene("S9", 0)
    with pytest.raises(ValueError, match="split"):
        S.textures("val")
    with pytest.raises(ValueError, match="noise"):
        S.pseudo_labels(np.ones((4, 4)), None, np.ones((4, 4), bool), "loud",
                        np.random.default_rng(0))
    with pytest.raises(ValueError, match="single Camera"):
        S.gt_render(_scene(), C.arc_cameras(2, height=8, width=8), 0.0)


def test_textures_offline_and_split_disjoint(monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    photos.load_rgb.cache_clear()
    photos.load_float.cache_clear()
    train, test = S.textures("train"), S.textures("test")
    assert len(train) >= 5 and len(test) >= 3
    assert not set(S.TEXTURE_SPLITS["train"]) & set(S.TEXTURE_SPLITS["test"])
    for img in train + test:
        assert img.dtype == np.float32 and img.ndim == 3 and img.shape[2] == 3
        assert img.min() >= 0.0 and img.max() <= 1.0 and img.std() > 0.05
    shapes_train = {(a.shape, float(a.sum())) for a in train}
    assert not shapes_train & {(a.shape, float(a.sum())) for a in test}
    scene = S.make_scene("S4", 0, texture_split="test")
    assert all(o.texture_name in S.TEXTURE_SPLITS["test"] for o in scene.objects)


def _labels(seed, noise, n=64):
    rng = np.random.default_rng(seed)
    depth = rng.uniform(1.0, 5.0, size=(n, n))
    flow = rng.normal(size=(n, n, 2)) * 3.0
    valid = np.ones((n, n), bool)
    valid[:, :8] = False  # 1/8 invalid
    return depth, flow, valid


@pytest.mark.parametrize("noise,mult", [("default", 1), ("heavy", 2)])
def test_pseudo_label_outlier_fractions(noise, mult):
    depth, flow, valid = _labels(0, noise)
    fracs_d, fracs_f = [], []
    for seed in range(4):  # 4 x 64 x 64 pixels: the binomial std of each fraction < 0.2%
        d, f, v, (d_out, f_out) = S.pseudo_labels(depth, flow, valid, noise,
                                                  np.random.default_rng(seed),
                                                  return_outliers=True)
        np.testing.assert_array_equal(v, valid)  # invalid pixels stay invalid
        assert not f_out[~valid].any() and np.all(f[~valid] == 0)
        fracs_d.append(d_out.mean())
        fracs_f.append(f_out[valid].mean())
        # inliers: scale-and-noise model (one s_clip per image, 3% relative noise)
        ratio = d[~d_out] / depth[~d_out]
        s_clip = np.median(ratio)
        assert 1 - 0.2 * mult <= s_clip <= 1 + 0.2 * mult
        np.testing.assert_allclose(np.std(ratio / s_clip), 0.03 * mult, rtol=0.1)
        err = (f - flow)[valid & ~f_out]
        np.testing.assert_allclose(err.std(), mult * math.sqrt(0.5), rtol=0.05)
        assert np.abs((f - flow)[f_out]).max() <= 5.0 * mult
    assert abs(np.mean(fracs_d) - 0.02 * mult) < 0.01
    assert abs(np.mean(fracs_f) - 0.05 * mult) < 0.01


def test_pseudo_labels_deterministic_and_none_exact():
    depth, flow, valid = _labels(1, "default")
    a = S.pseudo_labels(depth, flow, valid, "default", np.random.default_rng(7))
    b = S.pseudo_labels(depth, flow, valid, "default", np.random.default_rng(7))
    c = S.pseudo_labels(depth, flow, valid, "default", np.random.default_rng(8))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    d, f, v = S.pseudo_labels(depth, flow, valid, "none", np.random.default_rng(7))
    np.testing.assert_array_equal(d, depth.astype(np.float32))
    np.testing.assert_array_equal(f[valid], flow[valid].astype(np.float32))
    np.testing.assert_array_equal(v, valid)
    d_only, f_none, _ = S.pseudo_labels(depth, None, valid, "heavy", np.random.default_rng(0))
    assert f_none is None and d_only.shape == depth.shape


def test_ray_caster_shares_no_code_with_the_rasteriser():
    tree = ast.parse(inspect.getsource(S))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names} | {node.module or ""}
    assert not any("render" in name or "gaussians" in name for name in imported), imported
