"""Passive retrieval primitives: top-k ties by id, BM25 (hand-computed and rank-bm25 parity),
personalised PageRank against networkx (spec §Tests "Peers")."""

import math

import numpy as np
import pytest

from icml26_jax.mragent import baselines

DOCS = [["jordan", "move", "porto"], ["caroline", "gave", "milo", "jordan"],
        ["bought", "bike"], ["jordan", "jordan", "bike", "porto", "lisbon"]]


def test_topk_breaks_ties_by_id():
    np.testing.assert_array_equal(baselines.topk_ids([0.5, 0.9, 0.5, 0.9, 0.1], 4),
                                  [1, 3, 0, 2])
    assert baselines.topk_ids([1.0, 2.0], 5).tolist() == [1, 0]
    with pytest.raises(ValueError, match="k must be"):
        baselines.topk_ids([1.0], -1)


def test_bm25_hand_computed():
    bm = baselines.BM25(DOCS)
    # "porto": n = 2 of N = 4 -> idf log(2.5 / 2.5) = 0; "milo": n = 1 -> log(3.5 / 1.5).
    idf_milo = math.log(3.5) - math.log(1.5)
    avgdl = (3 + 4 + 2 + 5) / 4
    want = idf_milo * 1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 4 / avgdl))
    s = bm.scores(["milo"])
    assert s[1] == pytest.approx(want) and np.all(s[[0, 2, 3]] == 0)
    assert bm.scores(["unseen"]).tolist() == [0.0] * 4


def test_bm25_matches_rank_bm25():
    rank_bm25 = pytest.importorskip("rank_bm25")
    ref = rank_bm25.BM25Okapi(DOCS)
    ours = baselines.BM25(DOCS)
    for q in (["jordan", "porto"], ["bike"], ["milo", "lisbon", "jordan"]):
        np.testing.assert_allclose(ours.scores(q), ref.get_scores(q), rtol=1e-12)


def test_personalized_pagerank_matches_networkx():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(0)
    n = 12
    W = np.triu(rng.random((n, n)) * (rng.random((n, n)) < 0.3), 1)
    W = W + W.T
    W[:, 11] = W[11, :] = 0.0  # a dangling node
    seeds = np.zeros(n)
    seeds[[0, 3]] = [1.0, 2.0]
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_weighted_edges_from((i, j, W[i, j]) for i in range(n) for j in range(i + 1, n)
                              if W[i, j] > 0)
    ref = nx.pagerank(G, alpha=0.85, personalization={i: seeds[i] for i in range(n)},
                      weight="weight", tol=1e-12, max_iter=1000)
    ours = baselines.personalized_pagerank(W, seeds, iters=200)
    np.testing.assert_allclose(ours, [ref[i] for i in range(n)], atol=1e-6)
    # The default 50 iterations are within damping ** 50 of the fixed point.
    np.testing.assert_allclose(baselines.personalized_pagerank(W, seeds), ours, atol=1e-3)
    with pytest.raises(ValueError, match="at least one seed"):
        baselines.personalized_pagerank(W, np.zeros(n))
