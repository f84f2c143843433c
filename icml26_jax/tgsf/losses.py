"""Losses and metrics of TGsF (spec §Method "TGs-Flow", "Coupled baseline", §Metrics).

All functions are pure ``jax.numpy`` (jit, vmap and grad friendly). Images are [H, W, C]
floats in [0, 1]; depths are z-depths [H, W]; flows are forward, in pixels, [H, W, 2];
masks are [H, W] booleans or {0, 1} floats (a mask [H, W] is broadcast over the channels of
an [H, W, C] image). Camera conventions are those of ``camera.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26_jax.tgsf import camera as camlib

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_C1 = 0.01**2
SSIM_C2 = 0.03**2
PSNR_MAX_DB = 100.0  # an exact match would be +inf; cap it so means over scenes stay finite


def _broadcast_mask(mask: jax.Array | None, shape: tuple[int, ...], dtype) -> jax.Array:
    """``mask`` as {0, 1} of ``dtype`` broadcast to ``shape`` (a mask with one axis fewer than
    ``shape`` gets a trailing channel axis); all ones when ``mask`` is None."""
    if mask is None:
        return jnp.ones(shape, dtype)
    mask = jnp.asarray(mask)
    if mask.ndim == len(shape) - 1:
        mask = mask[..., None]
    try:
        return jnp.broadcast_to(mask.astype(dtype), shape)
    except ValueError as e:
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to {shape}") from e


def _as_bool(mask) -> jax.Array:
    """A mask (bool, or numbers where non-zero means set) as a bool array."""
    mask = jnp.asarray(mask)
    if mask.dtype == jnp.bool_:
        return mask
    return mask != jnp.zeros((), mask.dtype)


def _check_same_shape(x: jax.Array, y: jax.Array, names: str = "x, y") -> None:
    if x.shape != y.shape:
        raise ValueError(f"{names} must have the same shape, got {x.shape} and {y.shape}")


def _masked_mean(values: jax.Array, weights: jax.Array, empty=0.0) -> jax.Array:
    """sum(w v) / sum(w), or ``empty`` where sum(w) = 0 (gradient-safe)."""
    total = jnp.sum(weights)
    safe = jnp.where(total > 0, total, jnp.ones_like(total))
    return jnp.where(total > 0, jnp.sum(weights * values) / safe,
                     jnp.asarray(empty, values.dtype))


# ----------------------------------------------------------------------------- photometric


def l1(x: jax.Array, y: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Mean absolute error.

    Args:
      x: prediction [..., H, W, C] (any shape).
      y: target, same shape as ``x``.
      mask: optional weights broadcastable to ``x`` ([H, W] is broadcast over channels).

    Returns:
      Scalar mean of |x - y| over the masked elements (0 for an empty mask).
    """
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_same_shape(x, y)
    m = _broadcast_mask(mask, x.shape, x.dtype)
    return _masked_mean(jnp.abs(x - y), m)


def _gaussian_window(size: int, sigma: float, dtype) -> jax.Array:
    """Normalised 1-D Gaussian [size]."""
    r = jnp.arange(size, dtype=jnp.float32) - jnp.float32((size - 1) / 2)
    g = jnp.exp(-(r**2) / jnp.float32(2 * sigma**2))
    return (g / jnp.sum(g)).astype(dtype)


def _gaussian_filter(img: jax.Array, window: jax.Array, padding: str) -> jax.Array:
    """Separable Gaussian filtering of [H, W, C] per channel -> [H', W', C]."""
    x = jnp.transpose(img, (2, 0, 1))[:, None]  # [C, 1, H, W]: channels as the batch
    k = window.shape[0]
    kh = window.reshape(1, 1, k, 1)
    kw = window.reshape(1, 1, 1, k)
    x = jax.lax.conv_general_dilated(x, kh, (1, 1), padding)
    x = jax.lax.conv_general_dilated(x, kw, (1, 1), padding)
    return jnp.transpose(x[:, 0], (1, 2, 0))


def ssim_map(x: jax.Array, y: jax.Array, *, padding: str = "same") -> jax.Array:
    """Per-pixel, per-channel SSIM map (Wang et al. 2004) with an 11 x 11 Gaussian window.

    Args:
      x: image [H, W, C] in [0, 1].
      y: image [H, W, C] in [0, 1].
      padding: ``"same"`` (default; zero padding of 5 px as in the 3DGS reference
        implementation, output [H, W, C]) or ``"valid"`` (only windows fully inside the
        image, output [H - 10, W - 10, C]; needs H, W >= 11).

    Returns:
      SSIM map, 1 where the windows of ``x`` and ``y`` agree.
    """
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_same_shape(x, y)
    if x.ndim != 3:
        raise ValueError(f"ssim expects images [H, W, C], got shape {x.shape}")
    if padding not in ("same", "valid"):
        raise ValueError(f"padding must be 'same' or 'valid', got {padding!r}")
    if padding == "valid" and min(x.shape[:2]) < SSIM_WINDOW:
        raise ValueError(f"padding='valid' needs H, W >= {SSIM_WINDOW}, got {x.shape[:2]}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"ssim expects float images in [0, 1], got dtype {x.dtype}")
    y = y.astype(x.dtype)
    w = _gaussian_window(SSIM_WINDOW, SSIM_SIGMA, x.dtype)
    pad = padding.upper()
    mu_x = _gaussian_filter(x, w, pad)
    mu_y = _gaussian_filter(y, w, pad)
    var_x = _gaussian_filter(x * x, w, pad) - mu_x**2
    var_y = _gaussian_filter(y * y, w, pad) - mu_y**2
    cov = _gaussian_filter(x * y, w, pad) - mu_x * mu_y
    c1, c2 = jnp.asarray(SSIM_C1, x.dtype), jnp.asarray(SSIM_C2, x.dtype)
    num = (2 * mu_x * mu_y + c1) * (2 * cov + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    return num / den


def ssim(x: jax.Array, y: jax.Array, *, padding: str = "same") -> jax.Array:
    """Mean SSIM over pixels and channels (11 x 11 Gaussian window, sigma 1.5, C1 = 0.01^2,
    C2 = 0.03^2, data range 1). See ``ssim_map`` for ``padding`` (default ``"same"``).

    Args:
      x: image [H, W, C] in [0, 1].
      y: image [H, W, C] in [0, 1].
      padding: ``"same"`` or ``"valid"``.

    Returns:
      Scalar SSIM; 1 for identical images.
    """
    return jnp.mean(ssim_map(x, y, padding=padding))


def psnr(x: jax.Array, y: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Peak signal-to-noise ratio with peak value 1: -10 log10(MSE).

    Args:
      x: image [H, W, C] (any shape) in [0, 1].
      y: image, same shape.
      mask: optional weights broadcastable to ``x`` ([H, W] is broadcast over channels); the
        MSE is taken over the masked elements.

    Returns:
      Scalar PSNR in dB, capped at ``PSNR_MAX_DB`` (MSE <= 1e-10); NaN for an empty mask.
    """
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_same_shape(x, y)
    m = _broadcast_mask(mask, x.shape, x.dtype)
    mse = _masked_mean((x - y) ** 2, m, empty=jnp.nan)
    mse = jnp.maximum(mse, jnp.asarray(10.0 ** (-PSNR_MAX_DB / 10), mse.dtype))
    return -10.0 * jnp.log10(mse)


def dilate_mask(mask: jax.Array, radius: int) -> jax.Array:
    """Binary dilation of an [H, W] mask by a (2 radius + 1)^2 square (a max pool).

    Args:
      mask: [H, W] boolean or {0, 1} mask.
      radius: dilation in pixels (>= 0); a pixel becomes set when any pixel within
        Chebyshev distance ``radius`` is set.

    Returns:
      [H, W] boolean mask.
    """
    mask = jnp.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"mask must be [H, W], got shape {mask.shape}")
    radius = int(radius)
    if radius < 0:
        raise ValueError(f"dilate radius must be >= 0, got {radius}")
    m = _as_bool(mask).astype(jnp.float32)
    k = 2 * radius + 1
    # Out-of-image samples are -inf (the max identity), so the border never sets a pixel.
    out = jax.lax.reduce_window(m, -jnp.inf, jax.lax.max, (k, k), (1, 1),
                                ((radius, radius), (radius, radius)))
    return out > 0.5


def masked_psnr(x: jax.Array, y: jax.Array, fg_mask: jax.Array, dilate: int = 3) -> jax.Array:
    """PSNR over the ground-truth foreground dilated by ``dilate`` px (spec §Metrics; avoids
    the dilution of full-frame PSNR by a static background).

    Args:
      x: rendered image [H, W, C].
      y: ground-truth image [H, W, C].
      fg_mask: ground-truth foreground [H, W].
      dilate: square dilation radius in pixels (default 3, i.e. a 7 x 7 max pool).

    Returns:
      Scalar PSNR in dB over the dilated mask (NaN when the mask is empty).
    """
    return psnr(x, y, dilate_mask(fg_mask, dilate))


# ----------------------------------------------------------------------------- depth


def _scale_shift(pred: jax.Array, target: jax.Array, valid: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
    """Closed-form least squares (s, b) = argmin sum_valid (s pred + b - target)^2 per image.

    ``pred``, ``target``, ``valid`` are [..., H, W]; returns s, b of shape [...]. Degenerate
    images (fewer than 2 valid pixels or a constant prediction) get s = 0 and b = mean target
    (the best constant); an empty image gets s = 0, b = 0. Gradient-safe (double ``where``).
    """
    m = valid.astype(pred.dtype)
    n = jnp.sum(m, axis=(-2, -1))
    n_safe = jnp.maximum(n, jnp.ones_like(n))
    mp = jnp.sum(m * pred, axis=(-2, -1)) / n_safe
    mt = jnp.sum(m * target, axis=(-2, -1)) / n_safe
    dp = pred - mp[..., None, None]
    dt = target - mt[..., None, None]
    var = jnp.sum(m * dp * dp, axis=(-2, -1)) / n_safe
    cov = jnp.sum(m * dp * dt, axis=(-2, -1)) / n_safe
    # Relative test: a constant prediction has var ~ rounding noise of mean^2.
    tol = jnp.asarray(1e-10, pred.dtype) * (mp**2 + jnp.asarray(1e-20, pred.dtype))
    ok = (n >= 2) & (var > tol)
    s = jnp.where(ok, cov / jnp.where(ok, var, jnp.ones_like(var)), jnp.zeros_like(var))
    b = mt - s * mp
    return s, b


def _check_depth_args(pred, target, valid, name: str = "pred, target"):
    pred, target = jnp.asarray(pred), jnp.asarray(target)
    _check_same_shape(pred, target, name)
    if pred.ndim < 2:
        raise ValueError(f"depth maps must be [..., H, W], got shape {pred.shape}")
    valid = jnp.broadcast_to(_as_bool(valid), pred.shape)
    return pred, target.astype(pred.dtype), valid


def ssi_depth_loss(pred: jax.Array, target: jax.Array, valid: jax.Array) -> jax.Array:
    """Scale-and-shift-invariant depth loss L_ssi (spec §Method "TGs-Flow").

    Per image, (s, b) = argmin sum_valid (s pred + b - target)^2 in closed form (gradients
    flow through s and b), then the loss is mean_valid |s pred + b - target|. Hence the
    loss is invariant to any affine map a pred + c (a != 0) of the prediction and 0 when
    the prediction is an affine function of the target. Degenerate images (< 2 valid pixels,
    constant prediction) fall back to s = 0, b = mean target.

    Args:
      pred: rendered depth [..., H, W].
      target: (pseudo-)depth of any scale and shift [..., H, W].
      valid: [..., H, W] mask (broadcastable).

    Returns:
      Scalar: the mean over images of the per-image loss (an image without valid pixels
      counts 0).
    """
    pred, target, valid = _check_depth_args(pred, target, valid)
    s, b = _scale_shift(pred, target, valid)
    resid = jnp.abs(s[..., None, None] * pred + b[..., None, None] - target)
    m = valid.astype(pred.dtype)
    n = jnp.sum(m, axis=(-2, -1))
    per_image = jnp.sum(m * resid, axis=(-2, -1)) / jnp.maximum(n, jnp.ones_like(n))
    return jnp.mean(per_image)


def align_depth(pseudo: jax.Array, rendered: jax.Array, valid: jax.Array) -> jax.Array:
    """Pseudo-depth aligned to the rendered depth by a per-image least-squares scale and
    shift (spec §"Coupled baseline": D~' with a stop-gradient on the rendered side).

    Args:
      pseudo: pseudo-depth of any scale [..., H, W].
      rendered: current rendered depth [..., H, W] (no gradient flows into it).
      valid: [..., H, W] mask of the pixels used for the fit.

    Returns:
      s pseudo + b [..., H, W], everywhere (not only on valid pixels).
    """
    pseudo, rendered, valid = _check_depth_args(pseudo, rendered, valid, "pseudo, rendered")
    rendered = jax.lax.stop_gradient(rendered)
    s, b = _scale_shift(pseudo, rendered, valid)
    return s[..., None, None] * pseudo + b[..., None, None]


# ----------------------------------------------------------------------------- flow


def flow_loss(pred_flow: jax.Array, target_flow: jax.Array, valid: jax.Array,
              height: int | float) -> jax.Array:
    """Optical-flow L1 in units of image height (spec §"TGs-Flow": ||M (F^ - F~)||_1).

    Args:
      pred_flow: rendered forward flow [..., H, W, 2] in pixels.
      target_flow: (pseudo-)flow [..., H, W, 2] in pixels.
      valid: [..., H, W] mask (e.g. non-occluded & rendered alpha > 0.5), combined by the
        caller.
      height: image height in pixels (the flow unit).

    Returns:
      Scalar mean over valid pixels of (|du| + |dv|) / height; 0 when nothing is valid.
    """
    pred_flow, target_flow = jnp.asarray(pred_flow), jnp.asarray(target_flow)
    _check_same_shape(pred_flow, target_flow, "pred_flow, target_flow")
    if pred_flow.ndim < 3 or pred_flow.shape[-1] != 2:
        raise ValueError(f"flows must be [..., H, W, 2], got shape {pred_flow.shape}")
    if not height > 0:
        raise ValueError(f"height must be > 0, got {height!r}")
    target_flow = target_flow.astype(pred_flow.dtype)
    m = jnp.broadcast_to(_as_bool(valid), pred_flow.shape[:-1]).astype(pred_flow.dtype)
    err = jnp.sum(jnp.abs(pred_flow - target_flow), axis=-1) / jnp.asarray(height,
                                                                          pred_flow.dtype)
    return _masked_mean(err, m)


def _bilinear(img: jax.Array, uv: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Bilinear sample of ``img`` [H, W, ...] at pixel coordinates ``uv`` [..., 2] (pixel
    (i, j) has its centre at (j + 0.5, i + 0.5)). Returns (samples [..., ...], inside [...]);
    a point is inside when it lies within the hull of the pixel centres."""
    h, w = img.shape[:2]
    x = uv[..., 0] - 0.5
    y = uv[..., 1] - 0.5
    inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
    x = jnp.clip(x, 0.0, w - 1.0)
    y = jnp.clip(y, 0.0, h - 1.0)
    x0 = jnp.floor(x)
    y0 = jnp.floor(y)
    fx, fy = x - x0, y - y0
    x0i, y0i = x0.astype(jnp.int32), y0.astype(jnp.int32)
    x1i = jnp.minimum(x0i + 1, w - 1)
    y1i = jnp.minimum(y0i + 1, h - 1)
    extra = (None,) * (img.ndim - 2)
    fx, fy = fx[(...,) + extra], fy[(...,) + extra]
    out = ((1 - fy) * ((1 - fx) * img[y0i, x0i] + fx * img[y0i, x1i])
           + fy * ((1 - fx) * img[y1i, x0i] + fx * img[y1i, x1i]))
    return out, inside


def lift_scene_flow(depth_t: jax.Array, depth_t2: jax.Array, flow: jax.Array,
                    cam_t: camlib.Camera, cam_t2: camlib.Camera
                    ) -> tuple[jax.Array, jax.Array]:
    """Lifted 3D scene flow S(p) = X_{t2}(p + F(p)) - X_t(p) (spec §"Coupled baseline").

    X_t(p) = o_t + D_t(p) ray_t(p) with the z-unit rays of ``camera.rays``. For X_{t2} the
    z-depth ``depth_t2`` is sampled bilinearly at q = p + F(p) and the point is unprojected
    through cam_t2 exactly at q: identical to bilinear sampling of the map X_{t2} wherever
    the depth is locally affine in the image (X is then bilinear in q up to the exact ray),
    and exact for fronto-parallel surfaces. Targets outside the hull of the pixel centres of
    image t2 ([0.5, W - 0.5] x [0.5, H - 0.5]), non-positive or non-finite depths are
    invalid. Occlusion is not detected here: combine with the caller's occlusion mask.

    Args:
      depth_t: z-depth at time t in cam_t [H, W].
      depth_t2: z-depth at time t2 in cam_t2 [H, W].
      flow: forward flow t -> t2 in pixels [H, W, 2].
      cam_t: camera of frame t (single, not stacked).
      cam_t2: camera of frame t2 (single, same image size).

    Returns:
      (scene_flow [H, W, 3] (0 where invalid), valid [H, W] bool).
    """
    depth_t, depth_t2, flow = jnp.asarray(depth_t), jnp.asarray(depth_t2), jnp.asarray(flow)
    h, w = cam_t.height, cam_t.width
    if (cam_t2.height, cam_t2.width) != (h, w):
        raise ValueError(f"cam_t is {h}x{w} but cam_t2 is {cam_t2.height}x{cam_t2.width}")
    if depth_t.shape != (h, w) or depth_t2.shape != (h, w):
        raise ValueError(f"depths must be [{h}, {w}], got {depth_t.shape} and {depth_t2.shape}")
    if flow.shape != (h, w, 2):
        raise ValueError(f"flow must be [{h}, {w}, 2], got {flow.shape}")
    o_t, d_t = camlib.rays(cam_t)
    x_t = o_t + depth_t[..., None] * d_t  # [H, W, 3]
    q = camlib.pixel_centers(h, w, flow.dtype) + flow  # [H, W, 2]
    d2, inside = _bilinear(depth_t2, q)
    x_t2 = camlib.unproject(q, d2, cam_t2)  # [H, W, 3]
    valid = (inside & (depth_t > 0) & (d2 > 0) & jnp.isfinite(depth_t) & jnp.isfinite(d2)
             & jnp.all(jnp.isfinite(flow), axis=-1))
    sf = jnp.where(valid[..., None], x_t2 - x_t, jnp.zeros_like(x_t))
    return sf, valid


def lifted_sceneflow_loss(pred_disp3d: jax.Array, depth_t: jax.Array, depth_t2: jax.Array,
                          flow: jax.Array, valid: jax.Array, cam_t: camlib.Camera,
                          cam_t2: camlib.Camera) -> jax.Array:
    """Coupled-baseline loss: L1 between the rendered 3D displacement and the lifted scene
    flow label (spec §"Coupled baseline"). The label is held constant (stop-gradient); pass
    depths already aligned with ``align_depth``.

    Args:
      pred_disp3d: rendered displacement sum_i w_i (mu_i(t2) - mu_i(t)) / A [H, W, 3].
      depth_t: (aligned pseudo-)depth at t in cam_t [H, W].
      depth_t2: (aligned pseudo-)depth at t2 in cam_t2 [H, W].
      flow: (pseudo-)flow t -> t2 in pixels [H, W, 2].
      valid: [H, W] mask of the caller (occlusion, alpha > 0.5), and-ed with the lifting's
        own validity.
      cam_t: camera of frame t.
      cam_t2: camera of frame t2.

    Returns:
      Scalar mean over valid pixels of sum_xyz |pred - S|; 0 when nothing is valid.
    """
    pred_disp3d = jnp.asarray(pred_disp3d)
    if pred_disp3d.shape != (cam_t.height, cam_t.width, 3):
        raise ValueError(f"pred_disp3d must be [{cam_t.height}, {cam_t.width}, 3], "
                         f"got {pred_disp3d.shape}")
    sf, ok = lift_scene_flow(depth_t, depth_t2, flow, cam_t, cam_t2)
    sf = jax.lax.stop_gradient(sf).astype(pred_disp3d.dtype)
    m = (_as_bool(valid) & ok).astype(pred_disp3d.dtype)
    return _masked_mean(jnp.sum(jnp.abs(pred_disp3d - sf), axis=-1), m)


# ----------------------------------------------------------------------------- metrics


def motion_epe(pred_disp: jax.Array, gt_disp: jax.Array, mask: jax.Array) -> jax.Array:
    """End-point error: mean Euclidean distance between displacements over a mask.

    Args:
      pred_disp: predicted displacements [..., D] (e.g. [H, W, 3] or [H, W, 2]).
      gt_disp: ground truth, same shape.
      mask: [...] mask (e.g. the ground-truth foreground).

    Returns:
      Scalar mean of ||pred - gt||_2 over the mask; NaN when the mask is empty.
    """
    pred_disp, gt_disp = jnp.asarray(pred_disp), jnp.asarray(gt_disp)
    _check_same_shape(pred_disp, gt_disp, "pred_disp, gt_disp")
    gt_disp = gt_disp.astype(pred_disp.dtype)
    m = jnp.broadcast_to(_as_bool(mask), pred_disp.shape[:-1]).astype(pred_disp.dtype)
    err = jnp.linalg.norm(pred_disp - gt_disp, axis=-1)
    return _masked_mean(err, m, empty=jnp.nan)


def second_difference(p_minus: jax.Array, p0: jax.Array, p_plus: jax.Array,
                      delta) -> jax.Array:
    """Central second difference (p(t + d) - 2 p(t) + p(t - d)) / d^2.

    Exact (up to rounding) for quadratic motion p(t) = p0 + v t + a t^2 / 2, where it returns
    a: the identity that makes flows at two or more horizons constrain the acceleration
    (spec §"TGs-Flow").

    Args:
      p_minus: p(t - delta) [...].
      p0: p(t) [...].
      p_plus: p(t + delta) [...].
      delta: the step (scalar, non-zero).

    Returns:
      [...] second-derivative estimate.
    """
    return (p_plus - 2 * p0 + p_minus) / delta**2
