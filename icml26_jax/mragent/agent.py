"""Phase 2: active reconstruction (spec §Method "Active reconstruction, phase 2").

:func:`reconstruct` runs one question against one :class:`~icml26_jax.mragent.types.
MemoryGraph` with any :class:`~icml26_jax.mragent.types.Reasoner`:

1. plan (the reasoner);
2. match: contents linked to all question cues, plus partial matches (>= 2 cues; >= 1 on the
   temporal path);
3. temporal path: a time range holding < ``time_event_limit`` contents is read whole,
   otherwise intersected with the matches;
4. coarse select: the top ``k1`` matches by cos(e_q, e_content), one per turn; fine select:
   the best ``k2`` of those are read;
5. tag pruning: a cue with more than ``tag_max`` tags keeps its top ``tag_limit`` by
   cos(e_q, e_tag);
6. the tool loop (``max_rounds`` rounds, ``max_calls`` calls, <= ``max_calls_per_round`` per
   round): each round the reasoner sees a :class:`~icml26_jax.mragent.types.View` and returns
   ``[Answer]`` or navigation calls: ``edges_by_tag(cue, tag)`` (never the same pair twice; at
   most ``rerank_limit`` contents, reranked by cos(e_q, .)), ``event_keywords(content)`` (its
   entity cues join the frontier), ``event_context(content)`` (+-1 turn),
   ``conversation_time(content)``.

Costs are counted the same way for every method: ``contents_read`` distinct contents shown,
``tags_read`` tag entries shown, ``tokens`` = chars / 4 of everything shown (question,
contents with their dates, candidate lists, keyword lists, times), ``tool_calls``, ``rounds``.

Ablations (spec §Baselines): ``single_step`` one round and no harvest; ``no_tags`` a cue is
expanded to all its contents (no tag level; capped at ``READ_CAP`` reads); ``no_prune`` every
candidate pair of the frontier is expanded each round (no tag pruning, no threshold, no
per-round call limit; capped at ``READ_CAP`` reads); ``no_new_cues`` the frontier stays the
question's cues.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

import numpy as np

from icml26_jax.mragent.baselines import READ_CAP, shown_chars
from icml26_jax.mragent.reasoner import ENTITY_TYPES, LocalParams, extractive_answer
from icml26_jax.mragent.schema import format_date
from icml26_jax.mragent.types import (Answer, EventContext, EventKeywords, ExpandTag,
                                      MemoryGraph, QueryPlan, QueryTime, View)

ABLATIONS = ("none", "single_step", "no_tags", "no_prune", "no_new_cues")


class Budget(NamedTuple):
    """Phase-2 budgets (constants of the official loop, budgets of the reproduction)."""

    max_rounds: int = 8
    max_calls: int = 50
    max_calls_per_round: int = 10
    k1: int = 80
    k2: int = 20
    tag_max: int = 15
    tag_limit: int = 10
    rerank_limit: int = 20
    time_event_limit: int = 50

    def validate(self) -> "Budget":
        for name, v in self._asdict().items():
            if isinstance(v, bool) or int(v) < 1:
                raise ValueError(f"budget.{name} must be an integer >= 1, got {v!r}")
        if self.max_calls_per_round > self.max_calls:
            raise ValueError("budget.max_calls_per_round must be <= budget.max_calls")
        return self


class Trace(NamedTuple):
    """What one reconstruction did and cost."""

    actions: tuple
    evidence: tuple[int, ...]  # contents read, in reading order
    answer: Answer
    contents_read: int
    tags_read: int
    tokens: float
    tool_calls: int
    rounds: int
    cap_hit: bool = False
    round_calls: tuple[int, ...] = ()  # tool calls made in each round


def match(graph: MemoryGraph, plan: QueryPlan, min_cues: int = 2) -> np.ndarray:
    """Step 2: contents linked to >= min(min_cues, #cues) question cues (alternatives count
    for their cue). Ascending ids."""
    if not plan.cues:
        return np.zeros(0, np.int64)
    hits = np.zeros(graph.n_contents, np.int64)
    alts = plan.alternatives or ((),) * len(plan.cues)
    for c, alt in zip(plan.cues, alts):
        got = np.zeros(graph.n_contents, bool)
        for x in (c,) + tuple(alt):
            got[graph.contents_of(x)] = True
        hits += got
    need = min(min_cues, len(plan.cues))
    return np.flatnonzero(hits >= need)


def initial_evidence(graph: MemoryGraph, plan: QueryPlan, budget: Budget) -> np.ndarray:
    """Steps 2-4: the key sentences read before the tool loop."""
    m = match(graph, plan, 2)
    if plan.time_range is not None:
        lo, hi = plan.time_range
        in_range = np.flatnonzero((graph.content_day >= lo) & (graph.content_day <= hi))
        if in_range.size < budget.time_event_limit:
            return in_range
        m = np.intersect1d(in_range, match(graph, plan, 1))
    if m.size == 0:
        return m
    cos = graph.content_emb[m] @ plan.q_emb
    order = np.lexsort((m, -cos))
    seen_turns, coarse = set(), []
    for i in order:
        t = int(graph.content_turn[m[i]])
        if t in seen_turns:
            continue
        seen_turns.add(t)
        coarse.append(int(m[i]))
        if len(coarse) >= budget.k1:
            break
    return np.asarray(coarse[: budget.k2], np.int64)


def initial_frontier(graph: MemoryGraph, plan: QueryPlan) -> list[int]:
    """The question's expansion roots [R]: its entity and date cues; its stem cues (verbs,
    topics) only when it names no entity. Stems still drive the match step (2); expanding a
    verb cue would read every sentence with that verb, the blow-up tag pruning avoids."""
    roots = [c for c in plan.cues if graph.cue_type[c] != "stem"]
    if roots:
        return list(dict.fromkeys(roots))
    return list(dict.fromkeys(list(plan.cues) + [a for alt in plan.alternatives for a in alt]))


def _pruned_tags(graph: MemoryGraph, cue: int, q_emb, budget: Budget, prune: bool):
    tags = graph.tags_of(cue)
    if prune and tags.size > budget.tag_max:
        s = graph.tag_emb[tags] @ q_emb
        tags = tags[np.lexsort((tags, -s))[: budget.tag_limit]]
    return [int(t) for t in tags]


def reconstruct(graph: MemoryGraph, question: str, reasoner, budget: Budget = Budget(),
                ablation: str = "none", plan: QueryPlan | None = None) -> Trace:
    """Active reconstruction of the memory for ``question`` (see the module docstring)."""
    if ablation not in ABLATIONS:
        raise ValueError(f"unknown ablation {ablation!r}; allowed: {', '.join(ABLATIONS)}")
    plan = plan if plan is not None else reasoner.plan(graph, question)
    chars = len(question)
    evidence: list[int] = []
    seen: set[int] = set()
    cap_hit = False

    def read(ids):
        nonlocal chars, cap_hit
        for i in ids:
            i = int(i)
            if i in seen:
                continue
            if len(seen) >= READ_CAP:
                cap_hit = True
                return
            seen.add(i)
            evidence.append(i)
            chars += shown_chars(graph, [i])

    read(initial_evidence(graph, plan, budget))
    frontier = initial_frontier(graph, plan)
    harvest = ablation not in ("single_step", "no_new_cues")
    visited: set[tuple[int, int]] = set()
    inspected: set[int] = set()
    actions: list = []
    calls = rounds = tags_read = 0
    round_calls: list[int] = []
    answer = None
    ent = {i for i, t in enumerate(graph.cue_type) if t in ENTITY_TYPES}
    max_rounds = 1 if ablation == "single_step" else budget.max_rounds
    while rounds < max_rounds and calls < budget.max_calls:
        if ablation == "no_tags":
            cands = [(c, -1) for c in frontier if (c, -1) not in visited]
        else:
            cands = [(c, t) for c in frontier
                     for t in _pruned_tags(graph, c, plan.q_emb, budget, ablation != "no_prune")
                     if (c, t) not in visited]
        shown = cands
        tags_read += len(shown)
        chars += sum(len(graph.cue_text[c]) + (len(graph.tag_text[t]) if t >= 0 else 0) + 4
                     for c, t in shown)
        view = View(question, plan, rounds, tuple(frontier), tuple(cands), tuple(evidence),
                    frozenset(visited), frozenset(inspected), budget.max_calls - calls,
                    budget.max_calls_per_round)
        rounds += 1
        if ablation == "no_prune":  # unconstrained expansion: every candidate, every round
            acts = reasoner.act(graph, view)
            if any(isinstance(a, Answer) for a in acts):
                answer = next(a for a in acts if isinstance(a, Answer))
                break
            acts = [a for a in acts if not isinstance(a, ExpandTag)] + \
                [ExpandTag(c, t) for c, t in cands]
            limit = len(acts)
        else:
            acts = reasoner.act(graph, view)
            if any(isinstance(a, Answer) for a in acts):
                answer = next(a for a in acts if isinstance(a, Answer))
                break
            limit = min(budget.max_calls_per_round, budget.max_calls - calls)
        progressed = False
        round_calls.append(len(acts[:limit]))
        for a in acts[:limit]:
            calls += 1
            actions.append(a)
            if isinstance(a, ExpandTag):
                if (a.cue, a.tag) in visited:
                    continue  # never repeat a pair (the call is still counted)
                visited.add((a.cue, a.tag))
                ids = graph.contents_of(a.cue, None if a.tag < 0 else a.tag)
                if ids.size and a.tag >= 0:
                    cos = graph.content_emb[ids] @ plan.q_emb
                    ids = ids[np.lexsort((ids, -cos))[: budget.rerank_limit]]
                read(ids)
                progressed = True
            elif isinstance(a, EventKeywords):
                inspected.add(a.content)
                kw = graph.content_cues[a.content]
                chars += sum(len(graph.cue_text[c]) + 2 for c in kw)
                if harvest:
                    for c in kw:
                        if c in ent and c not in frontier and graph.cue_text[c] not in \
                                graph.speakers:
                            frontier.append(c)
                progressed = True
            elif isinstance(a, EventContext):
                t = int(graph.content_turn[a.content])
                near = [c for tt in (t - 1, t, t + 1) if 0 <= tt < len(graph.turn_contents)
                        for c in graph.turn_contents[tt]]
                read(near)
                progressed = True
            elif isinstance(a, QueryTime):
                inspected.add(a.content)
                chars += len(format_date(dt.date.fromordinal(int(graph.content_day[a.content]))))
                progressed = True
        if not progressed or cap_hit:
            break
    if answer is None:
        answer = extractive_answer(graph, plan, evidence,
                                   getattr(reasoner, "params", None) or LocalParams())
    return Trace(tuple(actions), tuple(evidence), answer, len(seen), tags_read, chars / 4.0,
                 calls, rounds, cap_hit, tuple(round_calls))
