"""A small decoder (or bidirectional) transformer in Flax NNX, with scan over layers.

Shared by the papers that need a language model (adarope, grad_smoothing,
discrete_diffusion). Pre-norm blocks (RMSNorm -> attention -> residual, RMSNorm -> GELU MLP
-> residual), tied embeddings by default, no biases. The ``num_layers`` blocks are created
with ``nnx.vmap`` so every block parameter has a leading depth axis ``[L, ...]``, and the
forward pass is one ``jax.lax.scan`` over that axis: compile time does not grow with depth.

Positions enter only through a *position encoder*, an ``nnx.Module`` built inside every block
by ``position_encoder_factory(rngs)`` (so its parameters are stacked ``[L, ...]`` as well) and
called as ``encoder(q[B,T,H,Dh], k[B,T,H,Dh], positions[B,T]) -> (q, k)`` between the q/k
projections and the logits. The default is standard RoPE (:class:`Rope`) with
``config.rope_base``; ``adarope.RotaryPositional`` drops in through the same hook.

Example::

    cfg = TransformerConfig(vocab_size=64, d_model=64, num_layers=2, num_heads=4)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    logits = model(tokens)                                 # [B, T, V]
    graphdef, params = nnx.split(model, nnx.Param)        # jit boundary: pure functions
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Shape and options of :class:`Transformer`.

    Attributes:
      vocab_size: number of token ids V.
      d_model: residual width d.
      num_layers: number of blocks L (stacked, scanned).
      num_heads: attention heads H; the head dim is ``head_dim`` or ``d_model // num_heads``.
      mlp_ratio: hidden width of the MLP over ``d_model``.
      causal: causal (decoder) attention; False gives bidirectional attention.
      cond_dim: if set, the model takes a per-sequence conditioning ``cond`` (a scalar per
        sequence such as a diffusion time, embedded with ``cond_dim`` sinusoidal features,
        or a ``[B, cond_dim]`` vector).
      cond_mode: how ``cond`` enters: ``"add"`` (an MLP of it is added to every position's
        embedding) or ``"adaln"`` (DiT-style adaptive norms: per block a zero-initialised
        linear map of silu(c) gives shift, scale and gate of both sub-layers,
        ``x + (1 + gate) * f(norm(x) * (1 + scale) + shift)``, and of the final norm; at
        init the model equals the unconditioned one).
      rope_base: base b of the default RoPE position encoder.
      tie_embeddings: output logits use the input embedding matrix.
      head_dim: per-head width Dh (default ``d_model // num_heads``).
      unroll_layers: unroll the layer scan (same numbers; XLA's ``cost_analysis`` counts a
        scanned body once, so FLOPs must be counted on the unrolled forward).
    """

    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    mlp_ratio: int = 4
    causal: bool = True
    cond_dim: int | None = None
    rope_base: float = 10_000.0
    tie_embeddings: bool = True
    head_dim: int | None = None
    cond_mode: str = "add"
    unroll_layers: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, "
                                 f"got {v!r}")
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ValueError(f"TransformerConfig.d_model={self.d_model} must be divisible by "
                             f"num_heads={self.num_heads} (or set head_dim)")
        if self.dh % 2:
            raise ValueError(f"the head dim must be even for rotary encodings, got {self.dh}")
        if self.cond_dim is not None and (self.cond_dim < 2 or self.cond_dim % 2):
            raise ValueError(f"TransformerConfig.cond_dim must be an even integer >= 2 or None, "
                             f"got {self.cond_dim!r}")
        if self.cond_mode not in ("add", "adaln"):
            raise ValueError(f"TransformerConfig.cond_mode must be 'add' or 'adaln', got "
                             f"{self.cond_mode!r}")
        if not self.rope_base > 1:
            raise ValueError(f"TransformerConfig.rope_base must be > 1, got {self.rope_base}")

    @property
    def dh(self) -> int:
        """The head dim Dh."""
        return self.head_dim or self.d_model // self.num_heads


def rotate_pairs(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotates consecutive pairs ``(x[..., 2i], x[..., 2i+1])`` of ``x`` by ``angles[..., i]``.

    Args:
      x: ``[B, T, H, D]``.
      angles: ``[B, T, H, D // 2]`` (radians; broadcastable).

    Returns:
      ``[B, T, H, D]`` in ``x.dtype``; the trigonometry runs in float32.
    """
    xf = x.astype(jnp.float32).reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = xf[..., 0], xf[..., 1]
    out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)


class Rope(nnx.Module):
    """Standard RoPE (Su et al., 2021): pair i of q and k at position m rotated by m b^(-2i/D)."""

    def __init__(self, head_dim: int, base: float):
        self.head_dim, self.base = head_dim, float(base)

    def __call__(self, q, k, positions):
        inv_freq = self.base ** (-jnp.arange(0, self.head_dim, 2, dtype=jnp.float32)
                                 / self.head_dim)
        angles = positions.astype(jnp.float32)[..., None, None] * inv_freq  # [B, T, 1, P]
        return rotate_pairs(q, angles), rotate_pairs(k, angles)


class RMSNorm(nnx.Module):
    """``x / rms(x) * scale`` with a learnable per-feature scale (init 1)."""

    def __init__(self, dim: int, *, eps: float = 1e-6):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        var = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        return (x * jax.lax.rsqrt(var + self.eps)).astype(x.dtype) * self.scale[...]


def _dense(din: int, dout: int, rngs: nnx.Rngs, *, scale: float = 1.0) -> nnx.Linear:
    init = nnx.initializers.normal(scale / math.sqrt(din))
    return nnx.Linear(din, dout, use_bias=False, kernel_init=init, rngs=rngs)


class Attention(nnx.Module):
    """Multi-head self-attention with a pluggable position encoder on q and k."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs,
                 position_encoder_factory: Callable[[nnx.Rngs], nnx.Module] | None = None):
        H, Dh, d = cfg.num_heads, cfg.dh, cfg.d_model
        self.num_heads, self.head_dim, self.causal = H, Dh, cfg.causal
        self.q = _dense(d, H * Dh, rngs)
        self.k = _dense(d, H * Dh, rngs)
        self.v = _dense(d, H * Dh, rngs)
        # Residual-branch output scaled down with depth (GPT-2 style) for stable starts.
        self.o = _dense(H * Dh, d, rngs, scale=1.0 / math.sqrt(2 * cfg.num_layers))
        if position_encoder_factory is None:
            self.pos = Rope(Dh, cfg.rope_base)
        else:
            self.pos = position_encoder_factory(rngs)

    def __call__(self, x, positions, mask):
        """x ``[B, T, d]``, positions ``[B, T]``, mask ``[B, T, T]`` bool or None.

        Returns:
          ``(out [B, T, d], attention weights [B, H, T, T])``.
        """
        B, T, _ = x.shape
        q, k, v = self._qkv(x, positions)
        allowed = jnp.ones((B, 1, T, T), bool) if mask is None else mask[:, None]
        if self.causal:
            allowed = allowed & jnp.tril(jnp.ones((T, T), bool))
        return self._attend(q, k, v, allowed)

    def _qkv(self, x, positions):
        B, T, _ = x.shape
        shape = (B, T, self.num_heads, self.head_dim)
        q, k, v = self.q(x).reshape(shape), self.k(x).reshape(shape), self.v(x).reshape(shape)
        q, k = self.pos(q, k, positions)
        return q, k, v

    def _attend(self, q, k, v, allowed):
        B, T = q.shape[:2]
        logits = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32)
        logits = logits / math.sqrt(self.head_dim)
        logits = jnp.where(allowed, logits, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(logits, axis=-1)
        out = jnp.einsum("bhts,bshd->bthd", weights.astype(v.dtype), v)
        return self.o(out.reshape(B, T, -1)), weights

    def decode(self, x, positions, cache_k, cache_v, index):
        """Attention of n new tokens against a KV cache (causal in cache-slot order).

        Args:
          x: ``[B, n, d]`` new tokens; positions: ``[B, n]`` their (RoPE) positions.
          cache_k, cache_v: ``[B, M, H, Dh]``; slots ``< index`` hold earlier tokens.
          index: int32 scalar, the first free slot; the new tokens go to
            ``index .. index + n - 1`` and token i attends to slots ``<= index + i``.

        Returns:
          ``(out [B, n, d], cache_k, cache_v)``.
        """
        q, k, v = self._qkv(x, positions)
        cache_k = jax.lax.dynamic_update_slice(cache_k, k.astype(cache_k.dtype),
                                               (0, index, 0, 0))
        cache_v = jax.lax.dynamic_update_slice(cache_v, v.astype(cache_v.dtype),
                                               (0, index, 0, 0))
        n, M = x.shape[1], cache_k.shape[1]
        allowed = jnp.arange(M)[None, :] <= index + jnp.arange(n)[:, None]  # [n, M]
        out, _ = self._attend(q, cache_k, cache_v, allowed[None, None])
        return out, cache_k, cache_v


class MLP(nnx.Module):
    """``d -> mlp_ratio d -> d`` with GELU."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        hidden = cfg.mlp_ratio * cfg.d_model
        self.up = _dense(cfg.d_model, hidden, rngs)
        self.down = _dense(hidden, cfg.d_model, rngs, scale=1.0 / math.sqrt(2 * cfg.num_layers))

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


class Block(nnx.Module):
    """Pre-norm transformer block (with adaLN modulation when ``cond_mode='adaln'``)."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs,
                 position_encoder_factory=None):
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, rngs=rngs, position_encoder_factory=position_encoder_factory)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg, rngs=rngs)
        self.adaln = cfg.cond_dim is not None and cfg.cond_mode == "adaln"
        if self.adaln:
            self.mod = nnx.Linear(cfg.cond_dim, 6 * cfg.d_model, kernel_init=nnx.initializers.zeros,
                                  bias_init=nnx.initializers.zeros, rngs=rngs)

    def _apply(self, x, c, attend):
        """The block around ``attend(normed x) -> (h, extra)``; returns ``(x, extra)``."""
        if not self.adaln or c is None:
            h, extra = attend(self.norm1(x))
            x = x + h
            return x + self.mlp(self.norm2(x)), extra
        sh1, sc1, g1, sh2, sc2, g2 = jnp.split(self.mod(c)[:, None, :], 6, axis=-1)  # [B, 1, d]
        h, extra = attend(self.norm1(x) * (1 + sc1) + sh1)
        x = x + (1 + g1) * h
        return x + (1 + g2) * self.mlp(self.norm2(x) * (1 + sc2) + sh2), extra

    def __call__(self, x, positions, mask, c=None):
        return self._apply(x, c, lambda h: self.attn(h, positions, mask))

    def decode(self, x, positions, cache_k, cache_v, index, c=None):
        """One block on n new tokens with the layer's KV cache (see ``Attention.decode``)."""
        def attend(h):
            out, ck, cv = self.attn.decode(h, positions, cache_k, cache_v, index)
            return out, (ck, cv)

        x, (cache_k, cache_v) = self._apply(x, c, attend)
        return x, cache_k, cache_v


class BlockStack(nnx.Module):
    """``num_layers`` blocks with stacked parameters ``[L, ...]``, applied by ``lax.scan``
    (fully unrolled when ``cfg.unroll_layers``)."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs,
                 position_encoder_factory=None):
        @nnx.split_rngs(splits=cfg.num_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(r):
            return Block(cfg, rngs=r, position_encoder_factory=position_encoder_factory)

        self.layers = make(rngs)
        self.num_layers = cfg.num_layers
        self.unroll = cfg.num_layers if cfg.unroll_layers else 1

    def __call__(self, x, positions, mask, *, c=None, return_intermediates: bool = False):
        """Returns ``(x [B, T, d], (hidden [L, B, T, d], attention [L, B, H, T, T]) | None)``;
        ``c`` ``[B, cond_dim]`` is the adaLN conditioning (or None)."""
        graphdef, state = nnx.split(self.layers)

        def body(h, layer_state):
            h, weights = nnx.merge(graphdef, layer_state)(h, positions, mask, c)
            return h, ((h, weights) if return_intermediates else None)

        x, inter = jax.lax.scan(body, x, state, unroll=self.unroll)
        return x, inter

    def decode(self, x, positions, cache_k, cache_v, index, *, c=None):
        """n new tokens through every layer with the per-layer caches ``[L, B, M, H, Dh]``."""
        graphdef, state = nnx.split(self.layers)

        def body(h, inp):
            layer_state, ck, cv = inp
            h, ck, cv = nnx.merge(graphdef, layer_state).decode(h, positions, ck, cv, index, c)
            return h, (ck, cv)

        x, (cache_k, cache_v) = jax.lax.scan(body, x, (state, cache_k, cache_v),
                                             unroll=self.unroll)
        return x, cache_k, cache_v


def timestep_embedding(t: jax.Array, dim: int, *, max_period: float = 10_000.0) -> jax.Array:
    """Sinusoidal features ``[B, dim]`` of scalars ``t [B]`` (e.g. a diffusion time in [0, 1])."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    args = 1000.0 * t.astype(jnp.float32)[:, None] * freqs
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class Transformer(nnx.Module):
    """Token embedding -> :class:`BlockStack` -> RMSNorm -> logits.

    Besides the full forward (:meth:`__call__`) it decodes incrementally with a KV cache
    (:meth:`init_cache`, :meth:`decode_step`): n new tokens per call, causal in cache-slot
    order, each with its own RoPE position (so tokens may arrive in any order).
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs,
                 position_encoder_factory: Callable[[nnx.Rngs], nnx.Module] | None = None):
        self.cfg = cfg
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model,
                               embedding_init=nnx.initializers.normal(1.0 / math.sqrt(cfg.d_model)),
                               rngs=rngs)
        if cfg.cond_dim is not None:
            if cfg.cond_mode == "add":
                self.cond_in = _dense(cfg.cond_dim, cfg.d_model, rngs)
                self.cond_out = _dense(cfg.d_model, cfg.d_model, rngs)
            else:  # adaln: an MLP of the features gives c [B, cond_dim]
                self.cond_in = _dense(cfg.cond_dim, cfg.cond_dim, rngs)
                self.cond_out = _dense(cfg.cond_dim, cfg.cond_dim, rngs)
                self.final_mod = nnx.Linear(cfg.cond_dim, 2 * cfg.d_model,
                                            kernel_init=nnx.initializers.zeros,
                                            bias_init=nnx.initializers.zeros, rngs=rngs)
        self.blocks = BlockStack(cfg, rngs=rngs, position_encoder_factory=position_encoder_factory)
        self.norm = RMSNorm(cfg.d_model)
        if not cfg.tie_embeddings:
            self.unembed = _dense(cfg.d_model, cfg.vocab_size, rngs)

    def _cond(self, cond, batch: int):
        """``(added [B, 1, d] | None, c [B, cond_dim] | None)`` from ``cond``."""
        if self.cfg.cond_dim is None:
            if cond is not None:
                raise ValueError("cond was passed but TransformerConfig.cond_dim is None")
            return None, None
        if cond is None:
            raise ValueError("this model has cond_dim set: pass cond=[B] or [B, cond_dim]")
        cond = jnp.broadcast_to(cond, (batch,)) if cond.ndim == 0 else cond
        feats = timestep_embedding(cond, self.cfg.cond_dim) if cond.ndim == 1 else cond
        hidden = self.cond_out(jax.nn.silu(self.cond_in(feats)))
        if self.cfg.cond_mode == "add":
            return hidden[:, None, :], None
        return None, jax.nn.silu(hidden)

    def _head(self, x, c):
        x = self.norm(x)
        if c is not None:
            shift, scale = jnp.split(self.final_mod(c)[:, None, :], 2, axis=-1)
            x = x * (1 + scale) + shift
        logits = self.embed.attend(x) if self.cfg.tie_embeddings else self.unembed(x)
        return logits.astype(jnp.float32)

    def __call__(self, tokens: jax.Array, *, positions: jax.Array | None = None,
                 cond: jax.Array | None = None, attention_mask: jax.Array | None = None,
                 return_intermediates: bool = False):
        """Logits of every position.

        Args:
          tokens: int ``[B, T]``.
          positions: int ``[B, T]`` (default ``0..T-1`` for every row).
          cond: ``[B]`` scalars or ``[B, cond_dim]`` features; required iff ``cond_dim``.
          attention_mask: bool ``[B, T, T]``, True where query t may attend key s (and-ed with
            the causal mask when ``causal``).
          return_intermediates: also return ``{"hidden": [L, B, T, d], "attention":
            [L, B, H, T, T]}``.

        Returns:
          logits ``[B, T, V]`` (float32), and the intermediates dict if asked.
        """
        B, T = tokens.shape
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if positions.shape != (B, T):
            raise ValueError(f"positions must have shape {(B, T)}, got {positions.shape}")
        if attention_mask is not None and attention_mask.shape != (B, T, T):
            raise ValueError(f"attention_mask must have shape {(B, T, T)}, got "
                             f"{attention_mask.shape}")
        # Embeddings have std 1/sqrt(d) so tied logits start O(1); the stream starts at rms 1.
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)
        added, c = self._cond(cond, B)
        if added is not None:
            x = x + added
        x, inter = self.blocks(x, positions, attention_mask, c=c,
                               return_intermediates=return_intermediates)
        logits = self._head(x, c)
        if return_intermediates:
            return logits, {"hidden": inter[0], "attention": inter[1]}
        return logits

    def init_cache(self, batch: int, max_len: int, dtype=jnp.float32) -> dict:
        """An empty KV cache: ``{"k", "v": [L, B, max_len, H, Dh], "index": int32 0}``."""
        cfg = self.cfg
        shape = (cfg.num_layers, batch, max_len, cfg.num_heads, cfg.dh)
        return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype),
                "index": jnp.zeros((), jnp.int32)}

    def decode_step(self, cache: dict, tokens: jax.Array, positions: jax.Array,
                    cond: jax.Array | None = None, *, keep: int | None = None):
        """Logits of n new tokens given the cache; writes them to the cache.

        Args:
          cache: from :meth:`init_cache` (or a previous call).
          tokens: int ``[B]`` (one token) or ``[B, n]``; they take cache slots
            ``index .. index + n - 1`` and token i attends to every slot ``<= index + i``.
          positions: int ``[B]`` / ``[B, n]``, their RoPE positions.
          cond: as in :meth:`__call__`.
          keep: how many of the n new tokens stay in the cache (the index advances by
            ``keep``, default n): later calls overwrite the rest, e.g. query-only mask slots.

        Returns:
          ``(logits [B, V] or [B, n, V], cache)``; equal to the full causal forward.
        """
        single = tokens.ndim == 1
        if single:
            tokens, positions = tokens[:, None], positions[:, None]
        B, n = tokens.shape
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)
        added, c = self._cond(cond, B)
        if added is not None:
            x = x + added
        x, k, v = self.blocks.decode(x, positions, cache["k"], cache["v"], cache["index"], c=c)
        logits = self._head(x, c)
        cache = {"k": k, "v": v, "index": cache["index"] + (n if keep is None else keep)}
        return (logits[:, 0] if single else logits), cache
