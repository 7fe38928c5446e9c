"""The event-driven cluster simulator: jobs arrive and finish, and at every event time the pure core's
`plan_pass` decides, exactly as the database scheduler does; its plan is applied (starts, and
preemptions that checkpoint, lose the work since the last checkpoint, and requeue).

With `consolidate` > 0, a request the scattered free share cannot hold may wait for running jobs to
move at their next checkpoint (the pass plans it, actions/consolidate.py); a job moves at most once
per CONSOLIDATION_MIN_INTERVAL_S and pays MOVE_RESTART_S of redone work to resume elsewhere.

What the queueing benchmark (bench.queueing), the operators' what-if (scheduler_app.whatif.replay) and the
demo's week of history (demo.history) run. Pure: no ORM, no clock, no I/O.
Units: milli-GPU, seconds on the caller's epoch.
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, replace

from .cluster import MILLI_PER_GPU, NodeState, Placement, RequestSpec
from .fragmentation import WorkloadMix
from .placement import apply_placement, release_placement
from .queueing import Consolidation, OpenRoom, QueueMode, RunningAllocation, TeamQuota, plan_pass
from .workload import Job

# A preempted job lost the work since its last checkpoint, taken every this many seconds.
CHECKPOINT_S = 600
# Consolidation: a job moves at most once per this long (the portal's default), and a move costs it this
# much work redone (loading its checkpoint elsewhere), counted as lost.
CONSOLIDATION_MIN_INTERVAL_S = 3600
MOVE_RESTART_S = 60


@dataclass(frozen=True, slots=True)
class Run:
    """One stretch of a job on its cards, [start, end) (s); preempted: it was stopped and requeued."""

    request_id: int | str
    node: str
    gpus: tuple[int, ...]
    milli: int
    gpu_memory_mib: int
    start: float
    end: float
    borrowed: bool
    preempted: bool


@dataclass
class Outcome:
    """What one simulation measured; times in seconds, work in milli-GPU-seconds."""

    delays: list[float]
    used_in_window: float
    allocated_in_window: float
    window_s: float
    makespan_s: float
    capacity_milli: int
    preemptions: int
    wall_s: float
    delay_by_request: dict[int | str, float] = field(default_factory=dict)
    lost_work: float = 0.0  # milli-GPU-seconds of work redone after preemptions
    used_in_steady: float = 0.0  # work done from warmup_s after the first arrival to the last
    offered_in_steady: float = 0.0  # work of the jobs that arrived in that window
    steady_s: float = 0.0
    team_delays: dict[str, list[float]] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)  # in the order they ended
    moves: int = 0  # jobs moved at a checkpoint to make room (consolidation)
    lost_to_moves: float = 0.0  # milli-GPU-seconds redone after those moves (part of lost_work)

    def utilization(self, allocated: bool = False) -> float:
        work = self.allocated_in_window if allocated else self.used_in_window
        return work / (self.capacity_milli * self.window_s)

    def steady_utilization(self) -> float:
        """Utilization in steady state (nan when the arrivals are shorter than the warm-up)."""
        return self.used_in_steady / (self.capacity_milli * self.steady_s) if self.steady_s > 0 else math.nan

    def steady_offered(self) -> float:
        """The load the jobs really offered in the steady window (Poisson arrivals stray from the target)."""
        return (
            self.offered_in_steady / (self.capacity_milli * self.steady_s) if self.steady_s > 0 else math.nan
        )

    def preempted_share(self) -> float:
        """Preemptions per job."""
        return self.preemptions / len(self.delays)


@dataclass
class _Sim:
    nodes: list[NodeState]
    quotas: list[TeamQuota]
    mode: QueueMode
    policy: str
    window: tuple[float, float]
    workload: WorkloadMix | None = None
    warmup_s: float = 0.0
    pending: dict[int, RequestSpec] = field(default_factory=dict)
    running: dict[int, RunningAllocation] = field(default_factory=dict)
    remaining: dict[int, float] = field(default_factory=dict)
    ends: dict[int, float] = field(default_factory=dict)
    used_milli: dict[int, int] = field(default_factory=dict)
    waiting_since: dict[int, float] = field(default_factory=dict)
    delay: dict[int, float] = field(default_factory=dict)
    events: list[tuple[float, int, int]] = field(default_factory=list)  # (time, kind, id)
    used: float = 0.0
    allocated: float = 0.0
    used_steady: float = 0.0
    lost_work: float = 0.0
    preemptions: int = 0
    last_end: float = 0.0
    runs: list[Run] = field(default_factory=list)
    consolidate: int = 0  # moves one pass may plan (0: no consolidation)
    rooms: dict[int, _Room] = field(default_factory=dict)  # open plans by waiting request
    moved_at: dict[int, float] = field(default_factory=dict)
    moves: int = 0
    lost_to_moves: float = 0.0
    by_name: dict[str, NodeState] = field(init=False)

    def __post_init__(self) -> None:
        self.by_name = {node.name: node for node in self.nodes}

    def arrive(self, request: RequestSpec, now: float) -> None:
        self.pending[request.id] = request
        self.waiting_since[request.id] = now
        self.delay.setdefault(request.id, 0.0)

    def finish(self, rid: int, now: float) -> None:
        allocation = self.running.pop(rid)
        self._account(allocation, now)
        self._record(allocation, now, preempted=False)
        node = self._node(allocation)
        release_placement(node, allocation.request, allocation.placement)
        self.last_end = max(self.last_end, now)

    def step(self, now: float) -> None:
        rules = self._consolidation(now) if self.consolidate else None
        plan = plan_pass(
            self.nodes, list(self.pending.values()), list(self.running.values()), self.quotas, now,
            self.policy, self.mode, self.workload, consolidation=rules,
        )  # fmt: skip
        if rules is not None:
            self._keep_rooms(plan.rooms, rules)
        for preemption in plan.preemptions:
            self._preempt(preemption.allocation, now)
        for start in plan.starts:
            rid = start.request.id
            del self.pending[rid]
            self.delay[rid] += now - self.waiting_since.pop(rid)
            apply_placement(self._node(start), start.request, start.placement)
            self.running[rid] = RunningAllocation(start.request, start.placement, now, start.borrowed)
            self.ends[rid] = now + self.remaining[rid]
            heapq.heappush(self.events, (self.ends[rid], 0, rid))

    def _consolidation(self, now: float) -> Consolidation:
        """The pass's rules: the open plans still waited for, and the jobs that may move, each by its next
        checkpoint. A plan ends when its request no longer waits or one of its jobs ended before moving."""
        for rid, room in list(self.rooms.items()):
            if rid not in self.pending or any(m not in self.running for m in room.moving):
                del self.rooms[rid]
        moving = {m for room in self.rooms.values() for m in room.moving}
        movable = {
            rid: _next_checkpoint(allocation.started_at, now)
            for rid, allocation in self.running.items()
            if rid not in moving and now - self.moved_at.get(rid, -math.inf) >= CONSOLIDATION_MIN_INTERVAL_S
        }
        open_rooms = {
            rid: OpenRoom(tuple(room.moving), room.placement, room.ready_at)
            for rid, room in self.rooms.items()
        }
        pools = frozenset(n.pool for n in self.nodes)
        return Consolidation(movable, pools, max_moves=self.consolidate, open=open_rooms)

    def _keep_rooms(self, rooms, rules: Consolidation) -> None:
        """Keep the plans the pass holds (the rest end); each new move is due at its job's checkpoint."""
        held = {room.request_id for room in rooms}
        for rid in [rid for rid in self.rooms if rid not in held]:
            del self.rooms[rid]
        for room in rooms:
            if room.new:
                self.rooms[room.request_id] = _Room(set(room.moving), room.placement, room.ready_at)
                for mover in room.moving:
                    heapq.heappush(self.events, (rules.movable[mover], 2, mover))

    def move(self, rid: int, now: float) -> None:
        """A job due to move at this checkpoint moves, if a plan still waits for it."""
        room = next((room for room in self.rooms.values() if rid in room.moving), None)
        if room is None or rid not in self.running:
            return
        room.moving.discard(rid)
        allocation = self.running[rid]
        self._stop(allocation, now)
        self.remaining[rid] += MOVE_RESTART_S
        self.lost_work += MOVE_RESTART_S * self.used_milli[rid]
        self.lost_to_moves += MOVE_RESTART_S * self.used_milli[rid]
        self.moved_at[rid] = now
        self.moves += 1

    def _preempt(self, allocation: RunningAllocation, now: float) -> None:
        self._stop(allocation, now)
        self.preemptions += 1

    def _stop(self, allocation: RunningAllocation, now: float) -> None:
        """Stop a running job and requeue it from its last checkpoint (the work since is lost)."""
        rid = allocation.request.id
        elapsed = now - allocation.started_at
        self.remaining[rid] -= elapsed - elapsed % CHECKPOINT_S
        self.lost_work += elapsed % CHECKPOINT_S * self.used_milli[rid]
        self.running.pop(rid)
        self._account(allocation, now)
        self._record(allocation, now, preempted=True)
        release_placement(self._node(allocation), allocation.request, allocation.placement)
        self.arrive(allocation.request, now)

    def _account(self, allocation: RunningAllocation, now: float) -> None:
        lo, hi = self.window
        overlap = max(0.0, min(now, hi) - max(allocation.started_at, lo))
        rid = allocation.request.id
        self.used += self.used_milli[rid] * overlap
        self.allocated += allocation.request.total_milli() * overlap
        steady = max(0.0, min(now, hi) - max(allocation.started_at, lo + self.warmup_s))
        self.used_steady += self.used_milli[rid] * steady

    def _record(self, allocation: RunningAllocation, now: float, *, preempted: bool) -> None:
        placement = allocation.placement
        self.runs.append(
            Run(
                allocation.request.id, placement.node, placement.gpus, placement.milli,
                placement.gpu_memory_mib, allocation.started_at, now, allocation.borrowed, preempted,
            )
        )  # fmt: skip

    def _node(self, item) -> NodeState:
        return self.by_name[item.placement.node]


@dataclass
class _Room:
    """An open consolidation plan: the jobs still to move, where its request goes, by when."""

    moving: set[int]
    placement: Placement
    ready_at: float


def _next_checkpoint(started_at: float, now: float) -> float:
    """The first checkpoint of a run started at `started_at` (one every CHECKPOINT_S) at or after now."""
    return started_at + math.ceil((now - started_at) / CHECKPOINT_S) * CHECKPOINT_S


def whole_cards(request: RequestSpec) -> RequestSpec:
    """The same request rounded up to whole cards."""
    return replace(request, gpu_milli=MILLI_PER_GPU)


def simulate(
    jobs: list[Job],
    nodes: Sequence[NodeState],
    mode: QueueMode,
    policy: str,
    quotas: list[TeamQuota],
    whole: bool,
    window: tuple[float, float] | None = None,
    progress: Callable[[int, int], object] | None = None,
    warmup_s: float = 0.0,
    consolidate: int = 0,
) -> Outcome:
    """Run the jobs (in submit order) to completion and measure queueing delay, utilization and makespan.

    nodes: free nodes (copied, not changed).
    window: where utilization is measured (default: first to last submit); the steady-state figures
    count from warmup_s after the first arrival.
    progress(arrived, total) is called as jobs arrive (the what-if page shows it).
    consolidate: the moves one pass may plan to make room (0: none; see the module's docstring).
    """
    started = time.perf_counter()
    first = jobs[0].request.submitted_at
    window = window or (first, jobs[-1].request.submitted_at)
    requests = [whole_cards(job.request) if whole else job.request for job in jobs]
    cluster = deepcopy(list(nodes))
    # As in production: the typical shapes are those of the requests the scheduler sees.
    sim = _Sim(cluster, quotas, mode, policy, window, WorkloadMix.from_requests(requests), warmup_s)
    sim.consolidate = consolidate
    by_id = {}
    for job, request in zip(jobs, requests, strict=True):
        by_id[request.id] = request
        sim.remaining[request.id] = job.duration_s
        sim.used_milli[request.id] = job.request.total_milli()
        sim.events.append((request.submitted_at, 1, request.id))
    heapq.heapify(sim.events)
    arrived, report_every = 0, max(1, len(jobs) // 100)
    while sim.events:
        now = sim.events[0][0]
        while sim.events and sim.events[0][0] == now:
            _, kind, rid = heapq.heappop(sim.events)
            if kind == 1:
                sim.arrive(by_id[rid], now)
                arrived += 1
                if progress is not None and arrived % report_every == 0:
                    progress(arrived, len(jobs))
            elif kind == 2:
                sim.move(rid, now)
            elif rid in sim.running and sim.ends[rid] == now:  # else: preempted since
                sim.finish(rid, now)
        if sim.pending:  # a pass with nothing pending starts and preempts nothing
            sim.step(now)
    assert not sim.pending and not sim.running, "the simulation lost work"
    steady_from = first + warmup_s
    return Outcome(
        delays=list(sim.delay.values()),
        team_delays=_by_team(sim.delay, by_id),
        used_in_window=sim.used,
        allocated_in_window=sim.allocated,
        window_s=window[1] - window[0],
        makespan_s=sim.last_end - first,
        capacity_milli=sum(len(node.gpus) for node in cluster) * MILLI_PER_GPU,
        preemptions=sim.preemptions,
        wall_s=time.perf_counter() - started,
        delay_by_request=dict(sim.delay),
        lost_work=sim.lost_work,
        used_in_steady=sim.used_steady,
        offered_in_steady=sum(
            job.duration_s * job.request.total_milli()
            for job in jobs
            if job.request.submitted_at >= steady_from
        ),
        steady_s=max(0.0, window[1] - steady_from),
        runs=sim.runs,
        moves=sim.moves,
        lost_to_moves=sim.lost_to_moves,
    )


def _by_team(delays: dict[int, float], requests: dict[int, RequestSpec]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for rid, delay in delays.items():
        out.setdefault(requests[rid].team, []).append(delay)
    return out


def p95(values: list[float]) -> float:
    """The 95th percentile (inclusive method: within the values' range)."""
    return statistics.quantiles(values, n=20, method="inclusive")[-1]
