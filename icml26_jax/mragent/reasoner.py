"""Phase-2 reasoners and the shared extractive answerer (spec §Method, "LocalReasoner",
"Extractive answerer").

* :func:`make_plan` -- step 1: the question's cues (matched to graph cues, with
  alternatives), a time range when the question names one, the answer type and "now".
* :func:`extractive_answer` [R] -- shared by *every* method (MRAgent, its ablations and all
  baselines): candidates are the cues of the answer type in the evidence (question cues and
  the speakers excluded; for dates, the contents' resolved times); a candidate scores
  ``max_e [cos(e_q, e_e) + 0.3 * 1[e links to a question cue via <= 2 shared cues]]``; "now"
  questions prefer the latest content among near-best candidates; below ``tau_abstain`` the
  answer is "Not mentioned in the conversation".
* :class:`LocalReasoner` [R] -- the offline deterministic policy. State
  ``s_t = (q, C_t, V_t, E_t)``; a candidate pair (c, tau) scores

      S(c, tau) = cos(e_q, e_tau) + lambda * max_{e in E_t} cos(e_e, e_tau) * 1[c in E_t]

  (lambda = 0.5), plus ``type_affinity`` x the share of tau's contents that name a cue of
  the asked answer type [R] (a 2-word tag's cosine to the question is a weak signal of what
  the topic is about; an LLM reads "moved settled" as places), minus ``novelty`` when a content already read carries tau and names c
  (the pair would mostly return what was read) [R].
  Each round it answers when the extractive answer's score is
  >= ``tau_stop`` with margin >= ``m_stop`` (a "now" answer only once every tag of its
  subject has been read: its first value found may have been replaced later); otherwise it inspects the keywords of the best
  new evidence (``event_keywords``: the harvest that makes step t+1 depend on step t), keeps
  the top ``tag_limit`` candidates, prunes S < ``theta`` and expands the best (plus every pair
  with S >= ``theta_hi``). Dates are read with ``conversation_time`` before answering.

No function here reads gold answers, gold evidence or generator metadata.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import NamedTuple

import numpy as np

from icml26_jax.mragent.graph import STOPWORDS, _initial_positions, _tokens
from icml26_jax.mragent.metrics import stem
from icml26_jax.mragent.schema import NOT_MENTIONED, format_date
from icml26_jax.mragent.types import (CUE_TYPES, Answer, EventKeywords, ExpandTag,
                                      MemoryGraph, QueryPlan, QueryTime, View)

ENTITY_TYPES = ("person", "place", "org", "animal", "event", "thing")
_QWORDS = frozenset("""what which who whom whose where when why how does did do is was are
were has have can city company person name people place date time year""".split())
_NOW = re.compile(r"\b(now|currently|current|these days|at the moment|still)\b", re.I)
_MONTHS = ("january february march april may june july august september october november "
           "december").split()


class LocalParams(NamedTuple):
    """Constants of the local policy and the answerer; the thresholds are calibrated on the
    dev conversations only (``train.calibrate``)."""

    lam: float = 0.5  # lambda in S(c, tau)
    theta: float = -0.2  # prune candidates with S < theta
    theta_hi: float = 0.6  # expand at once
    tau_stop: float = 0.55  # stop when the answer scores >= tau_stop ...
    m_stop: float = 0.1  # ... with this margin over the runner-up
    tau_abstain: float = 0.25  # below: "Not mentioned in the conversation"
    link_bonus: float = 0.3  # the answerer's chain bonus
    now_margin: float = 0.15  # "now": latest content among candidates this close to the best
    type_affinity: float = 0.5  # weight of the tag's share of contents of the asked type
    novelty: float = 0.5  # S penalty for a pair already covered by a read content
    tag_limit: int = 10  # candidates kept per round (TAG_LIMIT)
    harvest: int = 3  # event_keywords calls per round (best un-inspected evidence)
    expand: int = 3  # at most this many expansions per round
    exclude_speakers: bool = True  # speakers are never answers (SynthMem asks about others)


def _answer_type(q: str) -> str:
    s = q.lower()
    if re.match(r"\s*(when|what date|what day|which day|which year|what year)\b", s):
        return "date"
    if re.match(r"\s*how (many|much|old|long)\b", s):
        return "number"
    if re.match(r"\s*(who|whom|whose)\b", s):
        return "person"
    if "company" in s or "employer" in s or re.search(r"\bwhere\b.*\bwork", s) or \
            re.search(r"\bwork(s|ing)? for\b", s):
        return "org"
    if re.match(r"\s*(where|which city|what city|which country|which town)\b", s) or \
            "which city" in s:
        return "place"
    if re.search(r"\b(pet|cat|dog|parrot|rabbit|hamster|turtle|puppy|kitten)\b", s) and \
            re.search(r"\b(name|called|named)\b", s):
        return "animal"
    if re.match(r"\s*(which|what) (event|festival|concert|fair|show)\b", s):
        return "event"
    if re.match(r"\s*(is|was|are|were|did|does|do|has|have|can|could|will|would)\b", s):
        return "yes/no"
    return "thing"


def _time_range(q: str):
    m = re.search(r"\bin (" + "|".join(_MONTHS) + r")(?: of)? (\d{4})\b", q.lower())
    if m:
        mo, y = _MONTHS.index(m.group(1)) + 1, int(m.group(2))
        lo = dt.date(y, mo, 1)
        hi = (dt.date(y + (mo == 12), mo % 12 + 1, 1) - dt.timedelta(days=1))
        return lo.toordinal(), hi.toordinal()
    m = re.search(r"\bin (\d{4})\b", q)
    if m:
        y = int(m.group(1))
        return dt.date(y, 1, 1).toordinal(), dt.date(y, 12, 31).toordinal()
    return None


def question_cues(graph: MemoryGraph, question: str) -> list[int]:
    """Graph cue ids named by the question: capitalised spans (matched case-insensitively,
    possessives stripped) and content-word stems."""
    toks = _tokens(question)
    init = _initial_positions(toks)
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        w = t[:-2] if t.endswith("'s") else t
        if w[:1].isupper() and (i not in init or w.lower() not in _QWORDS | STOPWORDS):
            j, words = i, []
            while j < len(toks) and toks[j][:1].isupper():
                words.append(toks[j][:-2] if toks[j].endswith("'s") else toks[j])
                j += 1
                if toks[j - 1].endswith("'s"):
                    break
            span = " ".join(words)
            if span.lower() in graph.cue_lookup:
                out.append(graph.cue_lookup[span.lower()])
            else:  # try the words one by one (a partial span)
                out += [graph.cue_lookup[x.lower()] for x in words if x.lower() in graph.cue_lookup]
            i = j
            continue
        low = w.lower()
        if w.isalpha() and low not in STOPWORDS and low not in _QWORDS and len(low) >= 3:
            key = stem(low)
            if key in graph.cue_lookup:
                out.append(graph.cue_lookup[key])
        i += 1
    return list(dict.fromkeys(out))


def make_plan(graph: MemoryGraph, question: str, q_emb: np.ndarray,
              alt_threshold: float = 0.8) -> QueryPlan:
    """Step 1: cues (with alternatives: stem cues whose embedding is within
    ``alt_threshold`` cosine), time range, answer type and "now"."""
    cues = question_cues(graph, question)
    alts = []
    stem_ids = np.asarray([i for i, t in enumerate(graph.cue_type) if t == "stem"], np.int64)
    for c in cues:
        if graph.cue_type[c] == "stem" and stem_ids.size:
            sims = graph.cue_emb[stem_ids] @ graph.cue_emb[c]
            alts.append(tuple(int(stem_ids[j]) for j in np.argsort(-sims)[:4]
                              if sims[j] >= alt_threshold and stem_ids[j] != c))
        else:
            alts.append(())
    return QueryPlan(question=question, q_emb=np.asarray(q_emb, np.float32), cues=tuple(cues),
                     alternatives=tuple(alts), time_range=_time_range(question),
                     answer_type=_answer_type(question), now=bool(_NOW.search(question)))


# ----------------------------------------------------------------------------- answerer


def _entity_mask(graph: MemoryGraph) -> np.ndarray:
    speakers = set(graph.speakers)
    return np.asarray([t in ENTITY_TYPES and x not in speakers
                       for t, x in zip(graph.cue_type, graph.cue_text)])


def link_levels(graph: MemoryGraph, plan: QueryPlan, evidence) -> np.ndarray:
    """Per evidence content: how many shared entity cues link it to a question cue
    (0 = it names one; 1, 2 = through one or two other evidence contents; 3 = not linked
    within two). The speakers' cues never link (they are in every other sentence)."""
    ev = list(evidence)
    ent = _entity_mask(graph)
    qset = {c for c in plan.cues if ent[c]} | {a for alt in plan.alternatives for a in alt
                                               if ent[a]}
    cues = [{c for c in graph.content_cues[e] if ent[c]} for e in ev]
    level = np.full(len(ev), 3, np.int64)
    frontier = set()
    for i, cs in enumerate(cues):
        if cs & qset:
            level[i] = 0
            frontier |= cs
    for lv in (1, 2):
        new = set()
        for i, cs in enumerate(cues):
            if level[i] > lv and cs & frontier:
                level[i] = lv
                new |= cs
        frontier |= new
    return level


def rank_answers(graph: MemoryGraph, plan: QueryPlan, evidence, params: LocalParams = LocalParams()):
    """Ranked ``[(answer text, score, supporting content)]`` (best first) over ``evidence``."""
    ev = list(dict.fromkeys(int(e) for e in evidence))
    if not ev:
        return []
    cos = graph.content_emb[ev] @ plan.q_emb
    lv = link_levels(graph, plan, ev)
    base = cos + params.link_bonus * (lv <= 2)
    excl = set(plan.cues) | {a for alt in plan.alternatives for a in alt}
    if params.exclude_speakers:
        excl |= {i for i, t in enumerate(graph.cue_text) if t in graph.speakers}
    best: dict[str, tuple[float, int, int]] = {}  # text -> (score, content, day)
    for i, e in enumerate(ev):
        day = int(graph.content_day[e])
        if plan.answer_type == "date":
            cands = [format_date(dt.date.fromordinal(day))]
        elif plan.answer_type == "yes/no":
            cands = ["yes"]
        else:
            cands = [graph.cue_text[c] for c in graph.content_cues[e]
                     if graph.cue_type[c] == plan.answer_type and c not in excl]
        for a in cands:
            s = float(base[i])
            cur = best.get(a)
            if cur is None or s > cur[0] or (s == cur[0] and day > cur[2]):
                best[a] = (s, e, max(day, cur[2]) if cur else day)
            elif day > cur[2]:
                best[a] = (cur[0], cur[1], day)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))
    out = [(a, s, e) for a, (s, e, _) in ranked]
    if plan.now and out:
        top = out[0][1]
        near = [(a, s, e) for a, (s, e, d) in ranked if s >= top - params.now_margin]
        latest = max(near, key=lambda x: (best[x[0]][2], x[1]))
        out = [latest] + [x for x in out if x[0] != latest[0]]
    return out


def answer_and_margin(graph, plan, evidence, params: LocalParams = LocalParams()):
    """(:class:`Answer`, margin over the runner-up); abstains below ``tau_abstain``."""
    ranked = rank_answers(graph, plan, evidence, params)
    if not ranked:
        return Answer(NOT_MENTIONED, (), 0.0), 0.0
    a, s, e = ranked[0]
    margin = s - ranked[1][1] if len(ranked) > 1 else s
    if s < params.tau_abstain:
        return Answer(NOT_MENTIONED, (int(e),), float(s)), float(margin)
    if plan.answer_type == "yes/no":
        a = "yes"
    return Answer(a, (int(e),), float(s)), float(margin)


def extractive_answer(graph: MemoryGraph, plan: QueryPlan, evidence_ids,
                      params: LocalParams = LocalParams()) -> Answer:
    """The answer every method gives from its evidence (see the module docstring)."""
    return answer_and_margin(graph, plan, evidence_ids, params)[0]


# ----------------------------------------------------------------------------- LocalReasoner


class LocalReasoner:
    """The offline policy of spec §Method "LocalReasoner" (see the module docstring).

    Args:
      params: thresholds and constants (:class:`LocalParams`).
      encode: the run's embedder, ``encode(texts) -> [n, D]`` (questions are embedded with it).
    """

    def __init__(self, params: LocalParams = LocalParams(), encode=None):
        if encode is None:
            raise ValueError("LocalReasoner needs encode= (the run's embedder)")
        self.params, self.encode = params, encode

    def plan(self, graph: MemoryGraph, question: str) -> QueryPlan:
        return make_plan(graph, question, self.encode([question])[0])

    def scores(self, graph: MemoryGraph, view: View) -> np.ndarray:
        """S(c, tau) of every candidate of ``view`` (in its order)."""
        if not view.candidates:
            return np.zeros(0)
        pairs = np.asarray(view.candidates, np.int64)
        temb = graph.tag_emb[np.maximum(pairs[:, 1], 0)]
        # A tag of -1 is the no_tags ablation's "all contents of the cue": score the cue.
        temb = np.where((pairs[:, 1] < 0)[:, None], graph.cue_emb[pairs[:, 0]], temb)
        s = temb @ view.plan.q_emb
        if view.plan.answer_type in CUE_TYPES and self.params.type_affinity:
            # [R] What the topic is about: tags whose contents name the asked type.
            share = graph.type_share()[np.maximum(pairs[:, 1], 0),
                                       CUE_TYPES.index(view.plan.answer_type)]
            s = s + self.params.type_affinity * np.where(pairs[:, 1] >= 0, share, 0.0)
        if view.evidence:
            ev = np.asarray(view.evidence, np.int64)
            best_e = (temb @ graph.content_emb[ev].T).max(axis=1)
            in_ev = set()
            for e in view.evidence:
                in_ev.update(graph.content_cues[e])
            found = np.asarray([c in in_ev for c in pairs[:, 0]])
            s = s + self.params.lam * best_e * found
        # A pair that a read content already covers (the content carries the tag and names
        # the cue) mostly returns what was read: prefer pairs that reach new contents.
        covered = {(c, int(graph.content_tag[e])) for e in view.evidence
                   for c in graph.content_cues[e]}
        s = s - self.params.novelty * np.asarray([(int(c), int(t)) in covered for c, t in pairs])
        return s

    def act(self, graph: MemoryGraph, view: View) -> list:
        p = self.params
        ans, margin = answer_and_margin(graph, view.plan, view.evidence, p)
        confident = ans.answer != NOT_MENTIONED and ans.confidence >= p.tau_stop and \
            margin >= p.m_stop
        confirm = []
        if confident and view.plan.now:
            # A "now" answer may have been replaced later: it is final once every tag of its
            # subject (the other names in its support) has been read.
            ent = _entity_mask(graph)
            subj = [c for c in graph.content_cues[ans.supports[0]] if ent[c]
                    and graph.cue_text[c] != ans.answer]
            confirm = [(c, int(t)) for c in subj for t in graph.tags_of(c)
                       if (c, int(t)) not in view.visited]
            confident = not confirm
        if confirm:
            return [ExpandTag(c, t) for c, t in confirm[: min(view.max_calls, view.calls_left)]]
        if confident:
            if view.plan.answer_type == "date" and ans.supports and \
                    ans.supports[0] not in view.inspected and view.calls_left > 0:
                return [QueryTime(ans.supports[0])]
            return [ans]
        actions: list = []
        budget = min(view.max_calls, view.calls_left)
        # Harvest: inspect the keywords of the best not-yet-inspected evidence that is linked
        # to the question (level <= 2; unlinked sentences cannot extend the chain), sentences
        # naming someone or something not yet on the frontier first (the names are in the
        # text the reasoner read).
        if view.evidence:
            level = dict(zip(view.evidence, link_levels(graph, view.plan, view.evidence)))
            ev = [e for e in view.evidence if e not in view.inspected]
            if ev:
                lv = [level[e] for e in ev]
                ent = _entity_mask(graph)
                front = set(view.frontier)
                new = np.asarray([any(ent[c] and c not in front for c in graph.content_cues[e])
                                  for e in ev], np.float64)
                sc = graph.content_emb[ev] @ view.plan.q_emb + new
                # Closest to the question's cues first (a breadth-first walk of the chain).
                order = [i for i in np.lexsort((np.asarray(ev), -sc, np.asarray(lv)))
                         if lv[i] <= 2]
                actions += [EventKeywords(int(ev[i])) for i in order[:p.harvest]]
        # Expansion: top tag_limit candidates, prune S < theta, the best (+ S >= theta_hi),
        # greedily, a tag chosen in this round counting as visited for the next choice.
        if view.candidates:
            s = self.scores(graph, view)
            order = np.lexsort((np.arange(len(s)), -s))[: p.tag_limit]
            chosen = []
            for i in order:
                if s[i] < p.theta or (chosen and s[i] < p.theta_hi) or len(chosen) >= p.expand:
                    break
                chosen.append(i)
            actions += [ExpandTag(*map(int, view.candidates[i])) for i in chosen]
        actions = actions[:budget]
        if not actions:
            return [ans]
        return actions


# The online reasoner (spec §Module API lists it here); it lives in ``llm.py`` with the HTTP
# client and the LLM extractor.
from icml26_jax.mragent.llm import OpenAIReasoner  # noqa: E402,F401
