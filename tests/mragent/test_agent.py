"""Active reconstruction (spec §Tests "Agent") and the graph-level passive baselines."""

import collections
import datetime as dt

import numpy as np
import pytest

from icml26_jax.mragent import agent, baselines, graph
from icml26_jax.mragent.embed import Fitted
from icml26_jax.mragent.reasoner import LocalParams, LocalReasoner, make_plan
from icml26_jax.mragent.schema import Conversation, Session, Turn
from icml26_jax.mragent.types import EventKeywords, ExpandTag

PARAMS = LocalParams(theta=-1.0, theta_hi=-1.0, tau_stop=0.45, m_stop=0.05, tau_abstain=0.0)
QUESTION = "Which city does the person who adopted Nadia's cat live in now?"


def _chain():
    """Three contents: the first hop names the bridge (Jordan), the second gives his city; a
    distractor moved elsewhere. The question names neither Jordan nor Porto."""
    d = dt.date(2023, 5, 8)
    turns = (Turn("D1:1", "Ann", "Nadia gave Milo the cat to Jordan last week."),
             Turn("D1:2", "Bob", "Jordan moved to Porto."),
             Turn("D1:3", "Ann", "Sam moved to Lisbon."))
    conv = Conversation("chain", ("Ann", "Bob"), (Session(1, d, turns),), ())
    ex = graph.RuleExtractor()
    emb = Fitted.fit([s[2] for s in ex.sentences(conv)])
    return graph.build_graph(conv, ex, emb), emb


def test_pointer_chases_through_the_bridge():
    g, emb = _chain()
    r = LocalReasoner(PARAMS, encode=emb.encode)
    tr = agent.reconstruct(g, QUESTION, r)
    assert tr.answer.answer == "Porto"
    jordan = g.cue_lookup["jordan"]
    acts = list(tr.actions)
    # It read the first hop, inspected its keywords (the harvest), and only then expanded the
    # bridge's cue: step t + 1 depends on what step t read.
    harvest = next(i for i, a in enumerate(acts) if isinstance(a, EventKeywords)
                   and g.content_text[a.content].startswith("Nadia"))
    expand = next(i for i, a in enumerate(acts) if isinstance(a, ExpandTag) and a.cue == jordan)
    assert harvest < expand
    # Without the harvest the bridge is never reached.
    for ablation in ("single_step", "no_new_cues"):
        t2 = agent.reconstruct(g, QUESTION, r, ablation=ablation)
        assert t2.answer.answer != "Porto"
        assert "Jordan moved to Porto." not in [g.content_text[e] for e in t2.evidence]


def test_never_repeats_a_pair_and_respects_every_budget(small):
    convs, emb, graphs = small
    r = LocalReasoner(PARAMS, encode=emb.encode)
    tight = agent.Budget(max_rounds=3, max_calls=7, max_calls_per_round=3)
    n = 0
    for conv, g in zip(convs, graphs):
        for q in conv.qa:
            for bud in (agent.Budget(), tight):
                tr = agent.reconstruct(g, q.question, r, bud)
                pairs = [(a.cue, a.tag) for a in tr.actions if isinstance(a, ExpandTag)]
                assert len(pairs) == len(set(pairs))
                assert tr.rounds <= bud.max_rounds and tr.tool_calls <= bud.max_calls
                assert all(c <= bud.max_calls_per_round for c in tr.round_calls)
                assert sum(tr.round_calls) == tr.tool_calls == len(tr.actions)
                assert tr.contents_read == len(set(tr.evidence)) == len(tr.evidence)
                n += 1
    assert n > 50


def test_single_step_is_one_round_and_ablations_are_checked(small):
    convs, emb, graphs = small
    r = LocalReasoner(PARAMS, encode=emb.encode)
    for q in convs[0].qa[:20]:
        tr = agent.reconstruct(graphs[0], q.question, r, ablation="single_step")
        assert tr.rounds <= 1
        roots = set(agent.initial_frontier(graphs[0], r.plan(graphs[0], q.question)))
        assert {a.cue for a in tr.actions if isinstance(a, ExpandTag)} <= roots
    with pytest.raises(ValueError, match="unknown ablation"):
        agent.reconstruct(graphs[0], "Who?", r, ablation="no_graph")
    with pytest.raises(ValueError, match="budget.max_rounds"):
        agent.Budget(max_rounds=0).validate()


def test_no_tags_reads_whole_cues_and_no_prune_expands_every_pair(small):
    convs, emb, graphs = small
    r = LocalReasoner(PARAMS, encode=emb.encode)
    g = graphs[0]
    reads = collections.defaultdict(list)
    for q in convs[0].qa:
        for ab in ("none", "no_tags", "no_prune"):
            reads[ab].append(agent.reconstruct(g, q.question, r, ablation=ab).contents_read)
    assert np.mean(reads["no_tags"]) > np.mean(reads["none"])
    assert np.mean(reads["no_prune"]) > np.mean(reads["none"])


def test_same_inputs_same_trace(small):
    convs, emb, graphs = small
    r = LocalReasoner(PARAMS, encode=emb.encode)
    q = next(q for q in convs[1].qa if q.category == 1)
    a, b = (agent.reconstruct(graphs[1], q.question, r) for _ in range(2))
    assert a == b


# ----------------------------------------------------------------------------- baselines


def test_dense_ties_break_by_id_and_costs_count_every_shown_char():
    g, emb = _chain()
    plan = make_plan(g, QUESTION, np.zeros(g.content_emb.shape[1], np.float32))
    r = baselines.dense_topk(g, plan, 2)
    assert r.ids == (0, 1)  # all scores equal: smallest ids
    want = (len(QUESTION) + sum(len(g.content_text[i]) + len(g.content_id[i]) + 14
                                for i in r.ids)) / 4
    assert r.cost["tokens"] == pytest.approx(want) and r.cost["contents_read"] == 2


def test_ppr_rows_equal_the_reference_pagerank():
    g, emb = _chain()
    C, Q = g.n_contents, g.n_cues
    W = np.zeros((C + Q, C + Q))
    for q, _, c in g.edges:
        W[c, C + q] = W[C + q, c] = 1.0
    seeds = [(g.cue_lookup["nadia"],), (g.cue_lookup["jordan"], g.cue_lookup["sam"])]
    rows = baselines.ppr_scores(g, seeds, iters=200)
    for row, s in zip(rows, seeds):
        p = np.zeros(C + Q)
        p[[C + x for x in s]] = 1.0
        ref = baselines.personalized_pagerank(W, p, iters=200)[:C]
        np.testing.assert_allclose(row, ref, atol=1e-6)
    assert np.all(baselines.ppr_scores(g, [()])[0] == 0)


def test_ppr_rows_sharded_over_every_device_equal_one_device():
    """train.prepare's placement: 3 question rows padded to the 8 devices, gathered back."""
    from icml26_jax.core import mesh as mesh_lib
    g, _ = _chain()
    seeds = [(g.cue_lookup["nadia"],), (), (g.cue_lookup["jordan"], g.cue_lookup["sam"])]
    mesh = mesh_lib.data_mesh()
    assert mesh.devices.size == 8
    got = baselines.ppr_scores(g, seeds, mesh=mesh)
    np.testing.assert_allclose(got, baselines.ppr_scores(g, seeds), rtol=1e-6, atol=1e-9)
    assert got.shape == (3, g.n_contents) and np.all(got[1] == 0)


def test_graph_expand_and_full_context():
    g, emb = _chain()
    plan = make_plan(g, "Where does Jordan live now?", emb.encode(["Where does Jordan live"])[0])
    one = set(baselines.graph_expand(g, plan, 1).ids)
    assert one == {c for c in range(g.n_contents) if "Jordan" in g.content_text[c]}
    two = set(baselines.graph_expand(g, plan, 2).ids)
    assert one <= two
    with pytest.raises(ValueError, match="hops"):
        baselines.graph_expand(g, plan, 3)
    fc = baselines.full_context(g, plan, 20)
    assert fc.cost["tokens"] <= 20 and fc.ids and fc.ids[0] == g.n_contents - 1
