"""The shared backbone of every family (spec §Method, Backbone) and its token layout.

Token ids: ``0..K-1`` vocabulary, ``K`` = ``[MASK]``, ``K + 1`` = ``[BOS]``; the model's
embedding covers all ``K + 2`` and its outputs are sliced to the K vocabulary tokens (the
mask logit is -inf: SUBS). adaLN conditioning (cond_dim 32) on sigma: Duo feeds
sigma_t = -log alpha_t, MDLM, Eso-LM and AR feed 0, so every family has the same parameters
and FLOPs. AR and Eso-LM attend causally, MDLM and Duo bidirectionally (same cost).

Sizes [R] (head dim 16, MLP 4x, untied output; non-embedding parameters 12 d^2 n_layer):
XS d32/2 (25k), S d48/3 (83k), M d64/4 (197k), L d96/4 (442k), XL d128/5 (983k).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from flax import nnx

from icml26_jax.lm.transformer import Transformer, TransformerConfig

FAMILIES = ("ar", "mdlm", "mdlm_lowvar", "duo", "esolm")
CAUSAL = {"ar": True, "mdlm": False, "mdlm_lowvar": False, "duo": False, "esolm": True}
HEAD_DIM = 16
COND_DIM = 32


class Size(NamedTuple):
    d_model: int
    num_layers: int


SIZES = {"XS": Size(32, 2), "S": Size(48, 3), "M": Size(64, 4), "L": Size(96, 4),
         "XL": Size(128, 5)}


def check_family(family: str) -> None:
    """``ValueError`` unless ``family`` is one of :data:`FAMILIES`."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got family={family!r}")


def check_size(size: str) -> None:
    """``ValueError`` unless ``size`` is one of :data:`SIZES`."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)}, got size={size!r}")


def model_config(size: str, family: str, vocab: int, *, unroll: bool = False
                 ) -> TransformerConfig:
    """The :class:`TransformerConfig` of ``size`` for ``family`` over ``vocab`` tokens
    (+ mask and BOS)."""
    check_size(size)
    check_family(family)
    s = SIZES[size]
    return TransformerConfig(vocab_size=vocab + 2, d_model=s.d_model, num_layers=s.num_layers,
                             num_heads=s.d_model // HEAD_DIM, mlp_ratio=4,
                             causal=CAUSAL[family], cond_dim=COND_DIM, cond_mode="adaln",
                             tie_embeddings=False, unroll_layers=unroll)


def non_embedding_params(size: str) -> int:
    """12 d^2 n_layer: the N of the scaling laws."""
    s = SIZES[size]
    return 12 * s.d_model ** 2 * s.num_layers


def init(size: str, family: str, vocab: int, seed: int, *, unroll: bool = False):
    """``(graphdef, params)`` of a fresh model (``nnx.Rngs(seed)``)."""
    model = Transformer(model_config(size, family, vocab, unroll=unroll), rngs=nnx.Rngs(seed))
    return nnx.split(model, nnx.Param)


def logits_fn(graphdef, params, tokens, *, positions=None, cond=None):
    """Logits over the K vocabulary tokens [B, T, K] (mask and BOS outputs dropped)."""
    model = nnx.merge(graphdef, params)
    B = tokens.shape[0]
    cond = jnp.zeros((B,), jnp.float32) if cond is None else cond
    out = model(tokens, positions=positions, cond=cond)
    return out[..., : model.cfg.vocab_size - 2]
