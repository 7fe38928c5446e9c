"""Times people and agents send (API fields and queries, page forms, uploaded files): ISO 8601 with a
timezone, kept in UTC, between EARLIEST and LATEST.

Python's datetime ends at years 1 and 9999: a time near either end overflows when it is moved to UTC,
or when a window, a month or a grace period is added to it or taken from it (a 500). The bounds keep
every such step far inside the range, and still hold any time this portal can mean."""

import datetime as dt

from django.utils.dateparse import parse_datetime

EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)  # excluded
EXAMPLE = "2026-12-01T08:00:00Z"
SPAN = f"from {EARLIEST:%Y-%m-%d} to {LATEST - dt.timedelta(days=1):%Y-%m-%d} (UTC)"


class BadTime(ValueError):
    """What is wrong with a time, said to follow its name: "effective_from '…' has no timezone"."""

    def sentence(self) -> str:
        """The same as a field's message."""
        return f"This time {self}."


def parse_time(text: object) -> dt.datetime:
    """An ISO 8601 time with a timezone, in UTC; BadTime when it is none (or no string), names no real
    moment (month 13, an offset of 24 hours or more) or lies outside EARLIEST..LATEST."""
    try:
        moment = parse_datetime(text) if isinstance(text, str) else None
    except ValueError:
        raise BadTime(
            "is no real date and time: check the month, the day, the hour and the offset (under 24 hours)"
        ) from None
    if moment is None:
        raise BadTime(f"is not an ISO 8601 date and time (e.g. {EXAMPLE})")
    if moment.tzinfo is None:
        raise BadTime("has no timezone (add Z for UTC)")
    return in_range(moment)


def in_range(moment: dt.datetime) -> dt.datetime:
    """An aware time in UTC; BadTime when it lies outside EARLIEST..LATEST."""
    try:
        utc = moment.astimezone(dt.UTC)
    except OverflowError:  # near year 1 or 9999, the offset moves it out of Python's range
        utc = None
    if utc is None or not EARLIEST <= utc < LATEST:
        raise BadTime(f"is out of range: give a time {SPAN}")
    return utc
