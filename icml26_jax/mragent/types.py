"""Shared record types of the memory graph and the reasoners (spec §Module API).

``MemoryGraph`` is built by :func:`icml26_jax.mragent.graph.build_graph`; the action types and
the :class:`Reasoner` protocol are used by :func:`icml26_jax.mragent.agent.reconstruct`, the
offline :class:`~icml26_jax.mragent.reasoner.LocalReasoner` and the online
:class:`~icml26_jax.mragent.llm.OpenAIReasoner`. They live here so that neither side imports
the other.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Union

import numpy as np

CUE_TYPES = ("person", "place", "org", "animal", "event", "date", "number", "thing", "stem")
ANSWER_TYPES = ("person", "place", "org", "animal", "event", "date", "number", "thing",
                "yes/no")


class MemoryGraph(NamedTuple):
    """The Cue-Tag-Content graph of one conversation (spec §Method, phase 1).

    Contents are sentences ``D{s}:{t}-{k}`` with pronouns resolved; cues are the verbatim
    keywords (entities, dates, numbers: typed by majority vote) and content-word stems (type
    ``"stem"``); a tag is a <= 2-word cluster label. An edge ``(cue, tag, content)`` says that
    ``content`` mentions ``cue`` and carries ``tag``. Edges are sorted by (cue, tag, content);
    ``cue_ptr`` is their CSR row pointer over cues.
    """

    sample_id: str
    speakers: tuple[str, str]
    content_id: tuple[str, ...]  # [C] "D3:7-1"
    content_text: tuple[str, ...]  # [C] the resolved sentence
    content_turn: np.ndarray  # [C] int32 turn index (order of the turns in the conversation)
    content_day: np.ndarray  # [C] int32 proleptic ordinal of the resolved time
    content_emb: np.ndarray  # [C, D] float32 unit vectors
    content_tag: np.ndarray  # [C] int32 tag of each content
    content_cues: tuple[tuple[int, ...], ...]  # [C] its cue ids (the keywords, <= 30)
    cue_text: tuple[str, ...]  # [Q]
    cue_type: tuple[str, ...]  # [Q] one of CUE_TYPES
    cue_emb: np.ndarray  # [Q, D]
    cue_lookup: dict  # lowercased cue text (and stem) -> cue id
    tag_text: tuple[str, ...]  # [G]
    tag_emb: np.ndarray  # [G, D]
    edges: np.ndarray  # [E, 3] int32 (cue, tag, content), sorted
    cue_ptr: np.ndarray  # [Q + 1] int64 CSR pointer into edges
    timeline: np.ndarray  # [C] int32 content ids sorted by (day, turn, id)
    turn_contents: tuple[tuple[int, ...], ...]  # [T] the contents of each turn
    turn_ids: tuple[str, ...]  # [T] "D3:7"
    # [G, len(CUE_TYPES)] share of each tag's contents naming a cue of each type (what a
    # topic is about: "moved settled" -> places); None = computed on use.
    tag_type_share: np.ndarray | None = None

    @property
    def n_contents(self) -> int:
        return len(self.content_text)

    @property
    def n_cues(self) -> int:
        return len(self.cue_text)

    def tags_of(self, cue: int) -> np.ndarray:
        """The distinct tags of ``cue`` (ascending ids)."""
        e = self.edges[self.cue_ptr[cue]:self.cue_ptr[cue + 1]]
        return np.unique(e[:, 1])

    def type_share(self) -> np.ndarray:
        """``tag_type_share`` (computed when the graph was built without it)."""
        if self.tag_type_share is not None:
            return self.tag_type_share
        return tag_type_share(self.content_tag, self.content_cues, self.cue_type,
                              len(self.tag_text))

    def contents_of(self, cue: int, tag: int | None = None) -> np.ndarray:
        """Contents linked to ``cue`` (under ``tag`` only, when given), ascending ids."""
        e = self.edges[self.cue_ptr[cue]:self.cue_ptr[cue + 1]]
        if tag is not None:
            e = e[e[:, 1] == tag]
        return np.unique(e[:, 2])


def tag_type_share(content_tag, content_cues, cue_type, n_tags: int) -> np.ndarray:
    """[n_tags, len(CUE_TYPES)]: per tag, the share of its contents naming >= 1 cue of each
    type."""
    out = np.zeros((n_tags, len(CUE_TYPES)))
    count = np.zeros(n_tags)
    for t, cues in zip(content_tag, content_cues):
        count[t] += 1
        for k in {CUE_TYPES.index(cue_type[c]) for c in cues}:
            out[t, k] += 1
    return out / np.maximum(count, 1)[:, None]


class QueryPlan(NamedTuple):
    """Phase-2 step 1: the question's cues (graph ids) with alternatives, a time range
    (inclusive day ordinals) if the question names one, the answer type and whether it asks
    about the present ("now", "currently")."""

    question: str
    q_emb: np.ndarray  # [D]
    cues: tuple[int, ...]
    alternatives: tuple[tuple[int, ...], ...] = ()  # per cue: other cue ids accepted for it
    time_range: tuple[int, int] | None = None
    answer_type: str = "thing"
    now: bool = False


class ExpandTag(NamedTuple):
    """Tool ``edges_by_tag(cue, tag)``: the contents of one (cue, tag) pair."""
    cue: int
    tag: int


class EventKeywords(NamedTuple):
    """Tool ``event_keywords(content)``: its cues (new frontier cues)."""
    content: int


class EventContext(NamedTuple):
    """Tool ``event_context(content)``: the contents of the turns before and after."""
    content: int


class QueryTime(NamedTuple):
    """Tool ``conversation_time(content)``: its resolved date."""
    content: int


class Answer(NamedTuple):
    """The final action: an answer string, supporting content ids and a confidence."""
    answer: str
    supports: tuple[int, ...] = ()
    confidence: float = 0.0


Action = Union[ExpandTag, EventKeywords, EventContext, QueryTime, Answer]


class View(NamedTuple):
    """What a reasoner sees at the start of a round (everything here is counted as tokens).

    ``candidates`` are the unvisited (cue, tag) pairs of the frontier after tag pruning
    (spec step 5); ``evidence`` the contents read so far, in reading order.
    """

    question: str
    plan: QueryPlan
    round: int
    frontier: tuple[int, ...]
    candidates: tuple[tuple[int, int], ...]
    evidence: tuple[int, ...]
    visited: frozenset
    inspected: frozenset  # contents whose keywords / time were already fetched
    calls_left: int
    max_calls: int  # this round


class Reasoner(Protocol):
    """A phase-2 policy: makes the plan, then each round returns ``[Answer]`` or a list of
    navigation actions (at most ``view.max_calls``)."""

    def plan(self, graph: MemoryGraph, question: str) -> QueryPlan: ...

    def act(self, graph: MemoryGraph, view: View) -> list: ...


class Extracted(NamedTuple):
    """Phase-1 output for one content (sentence) -- what an extractor hands to
    :func:`~icml26_jax.mragent.graph.build_graph`.

    ``keywords`` are (verbatim text, cue type) pairs, 2-30 per content; ``tag`` the <= 2-word
    label; ``day`` the resolved absolute date (a ``datetime.date``).
    """

    content_id: str  # "D3:7-1"
    turn: int  # index of the turn in Conversation.turns()
    text: str  # the sentence with pronouns resolved
    day: object  # datetime.date
    keywords: tuple[tuple[str, str], ...]
    tag: str


class Extractor(Protocol):
    """Phase 1: ``extract(conv, encode)`` -> one :class:`Extracted` per sentence, in order.

    ``encode(texts) -> [n, D]`` is the run's embedder (the rule extractor clusters with it)."""

    def extract(self, conv, encode) -> list: ...
