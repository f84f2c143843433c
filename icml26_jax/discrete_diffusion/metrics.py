"""Sample-quality metrics with the HMM as the oracle (spec §Analysis): the oracle Gen-PPL
replaces Gen-PPL under Llama-2-7B (exact log p(x) by the forward algorithm, a strictly better
measurement), and the unigram / bigram entropies of the samples guard against low-entropy
(repetitive) samples that a perplexity alone would reward.
"""

from __future__ import annotations

import math

import numpy as np

from icml26_jax.lm import hmm as hmm_lib


SMOOTHING = 1e-4


def oracle_gen_ppl(lang: hmm_lib.HMM, samples, smoothing: float = SMOOTHING) -> float:
    """exp(mean over samples of -log p_ref(x) / L) for samples [N, L] (nats -> perplexity).

    The reference LM is the HMM with every conditional smoothed towards uniform,
    p_ref(x_t | x_<t) = (1 - s) p_HMM(x_t | x_<t) + s / V: the language's sparse emissions and
    transitions give an impossible token probability 0 (an infinite perplexity for a whole
    batch of samples because of one token), while a reference LM such as Llama-2 never
    does. With s = 1e-4 an impossible token costs log(V / s) ~ 13.4 nats and a possible one
    at most -log(1 - s) extra; ``smoothing=0`` is the exact HMM. :func:`invalid_rate` reports
    how many tokens were impossible.
    """
    samples = np.asarray(samples)
    if samples.ndim != 2 or samples.shape[1] < 1:
        raise ValueError(f"samples must be [N, L] with L >= 1, got shape {samples.shape}")
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got smoothing={smoothing}")
    ll = hmm_lib.log_likelihood(lang, samples)  # [N, L] log p(x_t | x_<t)
    if smoothing > 0:
        with np.errstate(divide="ignore"):
            ll = np.log((1.0 - smoothing) * np.exp(ll) + smoothing / lang.vocab_size)
    return float(math.exp(-np.mean(ll.sum(axis=1)) / samples.shape[1]))


def invalid_rate(lang: hmm_lib.HMM, samples) -> float:
    """Fraction of sampled tokens the HMM gives probability 0 given their prefix."""
    ll = hmm_lib.log_likelihood(lang, np.asarray(samples))
    return float(np.mean(~np.isfinite(ll)))


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


def exact_bigram(lang: hmm_lib.HMM) -> np.ndarray:
    """p(x_{t+1} = b | x_t = a) [V, V] of the stationary language (exact:
    p(a, b) = (pi * E[:, a])^T T E[:, b])."""
    joint = (lang.init[:, None] * lang.emit).T @ lang.trans @ lang.emit  # [V, V]
    marg = joint.sum(1, keepdims=True)
    return joint / np.where(marg > 0, marg, 1.0)


def reference_samples(lang: hmm_lib.HMM, n: int, length: int, seed: int) -> dict:
    """Samples [n, length] of three references that bracket the sample quality of a model:
    ``data`` (the language itself), ``bigram`` (a Markov chain with the language's exact
    bigram) and ``unigram`` (i.i.d. tokens from its marginal)."""
    rng = np.random.default_rng(seed)
    p = hmm_lib.token_marginal(lang)
    cond = np.cumsum(exact_bigram(lang), 1)
    big = np.empty((n, length), np.int64)
    big[:, 0] = rng.choice(lang.vocab_size, size=n, p=p)
    for t in range(1, length):
        u = rng.random(n)[:, None]
        big[:, t] = np.minimum((u > cond[big[:, t - 1]]).sum(1), lang.vocab_size - 1)
    return {"data": hmm_lib.sample(lang, n, length, seed=seed),
            "bigram": big,
            "unigram": rng.choice(lang.vocab_size, size=(n, length), p=p)}


def sample_quality(lang: hmm_lib.HMM, samples) -> dict:
    """``{"gen_ppl", "invalid", "unigram", "bigram"}`` of samples [N, L]."""
    return {"gen_ppl": oracle_gen_ppl(lang, samples), "invalid": invalid_rate(lang, samples),
            "unigram": unigram_entropy(samples, lang.vocab_size),
            "bigram": bigram_entropy(samples, lang.vocab_size)}
