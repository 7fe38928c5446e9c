"""Fixed-window hit counters in the shared cache: Redis in production, locmem in the embedded default.

A hit is `cache.add(counter, 0)` then `cache.incr(counter)`, atomic under any concurrency
(Redis INCR; locmem's incr holds its lock), where a read-modify-write of a list lost hits.
An identity's windows are laid end to end from its first hit (the anchor), so a burst
waits the whole window, and time-machine moves them as it moves time.time().
"""

import contextlib
import math
import time
from dataclasses import dataclass

from django.core.cache import cache

# How long an identity's anchor is remembered after its first hit; then its windows restart.
ANCHOR_TTL_S = 24 * 3600


@dataclass(frozen=True)
class Window:
    """The hits counted in the current window (this one included) and the seconds until it ends."""

    counter: str
    hits: int
    ends_in_s: float

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the window ends, at least 1 (the Retry-After header)."""
        return max(1, math.ceil(self.ends_in_s))


def hit(key: str, duration_s: int, now: float | None = None) -> Window:
    """Count one hit for `key` in its current window of `duration_s` seconds.

    One round trip on Redis (portal.redis_cache.RedisCache.count_hit, a script). Elsewhere two cache
    round trips in the usual case (read the anchor, increment the counter); the first hit of an
    identity or of a window adds what is missing, with `add` so racers agree.
    """
    now = time.time() if now is None else now
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


def take_back(window: Window) -> None:
    """Un-count the hit that returned `window` (a login that succeeded was no failure)."""
    with contextlib.suppress(ValueError):  # its window is gone already: nothing to take back
        cache.decr(window.counter)
