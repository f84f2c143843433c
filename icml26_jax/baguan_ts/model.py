"""The Baguan-TS network: patch encoder, 3D transformer and bar head (spec §Method).

Data flow (shapes at the CPU configuration d = 64, patch 8)::

    feat [B, N, S, F], targ [B, N, S, 1]          N = K supports + the query (last)
      -> PatchEncoder: P = ceil(S / 8) patches (right-padded by repeating the last step);
         covariates: Linear(8 -> d/2) per (patch, covariate)  (the official stride-8 conv),
         target: Linear(2*8 -> d/2) over [y * (1 - m), m], m = isnan(y), missing y := 0;
         Fourier lift z -> [cos z, sin z] in R^d
      -> + FeatureIdEmbed (covariate tokens only)
      -> token grid x [B, N, P, F+1, d], the target the last variable
      -> `layers` x Layer3D: post-norm sub-blocks x = LN(x + f(x)), LN non-affine (eps 1e-5):
           (1) attention across variables (padded covariates masked as keys),
           (2) across patches (bidirectional, RoPE; skipped when P = 1, as in the official code),
           (3) across contexts (ContextAttention),
           (4) bias-free GELU MLP d -> ffn -> d
      -> BarHead on the query's target tokens: Linear(d -> 4d) -> GELU -> Linear(4d -> bins*8),
         each token giving the `bins` logits of its 8 time steps -> logits [B, H, bins].

API: ``BaguanTS(cfg, rngs=...)(feat, targ, support_mask, sims=None, *, H, mode="3d",
feat_mask=None, n_query=None) -> logits [B, H, bins]``; ``BaguanTS.tokens`` (the final token
grid) and ``BaguanTS.readout`` (grid -> logits) split that call in two. The layers are one
``Layer3D`` with stacked ``[layers, ...]`` parameters run by ``lax.scan`` (compile time flat in
depth; ``ModelConfig.unroll_layers`` unrolls it). Jit the call (eagerly, the scan retraces).

Decisions beyond the spec (the official PyTorch code is the reference where it exists):
* The forecast slots are masked *inside* the model (as in the official encoder): in 3D the
  query's last H target steps, in 2D the query rows' targets, are set to NaN before encoding,
  so nothing a caller writes there can leak.
* The target token gets no feature-identity vector (the official ``PositionalEmbedder`` is
  applied to covariate tokens only); it is told apart by its own encoder.
* ContextAttention follows the official ``MultiHeadAttentionInTabPFN``: one [d, 3, heads, dh]
  projection; supports attend to the valid supports with every head's own K/V, queries attend
  to the valid supports with the first head's K/V shared by all heads (multi-query).
* The reliability scale ``alpha`` exists in every layer whether or not ``reliability_bias``
  is set (it is then unused, gradient 0): co_on and co_off branches forked from one trunk
  share one parameter tree.
* Masked keys get exactly zero weight and their values are zeroed (``where``, not a
  product), so masked supports and padded covariates cannot change the query's output.
  On input, padded covariate columns are zeroed and masked supports blanked (covariates 0,
  target all-missing) as well, so a NaN placed there cannot reach values or gradients.
* Initialisation: encoder "convs" like PyTorch's default (U(+-1/sqrt(fan_in)) kernel and
  bias; it sets the Fourier frequencies), all other linears Flax's default (LeCun normal).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

FEATURE_ID_SEED = 0  # the fixed key of the feature-identity table (spec Pitfalls)
LN_EPS = 1e-5
MODES = ("3d", "2d")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of :class:`BaguanTS` (spec "CPU configuration").

    Attributes:
      d: token width (even: half from the encoder, lifted to cos/sin).
      heads: attention heads; ``d // heads`` must be even (RoPE rotates pairs).
      layers: number of 3D layers.
      ffn: hidden width of the bias-free GELU MLP.
      patch: time steps per patch token (and per head output token).
      feat_id_dim: width of the fixed N(0, 1) feature-identity vectors.
      bins: bars of the output distribution.
      max_features: rows of the fixed feature-identity table (the most covariates).
      rope_base: RoPE base of the patch attention.
      reliability_bias: add alpha_l * standardised(sims) to the query->support logits.
      head_hidden: hidden width of the bar head; None = 4 * d (the spec). The official code
        uses its FFN width there (768 = 4 * 192 at paper scale); ``head_hidden=ffn`` gives
        that form, and ~0.47 M instead of ~0.74 M parameters at the CPU configuration (the
        head's Linear(hidden -> bins * 8) dominates the count).
      unroll_layers: unroll the layer scan (same numbers; ~10 % faster steps on CPU, compile
        time growing with depth).
    """

    d: int = 64
    heads: int = 4
    layers: int = 3
    ffn: int = 128
    patch: int = 8
    feat_id_dim: int = 16
    bins: int = 256
    max_features: int = 64
    rope_base: float = 10_000.0
    reliability_bias: bool = False
    head_hidden: int | None = None
    unroll_layers: bool = False

    def __post_init__(self):
        for name, lo in (("d", 2), ("heads", 1), ("layers", 1), ("ffn", 1), ("patch", 1),
                         ("feat_id_dim", 1), ("bins", 2), ("max_features", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"ModelConfig.{name} must be an integer >= {lo}, got {v!r}")
        if self.d % 2:
            raise ValueError(f"ModelConfig.d must be even (cos/sin lift), got {self.d}")
        if self.d % self.heads:
            raise ValueError(f"ModelConfig.d={self.d} must be divisible by "
                             f"ModelConfig.heads={self.heads}")
        if (self.d // self.heads) % 2:
            raise ValueError(f"ModelConfig.d // ModelConfig.heads must be even for RoPE, got "
                             f"{self.d // self.heads}")
        if not (isinstance(self.rope_base, (int, float)) and self.rope_base > 1):
            raise ValueError(f"ModelConfig.rope_base must be > 1, got {self.rope_base!r}")
        hh = self.head_hidden
        if hh is not None and (isinstance(hh, bool) or not isinstance(hh, int) or hh < 1):
            raise ValueError(f"ModelConfig.head_hidden must be an integer >= 1 or None, got "
                             f"{self.head_hidden!r}")
        for name in ("reliability_bias", "unroll_layers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name} must be a bool, got "
                                 f"{getattr(self, name)!r}")


# ----------------------------------------------------------------------------- helpers

def layer_norm(x: jax.Array, eps: float = LN_EPS) -> jax.Array:
    """Non-affine LayerNorm over the last axis (PyTorch ``elementwise_affine=False``)."""
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps)


def rope(x: jax.Array, positions: jax.Array, base: float = 10_000.0) -> jax.Array:
    """Rotary position encoding (Su et al., 2021), rotate-half layout as in the official code.

    Pair i = (x[..., i], x[..., i + dh/2]) at position m is rotated by m * base^(-2i/dh), so
    <rope(q, m), rope(k, n)> depends on m - n only.

    Args:
      x: [..., T, heads, dh] with dh even.
      positions: [T] (broadcastable to ``x.shape[:-2]``).
      base: the RoPE base.

    Returns:
      [..., T, heads, dh] float32.
    """
    dh = x.shape[-1]
    half = dh // 2
    inv_freq = jnp.asarray(base, jnp.float32) ** (
        -jnp.arange(0, dh, 2, dtype=jnp.float32) / jnp.float32(dh))  # [dh/2]
    ang = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq  # [..., T, dh/2]
    cos, sin = jnp.cos(ang)[..., None, :], jnp.sin(ang)[..., None, :]  # [..., T, 1, dh/2]
    x = x.astype(jnp.float32)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def masked_softmax(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Softmax over the last axis with masked entries at exactly 0; an all-masked row -> 0.

    Args:
      logits: [..., T] float32.
      mask: bool, broadcastable to ``logits`` (True = attend), or None.
    """
    if mask is None:
        return jax.nn.softmax(logits, axis=-1)
    mask = jnp.broadcast_to(mask, logits.shape)
    neg = jnp.finfo(jnp.float32).min
    z = jnp.where(mask, logits, neg)
    z = z - jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    e = jnp.where(mask, jnp.exp(z), 0.0)
    s = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(s > 0, s, 1.0)


@functools.lru_cache(maxsize=None)
def feature_id_table(max_features: int, dim: int) -> np.ndarray:
    """The fixed N(0, 1) feature-identity table [max_features, dim] (not a parameter).

    Drawn once from ``jax.random.key(FEATURE_ID_SEED)``; identical across calls, instances and
    processes (the official code resamples it on CPU at every call, spec Pitfalls).
    """
    with jax.ensure_compile_time_eval():
        t = jax.random.normal(jax.random.key(FEATURE_ID_SEED), (max_features, dim),
                              jnp.float32)
        return np.asarray(t)


def _torch_uniform(fan_in: int):
    """PyTorch's default Linear/Conv init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _patchify(x: jax.Array, patch: int) -> jax.Array:
    """[B, N, S, C] -> [B, N, P, C, patch], right-padded by repeating the last step."""
    B, N, S, C = x.shape
    P = -(-S // patch)
    pad = P * patch - S
    if pad:
        x = jnp.concatenate([x, jnp.repeat(x[:, :, -1:], pad, axis=2)], axis=2)
    return jnp.swapaxes(x.reshape(B, N, P, patch, C), -1, -2)


# ----------------------------------------------------------------------------- modules

class PatchEncoder(nnx.Module):
    """Patch tokens with the Fourier lift (official ``ConvXYEncoder_Fourier``)."""

    def __init__(self, d: int, patch: int, *, rngs: nnx.Rngs):
        self.patch = patch
        self.conv_x = nnx.Linear(patch, d // 2, kernel_init=_torch_uniform(patch),
                                 bias_init=_torch_uniform(patch), rngs=rngs)
        self.conv_y = nnx.Linear(2 * patch, d // 2, kernel_init=_torch_uniform(2 * patch),
                                 bias_init=_torch_uniform(2 * patch), rngs=rngs)

    def __call__(self, feat: jax.Array, targ: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Encodes covariates and target.

        Args:
          feat: [B, N, S, F] covariates (finite).
          targ: [B, N, S, 1] target, NaN where missing or masked.

        Returns:
          (covariate tokens [B, N, P, F, d], target tokens [B, N, P, 1, d]).
        """
        feat = jnp.asarray(feat, jnp.float32)
        targ = jnp.asarray(targ, jnp.float32)
        m = jnp.isnan(targ)
        y = jnp.where(m, 0.0, targ)
        # Padding after the masking: the last value of y *and* of the mask are repeated.
        yp = _patchify(y, self.patch)  # [B, N, P, 1, patch]
        mp = _patchify(m.astype(jnp.float32), self.patch)
        zy = self.conv_y(jnp.concatenate([yp * (1.0 - mp), mp], axis=-1))  # [B,N,P,1,d/2]
        zx = self.conv_x(_patchify(feat, self.patch))  # [B, N, P, F, d/2]
        lift = lambda z: jnp.concatenate([jnp.cos(z), jnp.sin(z)], axis=-1)  # noqa: E731
        return lift(zx), lift(zy)


class FeatureIdEmbed(nnx.Module):
    """Fixed N(0, 1) identity vector of covariate f -> learned Linear(feat_id_dim -> d).

    The official "subspace" feature positional embedding; only the Linear is learned.
    """

    def __init__(self, d: int, feat_id_dim: int, max_features: int, *, rngs: nnx.Rngs):
        self.feat_id_dim, self.max_features = feat_id_dim, max_features
        self.proj = nnx.Linear(feat_id_dim, d, rngs=rngs)

    def __call__(self, F: int) -> jax.Array:
        """Returns the [F, d] embeddings of covariates 0..F-1."""
        if F > self.max_features:
            raise ValueError(f"feat has F={F} covariates, more than "
                             f"ModelConfig.max_features={self.max_features}")
        table = jnp.asarray(feature_id_table(self.max_features, self.feat_id_dim)[:F])
        return self.proj(table)


class AxisAttention(nnx.Module):
    """Multi-head self-attention along the second-to-last axis, optional RoPE and key mask.

    Bias-free q/k/v/o projections (as the official ``MultiHeadAttention``). Returns the
    attention branch f(x) only; the residual and the norm are the caller's.
    """

    def __init__(self, d: int, heads: int, *, rope: bool = False, rope_base: float = 10_000.0,
                 rngs: nnx.Rngs):
        self.heads, self.dh = heads, d // heads
        self.use_rope, self.rope_base = rope, float(rope_base)
        self.qkv = nnx.Linear(d, 3 * d, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(d, d, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array, key_mask: jax.Array | None = None) -> jax.Array:
        """x [..., T, d]; key_mask bool broadcastable to [..., T] (True = valid key) or None.

        Returns [..., T, d]. A query row with no valid key gets exactly 0.
        """
        T = x.shape[-2]
        qkv = self.qkv(x).reshape(*x.shape[:-1], 3, self.heads, self.dh)
        q, k, v = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]  # [..., T, h, dh]
        if self.use_rope:
            pos = jnp.arange(T, dtype=jnp.float32)
            q, k = rope(q, pos, self.rope_base), rope(k, pos, self.rope_base)
        logits = jnp.einsum("...thk,...shk->...hts", q, k) / jnp.float32(math.sqrt(self.dh))
        mask = None
        if key_mask is not None:
            key_mask = jnp.asarray(key_mask, bool)
            v = jnp.where(key_mask[..., :, None, None], v, 0.0)
            mask = key_mask[..., None, None, :]  # [..., 1, 1, T]
        w = masked_softmax(logits, mask)
        o = jnp.einsum("...hts,...shk->...thk", w, v)
        return self.out(o.reshape(*x.shape[:-1], -1))


def standardise_sims(sims: jax.Array, valid: jax.Array, eps: float = 1e-6) -> jax.Array:
    """(s - mean) / sqrt(var + eps) over the valid entries of each row; 0 elsewhere.

    Args:
      sims: [B, K] similarities; valid: [B, K] bool.
    """
    sims = jnp.where(valid, jnp.asarray(sims, jnp.float32), 0.0)
    cnt = jnp.maximum(jnp.sum(valid, axis=-1, keepdims=True).astype(jnp.float32), 1.0)
    mean = jnp.sum(sims, axis=-1, keepdims=True) / cnt
    var = jnp.sum(jnp.where(valid, jnp.square(sims - mean), 0.0), axis=-1, keepdims=True) / cnt
    return jnp.where(valid, (sims - mean) * jax.lax.rsqrt(var + eps), 0.0)


class ContextAttention(nnx.Module):
    """Attention across contexts, no positional encoding (official ``MultiHeadAttentionInTabPFN``).

    Supports attend to the valid supports (per-head K/V); queries attend to the valid
    supports only, never to queries, with the first head's K/V shared by all heads
    (multi-query). A row without any valid key outputs exactly 0. With ``reliability_bias``,
    ``alpha * standardise_sims(sims)`` is added to the query->support logits (alpha learned,
    init 0; the parameter exists either way, see the module docstring).
    """

    def __init__(self, d: int, heads: int, *, reliability_bias: bool = False, rngs: nnx.Rngs):
        self.heads, self.dh = heads, d // heads
        self.reliability_bias = reliability_bias
        self.qkv = nnx.Linear(d, 3 * d, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(d, d, use_bias=False, rngs=rngs)
        self.alpha = nnx.Param(jnp.zeros((), jnp.float32))

    def __call__(self, x: jax.Array, support_mask: jax.Array, n_query: int,
                 sims: jax.Array | None = None) -> jax.Array:
        """Context attention.

        Args:
          x: [B, ..., N, d]; the last ``n_query`` of the N rows are queries.
          support_mask: [B, N] bool, True = valid support (query entries ignored).
          n_query: number of query rows (static).
          sims: [B, N] similarity of each support to the query (query entries ignored), or
            None (no bias).

        Returns:
          [B, ..., N, d].
        """
        N = x.shape[-2]
        K = N - n_query
        if K == 0:
            return jnp.zeros_like(x)
        mid = (1,) * (x.ndim - 3)  # the axes between B and N
        valid = jnp.asarray(support_mask, bool)[:, :K]  # [B, K]
        qkv = self.qkv(x).reshape(*x.shape[:-1], 3, self.heads, self.dh)
        q, k, v = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]  # [B,...,N,h,dh]
        vmask = valid.reshape(valid.shape[0], *mid, K, 1, 1)
        ks, vs = k[..., :K, :, :], jnp.where(vmask, v[..., :K, :, :], 0.0)
        scale = jnp.float32(1.0 / math.sqrt(self.dh))
        key_mask = valid.reshape(valid.shape[0], *mid, 1, 1, K)  # [B, ..., 1(h), 1(t), K]
        # Supports -> supports, every head with its own K/V.
        ls = jnp.einsum("...thk,...shk->...hts", q[..., :K, :, :], ks) * scale
        os = jnp.einsum("...hts,...shk->...thk", masked_softmax(ls, key_mask), vs)
        # Queries -> supports, head 0's K/V shared by all heads.
        lq = jnp.einsum("...thk,...sk->...hts", q[..., K:, :, :], ks[..., 0, :]) * scale
        if self.reliability_bias and sims is not None:
            z = standardise_sims(jnp.asarray(sims, jnp.float32)[:, :K], valid)
            lq = lq + self.alpha[...] * z.reshape(z.shape[0], *mid, 1, 1, K)
        oq = jnp.einsum("...hts,...sk->...thk", masked_softmax(lq, key_mask), vs[..., 0, :])
        o = jnp.concatenate([os, oq], axis=-3)  # [B, ..., N, h, dh]
        return self.out(o.reshape(*x.shape[:-1], -1))


class Layer3D(nnx.Module):
    """One 3D layer: variables, patches (RoPE), contexts, MLP; each x = LN(x + f(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.var_attn = AxisAttention(cfg.d, cfg.heads, rngs=rngs)
        self.patch_attn = AxisAttention(cfg.d, cfg.heads, rope=True, rope_base=cfg.rope_base,
                                        rngs=rngs)
        self.ctx_attn = ContextAttention(cfg.d, cfg.heads,
                                         reliability_bias=cfg.reliability_bias, rngs=rngs)
        self.fc1 = nnx.Linear(cfg.d, cfg.ffn, use_bias=False, rngs=rngs)
        self.fc2 = nnx.Linear(cfg.ffn, cfg.d, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array, var_mask: jax.Array | None, support_mask: jax.Array,
                 n_query: int, sims: jax.Array | None = None) -> jax.Array:
        """x [B, N, P, V, d] -> [B, N, P, V, d].

        var_mask: [B, V] bool (True = real variable) or None (all real); support_mask:
        [B, N] bool; n_query: the last rows that are queries; sims: [B, N] or None.
        """
        # (1) across variables; padded covariates are masked out as keys.
        vm = None if var_mask is None else var_mask[:, None, None, :]
        x = layer_norm(x + self.var_attn(x, vm))
        # (2) across patches, bidirectional with RoPE (skipped for a single patch, like the
        # official layer, so 2D mode S = 1 does not run it).
        if x.shape[2] > 1:
            xt = jnp.swapaxes(x, 2, 3)  # [B, N, V, P, d]
            xt = layer_norm(xt + self.patch_attn(xt))
            x = jnp.swapaxes(xt, 2, 3)
        # (3) across contexts.
        xc = jnp.moveaxis(x, 1, 3)  # [B, P, V, N, d]
        xc = layer_norm(xc + self.ctx_attn(xc, support_mask, n_query, sims))
        x = jnp.moveaxis(xc, 3, 1)
        # (4) bias-free GELU MLP.
        return layer_norm(x + self.fc2(jax.nn.gelu(self.fc1(x), approximate=False)))


class BarHead(nnx.Module):
    """Linear(d -> 4d) -> GELU -> Linear(4d -> bins * patch): per token, the bar logits of
    its ``patch`` time steps (official ``ClassifierDecoder``; ``hidden`` replaces 4d)."""

    def __init__(self, d: int, bins: int, patch: int, *, hidden: int | None = None,
                 rngs: nnx.Rngs):
        hidden = 4 * d if hidden is None else hidden
        self.bins, self.patch = bins, patch
        self.fc1 = nnx.Linear(d, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, bins * patch, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens [..., T, d] -> per-step logits [..., T * patch, bins] (step-major)."""
        h = self.fc2(jax.nn.gelu(self.fc1(tokens), approximate=False))
        return h.reshape(*tokens.shape[:-2], tokens.shape[-2] * self.patch, self.bins)


class BaguanTS(nnx.Module):
    """Baguan-TS: 3D in-context forecaster over [supports ..., query] windows.

    Example::

        model = BaguanTS(ModelConfig(), rngs=nnx.Rngs(0))
        logits = model(feat, targ, support_mask, sims, H=16)   # [B, 16, bins]
        graphdef, params = nnx.split(model, nnx.Param)       # jit boundary
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, ModelConfig):
            raise ValueError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.encoder = PatchEncoder(cfg.d, cfg.patch, rngs=rngs)
        self.feat_id = FeatureIdEmbed(cfg.d, cfg.feat_id_dim, cfg.max_features, rngs=rngs)

        # The layers are one Layer3D with stacked [layers, ...] parameters (nnx.vmap), run by
        # lax.scan: compile time does not grow with depth (as in icml26_jax.lm).
        @nnx.split_rngs(splits=cfg.layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(r):
            return Layer3D(cfg, rngs=r)

        self.layers = make(rngs)
        self.head = BarHead(cfg.d, cfg.bins, cfg.patch, hidden=cfg.head_hidden, rngs=rngs)

    def _check(self, feat, targ, support_mask, sims, feat_mask, H, mode, n_query):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
            raise ValueError(f"H must be an integer >= 1, got {H!r}")
        if feat.ndim != 4:
            raise ValueError(f"feat must be [B, N, S, F], got shape {feat.shape}")
        if targ.ndim != 4 or targ.shape[-1] != 1:
            raise ValueError(f"targ must be [B, N, S, 1], got shape {targ.shape}")
        B, N, S, F = feat.shape
        if targ.shape[:3] != (B, N, S):
            raise ValueError(f"targ shape {targ.shape} does not match feat shape {feat.shape}")
        if support_mask.shape != (B, N):
            raise ValueError(f"support_mask must be [B, N] = {(B, N)}, got "
                             f"{support_mask.shape}")
        if sims is not None and sims.shape != (B, N):
            raise ValueError(f"sims must be [B, N] = {(B, N)} or None, got {sims.shape}")
        if feat_mask is not None and feat_mask.shape != (B, F):
            raise ValueError(f"feat_mask must be [B, F] = {(B, F)} or None, got "
                             f"{feat_mask.shape}")
        if F > self.cfg.max_features:
            raise ValueError(f"feat has F={F} covariates, more than "
                             f"ModelConfig.max_features={self.cfg.max_features}")
        if n_query is None:
            n_query = 1 if mode == "3d" else H
        if isinstance(n_query, bool) or not isinstance(n_query, (int, np.integer)):
            raise ValueError(f"n_query must be an integer, got {n_query!r}")
        if mode == "3d":
            if H >= S:
                raise ValueError(f"H must be < S in mode '3d' (some history is needed), got "
                                 f"H={H}, S={S}")
            if n_query != 1:
                raise ValueError(f"n_query must be 1 in mode '3d' (the query is the last "
                                 f"row), got {n_query}")
        else:
            if S != 1:
                raise ValueError(f"S must be 1 in mode '2d' (one time step per row), got "
                                 f"S={S} (feat shape {feat.shape})")
            if n_query != H:
                raise ValueError(f"n_query must equal H in mode '2d' (one query row per "
                                 f"step), got n_query={n_query}, H={H}")
        if n_query > N:
            raise ValueError(f"n_query={n_query} exceeds the N={N} context rows")
        return int(n_query)

    def tokens(self, feat: jax.Array, targ: jax.Array, support_mask: jax.Array | None,
               sims: jax.Array | None = None, *, H: int, mode: str = "3d",
               feat_mask: jax.Array | None = None,
               n_query: int | None = None) -> jax.Array:
        """The final token grid [B, N, P, F+1, d] (arguments as :meth:`__call__`)."""
        return self._forward(feat, targ, support_mask, sims, H, mode, feat_mask, n_query)

    def __call__(self, feat: jax.Array, targ: jax.Array, support_mask: jax.Array | None,
                 sims: jax.Array | None = None, *, H: int, mode: str = "3d",
                 feat_mask: jax.Array | None = None,
                 n_query: int | None = None) -> jax.Array:
        """Bar logits of the query's forecast steps.

        Args:
          feat: [B, N, S, F] covariates (finite; padded columns marked by ``feat_mask``).
          targ: [B, N, S, 1] targets, NaN = missing. The forecast slots are masked here.
          support_mask: [B, N] bool, True = valid support; query entries are ignored. None =
            every support valid.
          sims: [B, N] support-to-query similarities (used only with
            ``cfg.reliability_bias``), or None.
          H: forecast steps. 3D: the query's last H steps (H < S, any H). 2D: the H query rows.
          mode: "3d" (windows, query = last row) or "2d" (tabular: S = 1, one row per step).
          feat_mask: [B, F] bool, True = real covariate, or None (all real).
          n_query: query rows; default 1 in 3D (must be 1) and H in 2D (must be H).

        Returns:
          logits [B, H, bins] float32. 3D: step j is time S - H + j of the query, read from
          patch token (S - H + j) // patch at offset (S - H + j) % patch (so the first step is
          patch (S - H) // patch, offset (S - H) % patch). 2D: row N - H + j, patch 0, offset 0.
        """
        x = self._forward(feat, targ, support_mask, sims, H, mode, feat_mask, n_query)
        return self.readout(x, S=feat.shape[2], H=H, mode=mode)

    def readout(self, x: jax.Array, *, S: int, H: int, mode: str = "3d") -> jax.Array:
        """Bar logits [B, H, bins] from the final token grid ``x`` [B, N, P, F+1, d].

        3D: the query (last row) target tokens of patches (S - H) // patch .. (S - 1) // patch,
        per-step logits from offset (S - H) % patch on. 2D: the target token of each of the
        last H rows (patch 0, offset 0).
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        p = self.cfg.patch
        if mode == "3d":
            p0, off, p1 = (S - H) // p, (S - H) % p, (S - 1) // p
            tok = x[:, -1, p0:p1 + 1, -1, :]  # [B, n_tok, d]: the tokens the H steps span
            return self.head(tok)[:, off:off + H, :]
        tok = x[:, x.shape[1] - H:, 0, -1, :]  # [B, H, d]
        return self.head(tok[:, :, None, :])[:, :, 0, :]

    def _forward(self, feat, targ, support_mask, sims, H, mode, feat_mask, n_query):
        feat = jnp.asarray(feat, jnp.float32)
        targ = jnp.asarray(targ, jnp.float32)
        B, N, S, F = feat.shape
        if support_mask is None:
            support_mask = jnp.ones((B, N), bool)
        support_mask = jnp.asarray(support_mask, bool)
        sims = None if sims is None else jnp.asarray(sims, jnp.float32)
        if feat_mask is not None:
            feat_mask = jnp.asarray(feat_mask, bool)
        nq = self._check(feat, targ, support_mask, sims, feat_mask, H, mode, n_query)

        # Mask the forecast slots before encoding (the official encoder does the same).
        rows = jnp.arange(N) >= N - nq  # [N] query rows
        if mode == "3d":
            slots = rows[:, None] & (jnp.arange(S) >= S - H)[None, :]  # [N, S]
        else:
            slots = jnp.broadcast_to(rows[:, None], (N, S))
        targ = jnp.where(slots[None, :, :, None], jnp.nan, targ)
        # Masked supports enter as blanks (covariates 0, target all missing): they are masked
        # out of the context attention anyway, and this keeps a NaN/inf there out of the
        # computation (and out of the gradients).
        live = (support_mask | rows[None, :])[:, :, None, None]  # [B, N, 1, 1]
        feat = jnp.where(live, feat, 0.0)
        targ = jnp.where(live, targ, jnp.nan)
        if feat_mask is not None:
            feat = jnp.where(feat_mask[:, None, None, :], feat, 0.0)
            var_mask = jnp.concatenate([feat_mask, jnp.ones((B, 1), bool)], axis=1)  # [B, V]
        else:
            var_mask = None  # every variable real: plain softmax

        xf, xy = self.encoder(feat, targ)  # [B,N,P,F,d], [B,N,P,1,d]
        xf = xf + self.feat_id(F)
        x = jnp.concatenate([xf, xy], axis=3)  # [B, N, P, F+1, d]
        graphdef, state = nnx.split(self.layers)

        def body(h, layer_state):
            return nnx.merge(graphdef, layer_state)(h, var_mask, support_mask, nq, sims), None

        unroll = self.cfg.layers if self.cfg.unroll_layers else 1
        x, _ = jax.lax.scan(body, x, state, unroll=unroll)
        return x


def count_params(params) -> int:
    """Number of scalars in a parameter pytree (an ``nnx.State``) or in a module's Params."""
    if isinstance(params, nnx.Module):
        params = nnx.state(params, nnx.Param)
    return int(sum(math.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)))
