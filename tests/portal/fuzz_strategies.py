"""String strategies for fuzzing the API's times: the edges of what Python and PostgreSQL can hold.

A time near year 1 or year 9999 overflows once an offset or a window moves it past the edge; an
offset of a whole day, a 13th month or a 45th day must be refused, not fail deep in a view.
"""

import datetime as dt

from hypothesis import strategies as st

EDGES = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-23:59",
    "9999-12-31T23:59:59.999999+23:59",
    "2020-13-45T00:00:00Z",
    "2020-01-01T00:00:00+99:00",
    "2020-02-30T25:61:61Z",
    "1970-01-01T00:00:00",
]

offsets = st.builds(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes)),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
)


def extreme_date_times() -> st.SearchStrategy[str]:
    """ISO 8601 times anywhere from year 1 to 9999, with any offset under a day, and the edges."""
    anywhere = st.datetimes(min_value=dt.datetime.min, max_value=dt.datetime.max, timezones=offsets)
    return st.one_of(st.sampled_from(EDGES), anywhere.map(dt.datetime.isoformat))


def extreme_dates() -> st.SearchStrategy[str]:
    """Dates from year 1 to 9999, and some that no calendar has."""
    anywhere = st.dates(min_value=dt.date.min, max_value=dt.date.max).map(dt.date.isoformat)
    return st.one_of(st.sampled_from(["0001-01-01", "9999-12-31", "2020-13-45", "2021-02-29"]), anywhere)


LONE_SURROGATES = ["\ud800", "\udfff", "a\udc80b"]
HOSTILE = {
    "surrogate": st.sampled_from(LONE_SURROGATES),
    "nul": st.sampled_from(["\x00", "a\x00b"]),
    "time": st.sampled_from(EDGES),
}


def spiked(value, data, *, surrogates: bool = True):
    """`value` (a JSON body or the query's parameters) with, at times, one leaf replaced by a hostile
    string: a lone surrogate (not in a query: a URL cannot carry one), a NUL or an extreme time.
    Schemathesis itself never draws lone surrogates, which cannot be sent as UTF-8 (JSON escapes them)."""
    leaves = list(_leaf_paths(value))
    kinds = [kind for kind in HOSTILE if surrogates or kind != "surrogate"]
    kind = data.draw(st.sampled_from([None, *kinds]), label="hostile string")
    if kind is None or not leaves:
        return value
    path = data.draw(st.sampled_from(leaves), label="where")
    return _replaced(value, path, data.draw(HOSTILE[kind], label=kind))


def _leaf_paths(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaf_paths(item, (*path, index))
    elif path:
        yield path


def _replaced(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy
