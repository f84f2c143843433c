"""Pinhole cameras (spec §Method "Rasteriser", §Module API).

Conventions (used by every module of the package):

- world -> camera: ``x_c = R @ x + T``; the camera looks along +z, image x to the right and
  image y *down* (OpenCV).
- ``K = [[f_x, 0, c_x], [0, f_y, c_y], [0, 0, 1]]``; a point projects to
  ``u = (f_x x / z + c_x, f_y y / z + c_y)`` in pixels.
- Pixel ``(row i, column j)`` covers ``[j, j + 1) x [i, i + 1)``; its centre is
  ``(j + 0.5, i + 0.5)`` (``pixel_centers``).
- ``rays`` returns directions scaled so that their camera-z component is 1: the world point
  seen at pixel p with *z-depth* D (the depth every renderer returns) is ``o + D * d(p)``.
- Flow is forward (t -> t'), in pixels, and includes the camera motion.

``Camera`` is a pytree whose leaves are ``K``, ``R``, ``T`` (so cameras can be stacked and
vmapped) with the image ``height`` and ``width`` as static metadata.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

Z_NEAR = 0.05  # Gaussians closer than this are culled (spec)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["K", "R", "T"],
                   meta_fields=["height", "width"])
@dataclasses.dataclass(frozen=True)
class Camera:
    """A pinhole camera: intrinsics ``K`` [3, 3], rotation ``R`` [3, 3], translation ``T``
    [3] (world -> camera), image ``height`` x ``width`` pixels (static)."""

    K: jax.Array
    R: jax.Array
    T: jax.Array
    height: int
    width: int


def intrinsics(height: int, width: int, fov_deg: float = 50.0) -> jax.Array:
    """``K`` of a square-pixel camera with horizontal field of view ``fov_deg`` and the
    principal point at the image centre."""
    f = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
    return jnp.array([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]], jnp.float32)


def look_at(eye, target, up=(0.0, 1.0, 0.0)) -> tuple[jax.Array, jax.Array]:
    """(R, T) of a camera at ``eye`` looking at ``target`` with the world direction ``up``
    appearing upwards in the image (image y points down). The world is right-handed with +y
    up by default."""
    eye, target = jnp.asarray(eye, jnp.float32), jnp.asarray(target, jnp.float32)
    z = target - eye
    z = z / jnp.linalg.norm(z)
    down = -jnp.asarray(up, jnp.float32)
    y = down - jnp.dot(down, z) * z
    y = y / jnp.linalg.norm(y)
    x = jnp.cross(y, z)
    R = jnp.stack([x, y, z])  # rows: the camera axes in world coordinates
    return R, -R @ eye


def arc_cameras(n: int, *, height: int, width: int, radius: float = 4.0,
                arc_deg: float = 60.0, target=(0.0, 0.0, 0.0), fov_deg: float = 50.0,
                elevation: float = 0.0) -> Camera:
    """``n`` cameras on a horizontal arc of ``arc_deg`` degrees (centred on the -z axis of
    the world, i.e. at angles in [-arc/2, arc/2]) at distance ``radius`` from ``target``,
    all looking at it. Returns one ``Camera`` with leaves stacked on a leading axis [n]."""
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    angles = [0.0] if n == 1 else [math.radians(-arc_deg / 2 + arc_deg * i / (n - 1))
                                   for i in range(n)]
    tgt = jnp.asarray(target, jnp.float32)
    Rs, Ts = [], []
    for a in angles:
        eye = tgt + jnp.array([radius * math.sin(a), elevation, -radius * math.cos(a)],
                              jnp.float32)
        R, T = look_at(eye, tgt)
        Rs.append(R)
        Ts.append(T)
    K = intrinsics(height, width, fov_deg)
    return Camera(jnp.broadcast_to(K, (n, 3, 3)), jnp.stack(Rs), jnp.stack(Ts), int(height),
                  int(width))


def index(cams: Camera, i) -> Camera:
    """Camera ``i`` of a stacked ``Camera``."""
    return jax.tree.map(lambda x: x[i], cams)


def center(cam: Camera) -> jax.Array:
    """The camera centre in world coordinates, ``-R^T T`` [3]."""
    return -cam.R.T @ cam.T


def to_camera(points: jax.Array, cam: Camera) -> jax.Array:
    """World points [..., 3] -> camera coordinates [..., 3]."""
    return points @ cam.R.T + cam.T


def project(points: jax.Array, cam: Camera) -> tuple[jax.Array, jax.Array]:
    """World points [..., 3] -> (pixel coordinates uv [..., 2], z-depth [...]).

    No culling here: callers mask ``z < Z_NEAR`` (the division uses max(z, 1e-6)).
    """
    xc = to_camera(points, cam)
    z = xc[..., 2]
    zs = jnp.maximum(z, 1e-6)
    u = cam.K[0, 0] * xc[..., 0] / zs + cam.K[0, 2]
    v = cam.K[1, 1] * xc[..., 1] / zs + cam.K[1, 2]
    return jnp.stack([u, v], -1), z


def pixel_centers(height: int, width: int, dtype=jnp.float32) -> jax.Array:
    """[H, W, 2] pixel-centre coordinates (u, v) = (j + 0.5, i + 0.5)."""
    v, u = jnp.meshgrid(jnp.arange(height, dtype=dtype) + 0.5,
                        jnp.arange(width, dtype=dtype) + 0.5, indexing="ij")
    return jnp.stack([u, v], -1)


def unproject(uv: jax.Array, z: jax.Array, cam: Camera) -> jax.Array:
    """Pixel coordinates [..., 2] at z-depth [...] -> world points [..., 3]."""
    x = (uv[..., 0] - cam.K[0, 2]) / cam.K[0, 0] * z
    y = (uv[..., 1] - cam.K[1, 2]) / cam.K[1, 1] * z
    xc = jnp.stack([x, y, z], -1)
    return (xc - cam.T) @ cam.R  # R^T (x_c - T)


def rays(cam: Camera) -> tuple[jax.Array, jax.Array]:
    """(origins [H, W, 3], directions [H, W, 3]) in world coordinates through the pixel
    centres; a direction's camera-z component is 1, so ``o + D d`` is the point at z-depth D."""
    uv = pixel_centers(cam.height, cam.width)
    d_cam = jnp.stack([(uv[..., 0] - cam.K[0, 2]) / cam.K[0, 0],
                       (uv[..., 1] - cam.K[1, 2]) / cam.K[1, 1],
                       jnp.ones(uv.shape[:-1], jnp.float32)], -1)
    d = d_cam @ cam.R  # R^T d_cam
    o = jnp.broadcast_to(center(cam), d.shape)
    return o, d


def plucker(cam: Camera) -> jax.Array:
    """[H, W, 6] Plücker coordinates (unit direction d, moment o x d) of the pixel rays."""
    o, d = rays(cam)
    d = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
    return jnp.concatenate([d, jnp.cross(o, d)], -1)
