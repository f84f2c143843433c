"""Issue 43: the on-device HMM sampler ``sample_jax`` against the NumPy sampler ``sample``.

The two use different generators, so their draws differ; what must agree is the distribution:
the hidden chain's transitions, the emissions, the stationary token marginal and the exact
entropy rate (scored with the exact forward algorithm). Seeds are fixed, so the statistical
checks are deterministic; each bound is several standard errors wide.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from icml26_jax.core.testing import largest_constant
from icml26_jax.lm import hmm as hmm_lib


def _draw(h, n, length, seed=0, **kw):
    return hmm_lib.sample_jax(jax.random.key(seed), hmm_lib.device_hmm(h), n, length, **kw)


def test_shapes_determinism_prefixes_and_keys():
    h = hmm_lib.make_hmm(seed=0)
    x, z = _draw(h, 16, 64, seed=7, return_states=True)
    assert x.shape == z.shape == (16, 64) and x.dtype == z.dtype == jnp.int32
    x, z = np.asarray(x), np.asarray(z)
    assert x.min() >= 0 and x.max() < 64 and z.min() >= 0 and z.max() < 32
    np.testing.assert_array_equal(x, _draw(h, 16, 64, seed=7))
    assert not np.array_equal(x, _draw(h, 16, 64, seed=8))
    # Position t draws from keys folded from t: a shorter sample is a prefix of a longer one.
    np.testing.assert_array_equal(x[:, :10], _draw(h, 16, 10, seed=7))


def test_transition_counts_match_trans_and_the_numpy_sampler():
    # Identity emissions reveal the state, so tokens are the hidden path of either sampler.
    h0 = hmm_lib.make_hmm(4, 4, seed=2, trans_concentration=1.0)
    h = h0._replace(emit=np.eye(4))
    counts = []
    for x in (np.asarray(_draw(h, 512, 64)), hmm_lib.sample(h, 512, 64, seed=0)):
        c = np.zeros((4, 4))
        np.add.at(c, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
        counts.append(c)
    empirical = counts[0] / counts[0].sum(axis=1, keepdims=True)
    # >= 4,000 transitions per row: binomial standard error <= 0.008, so 0.04 is 5 sigma.
    np.testing.assert_allclose(empirical, h.trans, atol=0.04)
    for i in range(4):  # Row by row, the two samplers' next-state counts are homogeneous.
        table = np.stack([counts[0][i], counts[1][i]])
        assert stats.chi2_contingency(table[:, table.sum(0) > 0]).pvalue > 1e-3, i


def test_emissions_and_the_stationary_marginal():
    h = hmm_lib.make_hmm(6, 8, seed=3, trans_concentration=1.0, emit_concentration=1.0)
    x, z = (np.asarray(a) for a in _draw(h, 8192, 8, return_states=True))
    # Given the state, the token follows emit (every state visited >= 5,000 times).
    counts = np.zeros((6, 8))
    np.add.at(counts, (z.ravel(), x.ravel()), 1)
    np.testing.assert_allclose(counts / counts.sum(1, keepdims=True), h.emit, atol=0.03)
    # Sequences are independent, so one position's tokens are i.i.d. draws of the marginal.
    want = hmm_lib.token_marginal(h)
    for t in (0, 7):
        got = np.bincount(x[:, t], minlength=8)
        assert stats.chisquare(got, want * got.sum()).pvalue > 1e-3, t
    ref = hmm_lib.sample(h, 8192, 8, seed=1)
    table = np.stack([np.bincount(x[:, 7], minlength=8), np.bincount(ref[:, 7], minlength=8)])
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_exact_entropy_rate_matches_the_numpy_sampler():
    h = hmm_lib.make_hmm(seed=0, trans_concentration=0.05, emit_concentration=0.05)
    rates = []
    for x in (np.asarray(_draw(h, 256, 512, seed=3)), hmm_lib.sample(h, 256, 512, seed=3)):
        per_seq = -hmm_lib.log_likelihood(h, x)[:, 256:].mean(1)
        rates.append((per_seq.mean(), per_seq.std(ddof=1) / np.sqrt(per_seq.size)))
    (a, sa), (b, sb) = rates
    assert abs(a - b) < 4 * np.hypot(sa, sb), rates
    # A sampler of another language would score far worse under this one's exact likelihood.
    other = hmm_lib.make_hmm(seed=1, trans_concentration=0.05, emit_concentration=0.05)
    wrong = -hmm_lib.log_likelihood(h, np.asarray(_draw(other, 64, 512)))[:, 256:].mean()
    assert wrong > a + 1.0


def test_zero_probability_states_and_tokens_are_never_drawn():
    h = hmm_lib.make_hmm(16, 32, seed=4, num_successors=2, num_emissions=3)
    x, z = (np.asarray(a) for a in _draw(h, 512, 64, return_states=True))
    assert (h.emit[z, x] > 0).all()
    assert (h.trans[z[:, :-1], z[:, 1:]] > 0).all()
    # A uniform that rounds up to the row total is capped at the last nonzero entry.
    p = jnp.array([[0.5, 0.5, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.2, 0.3, 0.5, 0.0]])
    np.testing.assert_array_equal(hmm_lib._last_positive(p), [1, 1, 2])


def test_inside_a_jitted_step_the_model_is_an_argument_not_a_constant():
    h = hmm_lib.make_hmm(64, 512, seed=0)  # 64 x 512 float32 emissions: 128 KB

    def step(key, model, i):
        return hmm_lib.sample_jax(jax.random.fold_in(key, i), model, 4, 16).sum()

    size, _ = largest_constant(jax.jit(step), jax.random.key(0), hmm_lib.device_hmm(h),
                               jnp.int32(0))
    assert size < 1024, size


@pytest.mark.parametrize("kwargs, match", [(dict(num_seqs=0), "num_seqs"),
                                           (dict(length=0), "length"),
                                           (dict(num_seqs=2.0), "num_seqs")])
def test_input_errors(kwargs, match):
    args = dict(num_seqs=2, length=3) | kwargs
    with pytest.raises(ValueError, match=match):
        hmm_lib.sample_jax(jax.random.key(0), hmm_lib.device_hmm(hmm_lib.make_hmm(seed=0)),
                           **args)
    bad = hmm_lib.HMM(np.ones(3) / 3, np.eye(3), np.ones((2, 4)) / 4)
    with pytest.raises(ValueError, match="hmm must have"):
        hmm_lib.sample_jax(jax.random.key(0), bad, 2, 3)
