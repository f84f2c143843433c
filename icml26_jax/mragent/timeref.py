"""Relative time expressions resolved against the *session* date (spec §Method, RuleExtractor
"Times"; Pitfalls: never against the question date).

``resolve_time(text, session_date)`` returns the absolute date a sentence refers to, or the
session date when it names none (the spec's default). Handled [R]: "today", "tonight",
"yesterday", "the day before yesterday", "tomorrow", "N days / weeks / months / years ago"
(N in digits or words up to twenty, "a" / "an" = 1, "a couple of" = 2, "a few" = 3),
"last / next <weekday>", "last / next week / month / year", "on 7 May" / "on May 7" (this
year; last year if that date is after the session), and full dates ("7 May 2023").
"""

from __future__ import annotations

import calendar
import datetime as dt
import re

_NUM = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
_NUM.update({"a": 1, "an": 1, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3})
_WEEKDAYS = [d.lower() for d in calendar.day_name]
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9

_N = r"(\d+|a couple of|couple of|a few|few|an|a|" + "|".join(
    sorted((w for w in _NUM if " " not in w and w not in ("a", "an", "few")), key=len,
           reverse=True)) + ")"
_AGO = re.compile(r"\b" + _N + r"\s+(day|week|month|year)s?\s+ago\b")
_REL_WD = re.compile(r"\b(last|next|this past|this coming)\s+(" + "|".join(_WEEKDAYS) + r")\b")
_REL_UNIT = re.compile(r"\b(last|next)\s+(week|month|year)\b")
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_MONTH = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + _MONTH_RE +
                        r")\.?(?:,?\s+(\d{4}))?\b")
_MONTH_DAY = re.compile(r"\b(" + _MONTH_RE + r")\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b(?:,?\s+(\d{4}))?")


def _count(tok: str) -> int:
    tok = tok.strip()
    return int(tok) if tok.isdigit() else _NUM[tok]


def add_months(d: dt.date, n: int) -> dt.date:
    """``d`` moved by ``n`` calendar months (day clipped to the month's length)."""
    m = d.month - 1 + n
    y, m = d.year + m // 12, m % 12 + 1
    return dt.date(y, m, min(d.day, calendar.monthrange(y, m)[1]))


def _absolute(day: int, month: int, year: int | None, ref: dt.date) -> dt.date | None:
    y = year if year is not None else ref.year
    try:
        d = dt.date(y, month, day)
    except ValueError:
        return None
    if year is None and d > ref:  # "on 7 December" said in May means last December
        d = dt.date(y - 1, month, day) if not (month == 2 and day == 29) else d
    return d


def resolve_time(text: str, session_date: dt.date) -> dt.date:
    """The date ``text`` refers to, resolved against ``session_date`` (default: itself).

    The first expression found wins, in this order: explicit dates, "N units ago",
    "last/next <weekday>", "last/next week|month|year", yesterday / tomorrow / today.
    """
    s = " ".join(str(text).lower().replace("-", " ").split())
    ref = session_date
    for rx, order in ((_DAY_MONTH, "dm"), (_MONTH_DAY, "md")):
        m = rx.search(s)
        if m:
            day, mon = (m.group(1), m.group(2)) if order == "dm" else (m.group(2), m.group(1))
            d = _absolute(int(day), _MONTHS[mon.rstrip(".")], int(m.group(3)) if m.group(3)
                          else None, ref)
            if d is not None:
                return d
    m = _AGO.search(s)
    if m:
        n, unit = _count(m.group(1)), m.group(2)
        if unit == "day":
            return ref - dt.timedelta(days=n)
        if unit == "week":
            return ref - dt.timedelta(weeks=n)
        return add_months(ref, -n if unit == "month" else -12 * n)
    m = _REL_WD.search(s)
    if m:
        target = _WEEKDAYS.index(m.group(2))
        if m.group(1) in ("last", "this past"):
            back = (ref.weekday() - target) % 7 or 7
            return ref - dt.timedelta(days=back)
        ahead = (target - ref.weekday()) % 7 or 7
        return ref + dt.timedelta(days=ahead)
    m = _REL_UNIT.search(s)
    if m:
        sign = -1 if m.group(1) == "last" else 1
        if m.group(2) == "week":
            return ref + dt.timedelta(weeks=sign)
        return add_months(ref, sign if m.group(2) == "month" else 12 * sign)
    if "day before yesterday" in s:
        return ref - dt.timedelta(days=2)
    if re.search(r"\byesterday\b", s):
        return ref - dt.timedelta(days=1)
    if re.search(r"\btomorrow\b", s):
        return ref + dt.timedelta(days=1)
    return ref
