"""A dense 3D Gaussian rasteriser in pure JAX (3DGS equations; spec §Method "Rasteriser").

For each Gaussian: x_c = R mu + T, z = x_c[2] (culled when z < 0.05); u = (f_x x/z + c_x,
f_y y/z + c_y); J = [[f_x/z, 0, -f_x x/z^2], [0, f_y/z, -f_y y/z^2]];
Sigma' = J R Sigma R^T J^T + 0.3 I_2 (inverted in closed form). At pixel centre p:

    alpha_i(p) = min(0.99, sigma_i exp(-1/2 (p - u_i)^T Sigma'^-1 (p - u_i))),  0 below 1/255,

sorted front to back by z (no gradient through the order); T_i = prod_{j<i} (1 - alpha_j),
w_i = alpha_i T_i; C = sum w_i c_i + T_{N+1} c_bg; A = sum w_i; D = sum w_i z_i / max(A, eps).
Any per-Gaussian feature is splatted like colour (``render_flow``, ``render_displacement3d``).

Dense: every pixel sees every Gaussian; pixels are processed in ``lax.map`` chunks of
``pixel_chunk`` so the [P, N] intermediates stay bounded (P N <= 2e7 in the experiments).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import gaussians as G

DILATION = 0.3  # px^2 added to the projected covariance
ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0
EPS = 1e-6


def project_gaussians(means, covs, cam: camlib.Camera):
    """Screen-space Gaussians: (uv [N, 2], z [N], conic [N, 3] = (A, B, C) of the inverse
    2D covariance [[A, B], [B, C]], visible bool [N] (z >= Z_NEAR))."""
    xc = camlib.to_camera(means, cam)
    z = xc[:, 2]
    visible = z >= camlib.Z_NEAR
    zs = jnp.where(visible, z, 1.0)  # keep culled Gaussians finite
    fx, fy = cam.K[0, 0], cam.K[1, 1]
    uv = jnp.stack([fx * xc[:, 0] / zs + cam.K[0, 2], fy * xc[:, 1] / zs + cam.K[1, 2]], -1)
    zero = jnp.zeros_like(zs)
    J = jnp.stack([jnp.stack([fx / zs, zero, -fx * xc[:, 0] / (zs * zs)], -1),
                   jnp.stack([zero, fy / zs, -fy * xc[:, 1] / (zs * zs)], -1)], -2)  # [N,2,3]
    M = J @ cam.R  # [N, 2, 3]
    cov2 = M @ covs @ jnp.swapaxes(M, -1, -2)  # [N, 2, 2]
    a = cov2[:, 0, 0] + DILATION
    b = cov2[:, 0, 1]
    c = cov2[:, 1, 1] + DILATION
    det = a * c - b * b
    conic = jnp.stack([c / det, -b / det, a / det], -1)
    return uv, z, conic, visible


def rasterize(means, covs, opacity, feats, cam: camlib.Camera, background, *,
              pixel_chunk: int = 256):
    """Renders N Gaussians into ``cam``.

    Args:
      means: [N, 3] world positions; covs: [N, 3, 3]; opacity: [N] in [0, 1];
      feats: [N, C] features (colour, flow, ...); cam: the camera; background: [C].
      pixel_chunk: pixels per ``lax.map`` step; H W must be a multiple of it (or smaller).

    Returns:
      {"feats": [H, W, C], "depth": [H, W], "alpha": [H, W]}.
    """
    H, W = cam.height, cam.width
    P = H * W
    chunk = min(int(pixel_chunk), P)
    if chunk < 1 or P % chunk:
        raise ValueError(f"pixel_chunk must divide H * W = {P}, got pixel_chunk={pixel_chunk}")
    uv, z, conic, visible = project_gaussians(means, covs, cam)
    op = jnp.where(visible, opacity, 0.0)
    order = jnp.argsort(jax.lax.stop_gradient(jnp.where(visible, z, jnp.inf)))
    uv, z, conic, op, feats = uv[order], z[order], conic[order], op[order], feats[order]
    pix = camlib.pixel_centers(H, W, means.dtype).reshape(P // chunk, chunk, 2)
    bg = jnp.asarray(background, feats.dtype)

    def shade(p):  # p [chunk, 2]
        d = p[:, None, :] - uv[None]  # [chunk, N, 2]
        power = -0.5 * (conic[:, 0] * d[..., 0] ** 2 + 2 * conic[:, 1] * d[..., 0] * d[..., 1]
                        + conic[:, 2] * d[..., 1] ** 2)
        alpha = jnp.minimum(ALPHA_MAX, op * jnp.exp(jnp.minimum(power, 0.0)))
        alpha = jnp.where(alpha < ALPHA_MIN, 0.0, alpha)
        trans = jnp.cumprod(1.0 - alpha, axis=-1)  # T after each Gaussian
        T_before = jnp.concatenate([jnp.ones_like(trans[:, :1]), trans[:, :-1]], -1)
        w = alpha * T_before  # [chunk, N]
        A = jnp.sum(w, -1)
        out = w @ feats + trans[:, -1:] * bg
        depth = (w @ z) / jnp.maximum(A, EPS)
        return out, depth, A

    out, depth, A = jax.lax.map(shade, pix)
    return {"feats": out.reshape(H, W, -1), "depth": depth.reshape(H, W),
            "alpha": A.reshape(H, W)}


def render(g: G.TaylorGaussians, cam: camlib.Camera, t, *, order: int = 2,
           temporal: bool = True, background=(0.0, 0.0, 0.0), pixel_chunk: int = 256):
    """Renders Taylor-Gaussians at time t: {"rgb" [H, W, 3], "depth", "alpha"}."""
    out = rasterize(G.positions_at(g, t, order), G.covariances(g), G.opacity_at(g, t, temporal),
                    g.rgb, cam, jnp.asarray(background, jnp.float32), pixel_chunk=pixel_chunk)
    return {"rgb": out["feats"], "depth": out["depth"], "alpha": out["alpha"]}


def render_flow(g: G.TaylorGaussians, cam_t: camlib.Camera, t, cam_t2: camlib.Camera, t2, *,
                order: int = 2, temporal: bool = True, pixel_chunk: int = 256):
    """Rendered forward flow F(p) = sum_i w_i(p) [Pi_{cam_t2}(mu_i(t2)) - Pi_{cam_t}(mu_i(t))]
    / A(p) with the weights of (cam_t, t) (TGs-Flow). Returns (flow [H, W, 2], alpha [H, W]);
    use it only where alpha > 0.5."""
    p_t = G.positions_at(g, t, order)
    uv_t, _ = camlib.project(p_t, cam_t)
    uv_t2, _ = camlib.project(G.positions_at(g, t2, order), cam_t2)
    out = rasterize(p_t, G.covariances(g), G.opacity_at(g, t, temporal), uv_t2 - uv_t, cam_t,
                    jnp.zeros((2,), jnp.float32), pixel_chunk=pixel_chunk)
    A = out["alpha"]
    return out["feats"] / jnp.maximum(A, EPS)[..., None], A


def render_displacement3d(g: G.TaylorGaussians, cam: camlib.Camera, t, t2, *, order: int = 2,
                          temporal: bool = True, pixel_chunk: int = 256):
    """Rendered 3D displacement sum_i w_i (mu_i(t2) - mu_i(t)) / A with the weights of (cam, t)
    (the coupled scene-flow baseline's prediction). Returns ([H, W, 3], alpha [H, W])."""
    p_t = G.positions_at(g, t, order)
    disp = G.positions_at(g, t2, order) - p_t
    out = rasterize(p_t, G.covariances(g), G.opacity_at(g, t, temporal), disp, cam,
                    jnp.zeros((3,), jnp.float32), pixel_chunk=pixel_chunk)
    A = out["alpha"]
    return out["feats"] / jnp.maximum(A, EPS)[..., None], A
