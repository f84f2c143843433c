"""The online (LLM) path of MRAgent (spec §Module API ``OpenAIReasoner``, §Experiment ``online``).

Three pieces, all speaking the OpenAI-compatible ``POST {base_url}/chat/completions`` protocol
through the standard library (``urllib``; no new dependency) in JSON mode
(``"response_format": {"type": "json_object"}``):

* :class:`ChatClient` -- the HTTP call, retries and cost counters. A transport failure
  (``URLError`` / ``HTTPError`` / timeout / a reply that is not a chat completion) is retried
  up to ``max_retries`` times with short back-offs (<= 0.5 s), then raises ``RuntimeError``
  naming the URL. A reply whose content is not a JSON object with the required keys is re-asked
  with a short corrective message, up to ``max_retries`` times, then raises ``RuntimeError``.
* :class:`OpenAIReasoner` -- the :class:`~icml26_jax.mragent.types.Reasoner` protocol: ``plan``
  asks for the question's cues, alternatives, time range, answer type and "now"; ``act`` shows
  the evidence read so far and the numbered candidate (cue, tag) pairs and parses either an
  answer or a list of tool calls.
* :class:`LLMExtractor` -- the :class:`~icml26_jax.mragent.types.Extractor` protocol (phase 1):
  one call per turn, returning its sentences with pronouns resolved, a <= 2-word tag, the
  verbatim time expression (resolved here against the *session* date by
  :func:`~icml26_jax.mragent.timeref.resolve_time`) and typed verbatim keywords.

Cost accounting. ``ChatClient.usage`` sums the server-reported ``prompt_tokens`` and
``completion_tokens`` over every completed call (re-asks included) and counts the ``calls``;
``ChatClient.chars_shown`` sums ``len(content)`` of every message sent in every request, so the
offline convention tokens = chars / 4 (what :func:`~icml26_jax.mragent.agent.reconstruct`
charges every method) can be compared with the server's count. ``OpenAIReasoner`` exposes both.

The prompts are our own. No host is built in: ``base_url`` is required (``ValueError``
otherwise); the API key, if any, is read from the environment variable named by
``api_key_env`` and sent as ``Authorization: Bearer ...`` (no header when it is unset, as local
servers need none). This module is never run in CI except against a stub HTTP server on
127.0.0.1 (``tests/mragent/test_llm.py``).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

import numpy as np

from icml26_jax.mragent import schema, timeref
from icml26_jax.mragent.types import (ANSWER_TYPES, CUE_TYPES, Answer, EventContext,
                                      EventKeywords, ExpandTag, Extracted, MemoryGraph,
                                      QueryPlan, QueryTime, View)

MAX_KEYWORDS = 30
_KEYWORD_TYPES = frozenset(CUE_TYPES) - {"stem"}
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*")

Check = Callable[[dict], "str | None"]


def _parse_json_object(text: str) -> dict | None:
    """The JSON object in a reply (tolerating code fences / surrounding prose), else None."""
    s = _FENCE.sub("", str(text).strip())
    for candidate in (s, s[s.find("{"):s.rfind("}") + 1] if "{" in s else ""):
        if not candidate:
            continue
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


class ChatClient:
    """A minimal OpenAI-compatible chat client in JSON mode, with retries and usage counters.

    Args:
      base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"`` (required; no default host).
      model: the model name sent with every request.
      api_key_env: the environment variable holding the API key (read at every request; no
        ``Authorization`` header when it is unset or empty).
      timeout_s: the socket timeout of one request, in seconds.
      max_retries: re-tries after a transport failure, and re-asks after a malformed reply
        (so at most ``1 + max_retries`` attempts of each kind).

    Attributes:
      url: ``{base_url}/chat/completions``.
      usage: running ``{"prompt_tokens", "completion_tokens", "calls"}`` over completed calls.
      chars_shown: total ``len(content)`` of every message sent.
    """

    def __init__(self, base_url: str | None, model: str, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 60, max_retries: int = 3):
        if not base_url or not str(base_url).strip():
            raise ValueError("base_url is required (e.g. 'http://127.0.0.1:8000/v1'); there is "
                             "no default host")
        if not timeout_s or float(timeout_s) <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if isinstance(max_retries, bool) or int(max_retries) < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        self.base_url = str(base_url).strip().rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = str(model)
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        self.chars_shown = 0

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post(self, messages: list[dict]) -> str:
        """One chat completion (transport retries included); returns the message content."""
        body = json.dumps({"model": self.model, "messages": messages, "temperature": 0,
                           "response_format": {"type": "json_object"}}).encode("utf-8")
        last = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(0.5, 0.05 * 2 ** attempt))
            self.chars_shown += sum(len(str(m.get("content", ""))) for m in messages)
            req = urllib.request.Request(self.url, data=body, headers=self._headers(),
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    reply = json.loads(resp.read().decode("utf-8"))
                content = reply["choices"][0]["message"]["content"]
            except (OSError, http.client.HTTPException) as e:  # URLError, HTTPError, timeout
                if isinstance(e, urllib.error.HTTPError):
                    e.close()
                last = e
                continue
            except (ValueError, KeyError, IndexError, TypeError) as e:  # not a completion
                last = ValueError(f"not a chat completion: {e!r}")
                continue
            usage = reply.get("usage") or {}
            for k in ("prompt_tokens", "completion_tokens"):
                try:
                    self.usage[k] += int(usage.get(k) or 0)
                except (TypeError, ValueError):
                    pass
            self.usage["calls"] += 1
            return "" if content is None else str(content)
        raise RuntimeError(f"chat completion request to {self.url} failed after "
                           f"{self.max_retries + 1} attempts: {last}")

    def complete_json(self, messages: Sequence[dict], required_keys: Sequence[str] = (),
                      check: Check | None = None) -> dict:
        """The JSON object the model returns for ``messages``.

        Args:
          messages: chat messages ``{"role", "content"}`` (not modified).
          required_keys: keys the object must have.
          check: optional further validation; returns an error text (re-ask) or None (valid).

        Raises:
          RuntimeError: when the transport fails ``1 + max_retries`` times in a row, or when
            ``1 + max_retries`` replies in a row are malformed.
        """
        msgs = [dict(m) for m in messages]
        problem = ""
        for _ in range(self.max_retries + 1):
            content = self._post(msgs)
            obj = _parse_json_object(content)
            if obj is None:
                problem = "it was not a JSON object"
            else:
                missing = [k for k in required_keys if k not in obj]
                problem = (f"it lacks the key(s) {', '.join(map(repr, missing))}" if missing
                           else (check(obj) if check is not None else None) or "")
                if not problem:
                    return obj
            msgs = msgs + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": f"Your reply could not be used: {problem}. Reply "
                 "again with only one JSON object in the format described above."}]
        raise RuntimeError(f"{self.url} returned malformed JSON {self.max_retries + 1} times in "
                           f"a row (model {self.model!r}); last problem: {problem}")


# ----------------------------------------------------------------------------- reasoner

_PLAN_SYSTEM = """\
You prepare a lookup in the memory of a long, multi-session chat between {a} and {b} \
(from {first} to {last}). The memory is indexed by cues: names, places, organisations, dates, \
numbers and ordinary content words, exactly as they were written in the chat.
For the question you are given, reply with one JSON object with these keys:
"cues": the words or short phrases of the question most likely to occur word for word in the \
messages that answer it (names first, at most 6);
"alternatives": an object mapping each cue to other words the chat might have used for the \
same thing (synonyms, other word forms), possibly empty lists;
"time_range": null, or ["YYYY-MM-DD", "YYYY-MM-DD"] (first and last day, inclusive) when the \
question restricts itself to a period;
"answer_type": one of {types};
"now": true when the question asks about the present state ("now", "currently", "still"), \
else false.
Reply with the JSON object only."""

_ACT_SYSTEM = """\
You answer a question about a long chat between {a} and {b} by exploring its memory graph. \
Messages are stored as numbered sentences (ids like D3:7-1 = session 3, turn 7, sentence 1), \
reachable through (cue, tag) pairs: a cue is a word of the chat, a tag a short topic label.
Each round, reply with one JSON object, either
{{"action": "answer", "answer": "<short answer>", "supports": ["<sentence id>", ...], \
"confidence": <0..1>}}
when the sentences read so far answer the question, or
{{"action": "navigate", "calls": [<tool call>, ...]}}
to read more, where a tool call is one of
{{"tool": "edges_by_tag", "pair": <candidate number>}} (read the sentences of that pair),
{{"tool": "event_keywords", "content": "<sentence id>"}} (new cues from that sentence),
{{"tool": "event_context", "content": "<sentence id>"}} (the turns just before and after),
{{"tool": "conversation_time", "content": "<sentence id>"}} (the date it refers to).
Follow leads: a name or object found in one sentence can be the cue of the next step. \
Answers are short phrases; dates are written like "7 May 2023". If the chat does not contain \
the answer, answer "{nm}"."""

_EXTRACT_SYSTEM = """\
You turn one chat message into memory records. Split the message into its informative \
sentences and reply with one JSON object:
{"sentences": [{"text": ..., "tag": ..., "time": ..., "keywords": [{"text": ..., \
"type": ...}]}]}
"text": the sentence rewritten to stand alone: "I", "me", "my" become the speaker's name, \
"you", "your" the other speaker's name, other pronouns the person or thing they refer to;
"tag": a topic label of at most 2 words (e.g. "pet adoption");
"time": the time expression of the sentence copied word for word ("yesterday", "last Friday", \
"on 7 May"), or "" when it has none;
"keywords": 2 to 30 words or short phrases copied exactly from "text" (people, places, \
organisations, dates, numbers, objects, activities, events), each with a "type" among \
person, place, org, date, number, thing.
Skip pure greetings and filler; reply {"sentences": []} when nothing is worth remembering."""


def _date_text(ordinal) -> str:
    return schema.format_date(dt.date.fromordinal(int(ordinal)))


def _lookup_cues(graph: MemoryGraph, text) -> list[int]:
    """Graph cue ids of a cue string: the whole lowercased string, else each of its words."""
    s = " ".join(str(text).lower().split())
    if not s:
        return []
    if s in graph.cue_lookup:
        return [int(graph.cue_lookup[s])]
    out = []
    for w in _WORD.findall(s):
        for key in (w, w[:-2] if w.endswith("'s") else None):
            if key and key in graph.cue_lookup:
                out.append(int(graph.cue_lookup[key]))
                break
    return list(dict.fromkeys(out))


def _day(text) -> int | None:
    try:
        return dt.date.fromisoformat(str(text).strip()[:10]).toordinal()
    except ValueError:
        return None


def _time_range(value) -> tuple[int, int] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = _day(value[0]), _day(value[1])
    if lo is None or hi is None:
        return None
    return (min(lo, hi), max(lo, hi))


def _check_plan(obj: dict) -> str | None:
    if not isinstance(obj["cues"], list):
        return '"cues" must be a list of strings'
    return None


def _check_act(max_calls: int) -> Check:
    def check(obj: dict) -> str | None:
        action = obj.get("action")
        if action == "answer":
            return None if "answer" in obj else 'an "answer" action needs the key "answer"'
        if action == "navigate":
            if max_calls <= 0:
                return 'no tool calls are left: reply with an "answer" action'
            return None if isinstance(obj.get("calls"), list) else \
                'a "navigate" action needs "calls", a list of tool calls'
        return '"action" must be "answer" or "navigate"'
    return check


def _confidence(value) -> float:
    try:
        c = float(value)
    except (TypeError, ValueError):
        return 0.0
    return float(min(max(c, 0.0), 1.0)) if c == c else 0.0


class OpenAIReasoner:
    """The phase-2 policy of an OpenAI-compatible LLM (the :class:`Reasoner` protocol).

    Args:
      base_url, model, api_key_env, timeout_s, max_retries: those of :class:`ChatClient`.
      encode: the run's embedder, ``encode(list[str]) -> [n, D]``, for ``QueryPlan.q_emb``
        (zeros of the graph's embedding width when None).

    Attributes:
      client: the :class:`ChatClient` of every call.
    """

    def __init__(self, base_url: str | None, model: str, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 60, max_retries: int = 3,
                 encode: Callable[[list[str]], np.ndarray] | None = None):
        self.client = ChatClient(base_url, model, api_key_env=api_key_env, timeout_s=timeout_s,
                                 max_retries=max_retries)
        self.encode = encode

    @property
    def usage(self) -> dict:
        """Running ``{"prompt_tokens", "completion_tokens", "calls"}`` of the client."""
        return self.client.usage

    @property
    def chars_shown(self) -> int:
        """Total characters of every message sent (tokens ~ chars / 4)."""
        return self.client.chars_shown

    def _system(self, template: str, graph: MemoryGraph, **kw) -> str:
        a, b = graph.speakers
        return template.format(a=a, b=b, **kw)

    def plan(self, graph: MemoryGraph, question: str) -> QueryPlan:
        """Step 1: the question's cues (graph ids; unknown ones dropped), their alternatives,
        the time range (day ordinals), the answer type (``"thing"`` if invalid) and "now"."""
        days = np.asarray(graph.content_day)
        first, last = (_date_text(days.min()), _date_text(days.max())) if days.size else \
            ("?", "?")
        system = self._system(_PLAN_SYSTEM, graph, first=first, last=last,
                              types=", ".join(ANSWER_TYPES))
        obj = self.client.complete_json(
            [{"role": "system", "content": system},
             {"role": "user", "content": f"Question: {question}"}],
            required_keys=("cues",), check=_check_plan)
        alt_text = obj.get("alternatives")
        alt_text = alt_text if isinstance(alt_text, dict) else {}
        alt_by_key = {" ".join(str(k).lower().split()): v for k, v in alt_text.items()}
        cues, alts = [], []
        for cue in obj["cues"]:
            raw = alt_by_key.get(" ".join(str(cue).lower().split()), [])
            raw = raw if isinstance(raw, list) else [raw]
            alt_ids = [a for r in raw for a in _lookup_cues(graph, r)]
            for c in _lookup_cues(graph, cue):
                if c in cues:
                    continue
                cues.append(c)
                alts.append(tuple(dict.fromkeys(a for a in alt_ids if a != c)))
        answer_type = str(obj.get("answer_type", "thing")).strip().lower()
        if answer_type not in ANSWER_TYPES:
            answer_type = "thing"
        if self.encode is not None:
            q_emb = np.asarray(self.encode([question]), np.float32)[0]
        else:
            q_emb = np.zeros(np.asarray(graph.content_emb).shape[1], np.float32)
        now = obj.get("now", False)
        now = now.strip().lower() == "true" if isinstance(now, str) else bool(now)
        return QueryPlan(question=question, q_emb=q_emb, cues=tuple(cues),
                         alternatives=tuple(alts), time_range=_time_range(obj.get("time_range")),
                         answer_type=answer_type, now=now)

    def render(self, graph: MemoryGraph, view: View) -> str:
        """The user message of one round: question, evidence, numbered candidates, budget."""
        lines = [f"Question: {view.question}",
                 f"Expected answer type: {view.plan.answer_type}"
                 + (" (the current state is asked)" if view.plan.now else ""),
                 f"Round {view.round + 1}.", "", "Sentences read so far:"]
        lines += [f"[{graph.content_id[i]}] ({_date_text(graph.content_day[i])}) "
                  f"{graph.content_text[i]}" for i in view.evidence] or ["(none)"]
        lines += ["", "Candidate (cue, tag) pairs:"]
        lines += [f"{n}. cue \"{graph.cue_text[c]}\" / tag \"{graph.tag_text[t]}\""
                  for n, (c, t) in enumerate(view.candidates, start=1)] or ["(none)"]
        lines += ["", f"Tool calls allowed this round: {max(view.max_calls, 0)} "
                  f"({max(view.calls_left, 0)} left in total)."]
        if view.max_calls <= 0:
            lines.append('No tool calls are left: reply with an "answer" action.')
        return "\n".join(lines)

    def act(self, graph: MemoryGraph, view: View) -> list:
        """One round: ``[Answer]`` or up to ``view.max_calls`` navigation actions (calls naming
        unknown pairs or ids are skipped; when none remains, ``[Answer(NOT_MENTIONED)]``)."""
        if not view.candidates and not view.evidence:
            return [Answer(schema.NOT_MENTIONED, (), 0.0)]
        system = self._system(_ACT_SYSTEM, graph, nm=schema.NOT_MENTIONED)
        obj = self.client.complete_json(
            [{"role": "system", "content": system},
             {"role": "user", "content": self.render(graph, view)}],
            required_keys=("action",), check=_check_act(view.max_calls))
        index = {cid: i for i, cid in enumerate(graph.content_id)}
        if obj["action"] == "answer":
            sup = obj.get("supports")
            sup = sup if isinstance(sup, list) else []
            ids = tuple(dict.fromkeys(index[s] for s in (str(x).strip() for x in sup)
                                      if s in index))
            return [Answer(str(obj["answer"]).strip() or schema.NOT_MENTIONED, ids,
                           _confidence(obj.get("confidence")))]
        tools = {"event_keywords": EventKeywords, "event_context": EventContext,
                 "conversation_time": QueryTime}
        actions = []
        for call in obj["calls"]:
            if not isinstance(call, dict):
                continue
            tool = str(call.get("tool", "")).strip()
            if tool == "edges_by_tag":
                try:
                    n = int(str(call.get("pair")).strip())
                except ValueError:
                    continue
                if 1 <= n <= len(view.candidates):
                    c, t = view.candidates[n - 1]
                    actions.append(ExpandTag(int(c), int(t)))
            elif tool in tools:
                cid = str(call.get("content", "")).strip()
                if cid in index:
                    actions.append(tools[tool](index[cid]))
        actions = list(dict.fromkeys(actions))[:max(view.max_calls, 0)]
        return actions or [Answer(schema.NOT_MENTIONED, (), 0.0)]


# ----------------------------------------------------------------------------- extractor


def _check_extract(obj: dict) -> str | None:
    if not isinstance(obj["sentences"], list):
        return '"sentences" must be a list of objects'
    return None


def _keywords(raw, text: str) -> tuple[tuple[str, str], ...]:
    """Verbatim (case-insensitive substring of ``text``) typed keywords, deduplicated, <= 30."""
    low, out, seen = text.lower(), [], set()
    for kw in raw if isinstance(raw, list) else []:
        if isinstance(kw, dict):
            word, kind = kw.get("text", ""), kw.get("type", "thing")
        else:
            word, kind = kw, "thing"
        word = " ".join(str(word).split())
        kind = str(kind).strip().lower()
        if not word or word.lower() not in low or word.lower() in seen:
            continue
        seen.add(word.lower())
        out.append((word, kind if kind in _KEYWORD_TYPES else "thing"))
    return tuple(out[:MAX_KEYWORDS])


def _tag(raw) -> str:
    words = str(raw or "").split()[:2]
    return " ".join(words) if words else "general"


class LLMExtractor:
    """Phase 1 by an LLM (the :class:`Extractor` protocol): one JSON call per turn.

    Each returned sentence becomes ``Extracted(f"{dia_id}-{k}", turn index, text, day,
    keywords, tag)``: ``day`` resolves the verbatim time expression (else the sentence) against
    the turn's session date; keywords not found in the sentence (case-insensitive) are dropped
    and at most 30 kept (fewer than 2 can remain when the model names too few); the tag keeps
    its first 2 words (``"general"`` if empty). Sentences with no text are skipped.

    Args:
      client: the :class:`ChatClient` (its ``usage`` / ``chars_shown`` count the extraction).
    """

    def __init__(self, client: ChatClient):
        self.client = client

    def messages(self, conv, turn, prev, session_date: dt.date) -> list[dict]:
        """The prompt of one turn (``prev``: the previous turn of the session, or None)."""
        a, b = conv.speakers
        other = b if turn.speaker == a else a
        lines = [f"Chat between {a} and {b}. Session date: {schema.format_date(session_date)}."]
        if prev is not None:
            lines.append(f"Previous message ({prev.speaker}): {prev.text}")
        lines += [f"Speaker: {turn.speaker}. Other speaker: {other}.",
                  f"Message: {turn.text}"]
        return [{"role": "system", "content": _EXTRACT_SYSTEM},
                {"role": "user", "content": "\n".join(lines)}]

    def extract(self, conv, encode=None) -> list[Extracted]:
        """One :class:`Extracted` per sentence, in turn order (the order of
        ``conv.turns()``, dated by the turn's session); ``encode`` is unused."""
        del encode
        out, i = [], 0
        for session in conv.sessions:
            prev = None
            for turn in session.turns:
                obj = self.client.complete_json(self.messages(conv, turn, prev, session.date),
                                                required_keys=("sentences",),
                                                check=_check_extract)
                k = 0
                for s in obj["sentences"]:
                    if not isinstance(s, dict):
                        continue
                    text = " ".join(str(s.get("text", "")).split())
                    if not text:
                        continue
                    k += 1
                    when = str(s.get("time") or "").strip()
                    out.append(Extracted(
                        content_id=f"{turn.dia_id}-{k}", turn=i, text=text,
                        day=timeref.resolve_time(when or text, session.date),
                        keywords=_keywords(s.get("keywords"), text), tag=_tag(s.get("tag"))))
                prev, i = turn, i + 1
        return out
