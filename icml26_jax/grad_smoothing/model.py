"""Models of the Gradient Smoothing experiments: the shared LM and a ViT, both on the shared
``lm.transformer.BlockStack`` (scan over blocks, parameters stacked ``[L, ...]``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.lm.transformer import BlockStack, RMSNorm, Transformer, TransformerConfig


def lm_config(vocab_size: int, depth: int, d_model: int, num_heads: int,
              mlp_ratio: int = 4, rope_base: float = 10_000.0) -> TransformerConfig:
    """Decoder-only pre-norm LM: RMSNorm, RoPE, tied embeddings; depth ``L`` blocks whose
    parameters are stacked ``[L, ...]`` under ``blocks`` (the axis smoothing acts on)."""
    if depth < 4:
        raise ValueError(f"depth must be >= 4 (a width-3 window over 2-3 blocks averages "
                         f"everything), got {depth}")
    return TransformerConfig(vocab_size=vocab_size, d_model=d_model, num_layers=depth,
                             num_heads=num_heads, mlp_ratio=mlp_ratio, rope_base=rope_base)


def make_lm(cfg: TransformerConfig, rngs: nnx.Rngs) -> Transformer:
    """The shared ``lm.Transformer`` with its built-in RoPE."""
    return Transformer(cfg, rngs=rngs)


def patchify(images, patch: int) -> np.ndarray:
    """``[B, H, W]`` or ``[B, H, W, C]`` -> ``[B, (H/p)(W/p), p * p * C]`` row-major patches."""
    x = np.asarray(images)
    x = x if x.ndim == 4 else x[..., None]
    B, H, W, C = x.shape
    if H % patch or W % patch:
        raise ValueError(f"image size {H}x{W} must be a multiple of patch={patch}")
    x = x.reshape(B, H // patch, patch, W // patch, patch, C).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // patch) * (W // patch), patch * patch * C)


class NoPositionEncoder(nnx.Module):
    """Leaves q and k unchanged (the ViT adds learned absolute positions instead)."""

    def __call__(self, q, k, positions):
        del positions
        return q, k


class ViT(nnx.Module):
    """Vision transformer: patch embedding + learned positions + the shared ``BlockStack``
    (bidirectional, no RoPE; parameters stacked ``[L, ...]`` under ``blocks``) + RMSNorm,
    mean pool and a linear head."""

    def __init__(self, depth: int, d_model: int, num_heads: int, patch: int, image_size: int,
                 num_classes: int, *, rngs: nnx.Rngs, channels: int = 1, mlp_ratio: int = 4):
        if depth < 4:
            raise ValueError(f"depth must be >= 4, got {depth}")
        if patch < 1 or image_size % patch:
            raise ValueError(f"image_size={image_size} must be a multiple of patch={patch}")
        self.patch, self.image_size, self.channels = patch, image_size, channels
        self.num_tokens = (image_size // patch) ** 2
        self.cfg = TransformerConfig(vocab_size=num_classes, d_model=d_model, num_layers=depth,
                                     num_heads=num_heads, mlp_ratio=mlp_ratio, causal=False)
        self.patch_embed = nnx.Linear(patch * patch * channels, d_model, rngs=rngs)
        self.pos = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(),
                                                           (self.num_tokens, d_model)))
        self.blocks = BlockStack(self.cfg, rngs=rngs,
                                 position_encoder_factory=lambda r: NoPositionEncoder())
        self.norm = RMSNorm(d_model)
        self.head = nnx.Linear(d_model, num_classes, rngs=rngs)

    def patches(self, images) -> np.ndarray:
        """``[B, H, W]`` or ``[B, H, W, C]`` images -> ``[B, N, patch * patch * C]`` (NumPy,
        on the host: the patch grid is a reshape that sharded replicas cannot trace)."""
        x = np.asarray(images)
        x = x if x.ndim == 4 else x[..., None]
        B, H, W, C = x.shape
        if (H, W, C) != (self.image_size, self.image_size, self.channels):
            raise ValueError(f"images must be [B, {self.image_size}, {self.image_size}"
                             f"{'' if self.channels == 1 else f', {self.channels}'}], got "
                             f"{np.shape(images)}")
        return patchify(x, self.patch)

    def forward_patches(self, patches: jax.Array, *, return_intermediates: bool = False):
        """Class logits ``[B, num_classes]`` of patch tokens ``[B, N, patch * patch * C]``
        (and ``{"hidden": [L, B, N, d]}`` if asked)."""
        x = self.patch_embed(patches.astype(jnp.float32)) + self.pos[...]
        B, N, _ = x.shape
        positions = jnp.zeros((B, N), jnp.int32)
        x, inter = self.blocks(x, positions, None, return_intermediates=return_intermediates)
        logits = self.head(self.norm(x).mean(1)).astype(jnp.float32)
        if return_intermediates:
            return logits, {"hidden": inter[0]}
        return logits

    def __call__(self, images, *, return_intermediates: bool = False):
        """Class logits of host images ``[B, H, W(, C)]``; see :meth:`forward_patches`."""
        return self.forward_patches(jnp.asarray(self.patches(images)),
                                    return_intermediates=return_intermediates)
