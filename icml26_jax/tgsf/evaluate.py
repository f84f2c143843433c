"""Evaluation of fitted Taylor-Gaussians on held-out cameras (spec §Experiment "Metrics").

Renders every fit (arms x seeds, vmapped) at every held-out camera and test time and scores
it against the analytic ground truth: PSNR, masked PSNR (GT foreground dilated by 3 px) and
SSIM, per arm x seed x camera x time. Also the motion diagnostics of a fit: the foreground
Gaussians' acceleration (norm, error against the true acceleration), the mean temporal
opacity factor at t = 1 and the 3D motion EPE of rendered displacement maps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import fit as fitlib
from icml26_jax.tgsf import gaussians as G
from icml26_jax.tgsf import losses, render, scenes

VISIBLE_OPACITY = 0.1  # sigmoid(o) above which a Gaussian counts as content
FG_RADIUS = 1.2  # foreground Gaussian: within FG_RADIUS object radii of the object centre


def render_grid(g: G.TaylorGaussians, arms: fitlib.Arm, cams: camlib.Camera, times):
    """Renders fits [A, S, N] with their arms [A] at stacked cameras [C] x times [T].

    Returns:
      rgb [A, S, C, T, H, W, 3] clipped to [0, 1].
    """
    return _render_grid(g, arms, cams, jnp.asarray(times, jnp.float32))


@jax.jit
def _render_grid(g, arms, cams, times):
    """``render_grid``'s program: module level and everything an argument, so every call with
    the same shapes reuses one compiled program (the image size is static in ``cams``)."""
    def one(gs, arm, cam, t):
        out = render.render(fitlib.apply_arm(gs, arm), cam, t, order=2, temporal=True)
        return jnp.clip(out["rgb"], 0.0, 1.0)

    f = jax.vmap(one, in_axes=(None, None, None, 0))  # times
    f = jax.vmap(f, in_axes=(None, None, 0, None))  # cameras
    f = jax.vmap(f, in_axes=(0, None, None, None))  # seeds
    f = jax.vmap(f, in_axes=(0, 0, None, None))  # arms
    return f(g, arms, cams, times)


def image_metrics(pred, gt, fg) -> dict:
    """PSNR, masked PSNR and SSIM of predictions [..., H, W, 3] against ground truth
    [..., H, W, 3] (broadcast over the leading axes of ``pred``) with foreground masks
    [..., H, W]. Returns {"psnr", "masked_psnr", "ssim"} each of the leading shape of
    ``pred``."""
    lead = np.shape(pred)[:-3]
    out = _image_metrics(pred, gt, fg)
    return {k: np.asarray(v).reshape(lead) for k, v in zip(("psnr", "masked_psnr", "ssim"), out)}


@jax.jit
def _image_metrics(pred, gt, fg):
    """``image_metrics`` flattened over the leading axes, one compiled program per shape
    (module level, so calls share it; the broadcasts run in it, not eagerly)."""
    pred = jnp.asarray(pred)
    lead = pred.shape[:-3]
    gt = jnp.broadcast_to(jnp.asarray(gt, jnp.float32), pred.shape)
    fg = jnp.broadcast_to(jnp.asarray(fg), lead + pred.shape[-3:-1])
    flat = lambda x: x.reshape((-1,) + x.shape[len(lead):])  # noqa: E731
    return jax.vmap(lambda a, b, c: (losses.psnr(a, b), losses.masked_psnr(a, b, c),
                                     losses.ssim(a, b)))(flat(pred), flat(gt), flat(fg))


def foreground_gaussians(g: G.TaylorGaussians, scene: scenes.SceneSpec) -> np.ndarray:
    """[..., N] bool: visible Gaussians (sigmoid(o) > 0.1) within 1.2 radii of an object's
    true centre at the Gaussian's anchor time (``g`` may carry leading axes)."""
    mean = np.asarray(g.mean)
    ta = np.asarray(g.t_anchor)
    vis = np.asarray(jax.nn.sigmoid(g.opacity_logit)) > VISIBLE_OPACITY
    fg = np.zeros(ta.shape, bool)
    flat_t = ta.reshape(-1)
    for k, obj in enumerate(scene.objects):
        c = np.stack([scenes.center_at(scene, float(t))[k] for t in flat_t]).reshape(
            ta.shape + (3,))
        fg |= np.linalg.norm(mean - c, axis=-1) < FG_RADIUS * obj.radius
    return fg & vis


def acceleration_stats(g: G.TaylorGaussians, arm_acc_on, scene: scenes.SceneSpec) -> dict:
    """Acceleration of the foreground Gaussians of fits [S, N] (one arm).

    Returns:
      {"fg_acc_norm": [S] mean ||a_i|| over foreground Gaussians,
       "acc_rel_error": [S] median ||a_i - a_true|| / ||a_true|| (NaN where the true
       acceleration is 0 or there are no foreground Gaussians),
       "bg_acc_norm": [S] mean ||a_i|| of visible non-foreground (static) Gaussians}.
    """
    fg = foreground_gaussians(g, scene)
    acc = np.asarray(g.acc) * float(arm_acc_on)
    vis = np.asarray(jax.nn.sigmoid(g.opacity_logit)) > VISIBLE_OPACITY
    out = {"fg_acc_norm": [], "acc_rel_error": [], "bg_acc_norm": []}
    for s in range(acc.shape[0]):
        a = acc[s][fg[s]]
        out["fg_acc_norm"].append(float(np.mean(np.linalg.norm(a, axis=-1))) if len(a)
                                  else float("nan"))
        bg = acc[s][vis[s] & ~fg[s]]
        out["bg_acc_norm"].append(float(np.mean(np.linalg.norm(bg, axis=-1))) if len(bg)
                                  else float("nan"))
        errs = []
        ta = np.asarray(g.t_anchor)[s][fg[s]]
        for ai, t in zip(a, ta):
            # The object whose centre is nearest owns the Gaussian (one object in S1).
            true = scenes.acceleration_at(scene, float(t))[0]
            n = np.linalg.norm(true)
            errs.append(np.linalg.norm(ai - true) / n if n > 0 else np.nan)
        out["acc_rel_error"].append(float(np.median(errs)) if errs else float("nan"))
    return {k: np.asarray(v) for k, v in out.items()}


def opacity_factor(g: G.TaylorGaussians, arm: fitlib.Arm, t: float = 1.0) -> np.ndarray:
    """Mean temporal-opacity factor exp(-((t - t_i) / exp(lambda_i))^2) at ``t`` over the
    visible Gaussians of fits [S, N] with one arm (1 when temporal opacity is off)."""
    ga = jax.vmap(lambda x: fitlib.apply_arm(x, arm))(g)
    dt = t - np.asarray(ga.t_anchor)
    factor = np.exp(-np.square(dt * np.exp(-np.asarray(ga.log_tscale, np.float64))))
    vis = np.asarray(jax.nn.sigmoid(g.opacity_logit)) > VISIBLE_OPACITY
    return np.asarray([float(np.mean(f[m])) if m.any() else float("nan")
                       for f, m in zip(factor, vis)])


def displacement_epe(g: G.TaylorGaussians, arms: fitlib.Arm, scene: scenes.SceneSpec, cams,
                     base_times, horizons=(0.1, 0.3)) -> np.ndarray:
    """Foreground 3D motion EPE of rendered displacement maps against the analytic ones.

    Args:
      g: fits [A, S, N]; arms: [A]; scene: the scene; cams: list of held-out cameras;
      base_times: times t; horizons: t2 - t.

    Returns:
      [A, S] mean over (camera, base time, horizon) of the EPE over GT-foreground pixels
      whose surface point exists at t2.
    """
    epe = _displacement_epe(g, arms, *epe_inputs(scene, cams, base_times, horizons))
    return np.asarray(jnp.nanmean(epe, axis=-1))


def epe_inputs(scene: scenes.SceneSpec, cams, base_times, horizons=(0.1, 0.3)) -> tuple:
    """The ground truth of :func:`displacement_epe` on the host, one entry per (camera, base
    time, horizon) pair [P]: ``(cameras [P], t [P], t2 [P], displacements [P, H, W, 3],
    masks [P, H, W])`` (GT foreground at t whose surface point exists at t2)."""
    pairs = [(cam, float(t), float(t) + float(h)) for cam in cams for t in base_times
             for h in horizons]
    gts, masks = [], []
    for cam, t, t2 in pairs:
        disp, ok = scenes.gt_displacement3d(scene, cam, t, t2)
        _, _, fg = scenes.gt_render(scene, cam, t, supersample=1)
        gts.append(disp)
        masks.append(ok & fg)
    # Stacked on the host: an eager jnp.stack compiles one program per leaf shape.
    cams_s = jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]),
                          *[p[0] for p in pairs])
    t1 = np.asarray([p[1] for p in pairs], np.float32)
    t2 = np.asarray([p[2] for p in pairs], np.float32)
    return cams_s, t1, t2, np.stack(gts), np.stack(masks)


@jax.jit
def _displacement_epe(g, arms, cams, t1, t2, gts, masks):
    """EPE [A, S, P] of fits [A, S, N] with arms [A] at (camera, t, t2) pairs [P] against
    the ground-truth displacements [P, H, W, 3] and masks [P, H, W]: module level, the ground
    truth an argument (never baked into the program), one compile per shape."""
    def one(gs, arm, cam, a, b, gt, m):
        d, _ = render.render_displacement3d(fitlib.apply_arm(gs, arm), cam, a, b)
        return losses.motion_epe(d, gt, m)

    f = jax.vmap(one, in_axes=(None, None, 0, 0, 0, 0, 0))
    f = jax.vmap(f, in_axes=(0, None, None, None, None, None, None))
    f = jax.vmap(f, in_axes=(0, 0, None, None, None, None, None))
    return f(g, arms, cams, t1, t2, gts, masks)
