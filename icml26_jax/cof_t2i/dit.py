"""The small video diffusion transformer (spec §Method "Video DiT" [R]).

Data flow for latents z [B, F, 8, 8, C] (F <= 3 frames, C = 8 channels, patch p = 2)::

    z -> p x p patches, linear -> tokens [B, F * 16, d]
      + learned frame embedding (frame index 0..F-1) + 2D sinusoidal patch positions
    caption ids [B, L] -> TextEncoder (embedding + positions + 2 pre-LN layers) -> ctx
      (a learned null token is always prepended: an empty caption still has a key)
    t -> sinusoidal(1000 t) -> MLP -> c (adaLN-zero conditioning)
    depth x [ x += g1 * SelfAttn(mod(LN x; c))      # full attention over ALL frame tokens
              x += CrossAttn(LN x, ctx)            # caption
              x += g2 * MLP(mod(LN x; c)) ]        # MLP 4d; g*, shift / scale from c,
                                                   # zero-initialised
    -> mod(LN x; c) -> linear (zero-init) -> unpatchify -> v [B, F, 8, 8, C]

Every frame attends to every other frame in every block: the frames are denoised jointly
(Wan's 3D attention), and the frame embedding tells F1 from F3 (the output is frame F - 1).
``cfg_velocity`` evaluates conditional and unconditional velocities in one batch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

MAX_FRAMES = 3


def sinusoid(x: jax.Array, dim: int) -> jax.Array:
    """[...] -> [..., dim] sin / cos features with geometric frequencies."""
    half = dim // 2
    freqs = jnp.exp(-math.log(10_000.0) * jnp.arange(half, dtype=jnp.float32) / max(half - 1, 1))
    a = jnp.asarray(x, jnp.float32)[..., None] * freqs
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def pos_2d(n: int, d: int) -> jax.Array:
    """[n * n, d] 2D sinusoidal positions (half the channels for rows, half for columns)."""
    r, c = jnp.meshgrid(jnp.arange(n), jnp.arange(n), indexing="ij")
    return jnp.concatenate([sinusoid(r.ravel(), d // 2), sinusoid(c.ravel(), d // 2)], -1)


class TextEncoder(nnx.Module):
    """Word embeddings + learned positions + ``layers`` pre-LN transformer layers."""

    def __init__(self, vocab: int, max_text: int, d: int, heads: int, layers: int = 2, *,
                 rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab, d, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (max_text, d)))
        self.layers = nnx.List([_EncoderLayer(d, heads, rngs=rngs) for _ in range(layers)])

    def __call__(self, ids, mask):
        x = self.embed(ids) + self.pos[...][: ids.shape[-1]]
        att = mask[:, None, None, :] & mask[:, None, :, None]
        for layer in self.layers:
            x = layer(x, att)
        return x


class _EncoderLayer(nnx.Module):
    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        self.n1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False,
                                           rngs=rngs)
        self.n2 = nnx.LayerNorm(d, rngs=rngs)
        self.fc1 = nnx.Linear(d, 4 * d, rngs=rngs)
        self.fc2 = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.n1(x), mask=mask)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.n2(x))))


def _modulate(x, shift, scale):
    return x * (1.0 + scale[:, None, :]) + shift[:, None, :]


class DiTBlock(nnx.Module):
    """adaLN-zero block: self-attention over all tokens, caption cross-attention, MLP 4d."""

    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        zeros = nnx.initializers.zeros
        self.ada = nnx.Linear(d, 6 * d, kernel_init=zeros, bias_init=zeros, rngs=rngs)
        self.n1 = nnx.LayerNorm(d, use_scale=False, use_bias=False, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False,
                                           rngs=rngs)
        self.nc = nnx.LayerNorm(d, rngs=rngs)
        self.cross = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False,
                                            rngs=rngs)
        self.n2 = nnx.LayerNorm(d, use_scale=False, use_bias=False, rngs=rngs)
        self.fc1 = nnx.Linear(d, 4 * d, rngs=rngs)
        self.fc2 = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x, c, ctx, ctx_mask):
        s1, sc1, g1, s2, sc2, g2 = jnp.split(self.ada(jax.nn.silu(c)), 6, -1)
        x = x + g1[:, None, :] * self.attn(_modulate(self.n1(x), s1, sc1))
        x = x + self.cross(self.nc(x), ctx, mask=ctx_mask[:, None, None, :])
        h = self.fc2(jax.nn.gelu(self.fc1(_modulate(self.n2(x), s2, sc2))))
        return x + g2[:, None, :] * h


class VideoDiT(nnx.Module):
    """The velocity model ``v(z [B, F, S, S, C], t [B], text_ids [B, L], text_mask [B, L])``."""

    def __init__(self, num_frames: int, d: int = 64, depth: int = 4, heads: int = 4,
                 patch: int = 2, vocab: int = 40, max_text: int = 12, *, latent_res: int = 8,
                 channels: int = 8, rngs: nnx.Rngs):
        if num_frames not in (1, 2, 3):
            raise ValueError(f"num_frames must be 1, 2 or 3, got {num_frames}")
        if latent_res % patch:
            raise ValueError(f"latent resolution {latent_res} is not divisible by patch={patch}")
        if d % heads or d % 4:
            raise ValueError(f"d={d} must be divisible by heads={heads} and by 4")
        self.num_frames, self.d, self.patch = num_frames, d, patch
        self.latent_res, self.channels = latent_res, channels
        self.grid = latent_res // patch
        pdim = patch * patch * channels
        self.embed = nnx.Linear(pdim, d, rngs=rngs)
        self.frame_emb = nnx.Param(0.02 * jax.random.normal(rngs.params(), (MAX_FRAMES, d)))
        self.t1 = nnx.Linear(d, d, rngs=rngs)
        self.t2 = nnx.Linear(d, d, rngs=rngs)
        self.text = TextEncoder(vocab, max_text, d, heads, rngs=rngs)
        self.null = nnx.Param(0.02 * jax.random.normal(rngs.params(), (1, d)))
        self.blocks = nnx.List([DiTBlock(d, heads, rngs=rngs) for _ in range(depth)])
        zeros = nnx.initializers.zeros
        self.final_ada = nnx.Linear(d, 2 * d, kernel_init=zeros, bias_init=zeros, rngs=rngs)
        self.final_norm = nnx.LayerNorm(d, use_scale=False, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(d, pdim, kernel_init=zeros, bias_init=zeros, rngs=rngs)

    def encode_text(self, text_ids, text_mask):
        """Caption ids ``[B, L]`` -> ``(ctx [B, 1 + L, d], ctx_mask [B, 1 + L])``: the text
        encoder's tokens after a learned null token (an empty caption still has a key)."""
        b, d = text_ids.shape[0], self.d
        mask = jnp.asarray(text_mask, bool)
        ctx = self.text(text_ids, mask)
        ctx = jnp.concatenate([jnp.broadcast_to(self.null[...][None], (b, 1, d)), ctx], 1)
        return ctx, jnp.concatenate([jnp.ones((b, 1), bool), mask], 1)

    def velocity(self, z, t, ctx):
        """``v(z [B, F, S, S, C], t [B], ctx)`` with ``ctx`` from ``encode_text``."""
        b, f, s, _, ch = z.shape
        if f != self.num_frames or s != self.latent_res or ch != self.channels:
            raise ValueError(f"z must be [B, {self.num_frames}, {self.latent_res}, "
                             f"{self.latent_res}, {self.channels}], got {z.shape}")
        p, g, d = self.patch, self.grid, self.d
        tok = z.reshape(b, f, g, p, g, p, ch).transpose(0, 1, 2, 4, 3, 5, 6)
        tok = self.embed(tok.reshape(b, f, g * g, p * p * ch))  # [B, F, G^2, d]
        tok = tok + self.frame_emb[...][:f][None, :, None, :] + pos_2d(g, d)[None, None]
        x = tok.reshape(b, f * g * g, d)
        c = self.t2(jax.nn.silu(self.t1(sinusoid(1000.0 * t, d))))
        ctx, cmask = ctx
        for blk in self.blocks:
            x = blk(x, c, ctx, cmask)
        shift, scale = jnp.split(self.final_ada(jax.nn.silu(c)), 2, -1)
        x = self.out(_modulate(self.final_norm(x), shift, scale))  # [B, F G^2, p^2 C]
        x = x.reshape(b, f, g, g, p, p, ch).transpose(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(b, f, s, s, ch)

    def __call__(self, z, t, text_ids, text_mask):
        return self.velocity(z, t, self.encode_text(text_ids, text_mask))


def cfg_velocity(model: VideoDiT, z, t, text_ids, text_mask, w: float):
    """Classifier-free guidance v_u + w (v_c - v_u), conditional and unconditional (empty
    caption) evaluated in ONE batch of 2B."""
    b = z.shape[0]
    v = model(jnp.concatenate([z, z]), jnp.concatenate([t, t]),
              jnp.concatenate([text_ids, jnp.zeros_like(text_ids)]),
              jnp.concatenate([jnp.asarray(text_mask, bool), jnp.zeros(text_mask.shape, bool)]))
    v_c, v_u = v[:b], v[b:]
    return v_u + w * (v_c - v_u)
