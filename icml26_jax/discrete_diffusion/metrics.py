"""Sample-quality metrics with the HMM as the oracle (spec §Analysis): the oracle Gen-PPL
replaces Gen-PPL under Llama-2-7B (exact log p(x) by the forward algorithm, a strictly better
measurement), and the unigram / bigram entropies of the samples guard against low-entropy
(repetitive) samples that a perplexity alone would reward.
"""

from __future__ import annotations

import math

import numpy as np

from icml26_jax.lm import hmm as hmm_lib


def oracle_gen_ppl(lang: hmm_lib.HMM, samples) -> float:
    """exp(mean over samples of -log p_HMM(x) / L) for samples [N, L] (nats -> perplexity)."""
    samples = np.asarray(samples)
    if samples.ndim != 2 or samples.shape[1] < 1:
        raise ValueError(f"samples must be [N, L] with L >= 1, got shape {samples.shape}")
    ll = hmm_lib.log_likelihood(lang, samples).sum(axis=1)  # [N] log p(x)
    return float(math.exp(-np.mean(ll) / samples.shape[1]))


def unigram_entropy(samples, vocab: int) -> float:
    """Entropy (nats) of the empirical token distribution of samples [N, L]."""
    counts = np.bincount(np.asarray(samples).ravel(), minlength=vocab).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def bigram_entropy(samples, vocab: int) -> float:
    """Conditional entropy H(x_{t+1} | x_t) (nats) of the empirical bigrams of samples [N, L]."""
    s = np.asarray(samples)
    if s.shape[1] < 2:
        raise ValueError("bigram_entropy needs sequences of length >= 2")
    pairs = s[:, :-1].astype(np.int64) * vocab + s[:, 1:]
    joint = np.bincount(pairs.ravel(), minlength=vocab * vocab).reshape(vocab, vocab)
    joint = joint.astype(np.float64) / joint.sum()
    marg = joint.sum(1, keepdims=True)
    nz = joint > 0
    return float(-(joint[nz] * np.log((joint / np.where(marg > 0, marg, 1.0))[nz])).sum())
