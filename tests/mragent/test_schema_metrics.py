"""MRAgent loaders (LoCoMo / LongMemEval fixtures written here, round trip, ids, dates) and
answer metrics on hand-computed cases (spec §Tests "Loaders", "Metrics")."""

import datetime as dt
import json

import jax
import numpy as np
import pytest

from icml26_jax.mragent import metrics, schema

LOCOMO = [{
    "sample_id": "conv-1",
    "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "I gave Milo to Jordan."},
                      {"speaker": "Melanie", "dia_id": "D1:2", "text": "That is kind!"}],
        "session_2_date_time": "10:37 am on 27 June, 2023",
        "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "Jordan moved to Porto."}],
    },
    "qa": [{"question": "Where does Jordan live?", "answer": "Porto", "evidence": ["D2:1"],
            "category": 4},
           {"question": "What did Melanie give Jordan?", "adversarial_answer": "Milo",
            "evidence": [], "category": 5}],
}]

LME = [{"question_id": "q1", "question_type": "temporal-reasoning",
        "question": "When did I buy the bike?", "answer": "3 March 2023",
        "question_date": "2023/04/01 (Sat) 10:00",
        "haystack_dates": ["2023/03/03 (Fri) 09:12", "2023/03/20 (Mon) 18:40"],
        "haystack_sessions": [[{"role": "user", "content": "I bought a bike today.",
                                "has_answer": True},
                               {"role": "assistant", "content": "Nice!"}],
                              [{"role": "user", "content": "Rainy day."}]]},
       {"question_id": "q2_abs", "question_type": "single-session-user",
        "question": "What is my cat's name?", "answer": "unknown",
        "question_date": "2023/04/01", "haystack_dates": ["2023-03-01"],
        "haystack_sessions": [[{"role": "user", "content": "Hello."}]]}]


def test_locomo_fixture_loads_and_round_trips(tmp_path):
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps(LOCOMO))
    (c,) = schema.load_locomo(p)
    assert c.sample_id == "conv-1" and c.speakers == ("Caroline", "Melanie")
    assert [s.date for s in c.sessions] == [dt.date(2023, 5, 8), dt.date(2023, 6, 27)]
    assert [t.dia_id for t in c.turns()] == ["D1:1", "D1:2", "D2:1"]
    assert c.turn_date()["D2:1"] == dt.date(2023, 6, 27)
    assert c.qa[0] == schema.QA("Where does Jordan live?", "Porto", ("D2:1",), 4, "")
    assert c.qa[1].answer == schema.NOT_MENTIONED and c.qa[1].category == 5
    q = tmp_path / "again.json"
    schema.dump_locomo([c], q)
    assert schema.load_locomo(q) == [c]


def test_longmemeval_fixture(tmp_path):
    p = tmp_path / "lme.json"
    p.write_text(json.dumps(LME))
    a, b = schema.load_longmemeval(p)
    assert [s.date for s in a.sessions] == [dt.date(2023, 3, 3), dt.date(2023, 3, 20)]
    assert [t.dia_id for t in a.turns()] == ["D1:1", "D1:2", "D2:1"]
    assert a.qa[0].evidence == ("D1:1",) and a.qa[0].category == 2
    assert a.qa[0].qtype == "temporal-reasoning"
    assert b.qa[0].category == 5 and b.qa[0].answer == schema.NOT_MENTIONED


def test_dia_ids_and_dates_resolve():
    assert schema.parse_dia_id("D3:7") == (3, 7, None)
    assert schema.parse_dia_id("D12:4-2") == (12, 4, 2)
    assert schema.turn_of("D12:4-2") == "D12:4"
    with pytest.raises(ValueError, match="not a dialogue id"):
        schema.parse_dia_id("S3:7")
    cases = {"1:56 pm on 8 May, 2023": dt.date(2023, 5, 8),
             "8 May 2023": dt.date(2023, 5, 8), "May 8, 2023": dt.date(2023, 5, 8),
             "2023/05/08 (Mon) 13:56": dt.date(2023, 5, 8), "2023-05-08": dt.date(2023, 5, 8),
             "9:00 am on 21 Sept, 2022": dt.date(2022, 9, 21)}
    for text, want in cases.items():
        assert schema.parse_session_datetime(text) == want, text
    with pytest.raises(ValueError, match="cannot parse a date"):
        schema.parse_session_datetime("sometime last spring")
    assert schema.format_date(dt.date(2023, 5, 7)) == "7 May 2023"


def test_bad_files_raise(tmp_path):
    with pytest.raises(ValueError, match="no LoCoMo file"):
        schema.load_locomo(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([{"question_id": "x", "haystack_dates": ["2023-01-01"]}]))
    with pytest.raises(ValueError, match="LongMemEval item x lacks 'haystack_sessions'"):
        schema.load_longmemeval(p)


def test_normalize_and_exact_match():
    assert metrics.normalize_answer("The Porto.") == "porto"
    assert metrics.normalize_answer("cats and dogs") == "cat dog"
    assert metrics.exact_match("Porto!", "porto") == 1.0
    assert metrics.exact_match("Lisbon", "Porto") == 0.0
    assert metrics.exact_match("7 May, 2023", "7 May 2023") == 1.0


def test_token_f1_hand_computed():
    # pred {jordan, porto}, gold {porto}: P 1/2, R 1 -> F1 2/3.
    assert metrics.token_f1("Jordan Porto", "Porto") == pytest.approx(2 / 3)
    assert metrics.token_f1("Lisbon", "Porto") == 0.0
    # Multi-part gold: "hiking" matched exactly, "painting" not at all -> (1 + 0) / 2.
    assert metrics.token_f1("hiking, chess", "hiking, painting") == pytest.approx(0.5)
    assert metrics.token_f1("", "Porto") == 0.0


def test_evidence_recall_and_paired_bootstrap():
    assert metrics.evidence_recall(["D1:1-2", "D4:2"], ["D1:1", "D2:3"]) == 0.5
    assert metrics.evidence_recall([], []) == 1.0
    a, b = np.array([1.0, 1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0, 0.0])
    mean, lo, hi = metrics.paired_bootstrap_ci(a, b, jax.random.key(0), n=2000)
    assert mean == pytest.approx(0.5) and 0.0 <= lo <= mean <= hi <= 1.0
    assert metrics.paired_bootstrap_ci(a, b, jax.random.key(0)) == \
        metrics.paired_bootstrap_ci(a, b, jax.random.key(0))
    with pytest.raises(ValueError, match="equal-length"):
        metrics.paired_bootstrap_ci(a, b[:3], jax.random.key(0))
