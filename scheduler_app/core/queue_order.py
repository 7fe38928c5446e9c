"""The order in which one pass considers pending requests.

Fair mode: work that fits in its team's guaranteed quota comes before work that
would borrow; among teams, the lowest dominant share goes first, re-evaluated after
every start (so one team cannot take a whole pass); within a team, effective
priority (priority plus one level per `aging_s` waited, so low priorities cannot
starve) then age. Strict mode: submission order, nothing else.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict, deque
from collections.abc import Sequence

from .cluster import RequestSpec
from .queue_ledger import Ledger


def effective_priority(request: RequestSpec, now: float, aging_s: float | None) -> int:
    """Priority raised by one level per `aging_s` seconds of waiting."""
    if not aging_s:
        return request.priority
    return request.priority + int(max(0.0, now - request.submitted_at) // aging_s)


def queue_key(request: RequestSpec, now: float, aging_s: float | None) -> tuple:
    """A request's place within its team: effective priority first, then age."""
    return (-effective_priority(request, now, aging_s), request.submitted_at, str(request.id))


def reorder_at(ordered: Sequence[RequestSpec], now: float, aging_s: float | None) -> float:
    """When (s, after `now`) aging first changes the order of `ordered`, sorted by queue_key at `now`
    (inf: never). Only neighbours of different priorities can swap, and their effective priorities
    differ periodically (period aging_s), so the next boundary of each of the two decides."""
    if not aging_s:
        return float("inf")
    first = float("inf")
    for a, b in itertools.pairwise(ordered):
        if a.priority == b.priority:
            continue
        for request in sorted((a, b), key=lambda r: _next_boundary(r, now, aging_s)):
            at = _next_boundary(request, now, aging_s)
            if at < first and queue_key(b, at, aging_s) < queue_key(a, at, aging_s):
                first = at
                break
    return first


def _next_boundary(request: RequestSpec, now: float, aging_s: float) -> float:
    """The first time after `now` at which the request's effective priority rises."""
    waited = max(0.0, now - request.submitted_at)
    return request.submitted_at + (waited // aging_s + 1) * aging_s


class FairQueue:
    """Yields pending requests one at a time, in the order described above."""

    def __init__(
        self,
        pending: Sequence[RequestSpec],
        ledger: Ledger,
        now: float,
        fair_share: bool = True,
        aging_s: float | None = None,
    ) -> None:
        self._ledger = ledger
        self._fair = fair_share
        if fair_share:
            by_team: dict[str, list[RequestSpec]] = defaultdict(list)
            for request in pending:
                by_team[request.team].append(request)

            self._teams = {
                team: deque(sorted(rs, key=lambda r: queue_key(r, now, aging_s)))
                for team, rs in by_team.items()
            }
        else:
            self._teams = {"": deque(sorted(pending, key=lambda r: (r.submitted_at, str(r.id))))}
        self._version: dict[str, int] = defaultdict(int)
        self._heap: list[tuple] = []
        for team in self._teams:
            self._push(team)

    def _push(self, team: str) -> None:
        queue = self._teams[team]
        if not queue:
            return
        self._version[team] += 1
        key = self.rank(queue[0]) if self._fair else ()
        heapq.heappush(self._heap, (key, self._version[team], team))

    def rank(self, request: RequestSpec) -> tuple:
        """Where the request's team stands while it heads the team's line (fair mode; lowest goes first):
        within-quota work first, then the lowest dominant share."""
        tier = 0 if self._ledger.quota_pools(request) else 1
        return (tier, self._ledger.dominant_share(request.team), request.team)

    def pop(self) -> RequestSpec | None:
        """The next request to consider, or None when every request has been seen."""
        while self._heap:
            _, version, team = heapq.heappop(self._heap)
            if version != self._version[team]:
                continue  # superseded by a later touch()
            request = self._teams[team].popleft()
            self._push(team)
            return request
        return None

    def touch(self, team: str) -> None:
        """Re-rank a team whose usage just changed (a start or a preemption)."""
        if self._fair and team in self._teams:
            self._push(team)
