"""Group-wise LSQ weight fake-quantisation (spec §Method "Group-wise LSQ weight quantization";
LSQ: Esser et al., ICLR 2020, https://arxiv.org/abs/1902.08153).

A Flax kernel ``w`` is stored ``[in, out]``; its scales ``log_scale`` are ``[out, in // G]``:
one scale per output row and per group of ``G`` consecutive *input* indices, which is the
official PyTorch layout (``weight[out, in].view(-1, G)``) and the AWQ layout up to a transpose
(see :mod:`icml26_jax.grace.int4`). With signed b-bit codes q in [q_min, q_max] =
[-2^(b-1), 2^(b-1) - 1] and s = exp(log_scale),

    w_hat = clamp(round_STE(w / s), q_min, q_max) * s,

so that ∂w_hat/∂w = 1 where round(w/s) lies in [q_min, q_max] and 0 outside, and
∂w_hat/∂s = round(w/s) - w/s inside, q_min or q_max where clipped; the LSQ gradient scale
g = 1 / sqrt(G q_max) multiplies the latter.

Everything here is a pure function (``QDense`` aside) and is jit-able; ``bits`` and ``group``
are static Python ints.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

BITS = (2, 3, 4, 8)
LOG_SCALE_MIN = math.log(1e-8)
LOG_SCALE_MAX = math.log(1e4)


def qrange(bits: int) -> tuple[int, int]:
    """(q_min, q_max) = (-2^(b-1), 2^(b-1) - 1) of signed b-bit codes; (-8, 7) for INT4."""
    check_bits(bits)
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def check_bits(bits) -> None:
    """Raises ``ValueError`` unless ``bits`` is one of :data:`BITS`."""
    if isinstance(bits, bool) or bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got bits={bits!r}")


def check_group(group, in_features: int) -> None:
    """Raises ``ValueError`` unless ``group`` is a positive int dividing ``in_features``."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be a positive int, got group={group!r}")
    if in_features % group:
        raise ValueError(f"group must divide the input dim: in_features={in_features} is not "
                         f"divisible by group={group} (allowed: divisors of {in_features})")


def ste_round(x):
    """round(x) (half to even, as ``torch.round``) with an identity (straight-through) gradient.

    A ``custom_jvp``, so forward- and reverse-mode both see d/dx = 1 and the forward value is
    exactly ``jnp.round(x)``.
    """
    return _ste_round(x)


@jax.custom_jvp
def _ste_round(x):
    return jnp.round(x)


@_ste_round.defjvp
def _ste_round_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.round(x), t


def grad_scale(x, g):
    """Identity in the forward pass, gradient multiplied by ``g`` (LSQ's s' = s g + sg(s - s g)).

    Written as sg(x) + (x g - sg(x g)): the same value and the same gradient as the spec's
    x g + sg(x - x g), but the forward value is exactly ``x`` (the spec's form can be off by
    one ulp, which would make fake-quant and the packed INT4 weights disagree).
    """
    xg = x * g
    return jax.lax.stop_gradient(x) + (xg - jax.lax.stop_gradient(xg))


@jax.custom_vjp
def clean_grad(x):
    """Identity whose cotangent is cleaned: NaN -> 0, then clipped to [-1, 1] (+-inf -> +-1).

    Applied to ``log_scale`` inside :func:`fake_quant` (spec: "its gradient is cleaned of NaN
    and clipped to +-1"), so the clipping acts on the full gradient of each scale parameter.
    """
    return x


def _clean_fwd(x):
    return x, None


def _clean_bwd(_, ct):
    return (jnp.clip(jnp.nan_to_num(ct, nan=0.0), -1.0, 1.0),)


clean_grad.defvjp(_clean_fwd, _clean_bwd)


def scale_from_log(log_scale):
    """s = exp(clamp(log_scale, log 1e-8, log 1e4)) (the forward value of the scale)."""
    return jnp.exp(jnp.clip(log_scale, LOG_SCALE_MIN, LOG_SCALE_MAX))


def check_shapes(w, log_scale, group: int) -> None:
    """Raises ``ValueError`` unless w is [in, out], G divides in and log_scale is [out, in // G]."""
    if w.ndim != 2:
        raise ValueError(f"w must be a kernel [in, out], got shape {w.shape}")
    check_group(group, w.shape[0])
    want = (w.shape[1], w.shape[0] // group)
    if log_scale.shape != want:
        raise ValueError(f"log_scale must be [out, in // group] = {want} for w {w.shape} and "
                         f"group={group}, got {log_scale.shape}")


def to_groups(w, group: int):
    """[in, out] kernel -> [out, in // G, G]: row o, group j holds w[j G:(j+1) G, o]."""
    n_in, n_out = w.shape
    return w.T.reshape(n_out, n_in // group, group)


def from_groups(wg):
    """Inverse of :func:`to_groups`: [out, in // G, G] -> [in, out]."""
    n_out, n_groups, group = wg.shape
    return wg.reshape(n_out, n_groups * group).T


def clip_ste(r, q_min: int, q_max: int):
    """clamp(r, q_min, q_max) with gradient 1 where q_min <= r <= q_max and 0 outside.

    ``jnp.clip`` would give 1/2 at r == q_max (ties of ``minimum``), and after rounding that tie
    is common: every w/s in [q_max - 1/2, q_max + 1/2) lands exactly on q_max.
    """
    inside = (r >= q_min) & (r <= q_max)
    return jnp.where(inside, r, jax.lax.stop_gradient(jnp.clip(r, q_min, q_max)))


def fake_quant(w, log_scale, bits: int = 4, group: int = 64, lsq_grad_scale: bool = True):
    """Group-wise LSQ fake quantisation: w_hat = clamp(round_STE(w/s), q_min, q_max) s.

    Args:
      w: kernel [in, out] (any float dtype; computed in float32, returned in ``w.dtype``).
      log_scale: [out, in // group] float32; s = exp(clamp(log_scale, log 1e-8, log 1e4)).
        Its gradient is cleaned of NaN and clipped to +-1 (:func:`clean_grad`).
      bits: code width, one of (2, 3, 4, 8); codes are signed, [-2^(b-1), 2^(b-1) - 1].
      group: G, consecutive input indices per scale; must divide ``in``.
      lsq_grad_scale: multiply the scale gradient by g = 1 / sqrt(G q_max) (LSQ).

    Returns:
      w_hat [in, out]: every entry is s_{o, i // G} q with an integer q in [q_min, q_max].
    """
    q_min, q_max = qrange(bits)
    check_shapes(w, log_scale, group)
    s = scale_from_log(clean_grad(log_scale.astype(jnp.float32)))  # [out, in // G]
    if lsq_grad_scale:
        s = grad_scale(s, 1.0 / math.sqrt(group * q_max))
    wg = to_groups(w.astype(jnp.float32), group)  # [out, in // G, G]
    q = clip_ste(ste_round(wg / s[..., None]), q_min, q_max)
    return from_groups(q * s[..., None]).astype(w.dtype)


def quant_error(w, scale, bits: int = 4, group: int = 64):
    """||w - dequant(quant(w, s))||^2 per group, [out, in // G] (round to nearest, clipped).

    ``scale`` is [out, in // G] (the scale itself, not its log).
    """
    q_min, q_max = qrange(bits)
    wg = to_groups(w.astype(jnp.float32), group)
    s = scale[..., None]
    q = jnp.clip(jnp.round(wg / s), q_min, q_max)
    return jnp.sum(jnp.square(q * s - wg), axis=-1)


def mse_init_log_scale(w, bits: int = 4, group: int = 64, n: int = 20, lo: float = 0.3,
                       hi: float = 1.2):
    """Scale init by MSE grid search (spec §Method), returns log_scale [out, in // G] float32.

    Candidates s_r = r max|w_group| / q_max for r in linspace(lo, hi, n); per group keep the
    first argmin of ||w - dequant(quant(w, s_r))||^2. An all-zero group gets max|w| := 1e-8
    (its error is 0 for every candidate), and the result is clamped to [1e-8, 1e4], the range
    :func:`fake_quant` uses, so no group starts where the log-scale clamp kills its gradient.
    """
    if w.ndim != 2:
        raise ValueError(f"w must be a kernel [in, out], got shape {w.shape}")
    check_group(group, w.shape[0])
    _, q_max = qrange(bits)
    if n < 1 or not 0 < lo <= hi:
        raise ValueError(f"need n >= 1 and 0 < lo <= hi, got n={n}, lo={lo}, hi={hi}")
    return _mse_search(w, bits, group, n, float(lo), float(hi))


@functools.partial(jax.jit, static_argnames=("bits", "group", "n", "lo", "hi"))
def _mse_search(w, bits, group, n, lo, hi):
    _, q_max = qrange(bits)
    wg = to_groups(w.astype(jnp.float32), group)
    base = jnp.maximum(jnp.max(jnp.abs(wg), axis=-1), 1e-8) / q_max  # [out, in // G]
    ratios = jnp.linspace(lo, hi, n, dtype=jnp.float32)
    # One candidate at a time: peak memory O(|w|) rather than O(n |w|).
    errs = jax.lax.map(lambda r: quant_error(w, r * base, bits, group), ratios)  # [n, out, G']
    best = jnp.take(ratios, jnp.argmin(errs, axis=0)) * base
    return jnp.clip(jnp.log(best), LOG_SCALE_MIN, LOG_SCALE_MAX)


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """Weight-only quantisation of a ``QDense``: ``bits`` in (2, 3, 4, 8), group size ``group``
    along the input dim."""

    bits: int = 4
    group: int = 64

    def __post_init__(self):
        check_bits(self.bits)
        if isinstance(self.group, bool) or not isinstance(self.group, int) or self.group < 1:
            raise ValueError(f"group must be a positive int, got group={self.group!r}")


class QDense(nnx.Module):
    """Dense layer y = x w_hat (+ b) with group-wise LSQ fake-quantised weights.

    ``kernel`` [in, out] (lecun-normal init, as ``nnx.Linear``); with ``quant`` set, also
    ``log_scale`` [out, in // G] (MSE-initialised from the initial kernel; call
    :meth:`init_scales` after loading a full-precision checkpoint). With ``quant=None`` it is
    a plain dense layer and has no ``log_scale``, which is how the non-quantised scope (vision
    tower, projector, lm_head) stays in floating point. The computation runs in ``x.dtype``.
    """

    def __init__(self, in_features: int, out_features: int, *, quant: QuantConfig | None,
                 use_bias: bool = False, rngs: nnx.Rngs):
        if quant is not None:
            if not isinstance(quant, QuantConfig):
                raise ValueError(f"quant must be a QuantConfig or None, got {quant!r}")
            check_group(quant.group, in_features)
        self.in_features, self.out_features = in_features, out_features
        self.quant = quant
        self.kernel = nnx.Param(
            nnx.initializers.lecun_normal()(rngs.params(), (in_features, out_features),
                                            jnp.float32))
        self.bias = (nnx.Param(jnp.zeros((out_features,), jnp.float32)) if use_bias
                     else nnx.data(None))
        if quant is not None:
            self.log_scale = nnx.Param(
                mse_init_log_scale(self.kernel[...], quant.bits, quant.group))

    def init_scales(self) -> None:
        """Re-runs the MSE scale init from the current kernel (QAT from an FP checkpoint)."""
        if self.quant is None:
            raise ValueError("init_scales needs quant to be a QuantConfig, got quant=None")
        self.log_scale[...] = mse_init_log_scale(self.kernel[...], self.quant.bits,
                                                 self.quant.group)

    def __call__(self, x):
        w = self.kernel[...]
        if self.quant is not None:
            w = fake_quant(w, self.log_scale[...], self.quant.bits, self.quant.group)
        y = jnp.dot(x, w.astype(x.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(y.dtype)
        return y
