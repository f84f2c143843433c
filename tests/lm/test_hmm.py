"""Tests of the synthetic HMM language: exact likelihood, sampling, entropy rate."""

import itertools

import numpy as np
import pytest

from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm.hmm import HMM


def _tiny(num_states, seed, *, stationary=True):
    """A small HMM with spread-out rows (concentration 1), so no path is negligible."""
    h = hmm_lib.make_hmm(num_states, 3, seed=seed, trans_concentration=1.0,
                         emit_concentration=1.0)
    if not stationary:  # The forward pass must use init, not assume stationarity.
        init = np.random.default_rng(seed + 100).dirichlet(np.ones(num_states))
        h = h._replace(init=init)
    return h


def _brute_force_log_marginals(h, x):
    """``[L + 1]`` log p(x_<t) for t = 0..L, summing the joint over every hidden path."""
    s = h.trans.shape[0]
    out = [0.0]
    for t in range(1, len(x) + 1):
        total = 0.0
        for z in itertools.product(range(s), repeat=t):
            p = h.init[z[0]] * h.emit[z[0], x[0]]
            for k in range(1, t):
                p *= h.trans[z[k - 1], z[k]] * h.emit[z[k], x[k]]
            total += p
        out.append(np.log(total))
    return np.array(out)


def _all_sequences(vocab, length):
    """``[V^L, L]`` every sequence, in lexicographic order (first token varies slowest)."""
    return np.array(list(itertools.product(range(vocab), repeat=length)), np.int32)


@pytest.mark.parametrize("num_states, seed, stationary", [(2, 0, True), (3, 1, True),
                                                          (3, 2, False)])
def test_log_likelihood_matches_brute_force(num_states, seed, stationary):
    h = _tiny(num_states, seed, stationary=stationary)
    tokens = _all_sequences(3, 4)  # [81, 4]
    ll = hmm_lib.log_likelihood(h, tokens)
    assert ll.shape == (81, 4) and ll.dtype == np.float64
    for x, row in zip(tokens, ll):
        expected = np.diff(_brute_force_log_marginals(h, x))  # log p(x_t | x_<t)
        np.testing.assert_allclose(row, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("num_states, seed", [(2, 3), (3, 4)])
def test_conditionals_are_normalised(num_states, seed):
    h = _tiny(num_states, seed, stationary=False)
    v, length = 3, 4
    ll = hmm_lib.log_likelihood(h, _all_sequences(v, length))
    for t in range(length):
        # Lexicographic order: rows with the same x_<t and x_t are the block [x_<t, x_t, :].
        p = np.exp(ll[:, t]).reshape(v ** t, v, v ** (length - t - 1))
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.exp(ll.sum(axis=1)).sum(), 1.0, rtol=0, atol=1e-12)


def test_log_likelihood_impossible_token_is_minus_inf():
    h = HMM(init=np.array([1.0, 0.0]), trans=np.array([[0.5, 0.5], [0.5, 0.5]]),
            emit=np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]]))
    ll = hmm_lib.log_likelihood(h, np.array([[1, 0, 2]]))  # z_0 = 0 cannot emit token 1.
    assert ll[0, 0] == -np.inf
    np.testing.assert_allclose(ll[0, 1:], np.log([0.5, 0.25]))  # carried on unconditioned


def test_make_hmm_is_a_deterministic_stationary_hmm():
    h = hmm_lib.make_hmm(8, 16, seed=3)
    assert h.init.shape == (8,) and h.trans.shape == (8, 8) and h.emit.shape == (8, 16)
    assert (h.num_states, h.vocab_size) == (8, 16)
    assert all(a.dtype == np.float64 for a in h)
    np.testing.assert_allclose(h.trans.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(h.emit.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(h.init.sum(), 1.0, atol=1e-12)
    np.testing.assert_allclose(h.init @ h.trans, h.init, atol=1e-12)
    assert np.all(h.init >= 0)
    for a, b in zip(h, hmm_lib.make_hmm(8, 16, seed=3)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(h.emit, hmm_lib.make_hmm(8, 16, seed=4).emit)


def test_make_hmm_small_concentration_has_no_degenerate_rows():
    # Plain gamma draws underflow to 0 at this concentration; rows must still be distributions.
    h = hmm_lib.make_hmm(16, 32, seed=0, trans_concentration=1e-3, emit_concentration=1e-3)
    assert np.all(np.isfinite(h.trans)) and np.all(np.isfinite(h.emit))
    np.testing.assert_allclose(h.emit.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(h.emit.max(axis=1) > 0.5)  # nearly one-hot


def test_make_hmm_sparsity():
    h = hmm_lib.make_hmm(10, 20, seed=1, sparsity=0.75)
    assert np.all((h.emit > 0).sum(axis=1) == 5)
    # round(0.25 * 10) = 2 random successors, plus the forced one if it was not drawn.
    assert np.all(np.isin((h.trans > 0).sum(axis=1), (2, 3)))
    assert np.all(h.trans[np.arange(10), (np.arange(10) + 1) % 10] > 0)  # irreducible cycle
    np.testing.assert_allclose(h.init @ h.trans, h.init, atol=1e-12)
    assert np.all(h.init > 0)


def test_stationary_distribution_closed_form():
    p, q = 0.1, 0.3
    pi = hmm_lib.stationary_distribution(np.array([[1 - p, p], [q, 1 - q]]))
    np.testing.assert_allclose(pi, [q / (p + q), p / (p + q)], rtol=1e-12)


def test_sample_is_deterministic_and_in_range():
    h = hmm_lib.make_hmm(seed=0)
    x = hmm_lib.sample(h, 16, 64, seed=7)
    assert x.shape == (16, 64) and x.dtype == np.int32
    assert x.min() >= 0 and x.max() < 64
    np.testing.assert_array_equal(x, hmm_lib.sample(h, 16, 64, seed=7))
    assert not np.array_equal(x, hmm_lib.sample(h, 16, 64, seed=8))
    # Positions are drawn in order, so a longer sample extends a shorter one.
    np.testing.assert_array_equal(x[:, :10], hmm_lib.sample(h, 16, 10, seed=7))


def test_sample_frequencies_match_the_stationary_marginal():
    h = hmm_lib.make_hmm(seed=0)
    x = hmm_lib.sample(h, 256, 256, seed=1)  # 65,536 tokens
    freq = np.bincount(x.ravel(), minlength=64) / x.size
    tv = 0.5 * np.abs(freq - hmm_lib.token_marginal(h)).sum()
    # Measured TV over 20 seeds: mean 0.012, max 0.015 (tokens within a sequence are
    # correlated, so this is above the i.i.d. level); sampling from a wrong distribution,
    # e.g. the unigram of another seed's HMM, gives a TV above 0.4.
    assert tv < 0.03
    other = hmm_lib.token_marginal(hmm_lib.make_hmm(seed=1))
    assert 0.5 * np.abs(freq - other).sum() > 0.1


def test_sample_follows_transitions():
    # Deterministic emissions reveal the state: empirical transition counts match trans.
    h0 = hmm_lib.make_hmm(4, 4, seed=2, trans_concentration=1.0)
    h = h0._replace(emit=np.eye(4))
    x = hmm_lib.sample(h, 512, 64, seed=0)
    counts = np.zeros((4, 4))
    np.add.at(counts, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    empirical = counts / counts.sum(axis=1, keepdims=True)
    # >= 4,000 transitions per row: binomial standard error <= 0.008, so 0.04 is 5 sigma.
    np.testing.assert_allclose(empirical, h.trans, atol=0.04)


def test_entropy_rate_bounds_and_unigram():
    h = hmm_lib.make_hmm(seed=0)
    rate = hmm_lib.entropy_rate(h, num_seqs=128, length=512)
    unigram = hmm_lib.unigram_entropy(h)
    assert isinstance(rate, float)
    assert 0.0 < rate < unigram < np.log(64)
    # The first token has no context: its conditional entropy is the unigram entropy.
    by_pos = hmm_lib.conditional_entropy_by_position(h, 32, num_seqs=4096, seed=3)
    assert by_pos.shape == (32,)
    # Standard error of the position-0 mean over 4096 sequences is 0.008; 0.04 is 5 sigma.
    assert abs(by_pos[0] - unigram) < 0.04
    assert by_pos[1] < by_pos[0] - 0.05  # one token of context already helps
    assert abs(by_pos[16:].mean() - rate) < 0.03  # converged to the rate by position 16
    # Lower concentration: a more predictable language.
    peaked = hmm_lib.make_hmm(seed=0, trans_concentration=0.02, emit_concentration=0.02)
    assert hmm_lib.entropy_rate(peaked, num_seqs=128, length=512) < rate - 1.0


def _bigram_nll(train, test, vocab):
    counts = np.full((vocab, vocab), 1e-3)  # add-epsilon smoothing of unseen pairs
    np.add.at(counts, (train[:, :-1].ravel(), train[:, 1:].ravel()), 1)
    p = counts / counts.sum(axis=1, keepdims=True)
    return float(-np.log(p[test[:, :-1], test[:, 1:]]).mean())


@pytest.mark.parametrize("concentration", [0.1, 0.02])
def test_exact_predictor_beats_a_fitted_bigram(concentration):
    # With the defaults (0.1) the exact predictor is 0.10 nats/token ahead of the bigram
    # (3.82 vs 3.92, seed 0); at 0.02 the gap is 0.34. The standard error of each mean below
    # (64 x 1023 correlated tokens) is about 0.01, so a 0.05 margin is a real gap.
    h = hmm_lib.make_hmm(seed=0, trans_concentration=concentration,
                         emit_concentration=concentration)
    train = hmm_lib.sample(h, 512, 512, seed=1)
    test = hmm_lib.sample(h, 64, 1024, seed=2)
    exact = float(-hmm_lib.log_likelihood(h, test)[:, 1:].mean())
    bigram = _bigram_nll(train, test, 64)
    assert exact < bigram - 0.05


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_states=0), r"num_states must be an integer >= 1, got num_states=0"),
    (dict(num_states=2.0), "num_states must be an integer"),
    (dict(vocab_size=1), r"vocab_size must be an integer >= 2, got vocab_size=1"),
    (dict(trans_concentration=0.0), "trans_concentration must be a finite number > 0"),
    (dict(emit_concentration=float("nan")), "emit_concentration must be a finite number > 0"),
    (dict(sparsity=1.0), r"sparsity must be None or in \[0, 1\), got sparsity=1.0"),
])
def test_make_hmm_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        hmm_lib.make_hmm(**kwargs)


def test_input_errors():
    h = hmm_lib.make_hmm(4, 8, seed=0)
    with pytest.raises(ValueError, match=r"tokens must be in \[0, vocab_size=8\)"):
        hmm_lib.log_likelihood(h, np.array([[0, 8]]))
    with pytest.raises(ValueError, match="tokens must be a 2-D integer array"):
        hmm_lib.log_likelihood(h, np.array([0, 1]))
    with pytest.raises(ValueError, match="tokens must be a 2-D integer array"):
        hmm_lib.log_likelihood(h, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="num_seqs must be an integer >= 1"):
        hmm_lib.sample(h, 0, 4, seed=0)
    with pytest.raises(ValueError, match="length must be an integer >= 2"):
        hmm_lib.entropy_rate(h, length=1)
    with pytest.raises(ValueError, match=r"hmm must have init \[S\], trans \[S, S\]"):
        hmm_lib.sample(h._replace(trans=np.eye(3)), 1, 4, seed=0)


def test_exact_support_sizes():
    h = hmm_lib.make_hmm(128, 64, seed=0, trans_concentration=0.5, emit_concentration=0.5,
                         num_successors=4, num_emissions=8)
    assert ((h.trans > 0).sum(1) == 4).all()
    assert ((h.emit > 0).sum(1) == 8).all()
    assert (h.trans[np.arange(128), (np.arange(128) + 1) % 128] > 0).all()
    np.testing.assert_allclose(h.trans.sum(1), 1.0)
    with pytest.raises(ValueError, match="num_successors"):
        hmm_lib.make_hmm(4, 8, num_successors=5)
    with pytest.raises(ValueError, match="num_emissions"):
        hmm_lib.make_hmm(4, 8, num_emissions=0)
