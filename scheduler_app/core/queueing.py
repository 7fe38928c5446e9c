"""One pure scheduling pass: who starts now, who is preempted, who waits, why, and until when.

`plan_pass` takes plain state and returns a `PassPlan`; it changes none of its
inputs, reads no clock (`now` is a parameter) and draws no random numbers, so the
database scheduler, the demo cluster and the benchmarks run the same decisions.
Units: milli-GPU (1000 = one card), MiB, seconds on the caller's epoch.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import placement as placement_policies
from .cluster import NodeState, OfflineNode, Placement, RequestSpec
from .fragmentation import WorkloadMix
from .placement import Placer, apply_placement, choose_placement, release_placement
from .queue_estimates import FluidEstimator
from .queue_ledger import Ledger, TeamQuota
from .queue_order import FairQueue
from .queue_reservations import Reservation, ReservationBook, copy_node, fits
from .queue_text import never_fits, no_room

DEFAULT_POLICY: str = getattr(placement_policies, "DEFAULT_POLICY", "first-fit")
SPOT = "spot"  # the capacity type of reclaimable nodes, and the billing mode of work that may run on them

__all__ = [
    "EASY_BACKFILL",
    "STRICT_FIFO",
    "PassPlan",
    "Preemption",
    "QueueMode",
    "Reservation",
    "RunningAllocation",
    "Start",
    "TeamQuota",
    "Waiting",
    "plan_pass",
]


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


@dataclass(slots=True)
class PassPlan:
    """The decisions of one pass; `waiting` lists every request left pending, in queue order."""

    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)


def plan_pass(
    nodes: Sequence[NodeState],
    pending: Sequence[RequestSpec],
    running: Sequence[RunningAllocation],
    quotas: Sequence[TeamQuota],
    now: float,
    policy: str = DEFAULT_POLICY,
    mode: QueueMode = QueueMode(),
    workload: WorkloadMix | None = None,
    offline: Sequence[OfflineNode] = (),
) -> PassPlan:
    """Decide one scheduling pass.

    nodes: free state with every running allocation already taken out (as loaded).
    running: those allocations (on nodes not listed they are ignored).
    Requests are considered in FairQueue order; each either starts (quota pools
    first, then borrowing), starts after reclaiming borrowed/spot work (only when
    within quota), or waits, the first `reservation_depth` of them with a reservation
    that later starts must not delay.
    workload: the typical request shapes the fgd policies keep room for
    (``WorkloadMix.from_requests(recent requests)``).
    offline: the nodes that take no new work; a request only they could hold waits saying so.
    """
    state = _Pass(nodes, pending, running, quotas, now, policy, mode, workload, offline)
    first_blocked: RequestSpec | None = None
    while (request := state.queue.pop()) is not None:
        if (first_blocked is None or mode.backfill) and state.try_start(request):
            state.queue.touch(request.team)
            continue
        state.wait(request, first_blocked)
        first_blocked = first_blocked or request
    return state.finish()


class _Pass:
    """Working state of one pass: scratch copies of the nodes and the growing plan."""

    def __init__(
        self,
        nodes: Sequence[NodeState],
        pending: Sequence[RequestSpec],
        running: Sequence[RunningAllocation],
        quotas: Sequence[TeamQuota],
        now: float,
        policy: str,
        mode: QueueMode,
        workload: WorkloadMix | None,
        offline: Sequence[OfflineNode] = (),
    ) -> None:
        self.offline = offline
        # The caller's nodes, read as given; the pass copies a node the first time it changes it (_own),
        # so a pass that starts one request on a large cluster copies one node, not all of them.
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self._row = {n.name: i for i, n in enumerate(self.nodes)}
        self._owned: set[str] = set()
        self.now, self.policy, self.mode, self.workload = now, policy, mode, workload
        self.ledger = Ledger(self.nodes, quotas)
        self.book = ReservationBook(now, policy)
        self.victims: dict[str, list[RunningAllocation]] = defaultdict(list)
        for allocation in running:
            node = allocation.placement.node
            if node in self.by_name:
                self.ledger.add(allocation.request, node)
                self.book.hold(allocation.request, allocation.placement, allocation.started_at)
                if allocation.preemptible:
                    self.victims[node].append(allocation)
        self.queue = FairQueue(pending, self.ledger, now, mode.fair_share, mode.aging_s)
        self.plan = PassPlan()
        self._version = 0  # bumped whenever free capacity changes
        self._placers: dict[frozenset[str], Placer] = {}
        self._pool_nodes = Counter(n.pool for n in self.nodes)
        self._spot_pools = frozenset(n.pool for n in self.nodes if n.capacity_type == SPOT)
        self._fit_memo: dict[tuple, tuple[int, bool]] = {}
        self._never_memo: dict[tuple, str] = {}
        self._waiting: list[tuple[RequestSpec, Reservation | None]] = []

    def try_start(self, request: RequestSpec) -> bool:
        """Start the request if it fits (quota pools first), else reclaim for it if allowed."""
        choice = self.choose_start(request)
        if choice is None:
            return False
        placement, victims = choice
        for victim in victims:
            self._evict(victim, request)
        self._start(request, placement)
        return True

    def choose_start(self, request: RequestSpec) -> tuple[Placement, list[RunningAllocation]] | None:
        """Where the request would start now, and whose borrowed/spot work it reclaims; changes nothing."""
        if self._fits_now(request):
            views = self.book.guarded(self.by_name, self.book.end_of(request))
            for pools in self._tiers(request):
                placement = self._placer(pools).choose(request, views)
                if placement is not None:
                    return placement, []
        return self._reclaim_choice(request)

    def _tiers(self, request: RequestSpec) -> list[frozenset[str]]:
        """The sets of pools a start tries in turn, each one's quota pools before the rest of it. Spot work
        that accepts on-demand fallback tries the spot pools first: it falls back to on-demand capacity
        only when no spot pool can place it now (spot is what it asked and pays for)."""
        allowed = self._allowed(request)
        groups = [allowed]
        if request.billing_mode == SPOT and request.allow_fallback:
            spot = allowed & self._spot_pools
            if 0 < self._count(spot) < self._count(allowed):
                groups = [spot, allowed]
        quota = self.ledger.quota_pools(request)
        tiers = []
        for group in groups:
            in_quota = group.intersection(quota)
            if 0 < self._count(in_quota) < self._count(group):
                tiers.append(in_quota)
            tiers.append(group)
        return tiers

    def _placer(self, pools: frozenset[str]) -> Placer:
        """The placement engine over the nodes of these pools (in node order), kept for the pass: its
        index and score caches follow each start and eviction instead of being built per request."""
        placer = self._placers.get(pools)
        if placer is None:
            nodes = [n for n in self.nodes if n.pool in pools]
            placer = self._placers[pools] = Placer(nodes, self.policy, self.workload)
        return placer

    def _allowed(self, request: RequestSpec) -> frozenset[str]:
        """The pools of the nodes the request may run on."""
        return frozenset(p for p in self._pool_nodes if not request.pools or p in request.pools)

    def _count(self, pools: frozenset[str]) -> int:
        return sum(self._pool_nodes[p] for p in pools)

    def _own(self, node: str) -> NodeState:
        """This pass's scratch copy of the node, made the first time the pass changes it (the caller's
        NodeState is never changed); the placers hold the copy from then on."""
        if node not in self._owned:
            mine = copy_node(self.by_name[node])
            self.nodes[self._row[node]] = self.by_name[node] = mine
            for placer in self._placers.values():
                placer.refresh(node, mine)
            self._owned.add(node)
        return self.by_name[node]

    def _changed(self, node: str) -> None:
        """A node's free capacity changed: the placers read it again."""
        self._version += 1
        for placer in self._placers.values():
            placer.refresh(node)

    def wait(
        self, request: RequestSpec, first_blocked: RequestSpec | None, explain: bool = True
    ) -> Reservation | None:
        """Leave the request pending, with a reservation while the depth allows (returned); explain=False
        leaves its cause blank, for a plan nobody reads the words of."""
        reservation = self.reserve_for(request)
        self._waiting.append((request, reservation))
        cause = self.cause(request, first_blocked) if explain else ""
        self.plan.waiting.append(Waiting(request.id, cause, len(self.plan.waiting)))
        return reservation

    def reserve_for(self, request: RequestSpec) -> Reservation | None:
        """Reserve for a blocked request while fewer than `reservation_depth` are held and it can fit."""
        if len(self.book.reservations) < self.mode.reservation_depth and not self._never_fits(request):
            return self.book.reserve(request, self.nodes)
        return None

    def finish(self) -> PassPlan:
        """Attach start estimates (reservation times, else the fluid estimate) and return the plan."""
        fluid = self.estimator() if self._waiting else None
        for i, (request, reservation) in enumerate(self._waiting):
            estimate = self.estimate_start(fluid, request, reservation)
            if estimate is not None and estimate[1]:
                w = self.plan.waiting[i]
                self.plan.waiting[i] = Waiting(w.request_id, w.cause, w.ahead, estimate[0])
        self.plan.reservations = list(self.book.reservations)
        return self.plan

    def estimator(self) -> FluidEstimator:
        """The fluid estimator on the capacity as it stands, before any waiting request is counted."""
        pool_of = self.ledger.pool_of
        releases = [
            (pool_of[node], h.end, h.milli * len(h.gpus), h.known) for node, h in self.book.releases()
        ]
        return FluidEstimator(self.nodes, releases, self.now)

    def estimate_start(
        self, fluid: FluidEstimator, request: RequestSpec, reservation: Reservation | None
    ) -> tuple[float, bool] | None:
        """(start s, firm) of the next waiting request in queue order; `fluid` then counts it started."""
        if reservation is not None:
            fluid.take_reservation(self.ledger.pool_of[reservation.node], request, reservation.start_at)
            return reservation.start_at, reservation.firm
        return fluid.take_earliest(request)

    def fork(self, now: float, workload: WorkloadMix | None, reservations: int) -> _Pass:
        """This pass as it stands, judged at `now` with only its first `reservations` reservations, to ask
        where one more request would go: it shares the nodes, the ledger and the holds, so it may reserve
        (choose_start, reserve_for, cause) but must never start or evict."""
        fork = copy.copy(self)
        fork.now, fork.workload = now, workload
        fork.book = self.book.fork(now, reservations)
        fork._placers = {}  # its own: they score for its workload
        fork.plan, fork._waiting = PassPlan(), []
        return fork

    def _fits_now(self, request: RequestSpec) -> bool:
        """Whether the request fits somewhere now, reservations aside (memoised per shape)."""
        key = _shape(request)
        memo = self._fit_memo.get(key)
        if memo is None or memo[0] != self._version:
            memo = (self._version, self._placer(self._allowed(request)).fits(request))
            self._fit_memo[key] = memo
        return memo[1]

    def _never_fits(self, request: RequestSpec) -> str:
        """Why the request cannot fit even on an idle node ('' when it can); memoised per shape."""
        key = _shape(request)
        if key not in self._never_memo:
            self._never_memo[key] = never_fits(request, self.nodes, self.offline)
        return self._never_memo[key]

    def _reclaim_choice(self, request: RequestSpec) -> tuple[Placement, list[RunningAllocation]] | None:
        """The fewest borrowed/spot allocations of other teams to preempt so within-quota work starts."""
        quota_pools = self.ledger.quota_pools(request)
        if not self.mode.preemption or not quota_pools:
            return None
        end = self.book.end_of(request)
        candidates = [n for n in self.nodes if n.pool in quota_pools and self.victims[n.name]]
        best: tuple[list[RunningAllocation], Placement] | None = None
        for node in self.book.view(candidates, end):
            found = self._victims_on(node, request, len(best[0]) if best else None)
            if found:
                best = found
        if best is None or self._frees_in_time(request):
            return None
        victims, placement = best
        return placement, victims

    def _frees_in_time(self, request: RequestSpec) -> bool:
        """Whether room for the request frees up by itself (max durations, reservations held) within the
        reclaim grace of its submission: then it waits for that instead of preempting anyone."""
        grace = self.mode.reclaim_grace_s
        if grace is None or request.submitted_at + grace < self.now:
            return False
        earliest = self.book.earliest(request, self.nodes)
        return earliest is not None and earliest[1] and earliest[0] <= request.submitted_at + grace

    def _victims_on(
        self, node: NodeState, request: RequestSpec, fewer_than: int | None
    ) -> tuple[list[RunningAllocation], Placement] | None:
        """Borrowed before spot, lowest priority, youngest first, until the request fits."""
        order = sorted(
            (a for a in self.victims[node.name] if a.request.team != request.team),
            key=lambda a: (not a.borrowed, a.request.priority, -a.started_at, str(a.request.id)),
        )
        scratch = copy_node(node)
        for count, victim in enumerate(order, start=1):
            if fewer_than is not None and count >= fewer_than:
                return None
            release_placement(scratch, victim.request, victim.placement)
            if fits(request, scratch):
                placement = choose_placement([scratch], request, self.policy, self.workload)
                if placement is not None:
                    return order[:count], placement
        return None

    def _evict(self, victim: RunningAllocation, request: RequestSpec) -> None:
        node = victim.placement.node
        release_placement(self._own(node), victim.request, victim.placement)
        self.ledger.add(victim.request, node, sign=-1)
        self.book.drop(victim.request.id, node)
        self.victims[node].remove(victim)
        self._changed(node)
        kind = "borrowed capacity" if victim.borrowed else "spot capacity"
        reason = f"{kind} reclaimed for request {request.id} of team {request.team or '-'} within its quota"
        self.plan.preemptions.append(Preemption(victim, request.id, reason))
        self.queue.touch(victim.request.team)

    def _start(self, request: RequestSpec, placement: Placement) -> None:
        borrowed = self.ledger.is_borrowed(request, placement.node)
        apply_placement(self._own(placement.node), request, placement)
        self.ledger.add(request, placement.node)
        self.book.hold(request, placement, self.now)
        self._changed(placement.node)
        self.plan.starts.append(Start(request, placement, borrowed))

    def cause(self, request: RequestSpec, first_blocked: RequestSpec | None) -> str:
        """Why the request waits, in the words its user reads."""
        if impossible := self._never_fits(request):
            return impossible
        if not self._fits_now(request):
            return no_room(request)
        if first_blocked is not None and not self.mode.backfill:
            return f"waiting behind request {first_blocked.id}, first in line"
        held = ", ".join(str(r.request_id) for r in self.book.reservations) or "earlier requests"
        return f"the free capacity is reserved for earlier requests ({held})"


def _shape(request: RequestSpec) -> tuple:
    """What decides whether a request fits, so equal shapes share one answer."""
    return (
        request.gpu_milli,
        request.num_gpus,
        request.cpu_milli,
        request.memory_mib,
        request.gpu_memory_mib,
        request.models,
        request.pools,
    )
