"""Rotary position encodings: the pure math, and the AdaRoPE module.

Notation (spec §Method): head h, head dim D, pairs i = 0..P-1 with P = D/2 (pair i is the
consecutive dims (2i, 2i+1)), frequency θ_i = b^(-2i/D_r) over the D_r rotated dims. A
frequency table always has all P pairs; pairs that do not rotate (NoPE, the dims that
partial-RoPE leaves alone, the pairs p-RoPE truncates) have θ = 0, i.e. the identity. So
every kind is the same static-shape table ``[H, P]`` plus a per-head logit multiplier, and
arms of an experiment can be stacked and ``vmap``-ed as one program.

AdaRoPE (reconstructed [R], see the paper README):

* pretraining, eq. (1): θ_{l,h,i} = exp(φ_{l,h,i}), φ initialised at log θ_i (so the model IS
  RoPE at step 0), clipped at φ <= log π (aliasing);
* eq. (2), a per-head, length-aware temperature folded into q:
  ``q_h(m) <- s_h(m) q_h(m)``, ``s_h(m) = exp(ψ_h) (1 + c_h log(max(m+1, L0)/L0))``;
* extension to L' = s L0, eq. (3): θ'_{l,h,i} = θ_{l,h,i} / λ_{l,h,i}, λ = exp(ρ)
  initialised at YaRN's per-pair factor and ψ_h at ln((0.1 ln s + 1)^2), c = 0, so
  AdaRoPE-ext IS YaRN at step 0 for every head; then {ρ, ψ, c} are trained.

Angles are recomputed from the learnable log-frequencies in float32 inside the step
(``positions * exp(φ)``): no cached cos/sin tables, so the frequencies get gradients.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.lm.transformer import rotate_pairs

KINDS = ("rope", "nope", "partial", "prope", "adarope")
EXTS = ("none", "pi", "ntk", "yarn", "yarn_learned", "adarope")
LOG_PI = math.log(math.pi)


# --------------------------------------------------------------------------- pure math


def rope_frequencies(head_dim: int, base: float, rotary_dims: int | None = None) -> np.ndarray:
    """RoPE frequencies θ_i = b^(-2i/D_r) of the first D_r/2 pairs, zero for the rest.

    Args:
      head_dim: D (even).
      base: b > 1.
      rotary_dims: D_r, the number of rotated dims (even, <= D); default D. Partial rotary
        (GPT-NeoX ``rotary_pct``) recomputes the schedule over its D_r dims.

    Returns:
      float64 ``[D/2]``: θ_0..θ_{D_r/2-1} then zeros.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even integer, got {head_dim}")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base}")
    rotary_dims = head_dim if rotary_dims is None else rotary_dims
    if not (0 <= rotary_dims <= head_dim and rotary_dims % 2 == 0):
        raise ValueError(f"rotary_dims must be even and in [0, head_dim={head_dim}], "
                         f"got {rotary_dims}")
    theta = np.zeros(head_dim // 2)
    pr = rotary_dims // 2
    theta[:pr] = float(base) ** (-2.0 * np.arange(pr) / max(rotary_dims, 1))
    return theta


def partial_frequencies(head_dim: int, base: float, fraction: float) -> np.ndarray:
    """Partial-RoPE(p): rotate only the first ⌊pD⌋ dims (rounded down to even) [P]."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rd = int(math.floor(fraction * head_dim + 1e-9))
    return rope_frequencies(head_dim, base, rd - rd % 2)


def prope_frequencies(head_dim: int, base: float, keep: float) -> np.ndarray:
    """p-RoPE(p) (Barbero et al., 2024): keep the highest fraction p of the RoPE frequencies.

    The lowest (1 - p) P frequencies (the last pairs) are set to θ = 0; the kept ones are the
    standard θ_i = b^(-2i/D). Not the same as partial-RoPE, which recomputes the schedule.
    """
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep must be in [0, 1], got {keep}")
    theta = rope_frequencies(head_dim, base)
    P = head_dim // 2
    drop = int(round((1.0 - keep) * P))
    if drop:
        theta[P - drop:] = 0.0
    return theta


def ntk_frequencies(head_dim: int, base: float, factor: float,
                    rotary_dims: int | None = None) -> np.ndarray:
    """NTK-aware scaling (bloc97; as defined in YaRN §3.1): b' = b s^(D/(D-2)) [P]."""
    if not factor >= 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    d = head_dim if rotary_dims is None else rotary_dims
    return rope_frequencies(head_dim, base * factor ** (d / (d - 2)), rotary_dims)


def yarn_factors(theta: np.ndarray, train_len: int, factor: float, alpha: float = 1.0,
                 beta: float = 32.0) -> tuple[np.ndarray, float]:
    """YaRN's per-pair interpolation factors λ_i = θ_i / θ'_i and its logit multiplier.

    YaRN (Peng et al., 2023, eqs. 17-23): r_i = L0 θ_i / (2π) rotations in the training
    window; ramp γ(r) = 0 for r < α, 1 for r > β, (r - α)/(β - α) between;
    θ'_i = (1 - γ_i) θ_i / s + γ_i θ_i. Temperature √(1/t) = 0.1 ln s + 1 on q and on k, so
    the logits are multiplied by (0.1 ln s + 1)^2.

    Args:
      theta: ``[P]`` frequencies (zeros allowed: such pairs get λ = s, which is harmless).
      train_len: L0.
      factor: s = L' / L0 >= 1.
      alpha, beta: ramp bounds (YaRN's defaults for LLaMA are 1 and 32).

    Returns:
      ``(lam [P], logit_mult)``.
    """
    if not factor >= 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    if not beta > alpha:
        raise ValueError(f"yarn beta must exceed alpha, got alpha={alpha}, beta={beta}")
    r = train_len * np.asarray(theta, np.float64) / (2 * math.pi)
    gamma = np.clip((r - alpha) / (beta - alpha), 0.0, 1.0)
    lam = 1.0 / ((1.0 - gamma) / factor + gamma)
    return lam, yarn_logit_multiplier(factor)


def yarn_logit_multiplier(factor: float) -> float:
    """(0.1 ln s + 1)^2: YaRN's attention temperature folded into q alone."""
    return (0.1 * math.log(factor) + 1.0) ** 2 if factor > 1 else 1.0


def rotary_angles(positions: jax.Array, log_freq: jax.Array,
                  rotate: jax.Array | None = None) -> jax.Array:
    """Angles m θ_{h,i} = m exp(φ_{h,i}) in float32.

    Args:
      positions: int ``[B, T]``.
      log_freq: ``[H, P]`` log-frequencies φ.
      rotate: optional ``[H, P]`` 0/1 mask of the pairs that rotate.

    Returns:
      ``[B, T, H, P]`` float32.
    """
    freq = jnp.exp(log_freq.astype(jnp.float32))
    if rotate is not None:
        freq = freq * rotate
    return positions.astype(jnp.float32)[..., None, None] * freq


def apply_rotary(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotates pair i of every head of ``x [B, T, H, D]`` by ``angles [B, T, H, D/2]``."""
    if angles.shape[-1] * 2 != x.shape[-1]:
        raise ValueError(f"angles [..., {angles.shape[-1]}] do not match x [..., {x.shape[-1]}]")
    return rotate_pairs(x, angles)


def head_temperature(positions: jax.Array, log_temp: jax.Array, len_slope: jax.Array,
                     train_len: int) -> jax.Array:
    """Eq. (2): s_h(m) = exp(ψ_h) (1 + c_h log(max(m + 1, L0) / L0)), float32 ``[B, T, H]``."""
    m = positions.astype(jnp.float32)[..., None]
    excess = jnp.log(jnp.maximum(m + 1.0, float(train_len)) / float(train_len))
    return jnp.exp(log_temp.astype(jnp.float32)) * (1.0 + len_slope.astype(jnp.float32) * excess)


# --------------------------------------------------------------------------- the module


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Which rotary encoding a :class:`RotaryPositional` implements.

    Attributes:
      kind: ``rope`` | ``nope`` | ``partial`` | ``prope`` | ``adarope``.
      head_dim, num_heads: D and H.
      base: b.
      fraction: p of ``partial`` (rotated fraction of dims) and ``prope`` (kept frequencies).
      train_len: L0 (the length term of eq. 2 is zero inside it; YaRN's ramp uses it).
      learn_freq: AdaRoPE learns φ (eq. 1).
      learn_scale: AdaRoPE learns ψ (and c during extension) (eq. 2).
      share_heads: one φ per (layer, pair) shared by all heads (LeRoPE-like ablation).
      learn_base_only: one learnable log b per layer instead of φ (ablation).
      ext: context extension: ``none`` | ``pi`` | ``ntk`` | ``yarn`` | ``yarn_learned`` |
        ``adarope``. ``yarn_learned`` and ``adarope`` train {ρ, ψ, c} from YaRN's start;
        ``yarn_learned`` shares them across heads (and, in ``adarope.train``, layers).
      ext_factor: s = L'/L0.
      yarn_alpha, yarn_beta: YaRN ramp bounds.
    """

    kind: str = "rope"
    head_dim: int = 16
    num_heads: int = 4
    base: float = 100.0
    fraction: float = 1.0
    train_len: int = 64
    learn_freq: bool = True
    learn_scale: bool = True
    share_heads: bool = False
    learn_base_only: bool = False
    ext: str = "none"
    ext_factor: float = 1.0
    yarn_alpha: float = 1.0
    yarn_beta: float = 32.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"RopeConfig.kind={self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.ext not in EXTS:
            raise ValueError(f"RopeConfig.ext={self.ext!r}; allowed: {', '.join(EXTS)}")
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"RopeConfig.head_dim must be even and >= 2, got {self.head_dim}")
        if self.num_heads < 1:
            raise ValueError(f"RopeConfig.num_heads must be >= 1, got {self.num_heads}")
        if not self.base > 1:
            raise ValueError(f"RopeConfig.base must be > 1, got {self.base}")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"RopeConfig.fraction must be in [0, 1], got {self.fraction}")
        if self.train_len < 1:
            raise ValueError(f"RopeConfig.train_len must be >= 1, got {self.train_len}")
        if not self.ext_factor >= 1.0:
            raise ValueError(f"RopeConfig.ext_factor must be >= 1, got {self.ext_factor}")
        if self.ext != "none" and self.ext_factor == 1.0:
            raise ValueError(f"RopeConfig.ext={self.ext!r} needs ext_factor > 1")

    @property
    def num_pairs(self) -> int:
        return self.head_dim // 2

    def base_table(self) -> np.ndarray:
        """The step-0 frequency table θ ``[P]`` of ``kind`` (zeros for non-rotating pairs)."""
        D, b = self.head_dim, self.base
        if self.kind in ("rope", "adarope"):
            return rope_frequencies(D, b)
        if self.kind == "nope":
            return np.zeros(D // 2)
        if self.kind == "partial":
            return partial_frequencies(D, b, self.fraction)
        return prope_frequencies(D, b, self.fraction)

    def interp_and_multiplier(self) -> tuple[np.ndarray, float]:
        """The extension's step-0 λ ``[P]`` (θ' = θ / λ) and logit multiplier exp(ψ)."""
        theta, s = self.base_table(), self.ext_factor
        ones = np.ones_like(theta)
        if self.ext == "none":
            return ones, 1.0
        if self.ext == "pi":
            return ones * s, 1.0
        if self.ext == "ntk":
            if self.kind not in ("rope", "adarope"):
                raise ValueError(f"ext='ntk' needs a full-rotary kind, got kind={self.kind!r}")
            new = ntk_frequencies(self.head_dim, self.base, s)
            return theta / new, 1.0
        return yarn_factors(theta, self.train_len, s, self.yarn_alpha, self.yarn_beta)

    @property
    def trains_extension(self) -> bool:
        return self.ext in ("yarn_learned", "adarope")


class PEBuffer(nnx.Variable):
    """Non-trainable constants of a position encoder (init values, masks)."""


def _gate(param, init, mask):
    """``init + mask (param - init)``: the parameter where mask = 1, its frozen init where 0.

    Used so that every kind has the same parameters (and the arms of an experiment can be
    vmapped), while kinds that do not learn a parameter get exactly zero gradient for it.
    """
    return init + mask * (param - init)


class RotaryPositional(nnx.Module):
    """RoPE, NoPE, partial-RoPE, p-RoPE and AdaRoPE, with PI/NTK/YaRN/AdaRoPE-ext extension.

    Parameters (``nnx.Param``; stacked ``[L, ...]`` when built inside the transformer's
    blocks): ``log_freq [H, P]`` (φ), ``log_interp [H, P]`` (ρ), ``log_temp [H]`` (ψ),
    ``len_slope [H]`` (c), ``log_base []`` (the ``learn_base_only`` ablation). Which of them
    the kind learns, which pairs rotate and whether heads are tied are ``PEBuffer`` arrays,
    not Python attributes, so modules of different kinds have one graph definition.
    """

    def __init__(self, config: RopeConfig, *, rngs: nnx.Rngs | None = None):
        del rngs  # deterministic initialisation
        c = config
        self.train_len = c.train_len
        self.head_dim, self.num_heads = c.head_dim, c.num_heads
        H, P = c.num_heads, c.num_pairs
        theta = c.base_table()
        rotate = (theta > 0).astype(np.float32)
        # Non-rotating pairs keep a finite dummy φ (masked by `rotate`): log 0 would make
        # the gate's (param - init) a NaN.
        phi0 = np.where(theta > 0, np.log(np.where(theta > 0, theta, 1.0)), 0.0)
        lam, mult = c.interp_and_multiplier()
        f32 = jnp.float32
        tile = lambda v: jnp.asarray(np.broadcast_to(v, (H, P)), f32)  # noqa: E731
        self.log_freq = nnx.Param(tile(phi0))
        self.log_interp = nnx.Param(tile(np.log(lam)))
        self.log_temp = nnx.Param(jnp.full((H,), math.log(mult), f32))
        self.len_slope = nnx.Param(jnp.zeros((H,), f32))
        self.log_base = nnx.Param(jnp.asarray(math.log(c.base), f32))
        self.rotate = PEBuffer(tile(rotate))
        self.log_freq_init = PEBuffer(tile(phi0))
        self.log_interp_init = PEBuffer(tile(np.log(lam)))
        self.log_temp_init = PEBuffer(jnp.full((H,), math.log(mult), f32))
        self.log_base_init = PEBuffer(jnp.asarray(math.log(c.base), f32))
        adaptive = c.kind == "adarope"
        pretrain = adaptive and c.ext == "none"
        flag = lambda b: jnp.asarray(float(b), f32)  # noqa: E731
        self.train_freq = PEBuffer(flag(pretrain and c.learn_freq and not c.learn_base_only))
        self.train_base = PEBuffer(flag(pretrain and c.learn_freq and c.learn_base_only))
        self.base_only = PEBuffer(flag(adaptive and c.learn_base_only))
        self.train_interp = PEBuffer(flag(c.trains_extension))
        self.train_temp = PEBuffer(flag((pretrain and c.learn_scale) or c.trains_extension))
        self.train_slope = PEBuffer(flag(c.trains_extension))
        self.share_heads = PEBuffer(flag((adaptive and c.share_heads)
                                         or c.ext == "yarn_learned"))
        # Tying across layers cannot happen inside one layer's module: the trainer sums the
        # PE gradients of such models over the layer axis (adarope.train._tie_layers).
        self.share_layers = PEBuffer(flag(c.ext == "yarn_learned"))

    def _tie(self, x):
        """Head tying: the mean over heads (so every tied copy gets the summed gradient / H)."""
        s = self.share_heads[...]
        return s * jnp.broadcast_to(jnp.mean(x, axis=0, keepdims=True), x.shape) + (1 - s) * x

    def log_frequencies(self) -> jax.Array:
        """Effective log-frequencies log θ' = min(φ, log π) - ρ, ``[H, P]`` (eqs. 1, 3)."""
        phi = _gate(self.log_freq[...], self.log_freq_init[...], self.train_freq[...])
        log_b = _gate(self.log_base[...], self.log_base_init[...], self.train_base[...])
        # learn_base_only: φ_i = -(2i/D) log b = φ0_i log b / log b0.
        phi_base = self.log_freq_init[...] * (log_b / self.log_base_init[...])
        bo = self.base_only[...]
        phi = self._tie(bo * phi_base + (1 - bo) * phi)
        phi = jnp.minimum(phi, LOG_PI)
        rho = self._tie(_gate(self.log_interp[...], self.log_interp_init[...],
                              self.train_interp[...]))
        return phi - rho

    def frequencies(self) -> jax.Array:
        """Effective frequencies θ' ``[H, P]`` (0 for pairs that do not rotate)."""
        return jnp.exp(self.log_frequencies()) * self.rotate[...]

    def temperature(self, positions: jax.Array) -> jax.Array:
        """Per-head multiplier s_h(m) of q, ``[B, T, H]`` (eq. 2)."""
        psi = self._tie(_gate(self.log_temp[...], self.log_temp_init[...],
                              self.train_temp[...])[:, None])[:, 0]
        c = self._tie(_gate(self.len_slope[...], 0.0, self.train_slope[...])[:, None])[:, 0]
        return head_temperature(positions, psi, c, self.train_len)

    def __call__(self, q: jax.Array, k: jax.Array, positions: jax.Array):
        """Rotates q and k ``[B, T, H, D]`` and folds the temperature into q only."""
        angles = rotary_angles(positions, self.log_frequencies(), self.rotate[...])
        q = apply_rotary(q, angles)
        k = apply_rotary(k, angles)
        q = (q * self.temperature(positions)[..., None]).astype(q.dtype)
        return q, k


def make_factory(config: RopeConfig):
    """``position_encoder_factory`` for ``lm.Transformer``: ``rngs -> RotaryPositional``."""
    return lambda rngs: RotaryPositional(config, rngs=rngs)
