"""Synthetic dynamic scenes and their ground truth (spec §Data, §Module API ``scenes.py``).

The ground truth is an **analytic ray caster** in NumPy (float64): rays through pixel
(sub-)samples are intersected exactly with textured spheres and a textured back plane, and
the nearest hit wins. It shares no code with the Gaussian rasteriser (``render.py``), so
fitting Gaussians to these images is never an inverse crime; it only reads the camera
conventions of ``camera.py`` (``x_c = R x + T``, +z forward, image y down, pixel centres at
``(j + 0.5, i + 0.5)``).

World: right-handed, +y up. The cameras of ``camera.arc_cameras(n, radius=4, arc_deg=60)``
sit on the -z side looking at the origin; the back plane ``z = PLANE_Z`` (= 2) lies behind
the origin and, being unbounded (mirror-tiled texture), fills every such camera's
background. Moving spheres live around the origin with centres ``c(t)`` and spin
rotations ``R(t)`` (rotation about ``spin_axis`` by ``spin_rate * t`` radians); time
``t`` is in [0, 1] (extrapolation is allowed).

A surface point of a sphere has object-local coordinates ``l = R(t)^T (x - c(t))``; at time
``t'`` it is at ``c(t') + R(t') l`` (forward flow, spec §Data). The plane is static.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from icml26_jax.core import photos
from icml26_jax.tgsf import camera as camera_lib

KINDS = ("S1", "S2", "S3", "S4", "S5", "S6")
NOISE_LEVELS = {"none": 0.0, "default": 1.0, "heavy": 2.0}
PLANE_Z = 2.0  # world z of the back plane (cameras at radius 4 sit near z = -4)
PLANE_TILE = 4.0  # world units covered by one (mirror-tiled) copy of the plane texture
NO_HIT, PLANE = -2, -1  # hit ids; spheres are 0..K-1

# Photos bundled inside the wheels (core.photos; never an on-demand download), split by photo.
TEXTURE_SPLITS = {
    "train": ("astronaut", "camera", "coins", "brick", "coffee", "china.jpg", "gravel"),
    "test": ("chelsea", "rocket", "grass", "flower.jpg"),
}


# --------------------------------------------------------------------------- textures

def textures(split: str) -> list[np.ndarray]:
    """The texture photos of one split (spec §Data "Textures").

    Args:
      split: ``"train"`` or ``"test"``; the two sets are disjoint by photo
        (``TEXTURE_SPLITS``).

    Returns:
      A list of read-only float32 arrays [h, w, 3] in [0, 1] (grey photos repeated to RGB),
      loaded from files shipped in the scikit-image / scikit-learn wheels (no network).
    """
    if split not in TEXTURE_SPLITS:
        raise ValueError(f"split must be one of {sorted(TEXTURE_SPLITS)}, got {split!r}")
    return [photos.load_float(n) for n in TEXTURE_SPLITS[split]]


# --------------------------------------------------------------------------- scene spec

class Sphere(NamedTuple):
    """One textured moving sphere.

    Motion ``"poly"``: ``c(t) = c0 + v0 s + acc s^2 / 2`` with ``s = min(t, t_stop)`` (the
    object stays put after ``t_stop``; ``inf`` = never). Motion ``"orbit"``:
    ``c(t) = c0 + orbit_radius (cos(w t + phase) e1 + sin(w t + phase) e2)`` with
    ``w = orbit_omega`` (non-polynomial). Spin: rotation about ``spin_axis`` by
    ``spin_rate * t`` radians. The object exists for ``t_start <= t <= t_end``.
    """

    radius: float
    texture: np.ndarray  # [h, w, 3] float32 in [0, 1] (a crop of a photo)
    motion: str = "poly"
    c0: tuple = (0.0, 0.0, 0.0)
    v0: tuple = (0.0, 0.0, 0.0)
    acc: tuple = (0.0, 0.0, 0.0)
    t_stop: float = math.inf
    orbit_radius: float = 0.0
    orbit_omega: float = 0.0
    orbit_phase: float = 0.0
    orbit_e1: tuple = (1.0, 0.0, 0.0)
    orbit_e2: tuple = (0.0, 1.0, 0.0)
    spin_axis: tuple = (0.0, 1.0, 0.0)
    spin_rate: float = 0.0
    t_start: float = -math.inf
    t_end: float = math.inf
    texture_name: str = ""


class SceneSpec(NamedTuple):
    """A synthetic dynamic scene: a textured back plane ``z = plane_z`` (normal -z, static)
    and 1-3 ``Sphere`` objects. ``kind`` is one of ``KINDS``; ``seed`` the generator seed."""

    kind: str
    seed: int
    objects: tuple  # tuple[Sphere, ...]
    plane_texture: np.ndarray  # [h, w, 3]
    plane_z: float = PLANE_Z
    plane_tile: float = PLANE_TILE
    plane_texture_name: str = ""


def _vec(x) -> np.ndarray:
    return np.asarray(x, np.float64).reshape(3)


def _object_center(obj: Sphere, t: float) -> np.ndarray:
    c0 = _vec(obj.c0)
    if obj.motion == "poly":
        s = min(float(t), obj.t_stop)
        return c0 + _vec(obj.v0) * s + 0.5 * _vec(obj.acc) * s * s
    if obj.motion == "orbit":
        a = obj.orbit_omega * t + obj.orbit_phase
        return c0 + obj.orbit_radius * (math.cos(a) * _vec(obj.orbit_e1)
                                        + math.sin(a) * _vec(obj.orbit_e2))
    raise ValueError(f"Sphere.motion must be 'poly' or 'orbit', got {obj.motion!r}")


def _object_acceleration(obj: Sphere, t: float) -> np.ndarray:
    if obj.motion == "poly":
        return _vec(obj.acc) if t < obj.t_stop else np.zeros(3)
    if obj.motion == "orbit":
        return -obj.orbit_omega ** 2 * (_object_center(obj, t) - _vec(obj.c0))
    raise ValueError(f"Sphere.motion must be 'poly' or 'orbit', got {obj.motion!r}")


def _rotation(axis, angle: float) -> np.ndarray:
    """Rodrigues: [3, 3] rotation by ``angle`` radians about ``axis``."""
    k = _vec(axis)
    k = k / np.linalg.norm(k)
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * kx + (1.0 - math.cos(angle)) * kx @ kx


def center_at(scene: SceneSpec, t: float) -> np.ndarray:
    """Object centres ``c_k(t)`` [K, 3] (float64, world)."""
    return np.array([_object_center(o, t) for o in scene.objects]).reshape(-1, 3)


def acceleration_at(scene: SceneSpec, t: float) -> np.ndarray:
    """Exact centre accelerations ``c_k''(t)`` [K, 3] (S1: g; S2: -v0/0.8 before the stop,
    then 0; S3: centripetal; S4: 0)."""
    return np.array([_object_acceleration(o, t) for o in scene.objects]).reshape(-1, 3)


def rotation_at(scene: SceneSpec, t: float) -> np.ndarray:
    """Object spin rotations ``R_k(t)`` [K, 3, 3] (local -> world)."""
    return np.array([_rotation(o.spin_axis, o.spin_rate * t)
                     for o in scene.objects]).reshape(-1, 3, 3)


def exists_at(scene: SceneSpec, t: float) -> np.ndarray:
    """[K] bool: whether each object is present at time ``t``."""
    return np.array([o.t_start <= t <= o.t_end for o in scene.objects], bool)


# --------------------------------------------------------------------------- make_scene

def _crop(rng: np.random.Generator, photo: np.ndarray, aspect: float) -> np.ndarray:
    """A random crop of ``photo`` with width/height ``aspect``, 40-80% of the photo."""
    h, w = photo.shape[:2]
    ch = int(rng.uniform(0.4, 0.8) * min(h, w / aspect))
    cw = max(2, int(ch * aspect))
    ch = max(2, ch)
    i = int(rng.integers(0, h - ch + 1))
    j = int(rng.integers(0, w - cw + 1))
    return photo[i:i + ch, j:j + cw]


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def make_scene(kind: str, seed: int, texture_split: str = "train") -> SceneSpec:
    """A random scene of one kind (spec §Data "Trajectories").

    Frame scale: at the origin the default arc cameras (distance 4, 50 deg field of view)
    see a square of side ``2 * 4 * tan(25 deg) ~= 3.73`` world units; sphere radii in [0.7, 0.8]
    make each object cover >= 8% of a square frame (pi 0.7^2 / 3.73^2 ~= 11% at the
    origin; >= 8% where it recedes to z = 0.4 or nears a frame edge).

    Kinds (t in [0, 1]):
      - ``S1`` projectile ``c0 + v0 t + g t^2 / 2``, g along -y with ``|g| / 2 ~= 1.5``
        (40% of the frame), no spin;
      - ``S2`` braking: acceleration ``-v0 / 0.8``, stops at t = 0.8, then stays;
      - ``S3`` circular orbit of the centre (centripetal, non-polynomial);
      - ``S4`` constant velocity (control);
      - ``S5`` a slow persistent object plus a transient one present only for
        t in [0.3, 0.7];
      - ``S6`` 2-3 spinning objects at different depths whose paths cross (occlusions).

    Args:
      kind: one of ``KINDS``.
      seed: generator seed (``np.random.default_rng``); same seed -> same scene.
      texture_split: ``"train"`` or ``"test"`` photos.

    Returns:
      A ``SceneSpec``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    photos = textures(texture_split)
    names = TEXTURE_SPLITS[texture_split]
    rng = np.random.default_rng([int(seed), KINDS.index(kind)])

    def tex(aspect, exclude=None):
        choices = [i for i in range(len(photos)) if names[i] != exclude]
        k = choices[int(rng.integers(len(choices)))]
        return _crop(rng, photos[k], aspect), names[k]

    plane_tex, plane_name = tex(1.0)
    tex = functools.partial(tex, exclude=plane_name)  # objects never share the plane's photo
    sgn = 1.0 if rng.uniform() < 0.5 else -1.0  # left-to-right or right-to-left
    z0 = rng.uniform(-0.4, 0.4)
    objs = []
    if kind == "S1":
        g = rng.uniform(2.6, 3.4)
        vy = rng.uniform(1.8, 2.2)
        t_, n_ = tex(2.0)
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           c0=(-0.9 * sgn, rng.uniform(-0.6, -0.4), z0),
                           v0=(1.8 * sgn, vy, rng.uniform(-0.2, 0.2)), acc=(0.0, -g, 0.0)))
    elif kind == "S2":
        speed = rng.uniform(1.8, 2.2)
        ang = rng.uniform(-0.4, 0.4)
        v0 = speed * np.array([sgn * math.cos(ang), math.sin(ang), 0.0])
        c0 = -0.8 * 0.5 * v0 + np.array([0.0, 0.0, z0])  # the path is centred on the origin
        t_, n_ = tex(2.0)
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           c0=tuple(c0), v0=tuple(v0), acc=tuple(-v0 / 0.8), t_stop=0.8))
    elif kind == "S3":
        t_, n_ = tex(2.0)
        tilt = rng.uniform(-0.3, 0.3)  # orbit plane tilted out of the image plane
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           motion="orbit", c0=(0.0, 0.0, z0),
                           orbit_radius=rng.uniform(0.7, 0.9),
                           orbit_omega=sgn * rng.uniform(0.8, 1.2) * math.pi,
                           orbit_phase=rng.uniform(0.0, 2 * math.pi),
                           orbit_e1=(1.0, 0.0, 0.0),
                           orbit_e2=(0.0, math.cos(tilt), math.sin(tilt))))
    elif kind == "S4":
        speed = rng.uniform(1.4, 1.8)
        ang = rng.uniform(-0.4, 0.4)
        v0 = speed * np.array([sgn * math.cos(ang), math.sin(ang), rng.uniform(-0.2, 0.2)])
        t_, n_ = tex(2.0)
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           c0=tuple(-0.5 * v0 + np.array([0.0, 0.0, z0])), v0=tuple(v0)))
    elif kind == "S5":
        t_, n_ = tex(2.0)
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           c0=(-0.6 * sgn, rng.uniform(-0.7, -0.5), 0.3),
                           v0=(0.6 * sgn, rng.uniform(0.0, 0.3), 0.0)))
        t_, n_ = tex(2.0)
        objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                           c0=(0.8 * sgn, rng.uniform(0.4, 0.6), -0.5),
                           v0=(-1.2 * sgn, rng.uniform(-0.3, 0.0), 0.0),
                           t_start=0.3, t_end=0.7))
    else:  # S6
        k = int(rng.integers(2, 4))
        depths = np.linspace(-0.8, 0.8, k)
        for i in range(k):
            s = sgn if i % 2 == 0 else -sgn  # alternate directions so the paths cross
            t_, n_ = tex(2.0)
            objs.append(Sphere(radius=rng.uniform(0.7, 0.8), texture=t_, texture_name=n_,
                               c0=(-1.0 * s, rng.uniform(-0.4, 0.4), depths[i]),
                               v0=(2.0 * s, rng.uniform(-0.3, 0.3), 0.0),
                               acc=tuple(rng.uniform(-0.5, 0.5, size=3) * (1.0, 1.0, 0.0)),
                               spin_axis=tuple(_unit(rng)),
                               spin_rate=rng.choice([-1.0, 1.0]) * rng.uniform(1.0, 2.0)
                               * math.pi))
    return SceneSpec(kind=kind, seed=int(seed), objects=tuple(objs), plane_texture=plane_tex,
                     plane_texture_name=plane_name)


# --------------------------------------------------------------------------- ray casting

class _Hit(NamedTuple):
    depth: np.ndarray  # [...] z-depth along camera-z-normalised rays (inf: no hit)
    obj: np.ndarray  # [...] int: NO_HIT, PLANE or the sphere index
    point: np.ndarray  # [..., 3] world hit point


def _cam_np(cam) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    K = np.asarray(cam.K, np.float64)
    R = np.asarray(cam.R, np.float64)
    T = np.asarray(cam.T, np.float64)
    if K.shape != (3, 3) or R.shape != (3, 3) or T.shape != (3,):
        raise ValueError("cam must be a single Camera (K [3,3], R [3,3], T [3]); got shapes "
                         f"{K.shape}, {R.shape}, {T.shape} (use camera.index on a stack)")
    return K, R, T, int(cam.height), int(cam.width)


def _pixel_rays(cam, du: float, dv: float):
    """Rays through ``(j + du, i + dv)``: origin [3] and directions [H, W, 3] whose
    camera-z component is 1 (so ray parameter = z-depth)."""
    K, R, T, H, W = _cam_np(cam)
    v, u = np.meshgrid(np.arange(H) + dv, np.arange(W) + du, indexing="ij")
    d_cam = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    return -R.T @ T, d_cam @ R  # R^T d_cam


def _cast(scene: SceneSpec, origin: np.ndarray, dirs: np.ndarray, t: float) -> _Hit:
    """Nearest intersection of rays ``origin + s dirs`` (s > 0) with the scene at time t."""
    shape = dirs.shape[:-1]
    best = np.full(shape, np.inf)
    obj = np.full(shape, NO_HIT, np.int64)
    # back plane z = plane_z (only rays heading to +z reach it)
    dz = dirs[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(dz > 1e-12, (scene.plane_z - origin[2]) / dz, np.inf)
    s = np.where(s > camera_lib.Z_NEAR, s, np.inf)
    obj = np.where(s < best, PLANE, obj)
    best = np.minimum(best, s)
    centers, alive = center_at(scene, t), exists_at(scene, t)
    for k, o in enumerate(scene.objects):
        if not alive[k]:
            continue
        oc = origin - centers[k]
        a = np.sum(dirs * dirs, -1)
        b = np.sum(dirs * oc, -1)  # half of the usual b
        c = oc @ oc - o.radius ** 2
        disc = b * b - a * c
        sq = np.sqrt(np.maximum(disc, 0.0))
        s_near, s_far = (-b - sq) / a, (-b + sq) / a
        s = np.where(s_near > camera_lib.Z_NEAR, s_near, s_far)  # camera inside: far root
        s = np.where((disc >= 0.0) & (s > camera_lib.Z_NEAR), s, np.inf)
        obj = np.where(s < best, k, obj)
        best = np.minimum(best, s)
    point = origin + np.where(np.isfinite(best), best, 0.0)[..., None] * dirs
    return _Hit(best, obj, point)


def _bilinear(tex: np.ndarray, u: np.ndarray, v: np.ndarray, wrap_u: bool) -> np.ndarray:
    """Bilinear lookup of ``tex`` [h, w, 3] at texture coordinates u, v in [0, 1]."""
    h, w = tex.shape[:2]
    x = u * w - 0.5
    y = np.clip(v * h - 0.5, 0.0, h - 1.0)
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    if wrap_u:
        xa, xb = x0 % w, (x0 + 1) % w
    else:
        xa, xb = np.clip(x0, 0, w - 1), np.clip(x0 + 1, 0, w - 1)
    ya, yb = y0, np.minimum(y0 + 1, h - 1)
    top = tex[ya, xa] * (1 - fx) + tex[ya, xb] * fx
    bot = tex[yb, xa] * (1 - fx) + tex[yb, xb] * fx
    return top * (1 - fy) + bot * fy


def _mirror(x: np.ndarray) -> np.ndarray:
    """Mirror tiling of the real line onto [0, 1]."""
    return 1.0 - np.abs(np.mod(x, 2.0) - 1.0)


def _local(scene: SceneSpec, hit: _Hit, t: float) -> np.ndarray:
    """Object-local coordinates ``R(t)^T (x - c(t))`` of sphere hits [..., 3] (plane hits:
    the world point itself; no hit: 0)."""
    local = np.where((hit.obj == PLANE)[..., None], hit.point, 0.0)
    if scene.objects:
        centers, rots = center_at(scene, t), rotation_at(scene, t)
        for k in range(len(scene.objects)):
            m = hit.obj == k
            local[m] = (hit.point[m] - centers[k]) @ rots[k]  # R^T (x - c) for row vectors
    return local


def _shade(scene: SceneSpec, hit: _Hit, t: float) -> np.ndarray:
    """RGB [..., 3] of the hits: planar UV on the plane, spherical UV (object-local,
    spinning with the object) on the spheres, black where nothing is hit."""
    rgb = np.zeros(hit.obj.shape + (3,))
    local = _local(scene, hit, t)
    m = hit.obj == PLANE
    if m.any():
        x, y = local[m, 0], local[m, 1]
        u = _mirror(x / scene.plane_tile + 0.5)
        v = _mirror(-y / scene.plane_tile + 0.5)  # texture rows go down, world y up
        rgb[m] = _bilinear(scene.plane_texture, u, v, wrap_u=False)
    for k, o in enumerate(scene.objects):
        m = hit.obj == k
        if not m.any():
            continue
        n = local[m] / o.radius
        u = np.arctan2(n[:, 0], -n[:, 2]) / (2 * math.pi) + 0.5  # longitude
        v = np.arccos(np.clip(n[:, 1], -1.0, 1.0)) / math.pi  # colatitude from +y (top)
        rgb[m] = _bilinear(o.texture, u, v, wrap_u=True)
    return rgb


def gt_render(scene: SceneSpec, cam, t: float, supersample: int = 2):
    """Ground-truth image by analytic ray casting (spec §Data).

    Args:
      scene: a ``SceneSpec``.
      cam: one ``camera.Camera`` (not stacked).
      t: time.
      supersample: s: RGB is the mean of s x s sub-pixel samples at ``(k + 0.5) / s``.

    Returns:
      ``(rgb [H, W, 3] float32 in [0, 1], depth [H, W] float32 camera z-depth (inf where
      nothing is hit), fg_mask [H, W] bool)``; depth and the mask (a sphere is the first
      hit) come from the pixel-centre ray.
    """
    if int(supersample) < 1:
        raise ValueError(f"supersample must be >= 1, got {supersample!r}")
    s = int(supersample)
    acc = 0.0
    for a in range(s):
        for b in range(s):
            origin, dirs = _pixel_rays(cam, (b + 0.5) / s, (a + 0.5) / s)
            acc = acc + _shade(scene, _cast(scene, origin, dirs, t), t)
    rgb = np.clip(acc / (s * s), 0.0, 1.0).astype(np.float32)
    origin, dirs = _pixel_rays(cam, 0.5, 0.5)
    hit = _cast(scene, origin, dirs, t)
    return rgb, hit.depth.astype(np.float32), hit.obj >= 0


def _transport(scene: SceneSpec, cam, t: float, t2: float):
    """The surface points seen at the pixel centres of ``cam`` at t, and where they are at
    t2: (hit, x_t [H, W, 3], x_t2 [H, W, 3], alive [H, W] bool = hit and exists at t2)."""
    origin, dirs = _pixel_rays(cam, 0.5, 0.5)
    hit = _cast(scene, origin, dirs, t)
    local = _local(scene, hit, t)
    x2 = np.where((hit.obj == PLANE)[..., None], hit.point, 0.0)
    alive = hit.obj == PLANE
    if scene.objects:
        centers, rots, ex = center_at(scene, t2), rotation_at(scene, t2), exists_at(scene, t2)
        for k in range(len(scene.objects)):
            m = hit.obj == k
            x2[m] = centers[k] + local[m] @ rots[k].T  # c(t2) + R(t2) l
            alive = alive | (m & ex[k])
    return hit, hit.point, x2, alive


def gt_flow(scene: SceneSpec, cam_t, t: float, cam_t2, t2: float, *, rel_tol: float = 1e-5):
    """Exact forward flow t -> t2 with an occlusion mask (spec §Data).

    The surface point seen at pixel centre p (camera ``cam_t``, time t) has object-local
    coordinates l; at t2 it is at ``c(t2) + R(t2) l`` and projects to uv' in ``cam_t2``.

    Visibility is an exact depth test: the ray of ``cam_t2`` through the moved point is cast
    at t2, and the point is visible iff no surface is nearer than its z-depth by more than
    ``rel_tol`` (relative). (This is the depth test against the t2 depth along the exact ray,
    so silhouettes are not misjudged by a pixel-grid lookup.) Points whose target lies
    outside the image are kept valid when visible.

    Args:
      scene: a ``SceneSpec``.
      cam_t, cam_t2: single cameras at t and t2 (same image size).
      t, t2: times.
      rel_tol: relative depth tolerance of the visibility test.

    Returns:
      ``(flow [H, W, 2] float32 pixels = uv' - p, valid [H, W] bool)``; valid = a surface is
      hit at t, its object exists at t2, it is in front of ``cam_t2`` and not occluded there.
      Invalid pixels have flow 0.
    """
    _, _, _, H, W = _cam_np(cam_t)
    K2, R2, T2, H2, W2 = _cam_np(cam_t2)
    if (H, W) != (H2, W2):
        raise ValueError(f"cam_t and cam_t2 must have the same image size, got {(H, W)} and "
                         f"{(H2, W2)}")
    hit, _, x2, alive = _transport(scene, cam_t, t, t2)
    xc = x2 @ R2.T + T2
    z = xc[..., 2]
    front = alive & (z > camera_lib.Z_NEAR)
    zs = np.where(front, z, 1.0)
    uv2 = np.stack([K2[0, 0] * xc[..., 0] / zs + K2[0, 2],
                    K2[1, 1] * xc[..., 1] / zs + K2[1, 2]], -1)
    origin2 = -R2.T @ T2
    dirs2 = np.where(front[..., None], (x2 - origin2) / zs[..., None], (0.0, 0.0, 1.0))
    seen = _cast(scene, origin2, dirs2, t2)  # ray parameter 1 per unit z-depth
    visible = seen.depth >= z * (1.0 - rel_tol)
    valid = front & visible
    v, u = np.meshgrid(np.arange(H) + 0.5, np.arange(W) + 0.5, indexing="ij")
    flow = np.where(valid[..., None], uv2 - np.stack([u, v], -1), 0.0)
    return flow.astype(np.float32), valid


def gt_displacement3d(scene: SceneSpec, cam, t: float, t2: float):
    """World displacement t -> t2 of the surface point seen at each pixel centre at t.

    Returns:
      ``(disp [H, W, 3] float32, valid [H, W] bool)``; valid = a surface is hit at t and its
      object exists at t2 (no occlusion test: the point is visible at t by construction).
      The static plane has displacement 0; invalid pixels 0.
    """
    _, x, x2, alive = _transport(scene, cam, t, t2)
    disp = np.where(alive[..., None], x2 - x, 0.0)
    return disp.astype(np.float32), alive


# --------------------------------------------------------------------------- pseudo-labels

def pseudo_labels(depth, flow, valid, noise: str, rng: np.random.Generator, *,
                  return_outliers: bool = False):
    """Monocular-depth-like and RAFT-like pseudo-labels from exact ones (spec §Data).

    Default level m = 1 ("heavy": m = 2, every level doubled; "none": exact copies):
      - depth: ``D~ = s_clip D (1 + 0.03 m N(0, 1))``, ``s_clip ~ U[1 - 0.2 m, 1 + 0.2 m]``
        per image; an outlier fraction 0.02 m of pixels instead gets
        ``s_clip D f`` with ``log f ~ U[-m ln 2, m ln 2]`` (f in [1/2, 2] by default).
      - flow: ``F~ = F + N(0, (m^2) 0.5 px^2)`` per component; an outlier fraction 0.05 m of
        valid pixels instead gets ``F + U[-5 m, 5 m]`` px per component.
    All random draws have the full image shape (the stream depends only on the shapes), so
    the result is deterministic given ``rng``'s state.

    Args:
      depth: [H, W] exact z-depth (non-finite entries stay as they are).
      flow: [H, W, 2] exact flow, or None (depth only).
      valid: [H, W] bool flow validity; invalid pixels stay invalid (their flow is set to 0).
      noise: ``"none"``, ``"default"`` or ``"heavy"``.
      rng: ``np.random.Generator``.
      return_outliers: also return the (depth, flow) outlier masks [H, W] bool.

    Returns:
      ``(depth_noisy [H, W] float32, flow_noisy [H, W, 2] float32 or None, valid [H, W])``
      (plus ``(depth_outliers, flow_outliers)`` with ``return_outliers``).
    """
    if noise not in NOISE_LEVELS:
        raise ValueError(f"noise must be one of {sorted(NOISE_LEVELS)}, got {noise!r}")
    depth = np.asarray(depth, np.float64)
    valid = np.asarray(valid, bool)
    if valid.shape != depth.shape:
        raise ValueError(f"valid {valid.shape} and depth {depth.shape} must have one shape")
    if flow is not None:
        flow = np.asarray(flow, np.float64)
        if flow.shape != depth.shape + (2,):
            raise ValueError(f"flow must have shape {depth.shape + (2,)}, got {flow.shape}")
        valid = valid & np.all(np.isfinite(flow), -1)
    m = NOISE_LEVELS[noise]
    finite = np.isfinite(depth)
    if m == 0.0:
        d_out, f_out = np.zeros_like(valid), np.zeros_like(valid)
        d_noisy = depth
        f_noisy = None if flow is None else np.where(valid[..., None], flow, 0.0)
    else:
        s_clip = rng.uniform(1.0 - 0.2 * m, 1.0 + 0.2 * m)
        gauss = rng.normal(size=depth.shape)
        d_out = (rng.uniform(size=depth.shape) < 0.02 * m) & finite
        log_f = rng.uniform(-m * math.log(2.0), m * math.log(2.0), size=depth.shape)
        factor = np.where(d_out, np.exp(log_f), 1.0 + 0.03 * m * gauss)
        d_noisy = np.where(finite, s_clip * np.where(finite, depth, 0.0) * factor, depth)
        f_noisy, f_out = None, np.zeros_like(valid)
        if flow is not None:
            fg = rng.normal(scale=m * math.sqrt(0.5), size=flow.shape)
            f_out = (rng.uniform(size=depth.shape) < 0.05 * m) & valid
            fu = rng.uniform(-5.0 * m, 5.0 * m, size=flow.shape)
            f_noisy = flow + np.where(f_out[..., None], fu, fg)
            f_noisy = np.where(valid[..., None], f_noisy, 0.0)
    out = (d_noisy.astype(np.float32),
           None if f_noisy is None else f_noisy.astype(np.float32), valid)
    if return_outliers:
        return out + ((d_out, f_out),)
    return out
