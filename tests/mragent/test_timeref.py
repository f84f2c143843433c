"""Relative times resolve against the session date (spec §Tests "Time resolver")."""

import datetime as dt

import pytest

from icml26_jax.mragent.timeref import add_months, resolve_time

SESSION = dt.date(2023, 5, 8)  # a Monday


@pytest.mark.parametrize("text, want", [
    ("I adopted a cat yesterday.", dt.date(2023, 5, 7)),
    ("We met three weeks ago in Porto.", dt.date(2023, 4, 17)),
    ("I ran a marathon last Friday!", dt.date(2023, 5, 5)),
    ("last Monday", dt.date(2023, 5, 1)),  # the same weekday means a week back
    ("next Friday", dt.date(2023, 5, 12)),
    ("2 days ago", dt.date(2023, 5, 6)),
    ("a couple of months ago", dt.date(2023, 3, 8)),
    ("a year ago", dt.date(2022, 5, 8)),
    ("last month", dt.date(2023, 4, 8)),
    ("next week", dt.date(2023, 5, 15)),
    ("the day before yesterday", dt.date(2023, 5, 6)),
    ("tomorrow", dt.date(2023, 5, 9)),
    ("on 7 May I moved", dt.date(2023, 5, 7)),
    ("on May 2nd", dt.date(2023, 5, 2)),
    ("on 24 December", dt.date(2022, 12, 24)),  # after the session date: last year's
    ("on 3 March 2021", dt.date(2021, 3, 3)),
    ("I love hiking.", SESSION),  # no expression: the session date
])
def test_resolve_time(text, want):
    assert resolve_time(text, SESSION) == want


def test_month_arithmetic_clips_the_day():
    assert add_months(dt.date(2023, 3, 31), -1) == dt.date(2023, 2, 28)
    assert add_months(dt.date(2023, 1, 15), -2) == dt.date(2022, 11, 15)
