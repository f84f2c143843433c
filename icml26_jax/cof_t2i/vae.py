"""The frozen frame autoencoder (spec §Method "Frame autoencoder" [R]): the stand-in for the
video VAE whose *independent* per-frame encoding CoF-T2I relies on.

``FrameAE``: 32 x 32 x 3 -> 8 x 8 x 8 latents (two stride-2 3x3 convs, each with GroupNorm
and SiLU, then a 1x1 conv to 8 channels) and a decoder that works at the latent
resolution (two residual conv blocks), lets each latent cell emit its 4 x 4 pixel patch
(depth-to-space) through a per-pixel head. Trained with MSE + 1e-4 ||z||^2 on flat, refined
and draft renders, then frozen; ``latent_scale`` (the std of the training latents) makes the
flow model see unit-variance latents.

``encode_frames(ae, x, independent=True)`` encodes every frame of a clip as its own 1-frame
clip (CoF-T2I's choice: F2 and F3 keep separate latents). A causal video VAE with temporal
stride 4 would map 3 frames to 1 + ceil(2 / 4) = 2 latent frames and mix F2 with F3; that
alternative is ``JointTemporalAE``, the encoder of the optional ``cof_joint_enc`` arm
(``encode_joint`` / ``decode_joint`` are its scaled counterparts of ``encode_frames`` /
``decode_frames``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

LATENT_CH = 8
RES = 32


def _groups(c: int) -> int:
    return max(1, min(8, c // 4))


class FrameAE(nnx.Module):
    """Conv autoencoder ``[B, 32, 32, 3]`` in [0, 1] <-> ``[B, 8, 8, 8]``."""

    def __init__(self, width: int = 32, *, channels: int = 3, rngs: nnx.Rngs):
        if width < 4 or width % 4:
            raise ValueError(f"width must be a positive multiple of 4, got {width}")
        w = int(width)
        self.channels = int(channels)  # 3 for one frame, 6 for two frames stacked on channels
        self.enc1 = nnx.Conv(self.channels, w, (3, 3), strides=2, rngs=rngs)
        self.norm1 = nnx.GroupNorm(w, num_groups=_groups(w), rngs=rngs)
        self.enc2 = nnx.Conv(w, 2 * w, (3, 3), strides=2, rngs=rngs)
        self.norm2 = nnx.GroupNorm(2 * w, num_groups=_groups(2 * w), rngs=rngs)
        self.to_z = nnx.Conv(2 * w, LATENT_CH, (1, 1), rngs=rngs)
        # Decoder: residual convs at the latent resolution, then every latent cell emits its
        # own 4 x 4 pixel patch (depth-to-space, a per-pixel 1 x 1 head). Nearest-neighbour
        # upsampling + 3 x 3 convs (the first version) blurred corners enough to turn
        # squares into circles for the detector; a 3 x 3 head after the patches did too.
        h = 4 * w
        self.from_z = nnx.Conv(LATENT_CH, h, (3, 3), rngs=rngs)
        self.res = nnx.List([_ResBlock(h, rngs=rngs) for _ in range(2)])
        self.norm3 = nnx.GroupNorm(h, num_groups=_groups(h), rngs=rngs)
        self.to_patch = nnx.Conv(h, 16 * w // 2, (1, 1), rngs=rngs)
        self.out = nnx.Conv(w // 2, self.channels, (1, 1), rngs=rngs)
        self.latent_scale = nnx.Variable(jnp.ones(()))  # set after training (not a Param)

    def encode(self, x: jax.Array) -> jax.Array:
        """Images ``[B, 32, 32, 3]`` in [0, 1] -> raw latents ``[B, 8, 8, 8]``."""
        if x.ndim != 4 or x.shape[1:] != (RES, RES, self.channels):
            raise ValueError(f"x must be [B, {RES}, {RES}, {self.channels}], got shape "
                             f"{x.shape}")
        h = jax.nn.silu(self.norm1(self.enc1(x * 2.0 - 1.0)))
        h = jax.nn.silu(self.norm2(self.enc2(h)))
        return self.to_z(h)

    def decode(self, z: jax.Array) -> jax.Array:
        """Raw latents ``[B, 8, 8, 8]`` -> images ``[B, 32, 32, 3]`` (unclipped, ~[0, 1])."""
        b = z.shape[0]
        h = self.from_z(z)
        for blk in self.res:
            h = blk(h)
        h = self.to_patch(jax.nn.silu(self.norm3(h)))  # [B, 8, 8, 16 * w / 2]
        c = h.shape[-1] // 16
        h = h.reshape(b, 8, 8, 4, 4, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, RES, RES, c)
        return self.out(jax.nn.silu(h)) * 0.5 + 0.5

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        z = self.encode(x)
        return self.decode(z), z


class _ResBlock(nnx.Module):
    def __init__(self, c: int, *, rngs: nnx.Rngs):
        self.norm = nnx.GroupNorm(c, num_groups=_groups(c), rngs=rngs)
        self.conv = nnx.Conv(c, c, (3, 3), rngs=rngs)

    def __call__(self, x):
        return x + self.conv(jax.nn.silu(self.norm(x)))


def ae_loss(ae: FrameAE, x: jax.Array, z_weight: float = 1e-4) -> jax.Array:
    """MSE(reconstruction, x) + z_weight * mean ||z||^2 (per latent element)."""
    rec, z = ae(x)
    return jnp.mean((rec - x) ** 2) + z_weight * jnp.mean(z * z)


def encode_frames(ae: FrameAE, x: jax.Array, independent: bool = True) -> jax.Array:
    """Clips ``[B, F, 32, 32, 3]`` -> scaled latents ``[B, F, 8, 8, 8]`` (unit std).

    ``independent=True`` encodes each frame as its own clip (the frames go through the
    encoder as one batch of B F images: nothing mixes across frames). ``False`` is only
    meaningful for a temporal encoder and raises here.
    """
    if not independent:
        raise ValueError("FrameAE encodes frames independently only; use the optional "
                         "JointTemporalAE for shared latents")
    if x.ndim != 5:
        raise ValueError(f"x must be [B, F, {RES}, {RES}, 3], got shape {x.shape}")
    b, f = x.shape[:2]
    z = ae.encode(x.reshape((b * f,) + x.shape[2:]))
    return (z / ae.latent_scale[...]).reshape((b, f) + z.shape[1:])


def decode_frames(ae: FrameAE, z: jax.Array) -> jax.Array:
    """Scaled latents ``[B, F, 8, 8, 8]`` -> images ``[B, F, 32, 32, 3]`` clipped to [0, 1]."""
    b, f = z.shape[:2]
    img = ae.decode(z.reshape((b * f,) + z.shape[2:]) * ae.latent_scale[...])
    return jnp.clip(img, 0.0, 1.0).reshape((b, f) + img.shape[1:])


class JointTemporalAE(nnx.Module):
    """The ``cof_joint_enc`` ablation's encoder (spec §Baselines, optional): what a causal video
    VAE with temporal stride 4 does to a 3-frame clip. F1 is encoded alone; F2 and F3 are
    encoded *together* into one shared latent frame (3 frames -> 1 + ceil(2 / 4) = 2 latent
    frames), so the refined frame cannot be denoised apart from the flat one.

    ``encode_clip(x [B, 3, 32, 32, 3]) -> z [B, 2, 8, 8, 8]`` (raw latents) and
    ``decode_clip(z) -> [B, 3, 32, 32, 3]``.
    """

    def __init__(self, width: int = 32, *, rngs: nnx.Rngs):
        self.first = FrameAE(width, rngs=rngs)
        self.pair = FrameAE(width, channels=6, rngs=rngs)

    def encode_clip(self, x: jax.Array) -> jax.Array:
        if x.ndim != 5 or x.shape[1] != 3:
            raise ValueError(f"x must be [B, 3, {RES}, {RES}, 3], got shape {x.shape}")
        z1 = self.first.encode(x[:, 0])
        z23 = self.pair.encode(jnp.concatenate([x[:, 1], x[:, 2]], -1))
        return jnp.stack([z1, z23], 1)

    def decode_clip(self, z: jax.Array) -> jax.Array:
        f1 = self.first.decode(z[:, 0])
        f23 = self.pair.decode(z[:, 1])
        return jnp.stack([f1, f23[..., :3], f23[..., 3:]], 1)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        z = self.encode_clip(x)
        return self.decode_clip(z), z

    def scales(self) -> jax.Array:
        """``[2]``: the latent scale of each latent frame (F1's and the shared (F2, F3)
        one come from different encoders, so each gets its own std)."""
        return jnp.stack([self.first.latent_scale[...], self.pair.latent_scale[...]])


def encode_joint(ae: JointTemporalAE, x: jax.Array) -> jax.Array:
    """Clips ``[B, 3, 32, 32, 3]`` -> scaled latents ``[B, 2, 8, 8, 8]`` (unit std each)."""
    return ae.encode_clip(x) / ae.scales()[None, :, None, None, None]


def decode_joint(ae: JointTemporalAE, z: jax.Array) -> jax.Array:
    """Scaled latents ``[B, 2, 8, 8, 8]`` -> clips ``[B, 3, 32, 32, 3]`` clipped to [0, 1]."""
    if z.ndim != 5 or z.shape[1] != 2:
        raise ValueError(f"z must be [B, 2, 8, 8, {LATENT_CH}], got shape {z.shape}")
    return jnp.clip(ae.decode_clip(z * ae.scales()[None, :, None, None, None]), 0.0, 1.0)


def joint_ae_loss(ae: JointTemporalAE, x: jax.Array, z_weight: float = 1e-4) -> jax.Array:
    """``ae_loss`` for 3-frame clips through the shared-latent encoder."""
    rec, z = ae(x)
    return jnp.mean((rec - x) ** 2) + z_weight * jnp.mean(z * z)
