"""Bar-distribution head: losses and decoding (spec §Method, Head and losses).

The head outputs, per forecast step, ``bins`` logits over a "bar distribution" (Müller et
al., "Transformers Can Do Bayesian Inference", ICLR 2022, https://arxiv.org/abs/2112.10510):
a piecewise-constant density on bars with borders ``b_0 < ... < b_bins`` (here
``linspace(-10, 10, bins + 1)`` in normalised target space), bar k holding the mass
``p_k = softmax(logits)_k`` uniformly over ``[b_k, b_{k+1}]`` of width ``w_k``.

Full support (the official code's ``FullSupportBarDistribution``, taken over from TabPFN):
the two OUTER bars are not uniform. Bar 0's mass is spread as a half-normal that starts at
its right border ``b_1`` and extends to -inf; the last bar's as a half-normal that starts at
its left border ``b_{bins-1}`` and extends to +inf. The half-normal scale is chosen so that
half of the tail's mass lies within the original bar width, P(|X| < w) = 0.5, i.e.

    sigma = w / Phi_half^{-1}(0.5) = w / Phi^{-1}(0.75) = w / 0.67449...

so the density is finite for every real y (a target outside [b_0, b_bins] is scored by the
tail, not clipped), and it integrates to 1 over R.

What uses the tails: only :func:`bar_log_density` / :func:`bar_nll` (the training loss). The
other functions follow the official code and treat every bar by its centre or as uniform:
:func:`crps_discrete` and :func:`decode_mean` use point masses at the bar centres (the
official ``CRLoss`` and ``ClassifierDecoder.decode``), and :func:`decode_quantiles` inverts
the piecewise-linear CDF through the borders (uniform density within every bar, outer bars
included), so quantiles stay inside [b_0, b_bins]. The official decoder returns the centre of
the bar where the CDF crosses q (a step function of q); we interpolate within the bar, which
is the same to within half a bar width but continuous and strictly inside the bar.

Temperature: decoding (mean and quantiles) uses softmax(logits / T) with the official
T = 0.9 for both; the losses use T = 1.

Every function is pure jnp, float32, jit- and vmap-safe (static shapes, no data-dependent
control flow) and not jitted internally. Shapes: ``logits`` [..., bins], ``y`` [...] with the
same leading shape, ``borders`` [bins + 1], strictly increasing (not checked: it may be
traced). A NaN target gives a NaN loss: the caller masks missing targets.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

QUANTILES = np.linspace(0.1, 0.9, 9)  # the nine forecast quantile levels q = 0.1, ..., 0.9

# Phi_half^{-1}(0.5) = Phi^{-1}(0.75): the median of a unit half-normal. The tail scale is
# sigma = width / HALFNORMAL_MEDIAN, so that half of a tail's mass is within one bar width.
HALFNORMAL_MEDIAN = 0.6744897501960817
_LOG_SQRT_2_OVER_PI = 0.5 * math.log(2.0 / math.pi)
DEFAULT_TEMPERATURE = 0.9  # the official decoder's softmax temperature


def _f32(x):
    return jnp.asarray(x).astype(jnp.float32)


def _check_head(logits, borders, y=None):
    """Static shape checks shared by every function; returns float32 arrays."""
    logits, borders = _f32(logits), _f32(borders)
    if borders.ndim != 1 or borders.shape[0] < 3:
        raise ValueError(f"borders must be 1-D [bins + 1] with bins >= 2, got shape "
                         f"{borders.shape}")
    bins = borders.shape[0] - 1
    if logits.ndim < 1 or logits.shape[-1] != bins:
        raise ValueError(f"logits must be [..., bins] with bins = len(borders) - 1 = {bins}, got "
                         f"shape {logits.shape}")
    if y is None:
        return logits, borders
    y = _f32(y)
    if y.shape != logits.shape[:-1]:
        raise ValueError(f"y must have the leading shape of logits {logits.shape[:-1]}, got "
                         f"shape {y.shape}")
    return logits, borders, y


def _check_temperature(temperature) -> None:
    # Only concrete Python numbers can be checked; traced values pass through.
    if isinstance(temperature, (int, float)) and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got temperature={temperature!r}")


def bar_borders(bins: int, lo: float = -10.0, hi: float = 10.0) -> jax.Array:
    """The bar borders ``linspace(lo, hi, bins + 1)`` (spec §Method, Head and losses).

    Args:
      bins: number of bars (>= 2: the two outer bars carry the tails); 256 in our CPU
        configuration, 5,000 in the paper's.
      lo, hi: the outermost borders in normalised target space, lo < hi.

    Returns:
      [bins + 1] float32, strictly increasing.
    """
    if not isinstance(bins, (int, np.integer)) or bins < 2:
        raise ValueError(f"bins must be an int >= 2, got bins={bins!r}")
    if not lo < hi:
        raise ValueError(f"lo must be < hi, got lo={lo!r}, hi={hi!r}")
    return jnp.asarray(np.linspace(lo, hi, bins + 1), jnp.float32)


def bar_centres(borders) -> jax.Array:
    """Bar centres ``(b_k + b_{k+1}) / 2``, [bins] float32, from borders [bins + 1]."""
    borders = _f32(borders)
    return 0.5 * (borders[:-1] + borders[1:])


def tail_scale(width) -> jax.Array:
    """Half-normal scale of an outer bar's tail: sigma = width / Phi^{-1}(0.75).

    With this sigma, P(|X| < width) = 0.5 for X ~ HalfNormal(sigma): half of the outer bar's
    mass stays within its original width (TabPFN's ``halfnormal_with_p_weight_before(w, 0.5)``).
    """
    return _f32(width) / HALFNORMAL_MEDIAN


def bar_index(y, borders) -> jax.Array:
    """Index of the bar that contains y, clipped to the outer bars, int32 [...].

    Bar k holds (b_k, b_{k+1}] (b_0 itself goes to bar 0, as in the official
    ``searchsorted(borders, y) - 1`` with its fix-ups); y < b_0 maps to bar 0 and
    y > b_bins to the last bar. Counting the inner borders below y is O(bins) per target and
    vectorises without a vmapped ``searchsorted``.

    Args:
      y: [...] targets.
      borders: [bins + 1] borders.
    """
    y, borders = _f32(y), _f32(borders)
    return jnp.sum(y[..., None] > borders[1:-1], axis=-1, dtype=jnp.int32)


def _halfnormal_logpdf(x, sigma):
    # log of sqrt(2 / pi) / sigma * exp(-x^2 / (2 sigma^2)), x >= 0.
    return _LOG_SQRT_2_OVER_PI - jnp.log(sigma) - 0.5 * jnp.square(x / sigma)


def bar_log_density(logits, y, borders) -> jax.Array:
    """log p(y) under the full-support bar distribution (spec §Method, Head and losses).

    Inner bars k = 1..bins-2: ``log softmax(logits)_k - log w_k``. Outer bars (half-normal
    tails, see the module docstring): ``log p_0 + log HalfNormal(b_1 - y; sigma_0)`` for y in
    bar 0 or below b_0, and ``log p_{bins-1} + log HalfNormal(y - b_{bins-1}; sigma_{bins-1})``
    for y in the last bar or above b_bins, with sigma = :func:`tail_scale` (w).

    Args:
      logits: [..., bins] unnormalised bar logits.
      y: [...] targets in normalised space; outside the borders the tails score them.
      borders: [bins + 1] strictly increasing borders.

    Returns:
      [...] float32 log densities.
    """
    logits, borders, y = _check_head(logits, borders, y)
    bins = logits.shape[-1]
    widths = borders[1:] - borders[:-1]  # [bins]
    logp = jax.nn.log_softmax(logits, axis=-1)  # [..., bins]
    k = bar_index(y, borders)  # [...]
    logp_k = jnp.take_along_axis(logp, k[..., None], axis=-1)[..., 0]
    inner = logp_k - jnp.log(widths[k])
    # Distances into the tails; the clip only matters for the branch that where() discards.
    left = logp[..., 0] + _halfnormal_logpdf(
        jnp.maximum(borders[1] - y, 0.0), tail_scale(widths[0]))
    right = logp[..., -1] + _halfnormal_logpdf(
        jnp.maximum(y - borders[-2], 0.0), tail_scale(widths[-1]))
    return jnp.where(k == 0, left, jnp.where(k == bins - 1, right, inner))


def bar_nll(logits, y, borders) -> jax.Array:
    """Bar NLL, ``-log p(y)`` with half-normal tails: the training loss (spec §Method).

    Equals the official ``FullSupportBarDistribution.forward``: ``-log softmax_k + log w_k``
    inside, the half-normal tails on the outer bars. No reduction: the caller masks and
    averages.

    Args:
      logits: [..., bins] logits.
      y: [...] normalised targets.
      borders: [bins + 1] borders.

    Returns:
      [...] float32 per-target losses (finite for any |y| below ~1e18: no overflow).
    """
    return -bar_log_density(logits, y, borders)


def crps_discrete(logits, y, borders) -> jax.Array:
    """CRPS of the discrete distribution with mass softmax(logits)_k at centre c_k.

    CRPS = sum_k p_k |c_k - y| - 1/2 sum_{k,l} p_k p_l |c_k - c_l| (spec §Method; the official
    ``CRLoss``). The pairwise term is computed in O(bins), not O(bins^2): for sorted centres,
    sum_{k,l} p_k p_l |c_k - c_l| = 2 int F(1 - F) dx
    = 2 sum_{k < bins-1} F_k (1 - F_k) (c_{k+1} - c_k), with F_k = sum_{l <= k} p_l and
    1 - F_k taken as the suffix sum sum_{l > k} p_l (no cancellation near F = 1).

    Args:
      logits: [..., bins] logits (temperature 1).
      y: [...] normalised targets.
      borders: [bins + 1] strictly increasing borders (so the centres are sorted).

    Returns:
      [...] float32 per-target CRPS (>= 0 up to rounding).
    """
    logits, borders, y = _check_head(logits, borders, y)
    c = bar_centres(borders)  # [bins]
    p = jax.nn.softmax(logits, axis=-1)  # [..., bins]
    term1 = jnp.sum(p * jnp.abs(c - y[..., None]), axis=-1)
    cdf = jnp.cumsum(p, axis=-1)[..., :-1]  # F_k, k < bins - 1
    sf = jnp.cumsum(p[..., ::-1], axis=-1)[..., ::-1][..., 1:]  # 1 - F_k = sum_{l > k} p_l
    half_pair = jnp.sum(cdf * sf * (c[1:] - c[:-1]), axis=-1)  # = 1/2 sum_{k,l} ...
    return term1 - half_pair


def bar_cross_entropy(logits, y, borders) -> jax.Array:
    """Cross-entropy of the bar that contains y, ``-log softmax(logits)_k(y)``.

    k(y) is :func:`bar_index` (targets outside the borders count for the outer bars), as in
    the official ``EntropyLoss``; no reduction.

    Args:
      logits: [..., bins] logits.
      y: [...] normalised targets.
      borders: [bins + 1] borders.

    Returns:
      [...] float32.
    """
    logits, borders, y = _check_head(logits, borders, y)
    logp = jax.nn.log_softmax(logits, axis=-1)
    k = bar_index(y, borders)
    return -jnp.take_along_axis(logp, k[..., None], axis=-1)[..., 0]


def decode_mean(logits, borders, temperature: float = DEFAULT_TEMPERATURE) -> jax.Array:
    """Point forecast ``sum_k softmax(logits / T)_k c_k`` (spec §Method; official decoder).

    The outer bars count at their centres (not at their tails' means), as in the official
    ``ClassifierDecoder.decode``.

    Args:
      logits: [..., bins] logits.
      borders: [bins + 1] borders.
      temperature: softmax temperature T > 0; 0.9 as in the official code.

    Returns:
      [...] float32 means in normalised space.
    """
    logits, borders = _check_head(logits, borders)
    _check_temperature(temperature)
    p = jax.nn.softmax(logits / temperature, axis=-1)
    return jnp.sum(p * bar_centres(borders), axis=-1)


def decode_quantiles(logits, borders, qs=QUANTILES,
                     temperature: float = DEFAULT_TEMPERATURE) -> jax.Array:
    """Quantiles by inverting the piecewise-linear CDF of softmax(logits / T) (spec §Method).

    The CDF passes through (b_k, F_k), F_0 = 0, F_k = sum_{l < k} p_l, linear within each bar
    (uniform density in every bar, the outer ones included, so every quantile lies in
    [b_0, b_bins]). For level q the bar is k = #{j >= 1 : F_j < q} (clipped to the bars),
    i.e. F_k < q <= F_{k+1}, and Q(q) = b_k + (q - F_k) / p_k * w_k with the fraction clipped
    to [0, 1]: bars without mass are skipped, and Q is non-decreasing in q even with float32
    rounding (F is a cumulative sum of non-negative terms, hence monotone).

    Args:
      logits: [..., bins] logits.
      borders: [bins + 1] borders.
      qs: [n_q] quantile levels in [0, 1]; the nine levels 0.1, ..., 0.9 by default.
      temperature: softmax temperature T > 0; 0.9 as in the official decoder.

    Returns:
      [..., n_q] float32 quantiles in normalised space (non-decreasing along the last axis
      when ``qs`` is sorted).
    """
    logits, borders = _check_head(logits, borders)
    _check_temperature(temperature)
    if jnp.ndim(qs) != 1 or jnp.size(qs) == 0:
        raise ValueError(f"qs must be a non-empty 1-D array of levels, got shape {jnp.shape(qs)}")
    try:  # the values can be checked only when they are concrete
        qs_np = np.asarray(qs, np.float64)
    except jax.errors.TracerArrayConversionError:
        qs_np = None
    if qs_np is not None and np.any((qs_np < 0) | (qs_np > 1)):
        raise ValueError(f"qs must lie in [0, 1], got qs={qs_np.tolist()}")
    qs = _f32(qs)
    bins = logits.shape[-1]
    p = jax.nn.softmax(logits / temperature, axis=-1)  # [..., bins]
    cdf = jnp.cumsum(p, axis=-1)  # F_1..F_bins, [..., bins]
    # k = #{j in 1..bins-1 : F_j < q}: F_k < q <= F_{k+1} for the unclipped k.
    k = jnp.sum(cdf[..., None, :-1] < qs[:, None], axis=-1, dtype=jnp.int32)  # [..., n_q]
    k = jnp.minimum(k, bins - 1)
    cdf_left = jnp.concatenate([jnp.zeros_like(cdf[..., :1]), cdf[..., :-1]], axis=-1)
    f_k = jnp.take_along_axis(cdf_left, k, axis=-1)  # F_k
    p_k = jnp.take_along_axis(p, k, axis=-1)
    frac = jnp.clip((qs - f_k) / jnp.maximum(p_k, jnp.finfo(jnp.float32).tiny), 0.0, 1.0)
    widths = borders[1:] - borders[:-1]
    return borders[k] + frac * widths[k]
