"""The Cue-Tag-Content graph (spec §Tests "Graph", "Time resolver"): edges name their cue,
every content is tagged, the CSR pointer matches the edges, the build is deterministic, the
timeline holds the resolved dates; the rule extractor's pronouns and cue types."""

import datetime as dt

import numpy as np

from icml26_jax.mragent import graph
from icml26_jax.mragent.embed import Fitted
from icml26_jax.mragent.metrics import stem
from icml26_jax.mragent.schema import Conversation, Session, Turn, format_date
from icml26_jax.mragent.timeref import resolve_time


def _names_cue(g, c, q) -> bool:
    text, typ = g.content_text[c], g.cue_type[q]
    cue = g.cue_text[q]
    if typ == "date":
        return cue == format_date(dt.date.fromordinal(int(g.content_day[c])))
    if typ == "stem":
        return cue in {stem(w) for w in graph._tokens(text.lower())}
    return cue in text  # entities, numbers: verbatim (the extractor's aliases are exact spans)


def test_every_edge_names_its_cue_and_every_content_is_tagged(small):
    _, _, graphs = small
    for g in graphs:
        assert len(g.content_tag) == g.n_contents
        assert np.all((g.content_tag >= 0) & (g.content_tag < len(g.tag_text)))
        for q, t, c in g.edges:
            assert _names_cue(g, c, q), (g.cue_text[q], g.content_text[c])
            assert t == g.content_tag[c]
        assert {int(c) for c in g.edges[:, 2]} <= set(range(g.n_contents))


def test_cue_ptr_is_the_csr_of_the_sorted_edges(small):
    _, _, graphs = small
    g = graphs[0]
    e = g.edges
    order = np.lexsort((e[:, 2], e[:, 1], e[:, 0]))
    np.testing.assert_array_equal(order, np.arange(len(e)))
    assert g.cue_ptr[0] == 0 and g.cue_ptr[-1] == len(e)
    for q in range(g.n_cues):
        rows = e[g.cue_ptr[q]:g.cue_ptr[q + 1]]
        assert np.all(rows[:, 0] == q)
        assert set(g.contents_of(q)) == {c for c, cues in enumerate(g.content_cues) if q in cues}


def test_build_is_deterministic(small):
    convs, emb, graphs = small
    again = graph.build_graph(convs[0], graph.RuleExtractor(), emb)
    for a, b in zip(again, graphs[0]):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b


def test_timeline_days_are_the_resolved_dates(small):
    convs, _, graphs = small
    conv, g = convs[0], graphs[0]
    dates = conv.turn_date()
    for c in range(g.n_contents):
        turn = g.content_id[c].split("-")[0]
        assert g.content_day[c] == resolve_time(g.content_text[c], dates[turn]).toordinal()
    assert np.all(np.diff(g.content_day[g.timeline]) >= 0)
    # The temporal questions' gold dates are the resolved days of their evidence sentence.
    for q in conv.qa:
        if q.qtype == "temporal":
            days = {format_date(dt.date.fromordinal(int(g.content_day[c])))
                    for c in range(g.n_contents) if g.content_id[c].startswith(q.evidence[0] + "-")}
            assert q.answer in days, (q, days)


def _tiny():
    d = dt.date(2023, 5, 8)
    turns = (Turn("D1:1", "Ann", "I adopted a cat named Milo yesterday."),
             Turn("D1:2", "Bob", "Cool! Did you see Jordan? He moved to Porto last Friday."),
             Turn("D1:3", "Ann", "Yes, Jordan started working at Acme."))
    return Conversation("tiny", ("Ann", "Bob"), (Session(1, d, turns),), ())


def test_pronouns_types_and_times():
    conv = _tiny()
    ex = graph.RuleExtractor()
    sents = {cid: text for cid, _, text, _ in ex.sentences(conv)}
    assert sents["D1:1-1"].startswith("Ann adopted a cat named Milo")
    assert sents["D1:2-2"] == "Did Ann see Jordan?"
    assert sents["D1:2-3"].startswith("Jordan moved to Porto")
    emb = Fitted.fit(list(sents.values()))
    g = graph.build_graph(conv, ex, emb)
    types = dict(zip(g.cue_text, g.cue_type))
    assert types["Jordan"] == "person" and types["Porto"] == "place"
    assert types["Acme"] == "org" and types["Milo"] == "animal"
    day = {g.content_id[c]: dt.date.fromordinal(int(g.content_day[c])) for c in range(g.n_contents)}
    assert day["D1:1-1"] == dt.date(2023, 5, 7)
    assert day["D1:2-3"] == dt.date(2023, 5, 5)  # last Friday before Monday 8 May
    assert day["D1:3-1"] == dt.date(2023, 5, 8)  # no time expression: the session date


def test_kmeans_is_deterministic_and_exact_on_separated_clusters():
    rng = np.random.default_rng(0)
    centers = np.eye(4, 8, dtype=np.float32) * 10
    x = np.concatenate([c + 0.01 * rng.standard_normal((30, 8)) for c in centers]).astype(
        np.float32)
    a = graph.kmeans(x, 4, seed=0)
    assert np.array_equal(a, graph.kmeans(x, 4, seed=0))
    for i in range(4):  # each true cluster is one predicted cluster
        assert len(set(a[30 * i:30 * (i + 1)])) == 1
    assert len(set(a)) == 4
