"""Queueing benchmark: whole-GPU strict FIFO against the portal's scheduler.

    python -m bench.queueing [--seed 1] [--jobs 4000] [--nodes 16] [--load 0.9]

An event-driven simulation (arrivals, completions) calls the pure core's
`plan_pass` at every event time, exactly as the database scheduler does, and
applies its plan: starts, and preemptions that checkpoint (work since the last
checkpoint is lost) and requeue. The baseline rounds every request up to whole
cards and runs it through the same pass in strict FIFO mode.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, replace

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import apply_placement, release_placement
from scheduler_app.core.queueing import (
    DEFAULT_POLICY,
    STRICT_FIFO,
    QueueMode,
    RunningAllocation,
    TeamQuota,
    plan_pass,
)

from .workload import TEAMS, Job, generate, trace_shapes

POOL = "bench"
GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 81920
CHECKPOINT_S = 600


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

    def utilization(self, allocated: bool = False) -> float:
        work = self.allocated_in_window if allocated else self.used_in_window
        return work / (self.capacity_milli * self.window_s)


@dataclass
class _Sim:
    nodes: list[NodeState]
    quotas: list[TeamQuota]
    mode: QueueMode
    policy: str
    window: tuple[float, float]
    workload: WorkloadMix | None = None
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
    preemptions: int = 0
    last_end: float = 0.0
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
        node = self._node(allocation)
        release_placement(node, allocation.request, allocation.placement)
        self.last_end = max(self.last_end, now)

    def step(self, now: float) -> None:
        plan = plan_pass(
            self.nodes, list(self.pending.values()), list(self.running.values()), self.quotas, now,
            self.policy, self.mode, self.workload,
        )  # fmt: skip
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

    def _preempt(self, allocation: RunningAllocation, now: float) -> None:
        rid = allocation.request.id
        elapsed = now - allocation.started_at
        self.remaining[rid] -= elapsed - elapsed % CHECKPOINT_S
        self.running.pop(rid)
        self._account(allocation, now)
        release_placement(self._node(allocation), allocation.request, allocation.placement)
        self.preemptions += 1
        self.arrive(allocation.request, now)

    def _account(self, allocation: RunningAllocation, now: float) -> None:
        lo, hi = self.window
        overlap = max(0.0, min(now, hi) - max(allocation.started_at, lo))
        rid = allocation.request.id
        self.used += self.used_milli[rid] * overlap
        self.allocated += allocation.request.total_milli() * overlap

    def _node(self, item) -> NodeState:
        return self.by_name[item.placement.node]


def make_nodes(count: int) -> list[NodeState]:
    """`count` identical 8-card nodes in one pool; host CPU and memory are not the bottleneck here."""
    return [
        NodeState(
            f"node-{i:03d}",
            POOL,
            10**9,
            10**9,
            [GpuState(g, "A100-80G", GPU_MEMORY_MIB) for g in range(GPUS_PER_NODE)],
        )
        for i in range(count)
    ]


def whole_cards(request: RequestSpec) -> RequestSpec:
    """The same request rounded up to whole cards."""
    return replace(request, gpu_milli=MILLI_PER_GPU)


def simulate(
    jobs: list[Job],
    nodes: int | Sequence[NodeState],
    mode: QueueMode,
    policy: str,
    quotas: list[TeamQuota],
    whole: bool,
    window: tuple[float, float] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> Outcome:
    """Run the jobs (in submit order) to completion and measure queueing delay, utilization and makespan.

    nodes: a count of `make_nodes` nodes, or the nodes themselves (free; copied, not changed).
    window: where utilization is measured (default: first to last submit).
    progress(arrived, total) is called as jobs arrive (the what-if page shows it).
    """
    started = time.perf_counter()
    first = jobs[0].request.submitted_at
    window = window or (first, jobs[-1].request.submitted_at)
    requests = [whole_cards(job.request) if whole else job.request for job in jobs]
    cluster = make_nodes(nodes) if isinstance(nodes, int) else deepcopy(list(nodes))
    # As in production: the typical shapes are those of the requests the scheduler sees.
    sim = _Sim(cluster, quotas, mode, policy, window, WorkloadMix.from_requests(requests))
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
            elif rid in sim.running and sim.ends[rid] == now:  # else: preempted since
                sim.finish(rid, now)
        sim.step(now)
    assert not sim.pending and not sim.running, "the simulation lost work"
    return Outcome(
        delays=list(sim.delay.values()),
        used_in_window=sim.used,
        allocated_in_window=sim.allocated,
        window_s=window[1] - window[0],
        makespan_s=sim.last_end - first,
        capacity_milli=sum(len(node.gpus) for node in cluster) * MILLI_PER_GPU,
        preemptions=sim.preemptions,
        wall_s=time.perf_counter() - started,
        delay_by_request=dict(sim.delay),
    )


def team_quotas(nodes: int) -> list[TeamQuota]:
    """Each team is guaranteed an equal share of the pool; demand is uneven (see workload)."""
    share = nodes * GPUS_PER_NODE * MILLI_PER_GPU // len(TEAMS)
    return [TeamQuota(team, POOL, share) for team in TEAMS]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def report(name: str, outcome: Outcome) -> None:
    print(
        f"{name:<22} mean delay {outcome_mean(outcome):8.0f} s   p95 {p95(outcome.delays):8.0f} s   "
        f"utilization {outcome.utilization():6.1%} (allocated {outcome.utilization(True):6.1%})   "
        f"makespan {outcome.makespan_s / 3600:6.2f} h   preemptions {outcome.preemptions:4d}   "
        f"[{outcome.wall_s:.0f} s wall]"
    )


def outcome_mean(outcome: Outcome) -> float:
    return statistics.fmean(outcome.delays)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--nodes", type=int, default=16, help="8-card nodes")
    parser.add_argument("--load", type=float, default=0.9, help="offered milli-GPU load / capacity")
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    args = parser.parse_args(argv)

    capacity = args.nodes * GPUS_PER_NODE * MILLI_PER_GPU
    jobs = generate(args.seed, args.jobs, capacity, args.load, trace_shapes())
    span = (jobs[-1].request.submitted_at - jobs[0].request.submitted_at) / 3600
    print(
        f"{args.jobs} jobs over {span:.1f} h on {args.nodes} x {GPUS_PER_NODE} GPUs, offered load "
        f"{args.load:.0%}, seed {args.seed}, policy {args.policy}"
    )
    fifo = simulate(jobs, args.nodes, STRICT_FIFO, args.policy, [], whole=True)
    report("whole-GPU strict FIFO", fifo)
    ours = simulate(jobs, args.nodes, QueueMode(), args.policy, team_quotas(args.nodes), whole=False)
    report("fractional + fair", ours)
    ratio = outcome_mean(fifo) / max(outcome_mean(ours), 1e-9)
    print(f"mean queueing delay ratio (FIFO / ours): {ratio:.1f}x (target >= 10x); "
          f"our utilization {ours.utilization():.1%} (target >= 80%)")  # fmt: skip


if __name__ == "__main__":
    main()
