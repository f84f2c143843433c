"""SynthMem (spec §Data): determinism, schema round trip, question kinds, templates, the
hidden bridge and the bridge-hard filter."""

import re

import numpy as np
import pytest

from icml26_jax.mragent import synth
from icml26_jax.mragent.schema import NOT_MENTIONED, load_locomo, parse_dia_id

from .conftest import small_synth_config


def test_deterministic_and_seed_dependent():
    cfg = small_synth_config(n_conversations=1)
    a, b = synth.generate(cfg, 5), synth.generate(cfg, 5)
    assert a == b
    assert synth.generate(cfg, 6) != a


def test_cached_file_round_trips(tmp_path):
    cfg = small_synth_config(n_conversations=1)
    first = synth.load_or_generate(cfg, 1, tmp_path)
    files = list(tmp_path.glob("synthmem_*.json"))
    assert len(files) == 1 and first == load_locomo(files[0])
    assert synth.load_or_generate(cfg, 1, tmp_path) == first  # served from the cache


def test_questions_cover_every_kind_and_cite_real_turns(small):
    convs, _, _ = small
    kinds = {q.qtype for c in convs for q in c.qa}
    assert {"multi_hop_2", "single_hop", "temporal", "knowledge_update", "adversarial"} <= kinds
    for c in convs:
        ids = {t.dia_id for t in c.turns()}
        for q in c.qa:
            assert set(q.evidence) <= ids
            assert (q.answer == NOT_MENTIONED) == (q.category == 5)
            if q.category == 2:
                assert re.fullmatch(r"\d{1,2} [A-Z][a-z]+ \d{4}", q.answer)


def test_multi_hop_questions_never_name_the_bridge(small):
    convs, _, _ = small
    n = 0
    for c in convs:
        text = {t.dia_id: t.text for t in c.turns()}
        for q in c.qa:
            if q.category != 1:
                continue
            n += 1
            # The bridge is the person named in the last hop's turn and not in the question.
            last = text[q.evidence[-1]]
            names = set(re.findall(r"\b[A-Z][a-z]+\b", last)) - {"I", "You", "Oh", "Quick",
                                                                 "Funny", "Have", "Guess"}
            assert q.answer in last
            bridge = [w for w in names if w in text[q.evidence[-2]] and w != q.answer]
            assert bridge and not any(b in q.question for b in bridge), (q, last)
    assert n >= 4


def test_every_relation_has_at_least_five_paraphrases():
    for kind, tpls in synth._TEMPLATES.items():
        assert len(set(tpls)) >= 5, kind


def test_bridge_hard_mask_only_marks_multi_hop_with_unreached_bridges(small):
    convs, emb, graphs = small
    masks = synth.bridge_hard_mask(convs, graphs, emb, k=20)
    for c, g, m in zip(convs, graphs, masks):
        assert m.shape == (len(c.qa),)
        for q, hard in zip(c.qa, m):
            assert not hard or q.category == 1
    # k = every content: nothing can be outside the top-k.
    full = synth.bridge_hard_mask(convs, graphs, emb, k=10 ** 6)
    assert not any(m.any() for m in full)
    assert sum(m.sum() for m in masks) > 0


def test_bad_config_values_raise():
    with pytest.raises(ValueError, match="synth.persons"):
        synth.generate(small_synth_config(persons=4, sibling_pairs=4), 0)
    with pytest.raises(ValueError, match="synth.sessions"):
        synth.generate(small_synth_config(sessions=(5, 2)), 0)


def test_dialogue_ids_parse(small):
    convs, _, _ = small
    for t in convs[0].turns():
        s, k, sub = parse_dia_id(t.dia_id)
        assert s >= 1 and k >= 1 and sub is None
    assert np.all(np.diff([parse_dia_id(t.dia_id)[0] for t in convs[0].turns()]) >= 0)


def test_default_benchmark_shape():
    from icml26_jax.mragent import configs
    c = configs.get_config("default").synth
    convs = synth.generate(c, 0)
    assert len(convs) == 24
    assert all(20 <= len(conv.sessions) <= 30 for conv in convs)
    assert 0.60 <= synth.filler_share(convs) <= 0.72
    test = convs[c.n_dev:]
    assert sum(len(conv.qa) for conv in test) >= 600
