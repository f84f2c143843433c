"""Per-scene optimisation of Taylor-Gaussians (spec §Method "Per-scene optimisation") [R].

In progress (issue 14): initialisation from keyframes and the per-parameter Adam. The loss,
the jitted step vmapped over seeds and arms, and ``fit_scene`` follow.

Initialisation: N / K Gaussians from each of K keyframes (times {0, 0.35, 0.7} in the
experiments) by back-projecting a random subset of pixels with the (noisy) pseudo-depth; the
anchor is the keyframe's time, v = a = 0, temporal scale exp(lambda) = 1, isotropic scale one
pixel's footprint at its depth, identity rotation, opacity sigmoid(o) = 0.5, colour from the
frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from icml26_jax.core.optim import promotion_safe
from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf.gaussians import TaylorGaussians

# Adam learning rates per field, scene extent 1 (spec).
LEARNING_RATES = {"mean": 1e-3, "vel": 5e-4, "acc": 2.5e-4, "rgb": 2.5e-3,
                  "opacity_logit": 5e-2, "log_scale": 5e-3, "quat": 1e-3, "log_tscale": 1e-3,
                  "t_anchor": 1e-3}


def init_from_frames(frames, depths, cams: camlib.Camera, times, num_gaussians: int, key
                     ) -> TaylorGaussians:
    """Gaussians spawned from K keyframes.

    Args:
      frames: [K, H, W, 3] colours; depths: [K, H, W] z-depths (pseudo or exact);
      cams: stacked ``Camera`` [K]; times: [K] keyframe times.
      num_gaussians: N, a multiple of K (N / K pixels per keyframe, drawn without
        replacement).
      key: PRNG key.

    Returns:
      ``TaylorGaussians`` with N rows, ordered keyframe by keyframe.
    """
    K, H, W = depths.shape
    if num_gaussians % K:
        raise ValueError(f"num_gaussians={num_gaussians} must be a multiple of the number of "
                         f"keyframes {K}")
    per = num_gaussians // K
    if per > H * W:
        raise ValueError(f"num_gaussians / keyframes = {per} exceeds the {H * W} pixels of a "
                         "frame")

    def one(frame, depth, cam, t, k):
        idx = jax.random.choice(k, H * W, (per,), replace=False)
        o, d = camlib.rays(cam)
        D = depth.reshape(-1)[idx]
        mean = o.reshape(-1, 3)[idx] + D[:, None] * d.reshape(-1, 3)[idx]
        footprint = D / cam.K[0, 0]  # one pixel at depth D
        return (mean, frame.reshape(-1, 3)[idx], jnp.full((per,), t, jnp.float32),
                jnp.log(jnp.maximum(footprint, 1e-4)))

    keys = jax.random.split(key, K)
    mean, rgb, t_anchor, log_s = jax.vmap(one)(frames, depths, cams,
                                               jnp.asarray(times, jnp.float32), keys)
    n = num_gaussians
    zeros3 = jnp.zeros((n, 3), jnp.float32)
    return TaylorGaussians(
        mean=mean.reshape(n, 3), vel=zeros3, acc=zeros3, t_anchor=t_anchor.reshape(n),
        log_tscale=jnp.zeros((n,), jnp.float32),
        log_scale=jnp.broadcast_to(log_s.reshape(n, 1), (n, 3)),
        quat=jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32), (n, 4)),
        opacity_logit=jnp.zeros((n,), jnp.float32), rgb=rgb.reshape(n, 3))


def optimizer(scale: float = 1.0, learn_anchor: bool = True) -> optax.GradientTransformation:
    """Adam with the spec's per-field learning rates (times ``scale``); ``learn_anchor=False``
    freezes t_anchor (the feed-forward model's anchors are the source frames' times)."""
    lrs = dict(LEARNING_RATES)
    transforms = {name: promotion_safe(optax.adam(scale * lr)) for name, lr in lrs.items()}
    if not learn_anchor:
        transforms["t_anchor"] = optax.set_to_zero()
    labels = TaylorGaussians(*TaylorGaussians._fields)
    return optax.multi_transform(transforms, labels)
