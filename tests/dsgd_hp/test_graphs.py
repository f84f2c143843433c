"""Graphs: Metropolis–Hastings weights, golden mixing rates, errors, networkx cross-check."""

import networkx as nx
import numpy as np
import pytest

from icml26_jax.dsgd_hp import graphs


@pytest.mark.parametrize("name", graphs.GRAPHS)
@pytest.mark.parametrize("n", [9, 16, 64])  # 9 = 3 x 3, the smallest torus
def test_mixing_matrix_properties(name, n):
    g = graphs.make_graph(name, n)
    assert g.W.shape == (n, n) and g.W.dtype == np.float64
    np.testing.assert_allclose(g.W, g.W.T, atol=1e-15)
    np.testing.assert_allclose(g.W.sum(1), 1.0, atol=1e-12)
    assert (g.W >= 0).all()
    # Off-diagonal support is exactly the adjacency (MH puts weight on every edge only).
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_array_equal(g.W[off] > 0, g.adjacency[off])
    assert 0 <= g.lam < 1
    assert g.gap == pytest.approx(graphs.spectral_gap(g.W))


@pytest.mark.parametrize("name,golden", [
    ("ring", {8: 0.8047, 16: 0.9493, 32: 0.9872, 64: 0.9968}),
    ("exp", {8: 0.3333, 16: 0.5000, 32: 0.6000, 64: 0.6667}),
    ("torus", {16: 0.6000, 32: 0.8828, 64: 0.8828}),
    ("complete", {8: 0.0, 64: 0.0}),
])
def test_golden_lambda(name, golden):
    for n, lam in golden.items():
        assert graphs.make_graph(name, n).lam == pytest.approx(lam, abs=1e-4), (name, n)


def test_metropolis_hastings_weights_by_hand():
    # Path 0 - 1 - 2: degrees 1, 2, 1, so w_01 = w_12 = 1/3.
    adj = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    W = graphs.metropolis_hastings(adj)
    expected = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    np.testing.assert_allclose(W, expected, atol=1e-15)


def test_exp_offsets_and_circulant_weights():
    g = graphs.make_graph("exp", 16)
    assert g.offsets == (1, 2, 4, 8, 12, 14, 15)  # +-1, +-2, +-4, and 8 == -8
    np.testing.assert_allclose(g.W[0, list(g.offsets)], 1 / 8)


@pytest.mark.parametrize("seed", range(20))
def test_er_connected(seed):
    g = graphs.make_graph("er", 32, seed=seed)
    assert nx.is_connected(nx.from_numpy_array(g.adjacency.astype(int)))
    assert g.lam < 1


def test_er_seeds_differ_and_repeat():
    a, b = graphs.make_graph("er", 32, seed=1), graphs.make_graph("er", 32, seed=2)
    assert not np.array_equal(a.adjacency, b.adjacency)
    np.testing.assert_array_equal(a.adjacency, graphs.make_graph("er", 32, seed=1).adjacency)


def test_networkx_cross_check():
    n = 16
    ours = {name: graphs.make_graph(name, n).adjacency for name in ("ring", "torus", "complete")}
    theirs = {
        "ring": nx.cycle_graph(n),
        "torus": nx.grid_2d_graph(4, 4, periodic=True),
        "complete": nx.complete_graph(n),
    }
    for name, G in theirs.items():
        A = nx.to_numpy_array(G, nodelist=sorted(G.nodes)).astype(bool)
        np.testing.assert_array_equal(ours[name], A, err_msg=name)


@pytest.mark.parametrize("call,match", [
    (lambda: graphs.make_graph("star", 8), "unknown graph 'star'; allowed: ring, torus"),
    (lambda: graphs.make_graph("ring", 2), "ring.*n >= 3"),
    (lambda: graphs.make_graph("torus", 8), "torus.*r >= 3|3 <= r"),
    (lambda: graphs.make_graph("torus", 14), "torus"),
    (lambda: graphs.make_graph("er", 16, p=0.0), "probability"),
    (lambda: graphs.make_graph("er", 64, p=0.01), "no connected ER graph"),
    (lambda: graphs.check_mixing(np.array([[0.5, 0.5], [0.2, 0.8]])), "symmetric"),
    (lambda: graphs.check_mixing(np.eye(4)), "mix"),
])
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
