"""OddSHAP spec §Tests 1-4: packed parity (multi-word), the FWHT, Walsh -> Shapley against
brute-force enumeration, and the odd/even theorem."""

import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.oddshap import baselines, fourier, games


@pytest.mark.parametrize("n", [5, 33, 70])
def test_parity_matches_explicit_and_pack_round_trips(n):
    rng = np.random.default_rng(n)
    s = rng.random((40, n)) < 0.5
    t = rng.random((25, n)) < 0.3
    ps, pt = fourier.pack(jnp.asarray(s)), fourier.pack(jnp.asarray(t))
    assert ps.dtype == jnp.uint32 and ps.shape == (40, fourier.num_words(n))
    np.testing.assert_array_equal(np.asarray(fourier.unpack(ps, n)), s)
    explicit = (-1) ** (s.astype(int) @ t.T.astype(int))
    par = fourier.parity(ps, pt)
    assert par.dtype == jnp.int8
    np.testing.assert_array_equal(np.asarray(par), explicit)
    with pytest.raises(ValueError, match="bool"):
        fourier.pack(jnp.asarray(s.astype(np.int32)))
    with pytest.raises(ValueError, match="uint32"):
        fourier.unpack(ps.astype(jnp.int32), n)


def test_fwht_involution_spectrum_and_unanimity_closed_form():
    n = 7
    rng = np.random.default_rng(0)
    v = jnp.asarray(rng.normal(size=1 << n))
    np.testing.assert_allclose(fourier.fwht(fourier.fwht(v)), (1 << n) * v, atol=1e-11)
    coefs = fourier.spectrum(v)
    chi = fourier.parity_f(fourier.pack(jnp.asarray(fourier.index_bits(n))),
                           fourier.pack(jnp.asarray(fourier.index_bits(n))))
    np.testing.assert_allclose(chi @ coefs, v, atol=1e-12)
    # 1[T ⊆ S] has (-1)^{|U|} / 2^{|T|} on every U ⊆ T and 0 elsewhere
    t = np.array([1, 4, 5])
    z = fourier.index_bits(n)
    una = np.all(z[:, t], axis=1).astype(np.float64)
    got = np.asarray(fourier.spectrum(jnp.asarray(una)))
    want = np.zeros(1 << n)
    for u in range(1 << n):
        members = np.flatnonzero(z[u])
        if set(members) <= set(t):
            want[u] = (-1) ** len(members) / 2 ** len(t)
    np.testing.assert_allclose(got, want, atol=1e-15)
    sm, sc = games.soum_spectrum(np.asarray(fourier.pack(jnp.asarray(z[[np.sum(2 ** t)]]))),
                                 [1.0], n)
    dense = np.zeros(1 << n)
    dense[sm[:, 0].astype(np.int64)] = sc
    np.testing.assert_allclose(dense, want, atol=1e-15)
    with pytest.raises(ValueError, match="2\\^n"):
        fourier.fwht(jnp.ones(12))


@pytest.mark.parametrize("n", [3, 6, 10])
def test_walsh_shapley_equals_brute_force_enumeration(n):
    rng = np.random.default_rng(n)
    v = rng.normal(size=1 << n)
    phi = np.asarray(fourier.shapley_from_table(jnp.asarray(v)))
    np.testing.assert_allclose(phi, baselines.shapley_bruteforce(v), atol=1e-10)
    if n <= 6:
        np.testing.assert_allclose(phi, baselines.shapley_permutations(v), atol=1e-10)
    # sparse form on the full spectrum
    masks = fourier.pack(jnp.asarray(fourier.index_bits(n)))
    np.testing.assert_allclose(fourier.shapley_from_fourier(fourier.spectrum(jnp.asarray(v)),
                                                            masks, n), phi, atol=1e-10)
    np.testing.assert_allclose(phi.sum(), v[-1] - v[0], atol=1e-10)  # efficiency


def test_shapley_of_even_part_is_zero_and_odd_part_suffices():
    n = 9
    v = jnp.asarray(np.random.default_rng(1).normal(size=1 << n))
    odd, even = fourier.odd_even_split(v)
    np.testing.assert_allclose(odd + even, v, atol=1e-15)
    comp = fourier.complement_index(n)
    np.testing.assert_allclose(odd[comp], -odd, atol=1e-15)
    np.testing.assert_allclose(fourier.shapley_from_table(even), 0.0, atol=1e-12)
    np.testing.assert_allclose(fourier.shapley_from_table(odd), fourier.shapley_from_table(v),
                               atol=1e-12)
    assert float(jnp.abs(fourier.shapley_from_table(v)).max()) > 0.05  # not a trivial game


def test_shapiq_exact_computer_agrees_when_installed():
    shapiq = pytest.importorskip("shapiq")
    n = 6
    v = np.random.default_rng(2).normal(size=1 << n)
    z = fourier.index_bits(n)
    lookup = {tuple(row): val for row, val in zip(z, v)}

    def game(coalitions):
        return np.array([lookup[tuple(np.asarray(c, bool))] for c in coalitions])

    ex = shapiq.ExactComputer(n_players=n, game=game)
    sv = ex("SV")
    got = np.array([sv[(i,)] for i in range(n)])
    np.testing.assert_allclose(got, np.asarray(fourier.shapley_from_table(jnp.asarray(v))),
                               atol=1e-10)
