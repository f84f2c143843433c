"""Oracle Gen-PPL and the entropy guard against closed forms on small cases."""

import math

import numpy as np
import pytest

from icml26_jax.discrete_diffusion import metrics
from icml26_jax.lm import hmm as hmm_lib


def test_oracle_gen_ppl_of_the_language_matches_its_entropy():
    lang = hmm_lib.make_hmm(8, 6, seed=0, trans_concentration=0.5, emit_concentration=0.5)
    x = hmm_lib.sample(lang, 4000, 16, seed=1)
    ppl = metrics.oracle_gen_ppl(lang, x, smoothing=0.0)
    nll = -hmm_lib.log_likelihood(lang, x).sum(1).mean() / 16
    assert ppl == pytest.approx(math.exp(nll), rel=1e-9)
    # The smoothed reference costs at most -log(1 - s) per possible token.
    assert ppl <= metrics.oracle_gen_ppl(lang, x) <= ppl / (1 - metrics.SMOOTHING)
    # Samples from the language itself score better than uniform noise.
    noise = np.random.default_rng(0).integers(0, 6, size=(4000, 16))
    assert metrics.oracle_gen_ppl(lang, noise) > ppl
    with pytest.raises(ValueError, match="samples"):
        metrics.oracle_gen_ppl(lang, np.zeros(5, int))


def test_smoothed_reference_prices_impossible_tokens():
    # Two states that swap every step, each emitting one of tokens {0, 1}; token 2 is never
    # emitted, and after the first token the whole sequence is determined.
    lang = hmm_lib.HMM(init=np.array([0.5, 0.5]), trans=np.array([[0.0, 1.0], [1.0, 0.0]]),
                       emit=np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    x = np.tile(np.array([0, 1, 0, 1, 0, 1, 0, 1]), (10, 1))
    assert metrics.invalid_rate(lang, x) == 0.0
    assert metrics.oracle_gen_ppl(lang, x, smoothing=0.0) == pytest.approx(2 ** (1 / 8))
    bad = x.copy()
    bad[:, 5] = 2  # one impossible token per sequence; the chain carries on past it
    assert metrics.invalid_rate(lang, bad) == pytest.approx(1 / 8)
    assert metrics.oracle_gen_ppl(lang, bad, smoothing=0.0) == math.inf
    s = metrics.SMOOTHING
    exact = [np.log((1 - s) * 0.5 + s / 3)] + [np.log((1 - s) + s / 3)] * 6 + [np.log(s / 3)]
    assert metrics.oracle_gen_ppl(lang, bad) == pytest.approx(math.exp(-sum(exact) / 8),
                                                              rel=1e-9)
    with pytest.raises(ValueError, match="smoothing"):
        metrics.oracle_gen_ppl(lang, x, smoothing=1.0)


def test_unigram_and_bigram_entropies():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(2000, 50))
    assert metrics.unigram_entropy(x, 4) == pytest.approx(math.log(4), abs=2e-3)
    assert metrics.bigram_entropy(x, 4) == pytest.approx(math.log(4), abs=5e-3)
    rep = np.tile(np.arange(4), (10, 5))  # deterministic successor: H(x_t+1 | x_t) = 0
    assert metrics.unigram_entropy(rep, 4) == pytest.approx(math.log(4))
    assert metrics.bigram_entropy(rep, 4) == pytest.approx(0.0, abs=1e-12)
    assert metrics.unigram_entropy(np.zeros((3, 3), int), 4) == 0.0


def test_exact_bigram_and_reference_samples():
    lang = hmm_lib.make_hmm(6, 5, seed=2, trans_concentration=0.5, emit_concentration=0.5)
    big = metrics.exact_bigram(lang)
    np.testing.assert_allclose(big.sum(1), 1.0, rtol=1e-12)
    x = hmm_lib.sample(lang, 20_000, 2, seed=0)
    emp = np.zeros((5, 5))
    np.add.at(emp, (x[:, 0], x[:, 1]), 1)
    np.testing.assert_allclose(emp / emp.sum(1, keepdims=True), big, atol=0.03)
    ref = metrics.reference_samples(lang, 3000, 12, seed=0)
    q = {k: metrics.sample_quality(lang, v) for k, v in ref.items()}
    # The language beats its bigram chain, which beats i.i.d. unigram tokens.
    assert q["data"]["gen_ppl"] < q["bigram"]["gen_ppl"] < q["unigram"]["gen_ppl"]
    assert q["data"]["invalid"] == 0.0
