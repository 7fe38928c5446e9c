"""Fixed-window hit counters in the shared cache: Redis in production, locmem in the embedded default;
in this process's memory while Redis is away.

A hit is `cache.add(counter, 0)` then `cache.incr(counter)`, atomic under any concurrency
(Redis INCR; locmem's incr holds its lock), where a read-modify-write of a list lost hits.
An identity's windows are laid end to end from its first hit (the anchor), so a burst
waits the whole window, and time-machine moves them as it moves time.time().

Redis away does not open the door: the API throttle and the sign-in lock then count in the process
(LocalCounters), with the same limits per process, where failing open let 800 calls through a limit of
600 a minute and 30 wrong passwords before a right one. Neither does it lock everyone out: the counts
start afresh in each process, so a client gets at most its limit again from each web process.
"""

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass

from django.core.cache import cache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

# How long an identity's anchor is remembered after its first hit; then its windows restart.
ANCHOR_TTL_S = 24 * 3600


@dataclass(frozen=True)
class Window:
    """The hits counted in the current window (this one included) and the seconds until it ends;
    `shared`: counted in the cache, else in this process only (Redis was away)."""

    counter: str
    hits: int
    ends_in_s: float
    shared: bool = True

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the window ends, at least 1 (the Retry-After header)."""
        return max(1, math.ceil(self.ends_in_s))


def hit(key: str, duration_s: int, now: float | None = None) -> Window:
    """Count one hit for `key` in its current window of `duration_s` seconds: in the shared cache, or
    in this process while Redis is away (a warning is logged)."""
    now = time.time() if now is None else now
    try:
        return _shared_hit(key, duration_s, now)
    except RedisError as error:
        log.warning("cannot reach Redis for the rate counters; counting in this process only: %s", error)
        return local_counters.hit(key, duration_s, now)


def take_back(window: Window) -> None:
    """Un-count the hit that returned `window` (a login that succeeded was no failure)."""
    if not window.shared:
        local_counters.take_back(window)
        return
    # Its window is gone already, or Redis is away: nothing to take back (the counter expires).
    with contextlib.suppress(ValueError, RedisError):
        cache.decr(window.counter)


def _shared_hit(key: str, duration_s: int, now: float) -> Window:
    """One round trip on Redis (infra.redis_cache.RedisCache.count_hit, a script). Elsewhere two cache
    round trips in the usual case (read the anchor, increment the counter); the first hit of an
    identity or of a window adds what is missing, with `add` so racers agree."""
    count_hit = getattr(cache, "count_hit", None)  # the production Redis cache: one round trip
    if count_hit is not None:
        anchor, index, hits = count_hit(key, duration_s, now, max(ANCHOR_TTL_S, 2 * duration_s))
        return Window(f"{key}:{anchor}:{index}", hits, anchor + (index + 1) * duration_s - now)
    anchor = cache.get(f"{key}:anchor")
    if anchor is None:
        cache.add(f"{key}:anchor", now, max(ANCHOR_TTL_S, 2 * duration_s))
        anchor = cache.get(f"{key}:anchor", now)
    index = max(0, math.floor((now - anchor) / duration_s))
    # Named by anchor and index, a counter outlives its window harmlessly: no later window reads it.
    counter = f"{key}:{anchor}:{index}"
    try:
        hits = cache.incr(counter)
    except ValueError:  # the window's first hit (or a full locmem cache culled the counter)
        cache.add(counter, 0, 2 * duration_s)
        try:
            hits = cache.incr(counter)
        except ValueError:  # culled again between add and incr
            cache.add(counter, 1, 2 * duration_s)
            hits = 1
    return Window(counter=counter, hits=hits, ends_in_s=anchor + (index + 1) * duration_s - now)


class LocalCounters:
    """The same windows, counted in this process's memory under a lock, for while Redis is away.

    At most `max_keys` identities are kept: past that, those whose window ended are dropped, then (a
    flood of new identities) the least recently hit down to half, so an attacker cannot grow the
    process without bound, nor push out the counter of an account under attack.
    """

    def __init__(self, max_keys: int = 100_000):
        self.max_keys = max_keys
        self._lock = threading.Lock()
        # key -> [anchor, window index, hits, window length in seconds]
        self._windows: dict[str, list] = {}

    def hit(self, key: str, duration_s: int, now: float) -> Window:
        with self._lock:
            entry = self._windows.pop(key, None)  # put back last: the most recently hit
            if entry is None or now - entry[0] >= max(ANCHOR_TTL_S, 2 * duration_s) or now < entry[0]:
                if len(self._windows) >= self.max_keys:
                    self._make_room(now)
                entry = [now, 0, 0, duration_s]
            self._windows[key] = entry
            anchor = entry[0]
            index = math.floor((now - anchor) / duration_s)
            if index != entry[1]:
                entry[1], entry[2] = index, 0
            entry[2] += 1
            return Window(f"{key}:{anchor}:{index}", entry[2], anchor + (index + 1) * duration_s - now, False)

    def take_back(self, window: Window) -> None:
        key, anchor, index = window.counter.rsplit(":", 2)
        with self._lock:
            entry = self._windows.get(key)
            if entry is not None and repr(entry[0]) == anchor and str(entry[1]) == index and entry[2] > 0:
                entry[2] -= 1

    def _make_room(self, now: float) -> None:
        for key, (anchor, index, _, duration_s) in list(self._windows.items()):
            if anchor + (index + 1) * duration_s <= now:
                del self._windows[key]
        excess = len(self._windows) - self.max_keys // 2
        for key in list(self._windows)[: max(0, excess)]:
            del self._windows[key]


local_counters = LocalCounters()
