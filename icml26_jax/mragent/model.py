"""The MiniLM sentence encoder in Flax NNX (spec §Method "Embedders", §Module API).

:class:`MiniLM` is a BERT encoder with the shape of all-MiniLM-L6-v2 (6 layers, hidden 384,
12 heads of 32, FFN 1536, vocabulary 30522, 512 positions, 2 token types), followed by the
sentence-transformers head of that model: masked mean pooling over the word pieces and L2
normalisation. ``MiniLM(input_ids [B,T], attention_mask [B,T]) -> [B,384]`` unit vectors.

The block is the original BERT one, written here from the architecture, not ported code:

* embeddings: word + absolute position + token type (type 0 unless given), then LayerNorm;
* each layer, post-LN: ``h = LN(h + Attn(h))``, ``h = LN(h + W2 gelu(W1 h))``, with the
  exact (erf) GELU and LayerNorm eps 1e-12; attention is scaled dot product over the
  unmasked keys (masked keys get the float32 minimum, so an all-padding row stays finite);
* no dropout (inference only) and no pooler (the mean pool replaces BERT's [CLS] pooler).

Every matmul runs at ``Precision.HIGHEST`` so accelerators match the float32 reference
(TF32/bf16 passes would cost the 0.9999-cosine agreement the tests ask for).

:func:`load_minilm_params` copies a checkpoint with the Hugging Face BERT tensor names
(``embeddings.word_embeddings.weight``, ``encoder.layer.{i}.attention.self.query.weight``,
...; e.g. read with ``safetensors.numpy.load_file``) into the module; torch ``Linear``
weights are ``[out, in]`` and are transposed to NNX's ``[in, out]`` kernels.
:func:`minilm_from_tensors` builds the module abstractly (no random init) and loads them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

_HIGHEST = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class MiniLMConfig:
    """Shape of the encoder; the defaults are all-MiniLM-L6-v2's ``config.json``."""

    vocab_size: int = 30522
    hidden: int = 384
    layers: int = 6
    heads: int = 12
    ffn: int = 1536
    max_positions: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}")


def _linear(n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(n_in, n_out, precision=_HIGHEST, rngs=rngs)


def _layer_norm(n: int, eps: float, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # Two-pass variance (E[(x - mean)^2]) like torch, not flax's fast E[x^2] - E[x]^2.
    return nnx.LayerNorm(n, epsilon=eps, use_fast_variance=False, rngs=rngs)


class BertLayer(nnx.Module):
    """One post-LN BERT layer: self-attention then the GELU feed-forward, each residual + LN."""

    def __init__(self, cfg: MiniLMConfig, *, rngs: nnx.Rngs):
        self.heads = cfg.heads
        self.query = _linear(cfg.hidden, cfg.hidden, rngs)
        self.key = _linear(cfg.hidden, cfg.hidden, rngs)
        self.value = _linear(cfg.hidden, cfg.hidden, rngs)
        self.attn_out = _linear(cfg.hidden, cfg.hidden, rngs)
        self.attn_norm = _layer_norm(cfg.hidden, cfg.eps, rngs)
        self.ffn_in = _linear(cfg.hidden, cfg.ffn, rngs)
        self.ffn_out = _linear(cfg.ffn, cfg.hidden, rngs)
        self.ffn_norm = _layer_norm(cfg.hidden, cfg.eps, rngs)

    def __call__(self, h: jax.Array, key_mask: jax.Array) -> jax.Array:
        """``h`` [B,T,H] float32, ``key_mask`` [B,T] bool (True = real token) -> [B,T,H]."""
        b, t, d = h.shape
        split = lambda x: x.reshape(b, t, self.heads, d // self.heads)  # noqa: E731
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=_HIGHEST)
        scores = scores / math.sqrt(d // self.heads)
        scores = jnp.where(key_mask[:, None, None, :], scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(scores, axis=-1)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v, precision=_HIGHEST).reshape(b, t, d)
        h = self.attn_norm(h + self.attn_out(ctx))
        return self.ffn_norm(h + self.ffn_out(jax.nn.gelu(self.ffn_in(h), approximate=False)))


class MiniLM(nnx.Module):
    """BERT encoder + masked mean pool + L2 norm: ``(input_ids, attention_mask) -> [B,384]``.

    Args:
      cfg: the encoder shape (default: all-MiniLM-L6-v2).
      rngs: initialiser keys (random weights; load real ones with :func:`load_minilm_params`).
    """

    def __init__(self, cfg: MiniLMConfig = MiniLMConfig(), *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = nnx.Embed(cfg.vocab_size, cfg.hidden, rngs=rngs)
        self.position_embeddings = nnx.Embed(cfg.max_positions, cfg.hidden, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(cfg.type_vocab_size, cfg.hidden, rngs=rngs)
        self.embed_norm = _layer_norm(cfg.hidden, cfg.eps, rngs)
        self.layers = nnx.List([BertLayer(cfg, rngs=rngs) for _ in range(cfg.layers)])

    def hidden_states(self, input_ids: jax.Array, attention_mask: jax.Array,
                      token_type_ids: jax.Array | None = None) -> jax.Array:
        """The last layer's token states ``[B,T,hidden]`` (padding positions included)."""
        t = input_ids.shape[1]
        if t > self.cfg.max_positions:
            raise ValueError(f"sequence length {t} > max_positions {self.cfg.max_positions}")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        h = (self.word_embeddings(input_ids)
             + self.position_embeddings(jnp.arange(t, dtype=jnp.int32))[None]
             + self.token_type_embeddings(token_type_ids))
        h = self.embed_norm(h)
        key_mask = attention_mask.astype(bool)
        for layer in self.layers:
            h = layer(h, key_mask)
        return h

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
                 token_type_ids: jax.Array | None = None) -> jax.Array:
        """Sentence embeddings.

        Args:
          input_ids: [B,T] int word-piece ids ([CLS] ... [SEP], then padding).
          attention_mask: [B,T], 1 (or True) for real word pieces, 0 for padding.
          token_type_ids: [B,T] int, default all 0 (single sentences).

        Returns:
          [B,hidden] float32: the mean of the unmasked token states, L2-normalised
          (a row without any unmasked token gives the zero vector).
        """
        h = self.hidden_states(input_ids, attention_mask, token_type_ids)
        m = attention_mask.astype(h.dtype)[..., None]
        pooled = (h * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1e-9)
        norm = jnp.linalg.norm(pooled, axis=-1, keepdims=True)
        return pooled / jnp.maximum(norm, 1e-12)


# Checkpoint tensors that the sentence embedding does not use.
_UNUSED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


def _assign(var: nnx.Variable, tensors: Mapping[str, np.ndarray], name: str,
            used: set[str], transpose: bool = False) -> None:
    if name not in tensors:
        raise KeyError(f"checkpoint lacks tensor {name!r}")
    x = np.asarray(tensors[name], dtype=np.float32)
    if transpose:
        x = x.T
    want = tuple(var.get_value().shape)  # an array, or a ShapeDtypeStruct under eval_shape
    if tuple(x.shape) != want:
        raise ValueError(f"{name}: checkpoint shape {x.shape} != module shape {want}")
    var.set_value(jnp.asarray(x))
    used.add(name)


def _assign_linear(lin: nnx.Linear, tensors, prefix: str, used: set[str]) -> None:
    _assign(lin.kernel, tensors, f"{prefix}.weight", used, transpose=True)  # [out,in] -> [in,out]
    _assign(lin.bias, tensors, f"{prefix}.bias", used)


def _assign_norm(ln: nnx.LayerNorm, tensors, prefix: str, used: set[str]) -> None:
    _assign(ln.scale, tensors, f"{prefix}.weight", used)
    _assign(ln.bias, tensors, f"{prefix}.bias", used)


def load_minilm_params(model: MiniLM, tensors: Mapping[str, np.ndarray]) -> MiniLM:
    """Copies Hugging Face BERT tensors into ``model`` in place (and returns it).

    An optional ``bert.`` prefix on every name is accepted. Every module parameter must be
    present with its exact shape; any tensor left over, other than the position-id buffer
    and the [CLS] pooler, is an error (it would mean a different architecture).

    Raises:
      KeyError: a parameter's tensor is missing.
      ValueError: a shape differs, or the checkpoint has unknown tensors.
    """
    if tensors and all(k.startswith("bert.") for k in tensors):
        tensors = {k[len("bert."):]: v for k, v in tensors.items()}
    used: set[str] = set()
    for attr in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        _assign(getattr(model, attr).embedding, tensors, f"embeddings.{attr}.weight", used)
    _assign_norm(model.embed_norm, tensors, "embeddings.LayerNorm", used)
    for i, layer in enumerate(model.layers):
        p = f"encoder.layer.{i}"
        _assign_linear(layer.query, tensors, f"{p}.attention.self.query", used)
        _assign_linear(layer.key, tensors, f"{p}.attention.self.key", used)
        _assign_linear(layer.value, tensors, f"{p}.attention.self.value", used)
        _assign_linear(layer.attn_out, tensors, f"{p}.attention.output.dense", used)
        _assign_norm(layer.attn_norm, tensors, f"{p}.attention.output.LayerNorm", used)
        _assign_linear(layer.ffn_in, tensors, f"{p}.intermediate.dense", used)
        _assign_linear(layer.ffn_out, tensors, f"{p}.output.dense", used)
        _assign_norm(layer.ffn_norm, tensors, f"{p}.output.LayerNorm", used)
    extra = sorted(set(tensors) - used - set(_UNUSED))
    if extra:
        raise ValueError(f"checkpoint has {len(extra)} unknown tensors, e.g. {extra[:5]}")
    return model


def minilm_from_tensors(tensors: Mapping[str, np.ndarray],
                        cfg: MiniLMConfig = MiniLMConfig()) -> MiniLM:
    """A :class:`MiniLM` holding ``tensors``, built without a random initialisation."""
    model = nnx.eval_shape(lambda: MiniLM(cfg, rngs=nnx.Rngs(0)))
    return load_minilm_params(model, tensors)
