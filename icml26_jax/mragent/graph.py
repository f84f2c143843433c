"""Phase 1: the Cue-Tag-Content memory graph (spec §Method "Graph, phase 1").

:class:`RuleExtractor` [R] replaces the paper's LLM extraction offline (it never reads
generator metadata):

* sentences: a regex split of each turn, ids ``D{s}:{t}-{k}``;
* proper-noun spans: runs of capitalised words (a sentence-initial word only when it is
  possessive, or capitalised mid-sentence somewhere in the conversation, or never written in
  lower case there), possessive ``'s`` stripped;
* cue types by majority vote over every context of a span: after "in/to/from" near a
  motion/living verb, or after "visit", -> place; after "at/for/by/from/with" near a work verb,
  or after "joined", -> org; after "named / called" or an animal word -> animal (pets);
  after "the" -> event; "X's", "X said", or sentence subject -> person; otherwise thing. The
  speakers are persons. (animal and event refine the spec's "thing" [R]: an extractive
  answer to "What did X buy?" must not be X's cat);
* pronouns: "I/me/my" -> the speaker, "you/your" -> the other speaker, "he/she/they/..." ->
  the latest third person mentioned;
* times: :func:`icml26_jax.mragent.timeref.resolve_time` against the session date (the
  default when the sentence names none);
* keywords (2-30): the entity spans, the resolved date when the sentence names a time, numbers,
  and the stop-listed content-word stems (cue type ``"stem"``);
* tags: per conversation, k-means on the content embeddings (k = ceil(n / 10), k-means++ with
  a fixed key, 20 Lloyd steps, in jnp); a content's tag is the top-2 TF-IDF non-entity stems of
  its cluster (shown by their most common surface word).

:func:`build_graph` turns the extracted contents into a :class:`~icml26_jax.mragent.types.
MemoryGraph`: edges (cue, tag, content) for every keyword of a content, sorted, with a CSR
pointer over cues; content/cue/tag embeddings from the run's embedder; the timeline and the
turn adjacency.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.mragent.metrics import stem
from icml26_jax.mragent.schema import format_date
from icml26_jax.mragent.timeref import resolve_time
from icml26_jax.mragent.types import Extracted, MemoryGraph, tag_type_share

STOPWORDS = frozenset("""a about above after again against all also am an and any are as at be
because been before being below between both but by can could did do does doing down during
each few for from further had has have having he her here hers herself him himself his how i if
in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself
yourselves oh wow haha yes yeah okay ok well really so thing things lot lots one ones get got
gets getting make made let know think thinks say says said tell told see seen way much many
ever still always never something anything everything someone anyone everyone going go went
come came thanks thank please guess funny story quick update believe honestly pretty same
sure maybe kind sort even back today yesterday tomorrow ago last next week weeks month months
year years day days monday tuesday wednesday thursday friday saturday sunday january february
march april may june july august september october november december morning night tonight
two three four five six seven eight nine ten eleven twelve new
""".split())
MOTION = frozenset(stem(w) for w in """move moved moving relocate relocated settle settled live
lives living flat apartment home life trip travel travelled flew fly moved there stay stayed
house""".split())
WORK = frozenset(stem(w) for w in """work works working worked job jobs hire hired join joined
offer position employ employed intern company""".split())
ANIMALS = frozenset("cat cats dog dogs parrot rabbit hamster turtle puppy kitten".split())
_SPLIT = re.compile(r"(?<=[.!?])\s+")
_TOK = re.compile(r"[A-Za-z]+(?:'s)?|\d+|[^\sA-Za-z\d]")
_PRON_SELF = {"i": "{s}", "me": "{s}", "my": "{s}'s", "mine": "{s}'s", "myself": "{s}"}
_PRON_OTHER = {"you": "{o}", "your": "{o}'s", "yours": "{o}'s"}
_PRON_3 = {"he": "{p}", "she": "{p}", "they": "{p}", "him": "{p}", "them": "{p}",
           "his": "{p}'s", "their": "{p}'s", "theirs": "{p}'s"}
_MONTH_WORDS = frozenset(m.lower() for m in ("January February March April May June July "
                                              "August September October November December"
                                              ).split())
_TIME_HINT = re.compile(r"\b(yesterday|today|tonight|tomorrow|ago|last|next|on \d{1,2} [A-Z]"
                        r"|on [A-Z][a-z]+ \d)", re.IGNORECASE)


def split_sentences(text: str) -> list[str]:
    """Regex sentence split (on ``. ! ?`` followed by space)."""
    return [s.strip() for s in _SPLIT.split(str(text).strip()) if s.strip()]


def _tokens(sentence: str) -> list[str]:
    return _TOK.findall(sentence)


def _initial_positions(toks: list[str]) -> set[int]:
    """Token positions that start a sentence or a clause after ':'."""
    out = {0}
    for i, t in enumerate(toks[:-1]):
        if t in (":", ";"):
            out.add(i + 1)
    return out


def _is_cap(t: str) -> bool:
    return t[:1].isupper() and t.isalpha() or (t.endswith("'s") and t[:1].isupper())


def _spans(toks: list[str], proper_vocab: set[str]) -> list[tuple[int, int, str, bool]]:
    """Proper-noun spans: (start, end, text, possessive)."""
    init = _initial_positions(toks)
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        word = t[:-2] if t.endswith("'s") else t
        ok = (_is_cap(t) and word != "I" and word.lower() not in STOPWORDS
              and (i not in init or word in proper_vocab or t.endswith("'s")))
        if not ok:
            i += 1
            continue
        j, words, poss = i, [], False
        while (j < len(toks) and _is_cap(toks[j]) and toks[j] != "I"
               and toks[j].removesuffix("'s").lower() not in STOPWORDS):
            w = toks[j]
            if w.endswith("'s"):
                words.append(w[:-2])
                poss = True
                j += 1
                break
            if j in init and j != i:
                break
            words.append(w)
            j += 1
        out.append((i, j, " ".join(words), poss))
        i = j
    return out


def _vote(toks, start, end, poss) -> str:
    prev = [x.lower() for x in toks[max(0, start - 4):start]]
    p1 = prev[-1] if prev else ""
    nxt = [x.lower() for x in toks[end:end + 2]]
    near = {stem(x) for x in prev}
    if p1 in ("named", "called") or (p1 and p1 in ANIMALS) or (
            len(nxt) == 2 and nxt[0] == "the" and nxt[1] in ANIMALS):
        return "animal"
    if (p1 in ("in", "to", "from") and near & MOTION) or stem(p1) == "visit":
        return "place"
    if (p1 in ("at", "for", "by", "from", "with") and near & WORK) or p1 == "joined":
        return "org"
    if p1 == "the":
        return "event"
    if poss or (nxt and nxt[0] in ("said", "says")):
        return "person"
    if start in _initial_positions(toks) or (start > 0 and toks[start - 1] in (",", ":")):
        if nxt and nxt[0].isalpha() and nxt[0].islower():
            return "person"
    return "thing"


_PRIORITY = {"person": 0, "place": 1, "org": 2, "animal": 3, "event": 4, "thing": 5}


@functools.partial(jax.jit, static_argnames=("k_pad", "steps"))
def _kmeans(x, n, k, key, k_pad: int, steps: int = 20):
    """k-means++ then Lloyd steps on the first ``n`` rows of ``x`` with ``k`` of ``k_pad``
    centroids live. Returns [n_pad] cluster ids (rows >= n: -1)."""
    n_pad = x.shape[0]
    valid = jnp.arange(n_pad) < n
    live = jnp.arange(k_pad) < k

    def d2(c):  # [n_pad, k_pad]
        return jnp.sum(x * x, 1)[:, None] - 2 * x @ c.T + jnp.sum(c * c, 1)[None]

    key0, key = jax.random.split(key)
    first = jax.random.randint(key0, (), 0, n)
    cent = jnp.zeros((k_pad, x.shape[1]), x.dtype).at[0].set(x[first])

    def init(j, carry):
        cent, key = carry
        key, sub = jax.random.split(key)
        dist = jnp.where(jnp.arange(k_pad)[None] < j, d2(cent), jnp.inf).min(1)
        dist = jnp.where(valid, jnp.maximum(dist, 0.0), 0.0)
        logits = jnp.where(dist > 0, jnp.log(jnp.where(dist > 0, dist, 1.0)), -jnp.inf)
        logits = jnp.where(jnp.any(dist > 0), logits, jnp.where(valid, 0.0, -jnp.inf))
        pick = jax.random.categorical(sub, logits)
        cent = jnp.where(j < k, cent.at[j].set(x[pick]), cent)
        return cent, key

    cent, _ = jax.lax.fori_loop(1, k_pad, init, (cent, key))

    def assign(cent):
        return jnp.argmin(jnp.where(live[None], d2(cent), jnp.inf), axis=1)

    def lloyd(cent, _):
        a = assign(cent)
        oh = jax.nn.one_hot(a, k_pad, dtype=x.dtype) * valid[:, None].astype(x.dtype)
        cnt = oh.sum(0)
        new = (oh.T @ x) / jnp.maximum(cnt, 1.0)[:, None]
        return jnp.where((cnt > 0)[:, None], new, cent), None

    cent, _ = jax.lax.scan(lloyd, cent, None, length=steps)
    return jnp.where(valid, assign(cent), -1)


def kmeans(x: np.ndarray, k: int, seed: int = 0, steps: int = 20) -> np.ndarray:
    """Cluster ids [n] of the rows of ``x`` (k-means++ init with ``jax.random.key(seed)``,
    ``steps`` Lloyd steps). Shapes are padded to buckets so conversations share programs."""
    x = np.asarray(x, np.float32)
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    n_pad = max(256, 1 << math.ceil(math.log2(n)))
    k_pad = max(16, 16 * math.ceil(k / 16))
    xp = np.zeros((n_pad, x.shape[1]), np.float32)
    xp[:n] = x
    out = _kmeans(jnp.asarray(xp), jnp.int32(n), jnp.int32(k), jax.random.key(seed), k_pad,
                  steps)
    return np.asarray(out)[:n]


class RuleExtractor:
    """The offline phase-1 extractor [R] (see the module docstring)."""

    def __init__(self, seed: int = 0, max_keywords: int = 30, kmeans_steps: int = 20):
        self.seed, self.max_keywords, self.kmeans_steps = seed, int(max_keywords), kmeans_steps

    # -- pass 1: proper-noun vocabulary and types ------------------------------------------
    def _types(self, conv) -> tuple[set[str], dict[str, str]]:
        sents = [toks for t in conv.turns() for s in split_sentences(t.text)
                 for toks in [_tokens(s)]]
        vocab, lower, initial = set(), set(), set()
        for toks in sents:
            init = _initial_positions(toks)
            for i, t in enumerate(toks):
                w = t[:-2] if t.endswith("'s") else t
                if t.isalpha() and t.islower():
                    lower.add(t)
                if not _is_cap(t) or w == "I" or w.lower() in STOPWORDS:
                    continue
                (initial if i in init else vocab).add(w)
        # A sentence-initial word is a name when it is capitalised mid-sentence somewhere, or
        # never written in lower case in the conversation ("Damon could not ...").
        vocab |= {w for w in initial if w.lower() not in lower}
        vocab |= set(conv.speakers)
        votes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for toks in sents:
            for a, b, text, poss in _spans(toks, vocab):
                votes[text][_vote(toks, a, b, poss)] += 1
        types = {t: min(v.items(), key=lambda kv: (-kv[1], _PRIORITY[kv[0]]))[0]
                 for t, v in votes.items()}
        for sp in conv.speakers:
            types[sp] = "person"
        return vocab, types

    # -- pass 2: sentences with pronouns resolved -------------------------------------------
    def sentences(self, conv) -> list[tuple[str, int, str, dt.date]]:
        """(content id, turn index, resolved sentence, session date) in conversation order."""
        vocab, types = self._types(conv)
        dates = conv.turn_date()
        latest = None
        out = []
        for ti, turn in enumerate(conv.turns()):
            me = turn.speaker
            other = conv.speakers[1] if me == conv.speakers[0] else conv.speakers[0]
            for k, sent in enumerate(split_sentences(turn.text), 1):
                toks = _tokens(sent)
                spans = {a: (b, text) for a, b, text, _ in _spans(toks, vocab)}
                words, i = [], 0
                while i < len(toks):
                    if i in spans:
                        b, text = spans[i]
                        words.append(" ".join(toks[i:b]))
                        if types.get(text) == "person" and text not in conv.speakers:
                            latest = text
                        i = b
                        continue
                    t, low = toks[i], toks[i].lower()
                    rep = None
                    if low in _PRON_SELF:
                        rep = _PRON_SELF[low].format(s=me)
                    elif low in _PRON_OTHER:
                        rep = _PRON_OTHER[low].format(o=other)
                    elif low in _PRON_3 and latest is not None:
                        rep = _PRON_3[low].format(p=latest)
                    elif low == "her" and latest is not None:
                        nxt = toks[i + 1].lower() if i + 1 < len(toks) else ""
                        rep = f"{latest}'s" if nxt.isalpha() and nxt not in STOPWORDS else latest
                    words.append(rep if rep is not None else t)
                    i += 1
                text = " ".join(words)
                text = re.sub(r"\s+([.,!?;:])", r"\1", text)
                out.append((f"{turn.dia_id}-{k}", ti, text, dates[turn.dia_id]))
        self._cache = (conv.sample_id, vocab, types)
        return out

    def extract(self, conv, encode) -> list[Extracted]:
        """Phase 1 for one conversation; ``encode(texts) -> [n, D]`` is the run's embedder."""
        sents = self.sentences(conv)
        _, vocab, types = self._cache
        rows = []
        for cid, ti, text, sdate in sents:
            toks = _tokens(text)
            spans = _spans(toks, vocab | set(conv.speakers))
            ent = [(s[2], types.get(s[2], "thing")) for s in spans]
            in_span = {j for a, b, _, _ in spans for j in range(a, b)}
            day = resolve_time(text, sdate)
            kws = list(dict.fromkeys(ent))
            if _TIME_HINT.search(text):
                kws.append((format_date(day), "date"))
            stems = []
            for j, t in enumerate(toks):
                low = t.lower()
                if j in in_span or not t.isalnum():
                    continue
                near = {x.lower() for x in toks[max(0, j - 1):j + 2]}
                if t.isdigit() and near & _MONTH_WORDS:
                    continue  # part of a date: the date cue carries it
                if t.isdigit():
                    kws.append((t, "number"))
                elif low not in STOPWORDS and len(low) >= 3:
                    stems.append((stem(low), low))
            kws += [(s, "stem") for s, _ in dict.fromkeys(stems)]
            kws = list(dict.fromkeys(kws))[: self.max_keywords]
            # The relation skeleton -- entity types and content words, no names, times or
            # stopwords -- is what gets clustered, so tags are topics ("moved settled"),
            # not names or "yesterday".
            starts = {a: types.get(t_, "thing") for a, _, t_, _ in spans}
            skel = [starts[j] if j in starts else toks[j].lower() for j in range(len(toks))
                    if j in starts or (j not in in_span and toks[j].isalpha()
                                       and toks[j].lower() not in STOPWORDS)]
            rows.append((cid, ti, text, day, tuple(kws), stems, " ".join(skel)))
        # Tags: k-means over the content embeddings, labelled by top-2 TF-IDF stems.
        emb = encode([r[6] for r in rows])
        k = max(1, math.ceil(len(rows) / 10))
        cl = kmeans(emb, k, self.seed, self.kmeans_steps)
        tf = collections.defaultdict(collections.Counter)
        surface = collections.defaultdict(collections.Counter)
        for r, c in zip(rows, cl):
            for s, w in r[5]:
                tf[int(c)][s] += 1
                surface[s][w] += 1
        df = collections.Counter(s for c in tf for s in tf[c])
        label = {}
        for c in sorted(set(int(v) for v in cl)):
            scored = sorted(tf[c].items(), key=lambda kv: (-kv[1] * math.log((1 + k) /
                                                                        df[kv[0]]), kv[0]))
            words = [surface[s].most_common(1)[0][0] for s, _ in scored[:2]]
            label[c] = " ".join(words) if words else "general"
        return [Extracted(cid, ti, text, day, kws, label[int(c)])
                for (cid, ti, text, day, kws, *_), c in zip(rows, cl)]


def build_graph(conv, extractor, embedder) -> MemoryGraph:
    """The memory graph of ``conv``.

    Args:
      conv: a :class:`~icml26_jax.mragent.schema.Conversation`.
      extractor: a phase-1 extractor (``RuleExtractor()`` offline, ``LLMExtractor`` online).
      embedder: anything with ``encode(texts) -> [n, D]`` unit vectors (the run's embedder,
        e.g. :class:`icml26_jax.mragent.embed.Fitted`).
    """
    rows = extractor.extract(conv, embedder.encode)
    if not rows:
        raise ValueError(f"conversation {conv.sample_id!r} has no content")
    turn_ids = tuple(t.dia_id for t in conv.turns())
    cues: dict[tuple[str, str], int] = {}
    tag_ids: dict[str, int] = {}
    content_cues, content_tag = [], []
    for r in rows:
        ids = []
        for text, typ in r.keywords:
            key = (text, typ)
            if key not in cues:
                cues[key] = len(cues)
            ids.append(cues[key])
        content_cues.append(tuple(dict.fromkeys(ids)))
        content_tag.append(tag_ids.setdefault(r.tag, len(tag_ids)))
    cue_text = tuple(k[0] for k in cues)
    cue_type = tuple(k[1] for k in cues)
    edges = np.asarray(sorted((q, content_tag[c], c) for c, qs in enumerate(content_cues)
                              for q in qs), np.int32).reshape(-1, 3)
    cue_ptr = np.searchsorted(edges[:, 0], np.arange(len(cue_text) + 1)).astype(np.int64)
    day = np.asarray([r.day.toordinal() for r in rows], np.int32)
    turn = np.asarray([r.turn for r in rows], np.int32)
    timeline = np.lexsort((np.arange(len(rows)), turn, day)).astype(np.int32)
    turn_contents = [[] for _ in turn_ids]
    for c, r in enumerate(rows):
        turn_contents[r.turn].append(c)
    lookup = {}
    for q, (text, typ) in enumerate(cues):
        for key in (text.lower(), stem(text.lower()) if typ == "stem" else None):
            if key is not None and key not in lookup:
                lookup[key] = q
    tag_text = tuple(tag_ids)
    return MemoryGraph(
        sample_id=conv.sample_id, speakers=tuple(conv.speakers),
        content_id=tuple(r.content_id for r in rows),
        content_text=tuple(r.text for r in rows), content_turn=turn, content_day=day,
        content_emb=np.asarray(embedder.encode([r.text for r in rows]), np.float32),
        content_tag=np.asarray(content_tag, np.int32), content_cues=tuple(content_cues),
        cue_text=cue_text, cue_type=cue_type,
        cue_emb=np.asarray(embedder.encode(list(cue_text)), np.float32), cue_lookup=lookup,
        tag_text=tag_text, tag_emb=np.asarray(embedder.encode(list(tag_text)), np.float32),
        edges=edges, cue_ptr=cue_ptr, timeline=timeline,
        turn_contents=tuple(tuple(x) for x in turn_contents), turn_ids=turn_ids,
        tag_type_share=tag_type_share(content_tag, content_cues, cue_type, len(tag_text)))


# The online extractor (spec §Module API lists it here); it lives in ``llm.py``.
from icml26_jax.mragent.llm import LLMExtractor  # noqa: E402,F401
