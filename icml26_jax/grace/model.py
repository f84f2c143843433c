"""The DigitGrid VLMs of the GRACE substitute (spec §Data, Models [R]).

A LLaVA-shaped pipeline at CPU scale::

    image [16, 16] -> 16 patches of 4x4 -> VisionTower (2 bidirectional layers, d_v) ->
    projector Dense(d_v -> d) -> the 16 IMG slots of the token sequence -> TinyLM (causal,
    pre-RMSNorm, learned positions, SwiGLU) -> logits [B, S, V]

* ``VisionTower`` is shared by teacher and student and frozen after a short digit
  pre-training (each digit classified from its 4 pooled patch tokens), like CLIP in LLaVA.
* ``TinyLM`` builds every decoder linear (q, k, v, o, gate, up, down) as an ``lsq.QDense``:
  with ``quant=None`` they are plain dense layers, with a ``QuantConfig`` they carry
  group-wise LSQ scales. Embeddings, positions, norms and ``lm_head`` stay in floating point.
* ``VLM.__call__`` returns ``VLMOut(logits, hidden_penult, visual_mask)``; ``hidden_penult`` is
  the input of the last decoder layer (what relational CKA aligns).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26_jax.grace import data as data_lib
from icml26_jax.grace.lsq import QDense, QuantConfig

# Patch indices (row-major 4x4 patch grid) of the four digits TL, TR, BL, BR.
DIGIT_PATCHES = ((0, 1, 4, 5), (2, 3, 6, 7), (8, 9, 12, 13), (10, 11, 14, 15))


class VLMOut(NamedTuple):
    """logits [B, S, V]; hidden_penult [B, S, D] (input of the last decoder layer);
    visual_mask [B, S] (True at the image-token slots)."""

    logits: jax.Array
    hidden_penult: jax.Array
    visual_mask: jax.Array


def _attention(q, k, v, causal: bool):
    """Multi-head softmax attention; q, k, v [B, T, H, Dh] -> [B, T, H, Dh]."""
    T = q.shape[1]
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    if causal:
        mask = jnp.tril(jnp.ones((T, T), bool))
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    w = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhts,bshd->bthd", w, v)


class Block(nnx.Module):
    """Pre-RMSNorm transformer block: x + Attn(norm x), then x + SwiGLU(norm x). The seven
    linears are ``QDense`` (quantised when ``quant`` is set)."""

    def __init__(self, d: int, heads: int, hidden: int, *, quant: QuantConfig | None,
                 causal: bool = True, rngs: nnx.Rngs):
        if d % heads:
            raise ValueError(f"d={d} must be divisible by heads={heads}")
        self.heads, self.causal = heads, causal
        self.attn_norm = nnx.RMSNorm(d, rngs=rngs)
        self.mlp_norm = nnx.RMSNorm(d, rngs=rngs)
        self.q = QDense(d, d, quant=quant, rngs=rngs)
        self.k = QDense(d, d, quant=quant, rngs=rngs)
        self.v = QDense(d, d, quant=quant, rngs=rngs)
        self.o = QDense(d, d, quant=quant, rngs=rngs)
        self.gate = QDense(d, hidden, quant=quant, rngs=rngs)
        self.up = QDense(d, hidden, quant=quant, rngs=rngs)
        self.down = QDense(hidden, d, quant=quant, rngs=rngs)

    def __call__(self, x):
        B, T, d = x.shape
        h = self.attn_norm(x)
        split = lambda y: y.reshape(B, T, self.heads, d // self.heads)  # noqa: E731
        a = _attention(split(self.q(h)), split(self.k(h)), split(self.v(h)), self.causal)
        x = x + self.o(a.reshape(B, T, d))
        h = self.mlp_norm(x)
        return x + self.down(jax.nn.silu(self.gate(h)) * self.up(h))


class VisionTower(nnx.Module):
    """16 patch tokens of 4x4 px -> Dense(16 -> d_v) + learned positions -> ``layers``
    bidirectional blocks -> final RMSNorm; ``classify`` pools each digit's 4 tokens into
    10-way logits (the pre-training head)."""

    def __init__(self, d_v: int = 64, layers: int = 2, heads: int = 4, *, rngs: nnx.Rngs):
        self.embed = nnx.Linear(16, d_v, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (16, d_v)))
        self.blocks = nnx.List([Block(d_v, heads, 2 * d_v, quant=None, causal=False,
                                      rngs=rngs) for _ in range(layers)])
        self.norm = nnx.RMSNorm(d_v, rngs=rngs)
        self.head = nnx.Linear(d_v, 10, rngs=rngs)
        self.d_v = d_v

    def __call__(self, images):
        """images [B, 16, 16] -> visual tokens [B, 16, d_v]."""
        x = self.embed(patches(images)) + self.pos[...]
        for b in self.blocks:
            x = b(x)
        return self.norm(x)

    def classify(self, images):
        """[B, 4, 10] digit logits (TL, TR, BL, BR), each from its 4 pooled patch tokens."""
        f = self(images)
        pooled = jnp.stack([f[:, list(ix)].mean(1) for ix in DIGIT_PATCHES], 1)
        return self.head(pooled)


def patches(images):
    """[..., 16, 16] -> [..., 16, 16]: the 16 row-major 4x4 patches, 16 values each."""
    x = jnp.asarray(images, jnp.float32)
    x = x.reshape(x.shape[:-2] + (4, 4, 4, 4))  # [..., pr, r, pc, c]
    x = jnp.swapaxes(x, -3, -2)  # [..., pr, pc, r, c]
    return x.reshape(x.shape[:-4] + (16, 16))


class TinyLM(nnx.Module):
    """Decoder-only LM: token embeddings (+ learned positions), ``layers`` causal blocks with
    (optionally quantised) linears, final RMSNorm and an FP ``lm_head``."""

    def __init__(self, d: int, layers: int, heads: int, hidden: int, vocab: int,
                 max_len: int = data_lib.SEQ_LEN, *, quant: QuantConfig | None = None,
                 rngs: nnx.Rngs):
        if layers < 2:
            raise ValueError(f"layers must be >= 2 (the penultimate hidden state is read), "
                             f"got {layers}")
        self.embed = nnx.Embed(vocab, d, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (max_len, d)))
        self.blocks = nnx.List([Block(d, heads, hidden, quant=quant, rngs=rngs)
                                for _ in range(layers)])
        self.norm = nnx.RMSNorm(d, rngs=rngs)
        self.lm_head = nnx.Linear(d, vocab, use_bias=False, rngs=rngs)
        self.vocab, self.d = vocab, d

    def __call__(self, x):
        """x [B, S, d] input embeddings -> (logits [B, S, V], hidden_penult [B, S, d])."""
        x = x + self.pos[...][: x.shape[1]]
        for b in self.blocks[:-1]:
            x = b(x)
        penult = x
        x = self.blocks[-1](x)
        return self.lm_head(self.norm(x)), penult


class VLM(nnx.Module):
    """VisionTower -> projector -> TinyLM. The vision tower is frozen by the trainer (it is
    split out of the trainable parameters, see ``train.split_trainable``)."""

    def __init__(self, *, d_v: int, vision_layers: int, d: int, layers: int, heads: int,
                 hidden: int, vocab: int = data_lib.VOCAB_SIZE,
                 quant: QuantConfig | None = None, rngs: nnx.Rngs):
        self.vision = VisionTower(d_v, vision_layers, rngs=rngs)
        self.projector = nnx.Linear(d_v, d, rngs=rngs)
        self.lm = TinyLM(d, layers, heads, hidden, vocab, quant=quant, rngs=rngs)

    def __call__(self, images, tokens) -> VLMOut:
        """images [B, 16, 16], tokens [B, S] (``data.IMG`` at the 16 visual slots)."""
        vis = self.projector(self.vision(images))  # [B, 16, d]
        visual_mask = tokens == data_lib.IMG
        idx = jnp.clip(jnp.cumsum(visual_mask, axis=1) - 1, 0, vis.shape[1] - 1)
        vis_at = jnp.take_along_axis(vis, idx[..., None], axis=1)  # [B, S, d]
        x = jnp.where(visual_mask[..., None], vis_at, self.lm.embed(tokens))
        logits, penult = self.lm(x)
        return VLMOut(logits, penult, visual_mask)


def greedy_answer(graphdef, params, images, prompt, answer_start, steps: int = 4):
    """Greedy decoding of the answer (``params``: one state, or a tuple of the states
    ``nnx.split`` returned): ``prompt`` [B, S] has PAD from ``answer_start`` [B] on;
    each step feeds the whole (short) sequence and writes the argmax at the next slot.
    Returns [B, steps] token ids (compare up to the first EOS)."""
    states = params if isinstance(params, tuple) else (params,)
    model = nnx.merge(graphdef, *states)
    B, S = prompt.shape
    rows = jnp.arange(B)
    tokens = jnp.asarray(prompt)
    out = []
    for i in range(steps):
        pos = jnp.clip(answer_start + i, 0, S - 1)
        logits = model(images, tokens).logits  # [B, S, V]
        nxt = jnp.argmax(logits[rows, pos - 1], -1).astype(tokens.dtype)
        out.append(nxt)
        tokens = tokens.at[rows, pos].set(nxt)
    return jnp.stack(out, 1)


def quantizable_paths(params) -> list[tuple]:
    """Paths (tuples of keys) of every ``log_scale`` leaf of a parameter state: the LLM
    decoder linears of a quantised model, never the vision tower, projector, embeddings,
    ``lm_head`` or norms (spec Tests #7 walks this)."""
    flat = nnx.to_flat_state(params) if isinstance(params, nnx.State) else None
    if flat is not None:
        return [tuple(p[:-1]) for p, _ in flat if p[-1] == "log_scale"]
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    out = []
    for path, _ in leaves:
        keys = tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
        if "log_scale" in keys:
            out.append(keys[:keys.index("log_scale")])
    return out
