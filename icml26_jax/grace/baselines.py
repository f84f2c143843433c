"""The GRACE baselines that are not a training mode of ``train.make_train_step`` (spec
§Baselines and peers).

* ``ptq_rtn``: post-training quantisation of the FP student: MSE-initialised group scales and
  round-to-nearest, no training (the forward of an LSQ model *is* round-to-nearest with its
  scales, so PTQ is the quantised model before any QAT step).
* ``plain_kd``: plain logit KD (Hinton et al. 2015), KL(p^t || p^s) T^2 at T = 2, averaged over
  the masked positions (the optional ``qat_kd`` arm).

``qat_ce`` and ``qat_dkd`` are ``train.make_train_step`` modes ``'ce'`` and ``'dkd'``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26_jax.grace import lsq
from icml26_jax.grace.export import path_keys


def ptq_rtn(params, bits: int = 4, group: int = 64):
    """``params`` (a quantised model's state) with every ``log_scale`` re-initialised by the
    MSE grid search from its kernel: round-to-nearest INT4 of the current weights."""
    lsq.check_bits(bits)
    flat = {path_keys(p): x for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}

    def f(p, x):
        k = path_keys(p)
        if k and k[-1] == "log_scale":
            return lsq.mse_init_log_scale(flat[k[:-1] + ("kernel",)], bits, group)
        return x
    return jax.tree_util.tree_map_with_path(f, params)


def plain_kd(zs, zt, mask, T: float = 2.0):
    """Mean over the masked positions of KL(p^t || p^s) T^2, p = softmax(z / T).

    As for :func:`icml26_jax.grace.losses.gated_dkd`, the inputs are already aligned (the
    caller does the next-token shift) and ``mask`` marks the positions that predict answer
    tokens.

    Args:
      zs: [..., V] student logits (e.g. [B, S, V]).
      zt: [..., V] teacher logits, same shape (the caller stops their gradient).
      mask: [...] bool, the positions that carry the loss (e.g. [B, S]).
      T: temperature (> 0); default 2.

    Returns:
      A scalar (>= float32); 0, not NaN, when ``mask`` is all false.
    """
    zs, zt = jnp.asarray(zs), jnp.asarray(zt)
    # float64 if either is float64, else float32 (jnp.promote_types is strict-mode aware).
    dtype = jnp.float64 if jnp.float64 in (zs.dtype, zt.dtype) else jnp.float32
    zs, zt = zs.astype(dtype), zt.astype(dtype)
    if zs.shape != zt.shape or jnp.shape(mask) != zs.shape[:-1]:
        raise ValueError(f"zs and zt must be [..., V] with the same shape and mask [...], got "
                         f"zs {zs.shape}, zt {zt.shape}, mask {jnp.shape(mask)}")
    if isinstance(T, (int, float)) and not T > 0:
        raise ValueError(f"T must be > 0, got T={T!r}")
    log_ps = jax.nn.log_softmax(zs / T, axis=-1)
    log_pt = jax.nn.log_softmax(zt / T, axis=-1)
    kl = jnp.sum(jnp.exp(log_pt) * (log_pt - log_ps), axis=-1) * (T * T)
    m = jnp.asarray(mask, bool)
    kl = jnp.where(m, kl, 0.0)
    return jnp.sum(kl) / jnp.maximum(jnp.sum(m).astype(kl.dtype), 1.0)
