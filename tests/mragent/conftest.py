"""Shared fixtures of the MRAgent tests: a small SynthMem with its memory graphs."""

import ml_collections
import pytest

from icml26_jax.mragent import graph, synth
from icml26_jax.mragent.embed import Fitted


def small_synth_config(**kw) -> ml_collections.ConfigDict:
    c = dict(n_conversations=2, n_dev=1, sessions=(8, 10), turns=(12, 16), persons=16, pets=6,
             sibling_pairs=4, speaker_facts=2, max_single_hop=6, max_temporal=5, max_update=4,
             adversarial=3)
    c.update(kw)
    return ml_collections.ConfigDict(c)


@pytest.fixture(scope="package")
def small():
    """(convs, embedder, graphs) of a 2-conversation SynthMem."""
    convs = synth.generate(small_synth_config(), seed=3)
    ex = graph.RuleExtractor()
    emb = Fitted.fit([s[2] for conv in convs for s in ex.sentences(conv)])
    graphs = [graph.build_graph(conv, ex, emb) for conv in convs]
    return convs, emb, graphs
