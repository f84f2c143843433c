"""Per-channel two-stage normalisation of a context set (spec Inference step 4).

Each channel (the ``F`` covariates, then the target last) is min-max scaled over
contexts x time, then standardised by the mean/std of the min-max-scaled values over
contexts x time. Both stages exclude the forecast slots (``slot_mask`` True) and NaNs, so
the query's unknown future can never leak into the statistics. The two stages compose to
one affine map ``x_n = (x - shift) / scale`` with ``shift = lo + mu * rng`` and
``scale = sd * rng``, which is how the official ``global_normalizer`` applies it.

Differences from the official code (deliberate): the official min-max stage includes the
forecast slots (filled with zeros there); the spec excludes them from both stages, as here.
Constant channels are guarded so everything stays finite (see ``RANGE_EPS``/``VAR_EPS``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

# A channel whose min-max range over kept entries is <= RANGE_EPS is constant: its range is
# replaced by 1, so it is only shifted (values elsewhere, e.g. future covariates, stay finite
# and un-amplified).
RANGE_EPS = 1e-12
# After min-max scaling a non-constant channel has range 1, hence variance >= 1 / (2n) for n
# kept entries; a variance <= VAR_EPS therefore only occurs for constant (or empty) channels,
# whose std is replaced by 1.
VAR_EPS = 1e-12


class NormState(NamedTuple):
    """Per-channel statistics; every field is ``[F + 1]`` float32 (covariates, target last).

    Attributes:
      lo: min-max stage minimum (0 for a channel with no kept entry).
      rng: min-max stage range ``max - min`` (1 for constant or empty channels).
      mu: mean of the min-max-scaled kept values (0 if empty).
      sd: population std of the min-max-scaled kept values (1 if constant or empty).
    """

    lo: jax.Array
    rng: jax.Array
    mu: jax.Array
    sd: jax.Array

    @property
    def shift(self) -> jax.Array:
        """``[F + 1]`` composite location: ``x_n = (x - shift) / scale``."""
        return self.lo + self.mu * self.rng

    @property
    def scale(self) -> jax.Array:
        """``[F + 1]`` composite scale (strictly positive)."""
        return self.sd * self.rng


def fit(feat: jax.Array, targ: jax.Array, slot_mask: jax.Array) -> NormState:
    """Fits the per-channel statistics over contexts x time.

    Args:
      feat: ``[N, M, F]`` covariates (``F`` may be 0).
      targ: ``[N, M, 1]`` target; NaN entries are ignored.
      slot_mask: ``[N, M]`` bool, True on forecast slots (and anything else to exclude, e.g.
        padded supports; see ``retrieval.forecast_slot_mask``). Excluded entries do not
        influence the state whatever their value.

    Returns:
      :class:`NormState` with ``[F + 1]`` fields.
    """
    if (
        feat.ndim != 3
        or targ.shape != feat.shape[:2] + (1,)
        or slot_mask.shape != feat.shape[:2]
    ):
        raise ValueError(
            f"expected feat [N, M, F], targ [N, M, 1] and slot_mask [N, M], got "
            f"feat {feat.shape}, targ {targ.shape}, slot_mask {slot_mask.shape}"
        )
    x = jnp.concatenate(
        [jnp.asarray(feat, jnp.float32), jnp.asarray(targ, jnp.float32)], axis=-1
    )  # [N, M, C]
    keep = ~jnp.asarray(slot_mask, bool)[..., None] & ~jnp.isnan(x)  # [N, M, C]
    count = jnp.sum(keep, axis=(0, 1))  # [C]
    has = count > 0
    lo = jnp.min(jnp.where(keep, x, jnp.inf), axis=(0, 1))
    hi = jnp.max(jnp.where(keep, x, -jnp.inf), axis=(0, 1))
    lo = jnp.where(has, lo, 0.0)
    rng = jnp.where(has & (hi - lo > RANGE_EPS), hi - lo, 1.0)
    u = jnp.where(keep, (x - lo) / rng, 0.0)  # zeros at excluded entries, never NaN
    n = jnp.maximum(count, 1).astype(jnp.float32)
    mu = jnp.sum(u, axis=(0, 1)) / n
    var = jnp.sum(jnp.where(keep, (u - mu) ** 2, 0.0), axis=(0, 1)) / n
    sd = jnp.where(var > VAR_EPS, jnp.sqrt(var), 1.0)
    return NormState(lo=lo, rng=rng, mu=mu, sd=sd)


def apply(
    state: NormState, feat: jax.Array, targ: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Normalises covariates ``[..., F]`` and target ``[..., 1]`` (NaN stays NaN)."""
    shift, scale = state.shift, state.scale
    feat_n = (jnp.asarray(feat, jnp.float32) - shift[:-1]) / scale[:-1]
    targ_n = (jnp.asarray(targ, jnp.float32) - shift[-1:]) / scale[-1:]
    return feat_n, targ_n


def invert(state: NormState, y_n: jax.Array) -> jax.Array:
    """Maps target-space values of any shape (means, quantiles) back to the data scale."""
    return jnp.asarray(y_n, jnp.float32) * state.scale[-1] + state.shift[-1]


def invert_feat(state: NormState, feat_n: jax.Array) -> jax.Array:
    """Inverse of :func:`apply` for covariates ``[..., F]``."""
    return jnp.asarray(feat_n, jnp.float32) * state.scale[:-1] + state.shift[:-1]
