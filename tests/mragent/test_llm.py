"""The online path against a stub OpenAI-compatible server (spec §Tests ``OpenAIReasoner``).

The stub is an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (a free port, a daemon thread)
that serves canned chat completions in order and records every request; clients use a short
timeout, so nothing here can hang.
"""

import datetime as dt
import http.server
import json
import threading

import numpy as np
import pytest

from icml26_jax.core.testing import free_port
from icml26_jax.mragent import schema
from icml26_jax.mragent.llm import ChatClient, LLMExtractor, OpenAIReasoner
from icml26_jax.mragent.types import (Answer, EventContext, EventKeywords, ExpandTag,
                                      MemoryGraph, QueryPlan, QueryTime, View)

USAGE = (11, 7)  # default (prompt_tokens, completion_tokens) of a canned reply


class Stub:
    """Canned replies, served in order: a dict / str (the message content, optionally as
    ``(content, (prompt_tokens, completion_tokens))``) or an int (an HTTP error status).
    When the list is exhausted the stub answers 500."""

    def __init__(self):
        self.responses: list = []
        self.requests: list[dict] = []  # {"path", "headers" (lowercased keys), "body"}
        self.lock = threading.Lock()
        self.url = ""

    def handler(self):
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server API)
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n).decode("utf-8"))
                with stub.lock:
                    stub.requests.append({"path": self.path, "body": body, "headers": {
                        k.lower(): v for k, v in self.headers.items()}})
                    item = stub.responses.pop(0) if stub.responses else 500
                if isinstance(item, int):
                    self.send_error(item, "stub error")
                    return
                content, (p, c) = item if isinstance(item, tuple) else (item, USAGE)
                if not isinstance(content, str):
                    content = json.dumps(content)
                data = json.dumps({"id": "stub", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": p, "completion_tokens": c,
                              "total_tokens": p + c}}).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def stub():
    s = Stub()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), s.handler())
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    s.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield s
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _day(y, m, d) -> int:
    return dt.date(y, m, d).toordinal()


@pytest.fixture
def graph() -> MemoryGraph:
    """3 contents, 5 cues, 2 tags; edges sorted by (cue, tag, content) with their CSR pointer."""
    texts = ("Caroline gave Milo to Jordan.", "Jordan moved to Porto.", "Melanie bought a bike.")
    cues = ("caroline", "milo", "jordan", "porto", "bike")
    content_cues = ((0, 1, 2), (2, 3), (4,))
    content_tag = np.asarray([0, 1, 1], np.int32)
    edges = np.asarray(sorted((q, int(content_tag[c]), c) for c, qs in enumerate(content_cues)
                              for q in qs), np.int32)
    cue_ptr = np.searchsorted(edges[:, 0], np.arange(len(cues) + 1)).astype(np.int64)
    rng = np.random.default_rng(0)

    def unit(n):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return MemoryGraph(
        sample_id="tiny", speakers=("Caroline", "Melanie"),
        content_id=("D1:1-1", "D1:2-1", "D2:1-1"), content_text=texts,
        content_turn=np.asarray([0, 1, 2], np.int32),
        content_day=np.asarray([_day(2023, 5, 7), _day(2023, 5, 8), _day(2023, 6, 1)],
                               np.int32),
        content_emb=unit(3), content_tag=content_tag, content_cues=content_cues,
        cue_text=cues, cue_type=("person", "animal", "person", "place", "thing"),
        cue_emb=unit(len(cues)), cue_lookup={c: i for i, c in enumerate(cues)},
        tag_text=("pet adoption", "life change"), tag_emb=unit(2), edges=edges,
        cue_ptr=cue_ptr, timeline=np.asarray([0, 1, 2], np.int32),
        turn_contents=((0,), (1,), (2,)), turn_ids=("D1:1", "D1:2", "D2:1"))


def _view(graph, *, evidence=(0,), max_calls=10, calls_left=50) -> View:
    plan = QueryPlan("Where does the person who got Milo live now?", np.zeros(4, np.float32),
                     (1,), ((),), None, "place", True)
    return View(question=plan.question, plan=plan, round=1, frontier=(1, 2),
                candidates=((1, 0), (2, 1), (2, 0)), evidence=evidence, visited=frozenset(),
                inspected=frozenset(), calls_left=calls_left, max_calls=max_calls)


def test_graph_fixture_is_consistent(graph):
    for q in range(graph.n_cues):
        e = graph.edges[graph.cue_ptr[q]:graph.cue_ptr[q + 1]]
        assert (e[:, 0] == q).all()
    assert graph.cue_ptr[-1] == len(graph.edges)
    assert list(graph.contents_of(2)) == [0, 1]


def test_plan_parses_cues_time_range_and_type(stub, graph):
    stub.responses.append({"cues": ["Caroline's cat", "Porto", "Lisbon"],
                           "alternatives": {"porto": ["Jordan", "Oslo"]},
                           "time_range": ["2023-05-31", "2023-05-01"],
                           "answer_type": "Place", "now": True})
    r = OpenAIReasoner(stub.url, "stub-model", timeout_s=5)
    plan = r.plan(graph, "Where did Caroline's cat go in May 2023?")
    assert plan.cues == (0, 3)  # "caroline's" -> caroline; Lisbon is not a cue
    assert plan.alternatives == ((), (2,))
    assert plan.time_range == (_day(2023, 5, 1), _day(2023, 5, 31))
    assert plan.answer_type == "place" and plan.now is True
    np.testing.assert_array_equal(plan.q_emb, np.zeros(4, np.float32))
    (req,) = stub.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "stub-model"
    assert req["body"]["response_format"] == {"type": "json_object"}
    assert "Where did Caroline's cat go in May 2023?" in req["body"]["messages"][-1]["content"]

    stub.responses.append({"cues": ["jordan moved"], "time_range": None,
                           "answer_type": "colour"})
    enc = lambda texts: np.ones((len(texts), 4), np.float32)  # noqa: E731
    plan = OpenAIReasoner(stub.url + "/", "m", timeout_s=5, encode=enc).plan(graph, "Q?")
    assert plan.cues == (2,) and plan.time_range is None
    assert plan.answer_type == "thing" and plan.now is False
    np.testing.assert_array_equal(plan.q_emb, np.ones(4, np.float32))
    assert stub.requests[-1]["path"] == "/v1/chat/completions"


def test_act_parses_answer(stub, graph):
    stub.responses.append({"action": "answer", "answer": "Porto",
                           "supports": ["D1:2-1", "D9:9-9", "D1:2-1"], "confidence": 0.8})
    r = OpenAIReasoner(stub.url, "m", timeout_s=5)
    out = r.act(graph, _view(graph, evidence=(0, 1)))
    assert out == [Answer("Porto", (1,), 0.8)]
    shown = stub.requests[0]["body"]["messages"][-1]["content"]
    assert "[D1:1-1] (7 May 2023) Caroline gave Milo to Jordan." in shown
    assert "[D1:2-1] (8 May 2023) Jordan moved to Porto." in shown
    assert '2. cue "jordan" / tag "life change"' in shown
    assert "Where does the person who got Milo live now?" in shown


def test_act_parses_navigation_truncated(stub, graph):
    stub.responses.append({"action": "navigate", "calls": [
        {"tool": "edges_by_tag", "pair": 99},  # unknown pair: skipped
        {"tool": "edges_by_tag", "pair": 2},
        {"tool": "teleport", "content": "D1:1-1"},  # unknown tool: skipped
        {"tool": "event_keywords", "content": "D9:1-1"},  # unknown id: skipped
        {"tool": "event_keywords", "content": "D1:1-1"},
        {"tool": "event_context", "content": "D1:2-1"},
        {"tool": "conversation_time", "content": "D2:1-1"}]})
    r = OpenAIReasoner(stub.url, "m", timeout_s=5)
    assert r.act(graph, _view(graph, max_calls=3)) == [
        ExpandTag(2, 1), EventKeywords(0), EventContext(1)]

    stub.responses.append({"action": "navigate", "calls": [
        {"tool": "edges_by_tag", "pair": "3"}, {"tool": "conversation_time",
                                                "content": "D2:1-1"}]})
    assert r.act(graph, _view(graph)) == [ExpandTag(2, 0), QueryTime(2)]

    stub.responses.append({"action": "navigate", "calls": [{"tool": "edges_by_tag",
                                                            "pair": 0}]})
    assert r.act(graph, _view(graph)) == [Answer(schema.NOT_MENTIONED, (), 0.0)]


def test_retries_malformed_json_then_raises(stub, graph):
    stub.responses += ["this is not {json", {"action": "answer", "answer": "Porto"}]
    r = OpenAIReasoner(stub.url, "m", timeout_s=5, max_retries=2)
    assert r.act(graph, _view(graph)) == [Answer("Porto", (), 0.0)]
    assert len(stub.requests) == 2
    retry = stub.requests[1]["body"]["messages"]
    assert len(retry) == 4 and retry[2] == {"role": "assistant", "content": "this is not {json"}
    assert retry[3]["role"] == "user"

    stub.requests.clear()
    stub.responses += ["nope", {"no_action": 1}, {"action": "answer"}]  # 3 = 1 + max_retries
    with pytest.raises(RuntimeError, match="malformed JSON 3 times"):
        r.act(graph, _view(graph))
    assert len(stub.requests) == 3


def test_http_errors_retry_then_raise_naming_url(stub, graph):
    stub.responses += [500, {"cues": ["porto"], "answer_type": "place"}]
    r = OpenAIReasoner(stub.url, "m", timeout_s=5, max_retries=1)
    assert r.plan(graph, "Where?").cues == (3,)
    assert len(stub.requests) == 2
    stub.responses += [503, 503]
    with pytest.raises(RuntimeError, match=r"/v1/chat/completions"):
        r.plan(graph, "Where?")
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(RuntimeError, match=dead):
        ChatClient(dead, "m", timeout_s=2, max_retries=1).complete_json(
            [{"role": "user", "content": "hi"}])


def test_usage_sums_across_calls(stub, graph):
    stub.responses += [({"cues": []}, (100, 20)), ("garbage", (40, 3)),
                       ({"action": "answer", "answer": "x"}, (60, 5))]
    r = OpenAIReasoner(stub.url, "m", timeout_s=5)
    r.plan(graph, "Q?")
    r.act(graph, _view(graph))
    assert r.usage == {"prompt_tokens": 200, "completion_tokens": 28, "calls": 3}
    sent = sum(len(m["content"]) for q in stub.requests for m in q["body"]["messages"])
    assert r.chars_shown == sent > 0


@pytest.mark.parametrize("url", [None, "", "  "])
def test_base_url_required(url):
    with pytest.raises(ValueError, match="base_url"):
        OpenAIReasoner(url, "m")
    with pytest.raises(ValueError, match="base_url"):
        ChatClient(url, "m")


def test_llm_extractor_builds_records(stub):
    s1 = schema.Session(1, dt.date(2023, 5, 8), (
        schema.Turn("D1:1", "Caroline", "I adopted a cat yesterday. She is called Milo."),
        schema.Turn("D1:2", "Melanie", "Nice!")))
    s2 = schema.Session(2, dt.date(2023, 6, 1), (
        schema.Turn("D2:1", "Melanie", "I moved to Porto last week."),))
    conv = schema.Conversation("c", ("Caroline", "Melanie"), (s1, s2), ())
    stub.responses += [
        {"sentences": [
            {"text": "Caroline adopted a cat yesterday.", "tag": "pet adoption story",
             "time": "yesterday", "keywords": [{"text": "Caroline", "type": "person"},
                                               {"text": "CAT", "type": "animal"},
                                               {"text": "Lisbon", "type": "place"}]},
            {"text": "The cat is called Milo.", "tag": "", "time": "",
             "keywords": [{"text": "cat", "type": "weird"}, {"text": "Milo", "type": "thing"}]},
            {"text": "   "}]},
        {"sentences": []},
        {"sentences": [{"text": "Melanie moved to Porto last week.", "tag": "relocation",
                        "time": "", "keywords": [{"text": "Melanie", "type": "person"},
                                                 {"text": "Porto", "type": "place"}]}]}]
    client = ChatClient(stub.url, "m", timeout_s=5)
    out = LLMExtractor(client).extract(conv, encode=None)
    assert [r.content_id for r in out] == ["D1:1-1", "D1:1-2", "D2:1-1"]
    assert [r.turn for r in out] == [0, 0, 2]
    assert out[0].day == dt.date(2023, 5, 7)  # "yesterday" of the session date
    assert out[1].day == dt.date(2023, 5, 8)  # no time: the session date
    assert out[2].day == dt.date(2023, 5, 25)  # "last week" in the sentence itself
    assert out[0].keywords == (("Caroline", "person"), ("CAT", "animal"))  # Lisbon dropped
    assert out[1].keywords == (("cat", "thing"), ("Milo", "thing"))
    assert (out[0].tag, out[1].tag, out[2].tag) == ("pet adoption", "general", "relocation")
    assert out[0].text == "Caroline adopted a cat yesterday."
    assert len(stub.requests) == 3 and client.usage["calls"] == 3
    first, second, third = (q["body"]["messages"][-1]["content"] for q in stub.requests)
    assert "8 May 2023" in first and "Speaker: Caroline" in first
    assert "Previous message (Caroline)" in second  # same session
    assert "Previous message" not in third and "1 June 2023" in third


def test_authorization_header_iff_env_set(stub, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-test")
    stub.responses += [{"ok": 1}, {"ok": 1}]
    client = ChatClient(stub.url, "m", api_key_env="STUB_KEY", timeout_s=5)
    assert client.complete_json([{"role": "user", "content": "hi"}], ("ok",)) == {"ok": 1}
    assert stub.requests[0]["headers"]["authorization"] == "Bearer sk-test"
    monkeypatch.delenv("STUB_KEY")
    client.complete_json([{"role": "user", "content": "hi"}], ("ok",))
    assert "authorization" not in stub.requests[1]["headers"]
