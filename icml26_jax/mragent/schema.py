"""Conversation memory benchmarks in the LoCoMo schema (spec §Data, §Module API ``schema.py``).

Every source (SynthMem, a user's ``locomo10.json``, LongMemEval_S) becomes a list of
:class:`Conversation`: dated sessions of turns with ids ``D{session}:{turn}`` and the QA items.
Sentence-level content ids are ``D{session}:{turn}-{k}``; :func:`parse_dia_id` resolves both.

Real data is user-supplied and never downloaded:

* ``load_locomo(path)`` reads ``locomo10.json``: per sample ``conversation`` with
  ``speaker_a``/``speaker_b``, ``session_N`` turn lists (``speaker``, ``dia_id``, ``text``) and
  ``session_N_date_time`` (e.g. ``"1:56 pm on 8 May, 2023"``), and ``qa`` items
  (``question``, ``answer`` or ``adversarial_answer``, ``evidence``, ``category``).
* ``load_longmemeval(path)`` reads LongMemEval_S: ``question_id`` (suffix ``_abs`` =
  abstention), ``question_type``, ``question``, ``answer``, ``question_date``,
  ``haystack_dates``, ``haystack_sessions`` (lists of ``{role, content, has_answer}``).

LoCoMo categories (spec Pitfalls): 1 multi-hop, 2 temporal, 3 open-domain (SynthMem:
knowledge-update [R]), 4 single-hop, 5 adversarial.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import NamedTuple

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
NOT_MENTIONED = "Not mentioned in the conversation"

_MONTHS = {m.lower(): i + 1 for i, m in enumerate(
    ("January", "February", "March", "April", "May", "June", "July", "August", "September",
     "October", "November", "December"))}
_MONTHS.update({k[:3]: v for k, v in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_DIA = re.compile(r"^D(\d+):(\d+)(?:-(\d+))?$")


class Turn(NamedTuple):
    """One utterance: ``dia_id`` ``"D{session}:{turn}"``, the speaker's name, the text."""

    dia_id: str
    speaker: str
    text: str


class Session(NamedTuple):
    """A dated session: 1-based ``index``, ``date`` (a ``datetime.date``), its turns."""

    index: int
    date: dt.date
    turns: tuple[Turn, ...]


class QA(NamedTuple):
    """A question with its gold answer and gold evidence ids (read by the evaluator only).

    ``category`` follows LoCoMo (1 multi-hop, 2 temporal, 3 open-domain / knowledge-update,
    4 single-hop, 5 adversarial); ``qtype`` is a free-form finer type (e.g. ``"multi_hop_2"``,
    LongMemEval's ``question_type``).
    """

    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int
    qtype: str = ""


class Conversation(NamedTuple):
    """One memory sample: two speakers, dated sessions, QA items."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...]

    def turns(self) -> list[Turn]:
        """Every turn in order."""
        return [t for s in self.sessions for t in s.turns]

    def turn_date(self) -> dict[str, dt.date]:
        """``dia_id -> session date``."""
        return {t.dia_id: s.date for s in self.sessions for t in s.turns}


def parse_dia_id(dia_id: str) -> tuple[int, int, int | None]:
    """``"D3:7"`` -> (3, 7, None); ``"D3:7-2"`` -> (3, 7, 2) (a sentence of that turn).

    Raises:
      ValueError: for anything else.
    """
    m = _DIA.match(str(dia_id).strip())
    if not m:
        raise ValueError(f"not a dialogue id 'D<session>:<turn>' or 'D<session>:<turn>-<k>': "
                         f"{dia_id!r}")
    k = m.group(3)
    return int(m.group(1)), int(m.group(2)), (int(k) if k is not None else None)


def turn_of(content_id: str) -> str:
    """The turn id of a turn or sentence id: ``"D3:7-2"`` -> ``"D3:7"``."""
    s, t, _ = parse_dia_id(content_id)
    return f"D{s}:{t}"


def parse_session_datetime(text: str) -> dt.date:
    """The date of a LoCoMo / LongMemEval date string.

    Accepts ``"1:56 pm on 8 May, 2023"``, ``"8 May 2023"``, ``"May 8, 2023"``,
    ``"2023/05/08 (Mon) 13:56"`` and ISO ``"2023-05-08"`` (a time part is ignored).

    Raises:
      ValueError: naming the string when no date is found.
    """
    s = str(text).strip()
    m = re.search(r"(\d{4})[/-](\d{1,2})[/-](\d{1,2})", s)
    if m:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = re.search(r"(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]+)\.?,?\s+(\d{4})", s)
    if m and m.group(2).lower() in _MONTHS:
        return dt.date(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
    m = re.search(r"([A-Za-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})", s)
    if m and m.group(1).lower() in _MONTHS:
        return dt.date(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))
    raise ValueError(f"cannot parse a date from {text!r} (expected e.g. '1:56 pm on 8 May, "
                     "2023', '2023/05/08 (Mon) 13:56' or '2023-05-08')")


def format_date(d: dt.date) -> str:
    """The answer format of temporal questions: ``"7 May 2023"``."""
    return f"{d.day} {d.strftime('%B')} {d.year}"


# ----------------------------------------------------------------------------- LoCoMo


def _session_keys(conv: dict) -> list[int]:
    out = []
    for k in conv:
        m = re.fullmatch(r"session_(\d+)", k)
        if m and isinstance(conv[k], list):
            out.append(int(m.group(1)))
    return sorted(out)


def _locomo_sample(sample: dict, i: int) -> Conversation:
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise ValueError(f"LoCoMo sample {i} has no 'conversation' object")
    speakers = (str(conv.get("speaker_a", "A")), str(conv.get("speaker_b", "B")))
    sessions = []
    for n in _session_keys(conv):
        key = f"session_{n}_date_time"
        if key not in conv:
            raise ValueError(f"LoCoMo sample {i}: session_{n} has no {key}")
        turns = []
        for t in conv[f"session_{n}"]:
            parse_dia_id(t["dia_id"])
            turns.append(Turn(str(t["dia_id"]), str(t["speaker"]), str(t.get("text", ""))))
        sessions.append(Session(n, parse_session_datetime(conv[key]), tuple(turns)))
    qa = []
    for q in sample.get("qa", []):
        cat = int(q.get("category", 0))
        ans = q.get("answer", q.get("adversarial_answer", NOT_MENTIONED))
        if cat == 5:  # adversarial: the conversation does not hold the answer
            ans = NOT_MENTIONED
        ev = tuple(str(e) for e in q.get("evidence", []) or [])
        qa.append(QA(str(q["question"]), str(ans), ev, cat, str(q.get("qtype", ""))))
    return Conversation(str(sample.get("sample_id", f"sample_{i}")), speakers, tuple(sessions),
                        tuple(qa))


def load_locomo(path: str | os.PathLike) -> list[Conversation]:
    """Reads a LoCoMo-format JSON file (a list of samples; ``locomo10.json``).

    Raises:
      ValueError: on a missing file or a malformed sample (naming it).
    """
    if not os.path.isfile(path):
        raise ValueError(f"no LoCoMo file at {path!r} (download locomo10.json from "
                         "https://github.com/snap-research/locomo)")
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: a LoCoMo file holds a JSON list of samples")
    return [_locomo_sample(s, i) for i, s in enumerate(data)]


def dump_locomo(convs, path: str | os.PathLike) -> None:
    """Writes conversations in the LoCoMo schema (``load_locomo`` reads them back).

    Dates are written as ``"12:00 pm on 7 May, 2023"``; ``qtype`` is kept as an extra field.
    """
    out = []
    for c in convs:
        conv = {"speaker_a": c.speakers[0], "speaker_b": c.speakers[1]}
        for s in c.sessions:
            conv[f"session_{s.index}"] = [{"speaker": t.speaker, "dia_id": t.dia_id,
                                           "text": t.text} for t in s.turns]
            conv[f"session_{s.index}_date_time"] = (f"12:00 pm on {s.date.day} "
                                                    f"{s.date.strftime('%B')}, {s.date.year}")
        qa = []
        for q in c.qa:
            item = {"question": q.question, "evidence": list(q.evidence),
                    "category": q.category, "qtype": q.qtype}
            item["adversarial_answer" if q.category == 5 else "answer"] = q.answer
            qa.append(item)
        out.append({"sample_id": c.sample_id, "conversation": conv, "qa": qa})
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


# ----------------------------------------------------------------------------- LongMemEval

_LME_CATEGORY = {"multi-session": 1, "temporal-reasoning": 2, "knowledge-update": 3,
                 "single-session-user": 4, "single-session-assistant": 4,
                 "single-session-preference": 4}


def load_longmemeval(path: str | os.PathLike) -> list[Conversation]:
    """Reads LongMemEval_S (a JSON list of questions, each with its own haystack).

    Every question becomes one :class:`Conversation` whose sessions are its haystack sessions
    (``dia_id`` ``D{session}:{turn}``, speakers "user" / "assistant"), whose gold evidence is
    the turns with ``has_answer``, and whose single QA item has the LoCoMo category of its
    ``question_type`` (abstention ``_abs`` -> 5, answer "Not mentioned in the conversation").

    Raises:
      ValueError: on a missing file or a malformed item (naming its question_id).
    """
    if not os.path.isfile(path):
        raise ValueError(f"no LongMemEval file at {path!r}")
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: a LongMemEval file holds a JSON list of questions")
    out = []
    for item in data:
        qid = str(item.get("question_id", "?"))
        try:
            dates, hay = item["haystack_dates"], item["haystack_sessions"]
            question, answer = item["question"], item["answer"]
        except KeyError as e:
            raise ValueError(f"LongMemEval item {qid} lacks {e.args[0]!r}") from None
        if len(dates) != len(hay):
            raise ValueError(f"LongMemEval item {qid}: {len(dates)} haystack_dates for "
                             f"{len(hay)} haystack_sessions")
        sessions, evidence = [], []
        for n, (date, turns) in enumerate(zip(dates, hay), start=1):
            ts = []
            for k, t in enumerate(turns, start=1):
                did = f"D{n}:{k}"
                ts.append(Turn(did, str(t.get("role", "user")), str(t.get("content", ""))))
                if t.get("has_answer"):
                    evidence.append(did)
            sessions.append(Session(n, parse_session_datetime(date), tuple(ts)))
        abstain = qid.endswith("_abs")
        qtype = str(item.get("question_type", ""))
        cat = 5 if abstain else _LME_CATEGORY.get(qtype, 4)
        qa = QA(str(question), NOT_MENTIONED if abstain else str(answer), tuple(evidence), cat,
                qtype)
        out.append(Conversation(qid, ("user", "assistant"), tuple(sessions), (qa,)))
    return out
