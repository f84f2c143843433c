"""The feed-forward FF-TGsF network and the MoVieS-style offset-head baseline (spec §Method
"Feed-forward FF-TGsF", §Baselines and peers) [R: the whole architecture is ours].

Data flow of ``FFTGsF`` for a clip of F frames of H x W pixels (token grid T x T, patch
p = H / T, width C)::

    frame rgb [H, W, 3] ++ Plücker rays [H, W, 6]      (camera information)
      -> CNN: 2 x (3x3 conv + GELU) at full resolution -> skip features [H, W, C]
      -> patchify p x p, linear                        -> tokens [T^2, C]
         + linear(sinusoidal features of the frame time)
      -> 2 cross-frame attention blocks over all F T^2 tokens of the clip (pre-LayerNorm)
      -> linear to p^2 C, unpatchify, + skip           -> per-pixel features [H, W, C]
      -> per-pixel heads (below)

One Gaussian per input pixel, ordered frame by frame, pixels row-major (N = F H W). Head
parameterisations (x is the raw head output of that channel; every head starts near x = 0):

- z-depth ``D = 4 * 2^tanh(x)`` in (2, 8): cameras sit at distance 4 from the origin and the
  back plane at world z = 2, so scene z-depths are about 2.5 - 6.5; D = 4 at init.
- mean ``= o + D d`` with the z-unit pixel rays of ``camera.rays`` (on the source pixel's ray).
- rgb ``= frame + 0.5 tanh(x)`` (image shortcut: the input colour at init). Not clipped, so
  the photometric gradient never vanishes; colours stay within [-0.5, 1.5].
- opacity logit ``= x`` (sigmoid 0.5 at init).
- log-scale (3) ``= log(D / f_x) + x``: one pixel's footprint at depth D at init.
- quaternion ``= (1, 0, 0, 0) + x`` (identity at init; normalised on use).
- motion MLP (C -> C -> 7, last layer zero-initialised, so the untrained model is static):
  v ``= 2 x``, a ``= 4 x`` (times ``order == 2``), temporal log-scale lambda ``= log(0.7) + x``
  (exp(lambda) = 0.7 at init: a Gaussian keeps 92% of its opacity 0.2 away from its source
  time).
- ``t_anchor`` = the source frame's time; ``gaussians.positions_at`` then gives the means at
  any query time, extrapolation included, from one pass.

Baselines on the same module:

- **FF order 1**: ``FFTGsF(order=1)`` is the identical network (same parameter tree; two
  models built with the same ``rngs`` have equal parameters and can be stacked and vmapped)
  whose a is exactly 0. ``gaussians.mask_motion(g, 1)`` does the same on any output.
- **FF without temporal opacity**: no module change; render with ``temporal=False``
  (``render.render(g, cam, t, temporal=False)``, ``fit.Arm.temporal = 0``).

``OffsetHeadModel`` (MoVieS-style) has the same backbone and static heads but no v / a /
lambda: a motion head conditioned on the query time through AdaLN predicts a per-pixel 3D
offset, one pass per query time. ``matched_offset_model`` sizes its motion width so its
parameter count is within 5% of FF-TGsF's.

Both are plain NNX modules without shared submodules (tree mode): split with
``nnx.split(model, nnx.Param)`` at a jit boundary and merge inside a pure loss.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import gaussians as G

NUM_FREQ = 4  # sinusoidal time features sin/cos(2^k pi t), k < NUM_FREQ
DEPTH_CENTER = 4.0  # z-depth at init (the cameras' distance to the origin)
DEPTH_RANGE = math.log(2.0)  # D = DEPTH_CENTER exp(DEPTH_RANGE tanh x) in (2, 8)
RGB_RANGE = 0.5  # rgb = frame + RGB_RANGE tanh(x)
VEL_SCALE, ACC_SCALE = 2.0, 4.0  # v = 2 x, a = 4 x (per unit of normalised time)
TSCALE_INIT = math.log(0.7)  # lambda at init
STATIC_OUT = 1 + 3 + 1 + 3 + 4  # depth, rgb, opacity, log-scale, quaternion
MOTION_OUT = 3 + 3 + 1  # v, a, lambda
OFFSET_LOG_TSCALE = 10.0  # offset model: exp(-(dt / e^10)^2) == 1 in float32 for |dt| <= 1


def time_features(t: jax.Array) -> jax.Array:
    """Sinusoidal features of times.

    Args:
      t: [...] times (normalised to [0, 1]; differences of times in [-1, 1] also work).

    Returns:
      [..., 2 NUM_FREQ] float32: sin(2^k pi t), then cos(2^k pi t), k < NUM_FREQ.
    """
    f = (2.0 ** jnp.arange(NUM_FREQ, dtype=jnp.float32)) * jnp.pi
    x = jnp.asarray(t, jnp.float32)[..., None] * f
    return jnp.concatenate([jnp.sin(x), jnp.cos(x)], -1)


def param_count(module: nnx.Module) -> int:
    """Number of scalar parameters (``nnx.Param`` leaves) of a module."""
    return int(sum(x.size for x in jax.tree.leaves(nnx.state(module, nnx.Param))))


def _check(image_size: int, tokens: int, width: int, heads: int) -> None:
    for name, v in (("image_size", image_size), ("tokens", tokens), ("width", width),
                    ("heads", heads)):
        if isinstance(v, bool) or int(v) != v or int(v) < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if int(image_size) % int(tokens):
        raise ValueError(f"image_size={image_size} must be divisible by the token grid "
                         f"tokens={tokens} (tokens x tokens patches per frame)")
    if int(width) % int(heads):
        raise ValueError(f"width={width} must be divisible by heads={heads}")


def _scaled_init(scale: float):
    """``scale`` x lecun-normal (exactly zero for ``scale == 0``)."""
    base = nnx.initializers.lecun_normal()

    def init(key, shape, dtype=jnp.float32):
        return scale * base(key, shape, dtype) if scale else jnp.zeros(shape, dtype)

    return init


class Block(nnx.Module):
    """Pre-LayerNorm transformer block: multi-head self-attention over all tokens, then a
    2x-wide GELU MLP, each with a residual connection."""

    def __init__(self, width: int, heads: int, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False,
                                           rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.fc1 = nnx.Linear(width, 2 * width, rngs=rngs)
        self.fc2 = nnx.Linear(2 * width, width, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, L, C] -> [B, L, C]."""
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(jax.nn.gelu(self.fc1(self.norm2(x))))


class Backbone(nnx.Module):
    """CNN + patch tokens with time embedding + 2 cross-frame attention blocks -> per-pixel
    features (module docstring). Shared design of ``FFTGsF`` and ``OffsetHeadModel``."""

    def __init__(self, image_size: int, width: int, tokens: int, heads: int, *,
                 rngs: nnx.Rngs):
        _check(image_size, tokens, width, heads)
        self.image_size = int(image_size)
        self.tokens = int(tokens)
        self.patch = int(image_size) // int(tokens)
        self.width = int(width)
        self.conv1 = nnx.Conv(3 + 6, width, (3, 3), rngs=rngs)  # rgb ++ Plücker
        self.conv2 = nnx.Conv(width, width, (3, 3), rngs=rngs)
        self.embed = nnx.Linear(width * self.patch ** 2, width, rngs=rngs)
        self.time = nnx.Linear(2 * NUM_FREQ, width, rngs=rngs)
        self.block1 = Block(width, heads, rngs=rngs)
        self.block2 = Block(width, heads, rngs=rngs)
        self.unembed = nnx.Linear(width, width * self.patch ** 2, rngs=rngs)

    def __call__(self, frames: jax.Array, cams: camlib.Camera, times: jax.Array) -> jax.Array:
        """Per-pixel features of a batch of clips.

        Args:
          frames: [B, F, H, W, 3] float32 images.
          cams: ``Camera`` with leaves stacked [B, F, ...].
          times: [B, F] frame times.

        Returns:
          [B, F, H, W, C] features.
        """
        B, F, H, W, _ = frames.shape
        T, p, C = self.tokens, self.patch, self.width
        pl = jax.vmap(jax.vmap(camlib.plucker))(cams)  # [B, F, H, W, 6]
        x = jnp.concatenate([frames, pl], -1).reshape(B * F, H, W, 9)
        skip = jax.nn.gelu(self.conv2(jax.nn.gelu(self.conv1(x))))  # [BF, H, W, C]
        tok = skip.reshape(B * F, T, p, T, p, C).transpose(0, 1, 3, 2, 4, 5)
        tok = self.embed(tok.reshape(B * F, T * T, p * p * C))  # [BF, T^2, C]
        tok = tok + self.time(time_features(times.reshape(B * F)))[:, None, :]
        tok = self.block2(self.block1(tok.reshape(B, F * T * T, C)))  # cross-frame
        up = self.unembed(tok.reshape(B * F, T * T, C)).reshape(B * F, T, T, p, p, C)
        up = up.transpose(0, 1, 3, 2, 4, 5).reshape(B * F, H, W, C)
        return (up + skip).reshape(B, F, H, W, C)


def _check_inputs(frames, cams: camlib.Camera, times, image_size: int):
    frames = jnp.asarray(frames, jnp.float32)
    times = jnp.asarray(times, jnp.float32)
    if frames.ndim != 5 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [B, F, H, W, 3], got shape {frames.shape}")
    B, F, H, W, _ = frames.shape
    if (H, W) != (image_size, image_size):
        raise ValueError(f"frames must be {image_size} x {image_size} (image_size), got "
                         f"{H} x {W}")
    if (cams.height, cams.width) != (H, W):
        raise ValueError(f"cams must be {H} x {W} like the frames, got "
                         f"{cams.height} x {cams.width}")
    if cams.K.shape != (B, F, 3, 3):
        raise ValueError(f"cams must be stacked [B, F] = [{B}, {F}], got K {cams.K.shape}")
    if times.shape != (B, F):
        raise ValueError(f"times must be [B, F] = [{B}, {F}], got {times.shape}")
    return frames, times


def _static_gaussians(raw, frames, cams: camlib.Camera, times):
    """Static fields of pixel-aligned Gaussians from the head output.

    Args:
      raw: [B, F, H, W, STATIC_OUT] raw head output.
      frames: [B, F, H, W, 3]; cams: stacked [B, F]; times: [B, F].

    Returns:
      (mean [B, N, 3], rgb [B, N, 3], opacity_logit [B, N], log_scale [B, N, 3],
      quat [B, N, 4], t_anchor [B, N]) with N = F H W, frame by frame, pixels row-major.
    """
    B, F, H, W, _ = frames.shape
    o, d = jax.vmap(jax.vmap(camlib.rays))(cams)  # [B, F, H, W, 3]
    depth = DEPTH_CENTER * jnp.exp(DEPTH_RANGE * jnp.tanh(raw[..., 0]))  # z-depth in (2, 8)
    mean = o + depth[..., None] * d
    rgb = frames + RGB_RANGE * jnp.tanh(raw[..., 1:4])
    fx = cams.K[..., 0, 0][:, :, None, None]  # [B, F, 1, 1]
    log_scale = jnp.log(depth / fx)[..., None] + raw[..., 5:8]
    quat = raw[..., 8:12] + jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32)
    t_anchor = jnp.broadcast_to(times[:, :, None, None], (B, F, H, W))
    n = F * H * W

    def flat(x):
        return x.reshape((B, n) + x.shape[4:])

    return (flat(mean), flat(rgb), flat(raw[..., 4]), flat(log_scale), flat(quat),
            flat(t_anchor))


class FFTGsF(nnx.Module):
    """Feed-forward Taylor-Gaussians: one pass over a clip gives pixel-aligned Gaussians with
    closed-form quadratic motion and temporal opacity (module docstring for the design).

    Args:
      image_size: H = W of the input frames.
      num_frames: F, recorded for callers (the network itself accepts any F).
      width: feature channels C.
      tokens: token grid T per frame (``image_size`` must be divisible by it).
      heads: attention heads (``width`` must be divisible by it).
      order: 2 (TGs) or 1 (identical network and parameters, a = 0).
      rngs: NNX rngs (``params`` stream).

    Raises:
      ValueError: ``image_size`` not divisible by ``tokens``, ``width`` not divisible by
        ``heads``, or ``order`` not in {1, 2}.
    """

    def __init__(self, *, image_size: int = 16, num_frames: int = 3, width: int = 32,
                 tokens: int = 8, heads: int = 4, order: int = 2, rngs: nnx.Rngs):
        order = G.check_order(order)
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2 for the feed-forward model, got {order!r}")
        self.order = order
        self.image_size = int(image_size)
        self.num_frames = int(num_frames)
        self.backbone = Backbone(image_size, width, tokens, heads, rngs=rngs)
        self.head = nnx.Linear(width, STATIC_OUT, kernel_init=_scaled_init(0.01), rngs=rngs)
        self.motion1 = nnx.Linear(width, width, rngs=rngs)
        self.motion2 = nnx.Linear(width, MOTION_OUT, kernel_init=_scaled_init(0.0), rngs=rngs)

    def __call__(self, frames: jax.Array, cams: camlib.Camera,
                 times: jax.Array) -> G.TaylorGaussians:
        """Gaussians of a batch of clips.

        Args:
          frames: [B, F, H, W, 3] float32 images in [0, 1].
          cams: ``Camera`` with leaves stacked [B, F, ...] (height = width = image_size).
          times: [B, F] frame times in [0, 1].

        Returns:
          ``TaylorGaussians`` with every field batched [B, N, ...], N = F H W (frame by
          frame, pixels row-major); ``t_anchor`` is each Gaussian's source-frame time.
        """
        frames, times = _check_inputs(frames, cams, times, self.image_size)
        feat = self.backbone(frames, cams, times)  # [B, F, H, W, C]
        mean, rgb, op, log_scale, quat, t_anchor = _static_gaussians(
            self.head(feat), frames, cams, times)
        B, n = mean.shape[:2]
        mo = self.motion2(jax.nn.gelu(self.motion1(feat))).reshape(B, n, MOTION_OUT)
        acc = ACC_SCALE * mo[..., 3:6]
        if self.order == 1:
            acc = jnp.zeros_like(acc)  # same parameters, a == 0 exactly
        return G.TaylorGaussians(mean=mean, vel=VEL_SCALE * mo[..., :3], acc=acc,
                                 t_anchor=t_anchor, log_tscale=TSCALE_INIT + mo[..., 6],
                                 log_scale=log_scale, quat=quat, opacity_logit=op, rgb=rgb)


class OffsetHeadModel(nnx.Module):
    """MoVieS-style baseline: the FF-TGsF backbone and static heads, plus a motion head
    conditioned on the query time through AdaLN that predicts per-pixel 3D offsets; one pass
    per query time.

    Motion head: ``c = [time_features(query_t), time_features(query_t - source time)]``;
    (scale, shift) = MLP(c) (``2 NUM_FREQ * 2 -> motion_width -> 2 C``, last layer small);
    ``h = LayerNorm(feat) * (1 + scale) + shift``; offset = MLP(h) (``C -> motion_width ->
    3``, last layer zero: no offset at init).

    Args:
      image_size, num_frames, width, tokens, heads, rngs: as ``FFTGsF``.
      motion_width: hidden width of the conditioning and offset MLPs (the knob that
        ``matched_offset_model`` sets to match FF-TGsF's parameter count).
    """

    def __init__(self, *, image_size: int = 16, num_frames: int = 3, width: int = 32,
                 tokens: int = 8, heads: int = 4, motion_width: int = 16, rngs: nnx.Rngs):
        if isinstance(motion_width, bool) or int(motion_width) < 1:
            raise ValueError(f"motion_width must be a positive integer, got {motion_width!r}")
        m = int(motion_width)
        self.image_size = int(image_size)
        self.num_frames = int(num_frames)
        self.backbone = Backbone(image_size, width, tokens, heads, rngs=rngs)
        self.head = nnx.Linear(width, STATIC_OUT, kernel_init=_scaled_init(0.01), rngs=rngs)
        self.cond1 = nnx.Linear(4 * NUM_FREQ, m, rngs=rngs)
        self.cond2 = nnx.Linear(m, 2 * width, kernel_init=_scaled_init(0.01), rngs=rngs)
        self.norm = nnx.LayerNorm(width, use_scale=False, use_bias=False, rngs=rngs)
        self.motion1 = nnx.Linear(width, m, rngs=rngs)
        self.motion2 = nnx.Linear(m, 3, kernel_init=_scaled_init(0.0), rngs=rngs)

    def __call__(self, frames: jax.Array, cams: camlib.Camera, times: jax.Array,
                 query_t: jax.Array) -> G.TaylorGaussians:
        """Gaussians of a batch of clips at one query time per clip.

        Args:
          frames: [B, F, H, W, 3]; cams: stacked [B, F]; times: [B, F] (as ``FFTGsF``).
          query_t: [B] query times.

        Returns:
          ``TaylorGaussians`` [B, F H W, ...] at the query time: mean = pixel-ray point +
          offset, v = a = 0, ``t_anchor = query_t`` (so ``positions_at(g, query_t) = mean``)
          and ``log_tscale = OFFSET_LOG_TSCALE`` (temporal opacity factor 1 for |dt| <= 1).
        """
        frames, times = _check_inputs(frames, cams, times, self.image_size)
        query_t = jnp.asarray(query_t, jnp.float32)
        if query_t.shape != times.shape[:1]:
            raise ValueError(f"query_t must be [B] = [{times.shape[0]}], got {query_t.shape}")
        feat = self.backbone(frames, cams, times)  # [B, F, H, W, C]
        mean, rgb, op, log_scale, quat, _ = _static_gaussians(self.head(feat), frames, cams,
                                                              times)
        q = jnp.broadcast_to(query_t[:, None], times.shape)  # [B, F]
        c = jnp.concatenate([time_features(q), time_features(q - times)], -1)  # [B, F, 4NF]
        scale, shift = jnp.split(self.cond2(jax.nn.gelu(self.cond1(c))), 2, -1)  # [B, F, C]
        h = self.norm(feat) * (1.0 + scale[:, :, None, None]) + shift[:, :, None, None]
        off = self.motion2(jax.nn.gelu(self.motion1(h)))  # [B, F, H, W, 3]
        B, n = mean.shape[:2]
        zeros = jnp.zeros_like(mean)
        return G.TaylorGaussians(
            mean=mean + off.reshape(B, n, 3), vel=zeros, acc=zeros,
            t_anchor=jnp.broadcast_to(query_t[:, None], (B, n)),
            log_tscale=jnp.full((B, n), OFFSET_LOG_TSCALE, jnp.float32), log_scale=log_scale,
            quat=quat, opacity_logit=op, rgb=rgb)


def matched_offset_model(image_size: int, num_frames: int, width: int, *, tokens: int = 8,
                         heads: int = 4, rngs: nnx.Rngs) -> OffsetHeadModel:
    """The ``OffsetHeadModel`` whose ``motion_width`` brings its parameter count closest to
    that of ``FFTGsF`` with the same settings.

    Raises:
      ValueError: when no motion width gets within 5% (only for very small ``width``).
    """
    kw = dict(image_size=image_size, num_frames=num_frames, width=width, tokens=tokens,
              heads=heads)
    ref = param_count(nnx.eval_shape(lambda: FFTGsF(**kw, rngs=nnx.Rngs(0))))

    def count(m):
        return param_count(nnx.eval_shape(
            lambda: OffsetHeadModel(**kw, motion_width=m, rngs=nnx.Rngs(0))))

    # The count is affine in the motion width m: base + per * m.
    c1, c2 = count(1), count(2)
    per = c2 - c1
    m = max(1, round((ref - (c1 - per)) / per))
    got = count(m)
    if abs(got - ref) > 0.05 * ref:
        raise ValueError(f"cannot match parameter counts within 5% for width={width}: "
                         f"offset model {got} vs FF-TGsF {ref}")
    return OffsetHeadModel(**kw, motion_width=m, rngs=rngs)
