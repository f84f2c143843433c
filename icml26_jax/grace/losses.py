"""GRACE's distillation losses: confidence-gated DKD and relational CKA (spec §Method
"Confidence-gated DKD" (paper Eq. 6) and "Relational CKA").

DKD (Zhao et al., CVPR 2022, https://arxiv.org/abs/2203.08679) splits the logit KL into a
target-class term TCKD (a binary KL on [p_y, 1 - p_y]) and a non-target term NCKD (the KL of
the distributions renormalised over the non-target classes); with b = [p_y, 1 - p_y] and
p_hat the non-target distribution,

    KL(p^t || p^s) = KL(b^t || b^s) + (1 - p^t_y) KL(p_hat^t || p_hat^s).

GRACE weights every token's DKD by a teacher-confidence gate g_i = exp(-H_i / log|V|) and
aligns the student's visual-token geometry with the teacher's through linear CKA (Kornblith
et al., ICML 2019, https://arxiv.org/abs/1905.00414) of per-image Gram matrices.

Every function is pure and jit-able (static shapes: masks instead of boolean indexing).
Logits and hidden states are computed in float32 at least (bf16/f16 inputs are upcast,
float64 inputs stay float64).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

# A finite "minus infinity" for the masked target logit of NCKD: -inf would give
# 0 * (-inf) = NaN in the KL sum and in its gradient (spec §Pitfalls).
MASK_LOGIT = -1e9
PROB_CLAMP = 1e-8  # TCKD's clamp of the binary probabilities (official code)
CKA_DEGENERATE_EPS = 1e-8  # images whose centred Gram has <K~, K~> below this are skipped
_NORM_EPS = 1e-12  # F.normalize's eps: a zero row stays zero instead of 0/0


class GDKDOut(NamedTuple):
    """``loss``: L_GDKD (scalar); ``gate_mean``: the mean gate over the masked positions
    (1 when ``gate=False``; 0 when no position is masked in)."""

    loss: jax.Array
    gate_mean: jax.Array


class RCKAOut(NamedTuple):
    """``loss``: L_RCKA = mean over valid images of (1 - CKA) (0 if none is valid);
    ``mean_cka``: the mean CKA over the same images (0 if none is valid)."""

    loss: jax.Array
    mean_cka: jax.Array


def _float(*xs):
    """The arrays ``xs`` in one float dtype: float64 if any is float64, else float32.

    (Written by hand: ``jnp.promote_types`` refuses float32/float64 under strict promotion.)
    """
    xs = [jnp.asarray(x) for x in xs]
    dtype = jnp.float64 if any(x.dtype == jnp.float64 for x in xs) else jnp.float32
    out = tuple(x.astype(dtype) for x in xs)
    return out[0] if len(out) == 1 else out


def _check_positive(name: str, value) -> None:
    # Only concrete Python numbers can be checked; traced values pass through.
    if isinstance(value, (int, float)) and not value > 0:
        raise ValueError(f"{name} must be > 0, got {name}={value!r}")


def dkd_per_token(zs, zt, y, T: float = 2.0, alpha: float = 1.0, beta: float = 4.0):
    """Per-token decoupled KD, L_i = (alpha TCKD_i + beta NCKD_i) T^2 (paper Eq. 6), [N].

    With p = softmax(z / T) for the student (s) and the teacher (t):
    TCKD_i = KL([p^t_y, 1 - p^t_y] || [p^s_y, 1 - p^s_y]), the binary probabilities clamped
    at 1e-8; NCKD_i = KL(p_hat^t || p_hat^s) with p_hat the softmax over the non-target
    classes (the target logit is set to the finite -1e9, never -inf, and its term is 0).

    Args:
      zs: [N, V] student logits.
      zt: [N, V] teacher logits (the caller stops their gradient).
      y: [N] int target classes in [0, V).
      T: temperature (> 0); the spec's default 2.
      alpha: TCKD weight; default 1.
      beta: NCKD weight (the paper's beta_dkd, not the controller's beta); default 4.

    Returns:
      [N] per-token losses, float32 (float64 if an input is float64).
    """
    zs, zt = _float(zs, zt)
    if zs.ndim != 2 or zs.shape != zt.shape:
        raise ValueError(f"zs and zt must both be [N, V], got zs {zs.shape}, zt {zt.shape}")
    if jnp.shape(y) != zs.shape[:1]:
        raise ValueError(f"y must be [N] = {zs.shape[:1]}, got y {jnp.shape(y)}")
    _check_positive("T", T)
    s, t = zs / T, zt / T
    y = jnp.asarray(y).astype(jnp.int32)
    is_y = jnp.arange(zs.shape[-1], dtype=jnp.int32) == y[:, None]  # [N, V]

    # TCKD: binary KL of {target, rest}.
    ps_y = jnp.sum(jnp.where(is_y, jax.nn.softmax(s, axis=-1), 0.0), axis=-1)
    pt_y = jnp.sum(jnp.where(is_y, jax.nn.softmax(t, axis=-1), 0.0), axis=-1)
    bs = jnp.maximum(jnp.stack([ps_y, 1.0 - ps_y], axis=-1), PROB_CLAMP)
    bt = jnp.maximum(jnp.stack([pt_y, 1.0 - pt_y], axis=-1), PROB_CLAMP)
    tckd = jnp.sum(bt * (jnp.log(bt) - jnp.log(bs)), axis=-1)

    # NCKD: KL over the non-target classes, renormalised.
    log_ps_nt = jax.nn.log_softmax(jnp.where(is_y, MASK_LOGIT, s), axis=-1)
    log_pt_nt = jax.nn.log_softmax(jnp.where(is_y, MASK_LOGIT, t), axis=-1)
    term = jnp.exp(log_pt_nt) * (log_pt_nt - log_ps_nt)
    nckd = jnp.sum(jnp.where(is_y, 0.0, term), axis=-1)
    return (alpha * tckd + beta * nckd) * (T * T)


def confidence_gate(zt):
    """The teacher-confidence gate g_i = exp(-H_i / log|V|) in [e^-1, 1], [N] (paper Eq. 6).

    H_i = -sum_v p_v log p_v is the entropy of the teacher at temperature 1 (not the DKD
    temperature): g = 1 for a one-hot teacher and e^-1 for a uniform one.

    Args:
      zt: [..., V] teacher logits, V >= 2.
    """
    zt = _float(zt)
    V = zt.shape[-1]
    if V < 2:
        raise ValueError(f"the vocabulary size V (last dim of zt) must be >= 2, got V={V}")
    logp = jax.nn.log_softmax(zt, axis=-1)
    H = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return jnp.exp(-H / math.log(V))


def gated_dkd(zs, zt, labels, mask, gate: bool = True, T: float = 2.0, alpha: float = 1.0,
              beta: float = 4.0) -> GDKDOut:
    """L_GDKD = sum_i g_i L_i / sum_i g_i over the masked positions (paper Eq. 6).

    L_i is :func:`dkd_per_token` at temperature ``T``; g_i is :func:`confidence_gate` of the
    teacher at T = 1 (``gate=False`` sets g = 1: plain DKD, the ``qat_dkd`` arm). The gate is
    a weight, not a target: its gradient is stopped.

    The inputs must already be ALIGNED: position s of ``zs``/``zt`` predicts ``labels[s]``.
    The caller does the next-token shift (e.g. ``logits[:, :-1]``, ``labels[:, 1:]``,
    ``mask[:, 1:]``) and passes ``mask`` true exactly on positions that predict an answer
    token. Labels outside ``mask`` are ignored (any value, e.g. -100, is fine).

    Args:
      zs: [B, S, V] student logits.
      zt: [B, S, V] teacher logits.
      labels: [B, S] int target tokens.
      mask: [B, S] bool, the positions that carry the loss.
      gate: weight tokens by the teacher-confidence gate (a static Python bool).
      T, alpha, beta: DKD's temperature and TCKD/NCKD weights (2, 1, 4).

    Returns:
      ``GDKDOut(loss, gate_mean)``: scalars; both 0 (not NaN) when ``mask`` is all false.
    """
    zs, zt = _float(zs, zt)
    if zs.ndim != 3 or zs.shape != zt.shape:
        raise ValueError(f"zs and zt must both be [B, S, V], got zs {zs.shape}, zt {zt.shape}")
    if jnp.shape(labels) != zs.shape[:2] or jnp.shape(mask) != zs.shape[:2]:
        raise ValueError(f"labels and mask must be [B, S] = {zs.shape[:2]}, got labels "
                         f"{jnp.shape(labels)}, mask {jnp.shape(mask)}")
    V = zs.shape[-1]
    m = jnp.asarray(mask, bool).reshape(-1)  # [N]
    # Unmasked labels may be anything (-100): replace them so the gather stays in range.
    y = jnp.where(m, jnp.asarray(labels).reshape(-1), 0)
    per_tok = dkd_per_token(zs.reshape(-1, V), zt.reshape(-1, V), y, T, alpha, beta)
    per_tok = jnp.where(m, per_tok, 0.0)  # a NaN off the mask must not leak through 0 * NaN
    if gate:
        g = jax.lax.stop_gradient(confidence_gate(zt.reshape(-1, V)))
    else:
        g = jnp.ones_like(per_tok)
    w = jnp.where(m, g, 0.0)
    den = jnp.sum(w)
    n = jnp.sum(m).astype(w.dtype)
    loss = jnp.sum(w * per_tok) / jnp.maximum(den, PROB_CLAMP)  # den >= e^-1 if n > 0
    return GDKDOut(loss, den / jnp.maximum(n, 1.0))


def _normalize_rows(F):
    # sqrt(max(|f|^2, eps^2)) = max(|f|, eps), without sqrt's infinite gradient at 0.
    sq = jnp.sum(F * F, axis=-1, keepdims=True)
    return F * jax.lax.rsqrt(jnp.maximum(sq, _NORM_EPS * _NORM_EPS))


def gram(F):
    """K = F_hat F_hat^T with the rows of F l2-normalised (a cosine-similarity kernel).

    Args:
      F: [..., n, d] features of n tokens (a zero row stays zero).

    Returns:
      [..., n, n].
    """
    Fh = _normalize_rows(_float(F))
    return jnp.einsum("...id,...jd->...ij", Fh, Fh)


def _center_masked(K, w):
    """H_w K H_w with H_w = diag(w) - w w^T / n, n = sum(w), w in {0, 1}: double centring
    over the n tokens with w = 1 (their block equals H K_sub H, H = I - 11^T / n), zero on
    the other rows and columns. K: [..., S, S] symmetric; w: [..., S] float."""
    K = K * w[..., :, None] * w[..., None, :]
    n = jnp.maximum(jnp.sum(w, axis=-1), 1.0)  # [...]
    row = jnp.sum(K, axis=-1) / n[..., None]  # [..., S] row means over the kept tokens
    tot = jnp.sum(row * w, axis=-1) / n  # [...] the grand mean
    Kc = K - row[..., :, None] - row[..., None, :] + tot[..., None, None]
    return Kc * w[..., :, None] * w[..., None, :]


def center(K):
    """K_tilde = H K H with H = I - 11^T / n (double centring).

    Args:
      K: [..., n, n] symmetric kernel.
    """
    K = _float(K)
    return _center_masked(K, jnp.ones(K.shape[:-1], K.dtype))


def _hsic(A, B):
    return jnp.sum(A * B, axis=(-2, -1))


def cka(Kt, Ks):
    """Linear CKA = <K~t, K~s>_F / sqrt(<K~t, K~t>_F <K~s, K~s>_F) of the centred kernels.

    The product under the root is floored at 1e-12 (as in the official code), so a
    degenerate kernel gives a finite (meaningless) value; :func:`rcka` skips those images.

    Args:
      Kt, Ks: [..., n, n] teacher and student kernels (e.g. :func:`gram`), same n.

    Returns:
      [...] CKA in [0, 1] for positive semi-definite kernels.
    """
    Kt, Ks = _float(Kt, Ks)
    if Kt.shape != Ks.shape:
        raise ValueError(f"Kt and Ks must have the same shape [..., n, n], got Kt {Kt.shape}, "
                         f"Ks {Ks.shape}")
    kt, ks = center(Kt), center(Ks)
    return _hsic(kt, ks) / jnp.sqrt(jnp.maximum(_hsic(kt, kt) * _hsic(ks, ks), 1e-12))


def rcka(hs, ht, visual_mask, min_tokens: int = 4) -> RCKAOut:
    """Relational CKA loss, L_RCKA = mean over valid images of (1 - CKA) (spec §Method
    "Relational CKA").

    Per batch row (one image), the n tokens with ``visual_mask`` true are taken from the
    penultimate hidden states of student and teacher; their row-normalised Grams are
    centred over those n tokens only and compared by linear CKA. The count n may differ
    between rows: it is handled by masking (the result equals slicing the visual tokens out
    and calling ``cka(gram(Ft), gram(Fs))``). An image is skipped when n < ``min_tokens`` or
    when either centred Gram has <K~, K~> < 1e-8 (all tokens collapsed onto one direction).

    Args:
      hs: [B, S, ds] student hidden states.
      ht: [B, S, dt] teacher hidden states; dt may differ from ds.
      visual_mask: [B, S] bool, the visual tokens of each row's image.
      min_tokens: the minimum n of a valid image (a static int, default 4).

    Returns:
      ``RCKAOut(loss, mean_cka)``: scalars; (0, 0), not NaN, when no image is valid.
    """
    hs, ht = _float(hs, ht)
    if hs.ndim != 3 or ht.ndim != 3 or hs.shape[:2] != ht.shape[:2]:
        raise ValueError(f"hs and ht must be [B, S, d] with the same B and S, got hs "
                         f"{hs.shape}, ht {ht.shape}")
    if jnp.shape(visual_mask) != hs.shape[:2]:
        raise ValueError(f"visual_mask must be [B, S] = {hs.shape[:2]}, got "
                         f"{jnp.shape(visual_mask)}")
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
        raise ValueError(f"min_tokens must be an int >= 1, got min_tokens={min_tokens!r}")
    dtype = hs.dtype
    w = jnp.asarray(visual_mask, bool).astype(dtype)  # [B, S]
    n = jnp.sum(w, axis=-1)  # [B]
    kt = _center_masked(gram(ht).astype(dtype), w)  # [B, S, S]
    ks = _center_masked(gram(hs).astype(dtype), w)
    tt, ss, ts = _hsic(kt, kt), _hsic(ks, ks), _hsic(kt, ks)
    valid = (n >= min_tokens) & (tt >= CKA_DEGENERATE_EPS) & (ss >= CKA_DEGENERATE_EPS)
    # Double where: a skipped image must not send NaN/inf gradients through the root.
    c = jnp.where(valid, ts / jnp.sqrt(jnp.where(valid, tt * ss, 1.0)), 0.0)  # [B]
    v = valid.astype(dtype)
    n_valid = jnp.maximum(jnp.sum(v), 1.0)
    return RCKAOut(jnp.sum(v * (1.0 - c)) / n_valid, jnp.sum(v * c) / n_valid)
