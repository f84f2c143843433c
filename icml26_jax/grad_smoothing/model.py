"""Models of the Gradient Smoothing experiments: the shared LM (scan over blocks)."""

from __future__ import annotations

from flax import nnx

from icml26_jax.lm.transformer import Transformer, TransformerConfig


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
