"""Rough start times for waiting requests that hold no reservation.

Each pool is treated as one tank of milli-GPU that fills as running allocations
reach their max durations and drains as waiting requests start, in queue order
(reservations first, at their reserved times). It ignores which card a slice
lands on, so it can be early for gangs on a fragmented pool; it is cheap
(amortised O(1) per request), which matters with thousands waiting. Releases of
allocations without a max duration never come, so a start that needs them is
unknown (None).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .cluster import NodeState, RequestSpec


@dataclass(slots=True)
class _Tank:
    free: int
    clock: float
    firm: bool = True
    releases: list[tuple[float, int, bool]] = field(default_factory=list)  # (end s, milli, known)
    next: int = 0

    def peek(self, need: int, now: float) -> tuple[float, bool] | None:
        """When `need` milli will be free: (time, firm).

        A request asking is blocked now, so nothing changes for it before the next release.
        """
        free, at, firm, i = self.free, self.clock, self.firm, self.next
        must_wait = at <= now
        while free < need or must_wait or (i < len(self.releases) and self.releases[i][0] <= at):
            if i == len(self.releases):
                return None
            end, milli, known = self.releases[i]
            free, at, firm, i, must_wait = free + milli, max(at, end), firm and known, i + 1, False
        return at, firm

    def take(self, need: int, at: float, runtime: float | None) -> None:
        """Start `need` milli at `at`, given back after `runtime` seconds (None: never)."""
        while self.next < len(self.releases) and self.releases[self.next][0] <= at:
            _, milli, known = self.releases[self.next]
            self.free, self.firm, self.next = self.free + milli, self.firm and known, self.next + 1
        self.free -= need
        self.clock = max(self.clock, at)
        if runtime is not None:
            bisect.insort(self.releases, (at + runtime, need, True), lo=self.next)


class FluidEstimator:
    """Start estimates per pool, fed in queue order."""

    def __init__(
        self, nodes: Sequence[NodeState], releases: Iterable[tuple[str, float, int, bool]], now: float
    ) -> None:
        """releases: (pool, end s, milli, known end) of everything running after this pass."""
        self._now = now
        self._tanks: dict[str, _Tank] = {}
        for node in nodes:
            tank = self._tanks.setdefault(node.pool, _Tank(0, now))
            tank.free += sum(max(0, g.free_milli) for g in node.gpus)
        for pool, end, milli, known in releases:
            if pool in self._tanks:
                self._tanks[pool].releases.append((end, milli, known))
        for tank in self._tanks.values():
            tank.releases.sort()

    def at(self, now: float) -> FluidEstimator:
        """A copy as it stands at a later `now` (s), for a request judged then; the same as counting every
        request again at `now` while no release or start it counted falls between."""
        copy = FluidEstimator((), (), now)
        copy._tanks = {
            pool: _Tank(t.free, max(t.clock, now), t.firm, list(t.releases), t.next)
            for pool, t in self._tanks.items()
        }
        return copy

    def take_reservation(self, pool: str, request: RequestSpec, at: float) -> None:
        """A reservation takes its share of the pool at its reserved time."""
        self._tanks[pool].take(request.total_milli(), at, request.max_duration_s)

    def take_earliest(self, request: RequestSpec) -> tuple[float, bool] | None:
        """(start s, firm) for a waiting request at the earliest a pool has room; the request takes that
        room from then, so requests behind it start later."""
        need = request.total_milli()
        best: tuple[float, bool, str] | None = None
        for pool, tank in self._tanks.items():
            if request.pools and pool not in request.pools:
                continue
            found = tank.peek(need, self._now)
            if found and (best is None or found[0] < best[0]):
                best = (found[0], found[1], pool)
        if best is None:
            return None
        at, firm, pool = best
        self._tanks[pool].take(need, at, request.max_duration_s)
        return at, firm
