"""Oracle Gen-PPL and the entropy guard against closed forms on small cases."""

import math

import numpy as np
import pytest

from icml26_jax.discrete_diffusion import metrics
from icml26_jax.lm import hmm as hmm_lib


def test_oracle_gen_ppl_of_the_language_matches_its_entropy():
    lang = hmm_lib.make_hmm(8, 6, seed=0, trans_concentration=0.5, emit_concentration=0.5)
    x = hmm_lib.sample(lang, 4000, 16, seed=1)
    ppl = metrics.oracle_gen_ppl(lang, x)
    nll = -hmm_lib.log_likelihood(lang, x).sum(1).mean() / 16
    assert ppl == pytest.approx(math.exp(nll), rel=1e-9)
    # Samples from the language itself score better than uniform noise.
    noise = np.random.default_rng(0).integers(0, 6, size=(4000, 16))
    assert metrics.oracle_gen_ppl(lang, noise) > ppl
    with pytest.raises(ValueError, match="samples"):
        metrics.oracle_gen_ppl(lang, np.zeros(5, int))


def test_unigram_and_bigram_entropies():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(2000, 50))
    assert metrics.unigram_entropy(x, 4) == pytest.approx(math.log(4), abs=2e-3)
    assert metrics.bigram_entropy(x, 4) == pytest.approx(math.log(4), abs=5e-3)
    rep = np.tile(np.arange(4), (10, 5))  # deterministic successor: H(x_t+1 | x_t) = 0
    assert metrics.unigram_entropy(rep, 4) == pytest.approx(math.log(4))
    assert metrics.bigram_entropy(rep, 4) == pytest.approx(0.0, abs=1e-12)
    assert metrics.unigram_entropy(np.zeros((3, 3), int), 4) == 0.0
