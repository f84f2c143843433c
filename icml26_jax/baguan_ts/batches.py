"""Training batches from the prior bank (spec §Method "Training", "Context-overfitting").

``make_batch(key, bank, cfg, H)`` is pure and jit-able: every sample draws a task and an
origin, retrieves its supports with the *same* RBfcst the forecaster uses at inference, and
normalises the contexts exactly as inference does (:mod:`predict`). On top come the training
augmentations: target blocks dropped (p = 0.3, blocks of 8·U{1..5} steps), a per-sample
number of active supports K_eff in {0..K} (P(0) = 0.1, so K = 0 is in distribution), and, in
the context-overfitting branch only, an injected near-copy of the query window *including its
future* (spec [R]: ±10 % amplitude jitter, noise 0.05·sd, a 0-2 step shift).

The data stream is ``fold_in(key, step)``: a resumed run sees the same batches.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26_jax.baguan_ts import normalize, retrieval
from icml26_jax.baguan_ts.predict import CLIP, tabular_inputs


@dataclasses.dataclass(frozen=True)
class BatchConfig:
    """Static batch settings (hashable).

    Attributes:
      batch: samples per batch; M, K, period: as at inference; context_len: history length
      L the retrieval sees; drop_p: probability that a context row loses a target block;
      p_k0: P(K_eff = 0); co_inject_p: probability of the context-overfitting injection.
    """

    batch: int = 8
    M: int = 64
    K: int = 8
    period: int = 5
    context_len: int = 160
    drop_p: float = 0.3
    p_k0: float = 0.1
    co_inject_p: float = 0.0


class Batch(NamedTuple):
    """One normalised training batch (3D layout; :func:`to_tabular` gives the 2D one).

    Attributes:
      feat: [B, K+1, M, F] covariates; targ: [B, K+1, M, 1] target (NaN: forecast slots and
      dropped blocks), query last; support_mask: [B, K+1] (query False); sims: [B, K+1];
      feat_mask: [B, F]; labels: [B, H] normalised future (clipped to ±10); t0: [B] int32
      absolute index of the query window's first step; period: [B] int32 season.
    """

    feat: jax.Array
    targ: jax.Array
    support_mask: jax.Array
    sims: jax.Array
    feat_mask: jax.Array
    labels: jax.Array
    t0: jax.Array
    period: jax.Array


def _drop_blocks(key, targ, p):
    """NaN-out one block of 8·U{1..5} steps per row with probability ``p``; targ [N, M, 1]."""
    N, M = targ.shape[:2]
    k1, k2, k3 = jax.random.split(key, 3)
    on = jax.random.bernoulli(k1, p, (N,))
    length = 8 * jax.random.randint(k2, (N,), 1, 6)
    start = jax.random.randint(k3, (N,), 0, M)
    t = jnp.arange(M)[None, :]
    hit = on[:, None] & (t >= start[:, None]) & (t < start[:, None] + length[:, None])
    return jnp.where(hit[..., None], jnp.nan, targ)


def _inject(key, ctx, y, X, L, M, H, active):
    """Replaces one active support by a jittered near-copy of the query window with its
    future; returns (feat, targ, sims). No-op when no support is active."""
    K = ctx.starts.shape[0]
    k_slot, k_amp, k_noise, k_shift = jax.random.split(key, 4)
    shift = jax.random.randint(k_shift, (), 0, 3)
    start = L - M + H - shift
    win = jax.lax.dynamic_slice(y, (start,), (M,))
    xwin = jax.lax.dynamic_slice(X, (start, 0), (M, X.shape[1]))
    sd = jnp.std(win)
    amp = 1.0 + jax.random.uniform(k_amp, (), jnp.float32, -0.1, 0.1)
    copy = amp * win + 0.05 * sd * jax.random.normal(k_noise, (M,), jnp.float32)
    # A uniformly chosen active support is replaced.
    logits = jnp.where(active, 0.0, -jnp.inf)
    slot = jax.random.categorical(k_slot, logits)
    onehot = (jnp.arange(K) == slot) & jnp.any(active)
    targ = ctx.targ.at[:K].set(jnp.where(onehot[:, None, None], copy[:, None], ctx.targ[:K]))
    feat = ctx.feat.at[:K].set(jnp.where(onehot[:, None, None], xwin[None], ctx.feat[:K]))
    # It is scored as the best candidate (it is the query's own window).
    best = jnp.max(jnp.where(active, ctx.sims, -jnp.inf))
    sims = jnp.where(onehot, best, ctx.sims)
    return feat, targ, sims


def make_sample(key, y_bank, X_bank, length, n_feat, period, cfg: BatchConfig, H: int):
    """One training sample from one bank task (see :func:`make_batch`)."""
    L, M, K = cfg.context_len, cfg.M, cfg.K
    k_org, k_drop, k_keff, k_k0, k_inj, k_co = jax.random.split(key, 6)
    hi = jnp.maximum(length - H - L, 0)  # origin o in [L, length - H]
    o = L + jax.random.randint(k_org, (), 0, hi + 1)
    y = jax.lax.dynamic_slice(y_bank, (o - L,), (L + H,))
    X = jax.lax.dynamic_slice(X_bank, (o - L, 0), (L + H, X_bank.shape[1]))
    ctx = retrieval.rbfcst(y, X, L, M, H, K, cfg.period)
    k_eff = jnp.where(jax.random.bernoulli(k_k0, cfg.p_k0), 0,
                      jax.random.randint(k_keff, (), 1, K + 1))
    active = ctx.mask & (jnp.arange(K) < k_eff)
    feat, targ, sims = ctx.feat, ctx.targ, ctx.sims
    if cfg.co_inject_p > 0:
        f2, t2, s2 = _inject(k_inj, ctx, y, X, L, M, H, active)
        do = jax.random.bernoulli(k_co, cfg.co_inject_p)
        feat, targ, sims = (jnp.where(do, a, b) for a, b in ((f2, feat), (t2, targ), (s2, sims)))
    slots = retrieval.forecast_slot_mask(ctx._replace(mask=active), H)
    state = normalize.fit(feat, targ, slots)
    feat_n, targ_n = normalize.apply(state, feat, targ)
    targ_n = jnp.clip(_drop_blocks(k_drop, targ_n, cfg.drop_p), -CLIP, CLIP)
    labels = jnp.clip((y[L:] - state.shift[-1]) / state.scale[-1], -CLIP, CLIP)
    feat_mask = jnp.arange(X.shape[1]) < n_feat
    return Batch(feat=feat_n, targ=targ_n,
                 support_mask=jnp.concatenate([active, jnp.zeros((1,), bool)]),
                 sims=jnp.concatenate([sims, jnp.zeros((1,), jnp.float32)]),
                 feat_mask=feat_mask, labels=labels, t0=(o - M + H).astype(jnp.int32),
                 period=jnp.asarray(period, jnp.int32))


def make_batch(key, bank, cfg: BatchConfig, H: int) -> Batch:
    """A batch of ``cfg.batch`` samples (pure; jit with ``cfg`` and ``H`` static).

    Args:
      key: typed key (the stream is ``fold_in(base, step)``).
      bank: a :class:`icml26_jax.baguan_ts.prior.Bank` of device arrays; every task must
        have ``length >= context_len + H``.
      cfg: :class:`BatchConfig`.
      H: horizon of this batch (static).
    """
    k_idx, k_s = jax.random.split(key)
    idx = jax.random.randint(k_idx, (cfg.batch,), 0, bank.y.shape[0])
    keys = jax.random.split(k_s, cfg.batch)
    fn = lambda k, i: make_sample(k, bank.y[i], bank.X[i], bank.length[i],  # noqa: E731
                                  bank.n_feat[i], bank.period[i], cfg, H)
    return jax.vmap(fn)(keys, idx)


def to_tabular(b: Batch, H: int):
    """The 2D (tabular) inputs of a batch's query windows: ``(feat [B, M, 1, F + 3],
    targ [B, M, 1, 1], row_mask [B, M], feat_mask [B, F + 3])``."""
    return jax.vmap(lambda f, t, fm, t0, m: tabular_inputs(f[-1], t[-1, :, 0], fm, t0, m, H))(
        b.feat, b.targ, b.feat_mask, b.t0, b.period)
