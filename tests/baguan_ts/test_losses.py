"""Bar-distribution losses and decoding against independent float64 references (spec §Tests,
"Losses"): the full-support density integrates to 1, the discrete CRPS equals the integral
int (F - 1[y <= x])^2 dx, decoded quantiles equal a numpy inverse CDF, gradients are finite."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from icml26_jax.baguan_ts import losses

BINS = 16  # small on purpose: every reference below is O(bins) or O(bins^2) in numpy
BORDERS = np.linspace(-10.0, 10.0, BINS + 1)  # float64 reference borders
B32 = losses.bar_borders(BINS)
CENTRES = 0.5 * (BORDERS[:-1] + BORDERS[1:])
WIDTH = BORDERS[1] - BORDERS[0]

log_density_j = jax.jit(losses.bar_log_density)
nll_j = jax.jit(losses.bar_nll)
crps_j = jax.jit(losses.crps_discrete)
ce_j = jax.jit(losses.bar_cross_entropy)
mean_j = jax.jit(losses.decode_mean, static_argnames="temperature")
quant_j = jax.jit(losses.decode_quantiles, static_argnames="temperature")


def _logits(n, bins=BINS, scale=3.0, seed=0):
    return (np.random.default_rng(seed).normal(size=(n, bins)) * scale).astype(np.float32)


def _softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _f32(x):
    return jnp.asarray(np.asarray(x, np.float32))


# ------------------------------------------------------------------------------------------
# Borders and the full-support density


def test_bar_borders():
    b = losses.bar_borders(256)
    assert b.shape == (257,) and b.dtype == jnp.float32
    assert float(b[0]) == -10.0 and float(b[-1]) == 10.0
    assert np.all(np.diff(np.asarray(b)) > 0)
    np.testing.assert_allclose(losses.bar_centres(B32), CENTRES, atol=1e-6)
    with pytest.raises(ValueError, match="bins must be an int >= 2"):
        losses.bar_borders(1)
    with pytest.raises(ValueError, match="lo must be < hi"):
        losses.bar_borders(8, lo=1.0, hi=-1.0)


def test_tail_scale_puts_half_the_mass_within_one_width():
    # The constant is the half-normal median, so P(|X| < w) = 0.5 for sigma = tail_scale(w).
    np.testing.assert_allclose(losses.HALFNORMAL_MEDIAN, stats.halfnorm.ppf(0.5), rtol=1e-12)
    sigma = float(losses.tail_scale(WIDTH))
    np.testing.assert_allclose(stats.halfnorm.cdf(WIDTH, scale=sigma), 0.5, rtol=1e-6)


def test_density_with_tails_integrates_to_one():
    # Midpoint rule on [-60, 60] with a step h that divides the bar width (1.25 / h = 1000),
    # so no node sits on a border and the inner, piecewise-constant part is integrated
    # exactly; the tails are smooth (sigma = 1.85) and end > 27 sigma before +-60. What is
    # left is float32 rounding of the density, hence the 1e-4 tolerance.
    h = WIDTH / 1000
    x = -60.0 + h * (np.arange(int(round(120 / h))) + 0.5)
    # Row 2 puts most of the mass into the two outer bars: the tails must carry it.
    lg = np.concatenate([_logits(2), np.array([[4.0] + [0.0] * (BINS - 2) + [3.0]], np.float32)])
    dens = np.exp(np.asarray(
        log_density_j(_f32(np.broadcast_to(lg[:, None], (3, x.size, BINS))),
                      _f32(np.broadcast_to(x, (3, x.size))), B32), np.float64))
    np.testing.assert_allclose(dens.sum(-1) * h, 1.0, atol=1e-4)

    p = _softmax(lg)
    # The lower tail holds p_0 over (-inf, b_1], half of it inside the original bar [b_0, b_1].
    lower = x < BORDERS[1]
    np.testing.assert_allclose(dens[:, lower].sum(-1) * h, p[:, 0], atol=1e-4)
    in_bar = lower & (x > BORDERS[0])
    np.testing.assert_allclose(dens[:, in_bar].sum(-1) * h, 0.5 * p[:, 0], atol=1e-4)
    upper_out = x > BORDERS[-1]
    np.testing.assert_allclose(dens[:, upper_out].sum(-1) * h, 0.5 * p[:, -1], atol=1e-4)


def test_log_density_inner_bars_and_tails_match_reference():
    lg = _logits(1)[0]
    logp = np.log(_softmax(lg))
    rng = np.random.default_rng(1)
    # Inner bars: log softmax_k - log w_k, at a random point strictly inside every inner bar.
    k = np.arange(1, BINS - 1)
    y = BORDERS[k] + rng.uniform(0.05, 0.95, k.size) * WIDTH
    got = log_density_j(_f32(np.broadcast_to(lg, (k.size, BINS))), _f32(y), B32)
    np.testing.assert_allclose(got, logp[k] - np.log(WIDTH), atol=2e-5)
    # Tails: log p_outer + the half-normal log-pdf of the distance from the inner border,
    # inside the outer bars and beyond the borders alike (scipy's halfnorm as reference).
    sigma = WIDTH / stats.halfnorm.ppf(0.5)
    y_lo = np.array([-9.5, -10.0, -11.0, -25.0])
    y_hi = np.array([9.0, 10.0, 12.5, 30.0])
    ref = np.concatenate([logp[0] + stats.halfnorm.logpdf(BORDERS[1] - y_lo, scale=sigma),
                          logp[-1] + stats.halfnorm.logpdf(y_hi - BORDERS[-2], scale=sigma)])
    yy = np.concatenate([y_lo, y_hi])
    got = log_density_j(_f32(np.broadcast_to(lg, (yy.size, BINS))), _f32(yy), B32)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-5)


def test_nll_is_minus_log_density_and_finite_far_outside():
    lg = _f32(_logits(6))
    y = _f32([-1e3, -50.0, -10.0, 0.3, 50.0, 1e3])
    nll = np.asarray(nll_j(lg, y, B32))
    assert np.all(np.isfinite(nll))
    np.testing.assert_array_equal(nll, -np.asarray(log_density_j(lg, y, B32)))
    # Further out in a tail is less likely.
    assert nll[0] > nll[1] and nll[5] > nll[4]


def test_bar_index_and_cross_entropy():
    y = np.array([-30.0, -10.0, -8.75, -8.7, 0.0, 0.01, 10.0, 30.0])
    # Bar k holds (b_k, b_{k+1}]; b_0 goes to bar 0; outside values go to the outer bars.
    expect = np.array([0, 0, 0, 1, 7, 8, 15, 15])
    np.testing.assert_array_equal(losses.bar_index(_f32(y), B32), expect)
    lg = _logits(y.size)
    ref = -np.log(_softmax(lg))[np.arange(y.size), expect]
    np.testing.assert_allclose(ce_j(_f32(lg), _f32(y), B32), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Discrete CRPS


def _crps_integral(p, y):
    """int (F(x) - 1[y <= x])^2 dx exactly: the integrand is constant between consecutive
    breakpoints (the centres and y), so evaluate it at the midpoints of that grid."""
    pts = np.sort(np.concatenate([CENTRES, [y]]))
    mid = 0.5 * (pts[1:] + pts[:-1])
    F = (p[None, :] * (CENTRES[None, :] <= mid[:, None])).sum(-1)
    return np.sum((F - (y <= mid)) ** 2 * np.diff(pts))


def _crps_pairwise(p, y, c):
    """The O(bins^2) definition sum_k p_k |c_k - y| - 1/2 sum_{k,l} p_k p_l |c_k - c_l|."""
    return (p * np.abs(c - y[:, None])).sum(-1) - 0.5 * np.einsum(
        "nk,nl,kl->n", p, p, np.abs(c[:, None] - c[None, :]))


def test_crps_equals_integral_of_squared_cdf_difference():
    lg = _logits(6, seed=2)
    y = np.array([-14.0, -9.9, -0.4, 0.0, 3.3, 11.0])
    got = np.asarray(crps_j(_f32(lg), _f32(y), B32))
    ref = np.array([_crps_integral(p, yi) for p, yi in zip(_softmax(lg), y)])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_crps_of_a_point_mass_is_the_absolute_error():
    k = np.array([0, 3, 9, 15, 15, 7])
    lg = np.full((6, BINS), -1e4, np.float32)  # exp(-1e4) underflows: exactly one-hot
    lg[np.arange(6), k] = 0.0
    y = np.array([-20.0, -5.1, 2.0, 9.2, 9.375, -0.625])
    np.testing.assert_allclose(crps_j(_f32(lg), _f32(y), B32), np.abs(CENTRES[k] - y), atol=1e-5)


def test_fast_crps_equals_pairwise_form_at_config_bins():
    bins = 256
    lg = _logits(5, bins=bins, seed=3)
    y = np.array([-12.0, -3.0, 0.05, 4.0, 9.99])
    b = np.linspace(-10.0, 10.0, bins + 1)
    got = crps_j(_f32(lg), _f32(y), losses.bar_borders(bins))
    ref = _crps_pairwise(_softmax(lg), y, 0.5 * (b[1:] + b[:-1]))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_crps_matches_scoringrules_ensemble():
    sr = pytest.importorskip("scoringrules")
    # Equal logits: equal point masses at the centres, i.e. an ensemble of the centres.
    y = np.array([-3.0, 0.2, 12.0])
    ref = np.asarray(sr.crps_ensemble(y, np.broadcast_to(CENTRES, (3, BINS)), estimator="nrg"))
    got = crps_j(jnp.zeros((3, BINS), jnp.float32), _f32(y), B32)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Decoding


def test_decode_mean_is_the_tempered_expectation():
    lg = _logits(6, seed=4)
    ref = (_softmax(lg / 0.9) * CENTRES).sum(-1)
    got = np.asarray(mean_j(_f32(lg), B32))  # default temperature 0.9
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # The temperature matters (so the default is really applied).
    t1 = np.asarray(mean_j(_f32(lg), B32, temperature=1.0))
    np.testing.assert_allclose(t1, (_softmax(lg) * CENTRES).sum(-1), rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(t1 - got)) > 1e-3


def test_decode_quantiles_is_the_numpy_inverse_cdf():
    lg = _logits(6, seed=5)
    qs = np.array([0.001, 0.1, 0.25, 0.5, 0.77, 0.9, 0.999])
    got = np.asarray(quant_j(_f32(lg), B32, _f32(qs)))
    assert got.shape == (6, qs.size)
    for row, p in zip(got, _softmax(lg / 0.9)):
        # Piecewise-linear CDF through (b_k, F_k); strictly increasing for these logits.
        cdf = np.concatenate([[0.0], np.cumsum(p)])
        np.testing.assert_allclose(row, np.interp(qs, cdf, BORDERS), atol=1e-4)
    assert np.all(np.diff(got, axis=-1) >= 0)


def test_decode_quantiles_default_levels_and_monotone_with_empty_bars():
    lg = _logits(8, scale=5.0, seed=6)
    lg[:, ::2] = -1e4  # every other bar has zero mass: flat CDF segments to skip
    q = np.asarray(quant_j(_f32(lg), B32))
    assert q.shape == (8, 9)
    assert np.all(np.diff(q, axis=-1) >= 0)
    # Every quantile lies in (the closure of) a bar that carries mass.
    k = np.clip(np.searchsorted(BORDERS, q, side="left") - 1, 0, BINS - 1)
    on_border = np.isclose(q[..., None], BORDERS[1::2], atol=1e-5).any(-1)
    assert np.all((k % 2 == 1) | on_border)


def test_decode_quantiles_of_one_bar_is_uniform_inside_it():
    lg = np.full((1, BINS), -1e4, np.float32)
    lg[0, 5] = 0.0
    q = quant_j(_f32(lg), B32)
    np.testing.assert_allclose(q[0], BORDERS[5] + losses.QUANTILES * WIDTH, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Autodiff, batching, errors


@jax.jit
def _all_grads(lg, y):
    def g(fn):
        return jax.grad(lambda z: jnp.mean(fn(z, y, B32)))(lg)

    return (g(losses.bar_nll), g(losses.crps_discrete), g(losses.bar_cross_entropy),
            jax.grad(lambda t: jnp.sum(losses.bar_nll(lg, t, B32)))(y))


def test_gradients_are_finite():
    lg = _f32(_logits(6, seed=7))
    y = _f32([-40.0, -10.0, -2.0, 0.0, 9.5, 40.0])  # tails, borders and inner bars
    g_nll, g_crps, g_ce, g_y = _all_grads(lg, y)
    for g in (g_nll, g_crps, g_ce):
        assert np.all(np.isfinite(g)) and np.any(g != 0)
    assert np.all(np.isfinite(g_y))
    # d(nll)/d(logits) = (softmax - onehot(bar)) / n: a row sums to 0.
    np.testing.assert_allclose(np.asarray(g_nll).sum(-1), 0.0, atol=1e-6)


@jax.jit
def _batched_and_vmapped(lg, y):
    fns = (losses.bar_nll, losses.crps_discrete, losses.bar_cross_entropy)
    full = [fn(lg, y, B32) for fn in fns]
    mapped = [jax.vmap(fn, in_axes=(0, 0, None))(lg, y, B32) for fn in fns]
    return full, mapped, losses.decode_quantiles(lg, B32), losses.decode_mean(lg, B32)


def test_leading_dims_and_vmap():
    lg = _f32(_logits(6, seed=8).reshape(2, 3, BINS))
    y = _f32(np.linspace(-11.0, 11.0, 6).reshape(2, 3))
    full, mapped, q, mean = _batched_and_vmapped(lg, y)
    for a, b in zip(full, mapped):
        assert a.shape == (2, 3) and a.dtype == jnp.float32
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)
    assert q.shape == (2, 3, 9) and q.dtype == jnp.float32
    assert mean.shape == (2, 3)


def test_errors_name_the_argument():
    lg, y = jnp.zeros((3, BINS), jnp.float32), jnp.zeros((3,), jnp.float32)
    with pytest.raises(ValueError, match="logits must be"):
        losses.bar_nll(jnp.zeros((3, BINS + 1), jnp.float32), y, B32)
    with pytest.raises(ValueError, match="y must have the leading shape"):
        losses.crps_discrete(lg, jnp.zeros((4,), jnp.float32), B32)
    with pytest.raises(ValueError, match="borders must be"):
        losses.bar_cross_entropy(jnp.zeros((3, 1), jnp.float32), y, jnp.zeros((2,)))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        losses.decode_mean(lg, B32, temperature=0.0)
    with pytest.raises(ValueError, match=r"qs must lie in \[0, 1\]"):
        losses.decode_quantiles(lg, B32, qs=np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="qs must be a non-empty 1-D"):
        losses.decode_quantiles(lg, B32, qs=np.zeros((2, 2)))
