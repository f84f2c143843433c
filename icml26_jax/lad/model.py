"""The retrieval "MLLM" of the substitute (spec §Data, Model [R]): a decoder-only transformer
whose prompt layout matches the real ones (images as delimiter-wrapped visual tokens, then
the caption), with learned absolute positions, pre-LN blocks and a causal mask.

The forward returns the logits of the token at ``last_idx`` *and* the post-softmax attention
row of that token at every layer, from the same pass (the layer scan keeps only that row:
[B, H, T] per layer, never the [B, H, T, T] map).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26_jax.lad import data as data_lib

PATCH_DIM = 16


def _dense(i: int, o: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(i, o, kernel_init=nnx.initializers.normal(1.0 / math.sqrt(i)), rngs=rngs)


class Block(nnx.Module):
    """Pre-LN block: causal multi-head attention, then a GELU MLP."""

    def __init__(self, d: int, heads: int, mlp: int, *, rngs: nnx.Rngs):
        if d % heads:
            raise ValueError(f"d={d} must be a multiple of heads={heads}")
        self.heads = heads
        self.ln1 = nnx.LayerNorm(d, rngs=rngs)
        self.qkv = _dense(d, 3 * d, rngs)
        self.proj = _dense(d, d, rngs)
        self.ln2 = nnx.LayerNorm(d, rngs=rngs)
        self.fc1 = _dense(d, mlp, rngs)
        self.fc2 = _dense(mlp, d, rngs)

    def attention(self, h):
        """(q, k, v) [B, T, H, Dh] and the post-softmax causal attention [B, H, T, T]."""
        B, T, d = h.shape
        q, k, v = jnp.split(self.qkv(self.ln1(h)), 3, axis=-1)
        q, k, v = (x.reshape(B, T, self.heads, d // self.heads) for x in (q, k, v))
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // self.heads)
        causal = jnp.tril(jnp.ones((T, T), bool))
        logits = jnp.where(causal, logits.astype(jnp.float32), -jnp.inf)
        return q, k, v, jax.nn.softmax(logits, axis=-1)

    def __call__(self, h, last_idx):
        """h [B, T, d] -> (h, attention row of ``last_idx`` [B, H, T] float32)."""
        B, T, d = h.shape
        _, _, v, probs = self.attention(h)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(B, T, d)
        h = h + self.proj(out)
        h = h + self.fc2(jax.nn.gelu(self.fc1(self.ln2(h))))
        row = jnp.take_along_axis(probs, last_idx[:, None, None, None], axis=2)[:, :, 0]
        return h, row


class RetrievalLM(nnx.Module):
    """Token + patch embedding + learned positions -> ``layers`` blocks (stacked parameters,
    ``lax.scan``) -> LayerNorm -> vocabulary logits at ``last_idx``.

    Args:
      vocab: vocabulary size (``data.VOCAB``).
      d: model width; heads: attention heads; mlp: MLP hidden width.
      layers: number of blocks.
      t_max: maximum sequence length (learned position table).
    """

    def __init__(self, vocab: int = data_lib.VOCAB, d: int = 64, layers: int = 6,
                 heads: int = 4, mlp: int = 128, t_max: int = data_lib.T_MAX, *,
                 rngs: nnx.Rngs):
        self.num_layers = layers
        self.t_max = t_max
        self.embed = nnx.Embed(vocab, d, embedding_init=nnx.initializers.normal(0.02),
                               rngs=rngs)
        self.patch = _dense(PATCH_DIM, d, rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (t_max, d)))

        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(r):
            return Block(d, heads, mlp, rngs=r)

        self.blocks = make(rngs)
        self.ln_f = nnx.LayerNorm(d, rngs=rngs)
        self.head = _dense(d, vocab, rngs)

    def hidden(self, tokens, patches, is_patch):
        """Input embeddings [B, T, d]: token embedding, replaced by the patch projection on
        visual slots, plus the position embedding."""
        T = tokens.shape[1]
        if T > self.t_max:
            raise ValueError(f"sequence length {T} exceeds t_max={self.t_max}")
        x = jnp.where(is_patch[..., None], self.patch(patches), self.embed(tokens))
        return x + self.pos[...][:T]

    def __call__(self, tokens, patches, is_patch, last_idx):
        """Returns ``(logits_last [B, V], attn_last [B, L, H, T])``.

        Args:
          tokens: [B, T] int token ids (right padded).
          patches: [B, T, 16] patch values (read where ``is_patch``).
          is_patch: [B, T] bool.
          last_idx: [B] int, the last prompt token (it predicts the index).
        """
        h = self.hidden(tokens, patches, is_patch)
        graphdef, state = nnx.split(self.blocks)

        def body(x, layer_state):
            return nnx.merge(graphdef, layer_state)(x, last_idx)

        h, rows = jax.lax.scan(body, h, state)  # rows [L, B, H, T]
        h_last = jnp.take_along_axis(h, last_idx[:, None, None], axis=1)[:, 0]
        return self.head(self.ln_f(h_last)), jnp.moveaxis(rows, 0, 1)

    def layer_attention(self, tokens, patches, is_patch, layer: int):
        """The full post-softmax map [B, H, T, T] of one layer, recomputed from its q and k
        (a test and plotting helper; the forward never returns full maps)."""
        h = self.hidden(tokens, patches, is_patch)
        graphdef, state = nnx.split(self.blocks)
        last = jnp.zeros((tokens.shape[0],), jnp.int32)
        for i in range(layer):
            h, _ = nnx.merge(graphdef, jax.tree.map(lambda x, i=i: x[i], state))(h, last)
        blk = nnx.merge(graphdef, jax.tree.map(lambda x: x[layer], state))
        return blk.attention(h)[3]


def logits_and_attention(graphdef, params, batch: data_lib.Batch):
    """Pure forward of a split model: ``(logits_last [B, V], attn_last [B, L, H, T])``."""
    model = nnx.merge(graphdef, params)
    return model(jnp.asarray(batch.tokens), jnp.asarray(batch.patches),
                 jnp.asarray(batch.is_patch), jnp.asarray(batch.last_idx))
