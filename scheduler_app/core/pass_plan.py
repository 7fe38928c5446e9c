"""What one scheduling pass decides, as plain data: the running work and the rules it is given, the
starts, preemptions and waits it returns (``PassPlan``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .cluster import Placement, RequestSpec
from .queue_reservations import Reservation

SPOT = "spot"  # the capacity type of reclaimable nodes, and the billing mode of work that may run on them


@dataclass(frozen=True, slots=True)
class RunningAllocation:
    """A request running on its placement since `started_at` (s).

    borrowed: it went beyond its team's quota, so its owner may reclaim it.
    """

    request: RequestSpec
    placement: Placement
    started_at: float
    borrowed: bool = False

    @property
    def preemptible(self) -> bool:
        """Borrowed capacity and spot jobs may be checkpointed and requeued."""
        return self.borrowed or self.request.billing_mode == SPOT


@dataclass(frozen=True, slots=True)
class QueueMode:
    """Which rules a pass applies; the default is the portal's scheduler.

    reservation_depth: how many blocked requests (in queue order) get a reservation
    per pass; the first blocked request always does, which is what rules out starvation.
    aging_s: waiting this long raises a request's priority by one level (None: never).
    reclaim_grace_s: the quota's promise: within-quota work starts within this long of its submission.
    It reclaims borrowed or spot work only when capacity would not free up by itself in that time (by the
    max durations of what runs), since each reclaim costs its victims the work since their last
    checkpoint (None: reclaim at once).
    """

    backfill: bool = True
    fair_share: bool = True
    preemption: bool = True
    reservation_depth: int = 4
    aging_s: float | None = 3600.0
    reclaim_grace_s: float | None = 600.0


STRICT_FIFO = QueueMode(backfill=False, fair_share=False, preemption=False, reservation_depth=0, aging_s=None)
# Slurm's default (sched/backfill with one reservation): submission order; the first request that does not
# fit gets a reservation at the earliest time it fits given the max durations of running work, and later
# requests start only where they do not delay it. No quotas, fair share or preemption.
EASY_BACKFILL = QueueMode(fair_share=False, preemption=False, reservation_depth=1, aging_s=None)


@dataclass(frozen=True, slots=True)
class Start:
    """Start `request` on `placement` now; borrowed means preemptible by the quota owner."""

    request: RequestSpec
    placement: Placement
    borrowed: bool


@dataclass(frozen=True, slots=True)
class Preemption:
    """Checkpoint `allocation` and requeue its request (never drop it)."""

    allocation: RunningAllocation
    for_request_id: int | str
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request left pending: why, its place in line, and its estimated start (s, None: unknown)."""

    request_id: int | str
    cause: str
    ahead: int
    estimated_start: float | None = None

    def reason(self, format_time: Callable[[float], str] = lambda t: f"{t:.0f} s") -> str:
        """The sentence a user reads; `format_time` words a time (the caller knows the time zone)."""
        start = "unknown" if self.estimated_start is None else format_time(self.estimated_start)
        return f"{self.cause}; {place_in_line(self.ahead)} ahead of you; estimated start {start}"


def place_in_line(ahead: int) -> str:
    """How many requests are ahead, as a person reads it: exact below 100, then to two significant
    figures ("about 2,900 requests"), so a deep queue's reasons do not all change, and are not all
    written again, whenever a request is submitted ahead of them."""
    if ahead == 1:
        return "1 request"
    if ahead < 100:
        return f"{ahead} requests"
    return f"about {round(ahead, 2 - len(str(ahead))):,} requests"


@dataclass(frozen=True, slots=True)
class OpenRoom:
    """A consolidation plan the caller keeps open: `moving`, the requests still to move (ids); where the
    waiting request goes once they have; `ready_at`, by when the last of them moves (s)."""

    moving: tuple[int | str, ...]
    placement: Placement
    ready_at: float


@dataclass(frozen=True, slots=True)
class Consolidation:
    """What a pass may move to make room for a request that fits nowhere only because the free share is
    scattered (core/consolidation.py plans the moves; actions/consolidate.py applies the bounds).

    movable: the running requests that may move, each with by when it would (its next checkpoint's
    deadline, s): the caller leaves out work with no checkpoint interval, pinned by its user, moved
    within the last interval or already moving. pools: the pools where moves may be planned.
    max_moves: the new moves one pass may plan, in all. tries: the blocked requests (first in queue
    order) one pass looks for moves for, each a check on a copy of its pools. open: the plans kept, by
    waiting request id.
    """

    movable: Mapping[int | str, float]
    pools: frozenset[str]
    max_moves: int = 4
    tries: int = 4
    open: Mapping[int | str, OpenRoom] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Room:
    """A consolidation plan this pass holds for a waiting request: new, or an open one that still holds
    (a plan the caller passed and the pass does not return no longer holds)."""

    request_id: int | str
    moving: tuple[int | str, ...]
    placement: Placement
    ready_at: float
    new: bool


@dataclass(slots=True)
class PassPlan:
    """The decisions of one pass; `waiting` lists every request left pending, in queue order."""

    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    rooms: list[Room] = field(default_factory=list)
