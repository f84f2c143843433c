"""Attention-Guided Debiasing, the paper's method (spec §Method; Eqs. 1-14).

Calibration on a few episodes symmetrised by cyclic shifts estimates the *conditional*
position bias B[i, j] (rows: ground-truth position i, columns: predicted position j) and a
static attention prior; at inference the model's own attention (same forward pass as the
logits) gives a posterior pi over the ground-truth position, and the posterior-weighted bias
row is subtracted from the candidate log-scores.

Two paper-vs-code differences are flags (the default is the official code, which produced
the paper's tables): the layer aggregation (``agg='code'`` ratio of means vs ``agg='paper'``
Eq. 11 mean of log ratios) and the mixing (``mix='log'`` subtracts pi @ B vs ``mix='prob'``
Eqs. 13-14 in probability space).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

ATTN_EPS = 1e-20
AGGS = ("code", "paper")
MIXES = ("log", "prob")


class CalStats(NamedTuple):
    """Calibration statistics: l_obs [N, N] mean candidate log-scores and p_obs [N, N] mean
    probabilities of the variants with ground truth at row i (Eq. 1); a_prior [Lc, N] the
    static attention prior (Eq. 7); n_forward the forward passes spent; cyclic_logp
    [S, N, N] the candidate log-probabilities of every sample's N cyclic variants (what PriDe
    calibrates on: the same passes)."""

    l_obs: np.ndarray
    p_obs: np.ndarray
    a_prior: np.ndarray
    n_forward: int
    cyclic_logp: np.ndarray


def candidate_logprobs(logits_last, index_ids):
    """log P(c_k | x) [B, N] under a softmax restricted to the N index tokens."""
    return jax.nn.log_softmax(jnp.take(logits_last.astype(jnp.float32), index_ids, axis=-1))


def span_matrix(spans, t: int):
    """[N, T] float32: 1 on the tokens of image k's span (delimiters included)."""
    spans = jnp.asarray(spans)
    pos = jnp.arange(t)
    return ((pos[None, :] >= spans[:, :1]) & (pos[None, :] < spans[:, 1:])).astype(jnp.float32)


def layer_scores(attn_last, spans, layers):
    """Eq. 6: a_k^(l) = (1/H) sum_h sum_{t in R_k} A^(l,h)_{t_q -> t}, [B, Lc, N].

    Args:
      attn_last: [B, L, H, T] post-softmax attention rows of the answering token.
      spans: [N, 2] (start, end) of every image, delimiters included.
      layers: [Lc] candidate layer indices.
    """
    a = jnp.mean(attn_last[:, jnp.asarray(layers)].astype(jnp.float32), axis=2)  # [B, Lc, T]
    return jnp.einsum("blt,nt->bln", a, span_matrix(spans, attn_last.shape[-1]))


def calibrate(scorer, cal_episodes, layers) -> CalStats:
    """Calibration statistics from ``cal_episodes`` (|D_cal| episodes, each symmetrised by its
    N cyclic shifts: N |D_cal| forward passes).

    Args:
      scorer: an ``adapter.RetrievalScorer``.
      cal_episodes: episodes of the calibration split (``data.Episodes``, or
        ``realdata.CaptionEpisodes`` for a real model).
      layers: candidate layers.
    """
    from icml26_jax.lad import data as data_lib

    n_cal, N = cal_episodes.image_ids.shape
    if n_cal < 1:
        raise ValueError(f"n_cal must be >= 1, got {n_cal} calibration episodes")
    var = data_lib.cyclic_variants(cal_episodes)
    logp, scores = scorer.score(var, layers)
    logp, scores = np.asarray(logp, np.float64), np.asarray(scores, np.float64)
    l_obs = np.stack([logp[var.gt == i].mean(0) for i in range(N)])
    p_obs = np.stack([np.exp(logp[var.gt == i]).mean(0) for i in range(N)])
    return CalStats(l_obs, p_obs, np.maximum(scores, 0.0).mean(0), len(var.gt),
                    logp.reshape(n_cal, N, N))


def bias_matrix(l_obs):
    """The code-form bias matrix: ``(B [N, N], log_gamma)``.

    mu = mean(L_obs); k = max_{i, j != i} (L_obs[i, i] - L_obs[i, j]) (= log gamma, Eq. 4);
    b = mu - k / N; ideal = b 11^T + k I; B = L_obs - ideal. B is 0 for L_obs = b 11^T + k I
    and unchanged by adding a constant to L_obs.
    """
    L = jnp.asarray(l_obs, jnp.float32)
    N = L.shape[0]
    if L.shape != (N, N):
        raise ValueError(f"l_obs must be square [N, N], got shape {L.shape}")
    off = ~jnp.eye(N, dtype=bool)
    gaps = jnp.diag(L)[:, None] - L
    k = jnp.max(jnp.where(off, gaps, -jnp.inf)) if N > 1 else jnp.float32(0.0)
    b = jnp.mean(L) - k / N
    return L - (b + k * jnp.eye(N)), k


def bias_matrix_paper(p_obs):
    """Eqs. 1-5 in the probability domain: ``(log P_bias [N, N], log_gamma)``.

    gamma = max_{i, j != i} P_obs(i|i) / P_obs(j|i) (Eq. 4); P_vis(j|i) = gamma^[j = i]
    (Eq. 3); log P_bias(j|i) = log P_obs(j|i) - log P_vis(j|i) (Eq. 5), rows renormalised
    (Eq. 2 holds up to a per-row constant).
    """
    P = jnp.asarray(p_obs, jnp.float32)
    N = P.shape[0]
    logp = jnp.log(jnp.maximum(P, ATTN_EPS))
    off = ~jnp.eye(N, dtype=bool)
    log_gamma = (jnp.max(jnp.where(off, jnp.diag(logp)[:, None] - logp, -jnp.inf))
                 if N > 1 else jnp.float32(0.0))
    lb = logp - log_gamma * jnp.eye(N)
    return lb - jax.nn.logsumexp(lb, axis=1, keepdims=True), log_gamma


def _check(scores, a_prior, k: int, tau: float, agg: str) -> None:
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got tau={tau}")
    if agg not in AGGS:
        raise ValueError(f"agg must be one of {AGGS}, got agg={agg!r}")
    Lc = scores.shape[1]
    if not 1 <= k <= Lc:
        raise ValueError(f"k (top-K layers) must be in [1, {Lc}] (the candidate layers), "
                         f"got k={k}")
    if a_prior.shape != scores.shape[1:]:
        raise ValueError(f"a_prior must be [Lc, N] = {scores.shape[1:]}, got {a_prior.shape}")


def attention_posterior(scores, a_prior, k: int = 2, tau: float = 5.0, agg: str = "code"):
    """pi [B, N]: the posterior over the ground-truth position from attention (Eqs. 8-12).

    S^(l) = sum_k a_k^(l) (Eq. 8); L* = the top-k layers by S^(l) per instance (Eq. 9);
    ``agg='code'``: ratio_k = mean_{L*} a_k / (geometric mean_{L*} a_prior,k + 1e-20);
    ``agg='paper'`` (Eq. 11): log ratio_k = mean_{L*} (log a_k - log a_prior,k);
    pi = softmax(tau log ratio) (Eq. 12). Attention is clipped at 0 and offset by 1e-20.
    """
    scores = jnp.maximum(jnp.asarray(scores, jnp.float32), 0.0)
    a_prior = jnp.maximum(jnp.asarray(a_prior, jnp.float32), 0.0)
    _check(scores, a_prior, k, tau, agg)
    _, top = jax.lax.top_k(jnp.sum(scores, -1), k)  # [B, k]
    a = jnp.take_along_axis(scores, top[..., None], axis=1)  # [B, k, N]
    prior = a_prior[top]  # [B, k, N]
    if agg == "code":
        gmean = jnp.exp(jnp.mean(jnp.log(prior + ATTN_EPS), axis=1))
        log_ratio = jnp.log(jnp.mean(a, axis=1) + ATTN_EPS) - jnp.log(gmean + ATTN_EPS)
    else:
        log_ratio = jnp.mean(jnp.log(a + ATTN_EPS) - jnp.log(prior + ATTN_EPS), axis=1)
    return jax.nn.softmax(tau * log_ratio, axis=-1)


def lad_scores(logp, scores, bias, a_prior, k: int = 2, tau: float = 5.0, agg: str = "code",
               mix: str = "log"):
    """The debiased scores [B, N] (predict their argmax).

    ``mix='log'`` (code): score_j = log P(c_j|x) - sum_k pi_k B[k, j] with ``bias`` = B of
    :func:`bias_matrix`; ``mix='prob'`` (Eqs. 13-14): score_j = log P(c_j|x) - log sum_k pi_k
    P_bias(j|k) with ``bias`` = log P_bias of :func:`bias_matrix_paper`.
    """
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}, got mix={mix!r}")
    logp = jnp.asarray(logp, jnp.float32)
    N = logp.shape[-1]
    if bias.shape != (N, N) or scores.shape[-1] != N:
        raise ValueError(f"mismatched N: logp has {N} candidates, bias {bias.shape}, "
                         f"attention scores {scores.shape}")
    pi = attention_posterior(scores, a_prior, k, tau, agg)
    if mix == "log":
        return logp - pi @ jnp.asarray(bias, jnp.float32)
    return logp - jnp.log(pi @ jnp.exp(jnp.asarray(bias, jnp.float32)) + ATTN_EPS)
