"""Queueing benchmark: the portal's scheduler against the schedulers users would run instead.

    python -m bench.queueing [--seed 1 2 3] [--load 0.7 0.9 1.1] [--jobs 4000] [--nodes 16]

An event-driven simulation (arrivals, completions) calls the pure core's
`plan_pass` at every event time, exactly as the database scheduler does, and
applies its plan: starts, and preemptions that checkpoint (work since the last
checkpoint is lost) and requeue. Every scheduler (`SCHEDULERS`) runs the same
jobs through the same pass: whole-GPU strict FIFO and EASY backfill (requests
rounded up to whole cards), fractional FIFO with EASY backfill (no quotas or
fair share), and the portal's fractional + fair default.
"""

from __future__ import annotations

import argparse
import heapq
import math
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
    EASY_BACKFILL,
    STRICT_FIFO,
    QueueMode,
    RunningAllocation,
    TeamQuota,
    plan_pass,
)

from .workload import LONG_S, TEAMS, Job, generate, trace_shapes

POOL = "bench"
GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 81920
CHECKPOINT_S = 600
# Utilization is measured from this long after the first arrival: by then every job that runs began in the
# window, so the cluster is in steady state (from empty, the first hours miss the work of the long jobs
# that would already be running, about load x E[S^2] / 2E[S] = 0.6 cluster-hours at 90 %).
WARMUP_S = LONG_S[1]


@dataclass(frozen=True, slots=True)
class Scheduler:
    """One way to run the jobs: a queue mode, whole cards or slices as asked, and whether teams get quotas."""

    name: str
    mode: QueueMode
    whole: bool
    quotas: bool


SCHEDULERS = (
    Scheduler("whole-GPU strict FIFO", STRICT_FIFO, whole=True, quotas=False),
    Scheduler("whole-GPU EASY backfill", EASY_BACKFILL, whole=True, quotas=False),
    Scheduler("fractional FIFO+backfill", EASY_BACKFILL, whole=False, quotas=False),
    Scheduler("fractional + fair (ours)", QueueMode(), whole=False, quotas=True),
)


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
    used_in_steady: float = 0.0  # work done from WARMUP_S after the first arrival to the last
    offered_in_steady: float = 0.0  # work of the jobs that arrived in that window
    steady_s: float = 0.0
    team_delays: dict[str, list[float]] = field(default_factory=dict)

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
        self.lost_work += elapsed % CHECKPOINT_S * self.used_milli[rid]
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
        steady = max(0.0, min(now, hi) - max(allocation.started_at, lo + WARMUP_S))
        self.used_steady += self.used_milli[rid] * steady

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
        if sim.pending:  # a pass with nothing pending starts and preempts nothing
            sim.step(now)
    assert not sim.pending and not sim.running, "the simulation lost work"
    steady_from = first + WARMUP_S
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
    )


def _by_team(delays: dict[int, float], requests: dict[int, RequestSpec]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for rid, delay in delays.items():
        out.setdefault(requests[rid].team, []).append(delay)
    return out


def team_quotas(nodes: int) -> list[TeamQuota]:
    """Each team is guaranteed an equal share of the pool; demand is uneven (see workload)."""
    share = nodes * GPUS_PER_NODE * MILLI_PER_GPU // len(TEAMS)
    return [TeamQuota(team, POOL, share) for team in TEAMS]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def outcome_mean(outcome: Outcome) -> float:
    return statistics.fmean(outcome.delays)


def run(jobs: list[Job], nodes: int, scheduler: Scheduler, policy: str = DEFAULT_POLICY) -> Outcome:
    """Simulate the jobs under one of the SCHEDULERS."""
    quotas = team_quotas(nodes) if scheduler.quotas else []
    return simulate(jobs, nodes, scheduler.mode, policy, quotas, scheduler.whole)


COLUMNS = (
    ("mean delay s", lambda o: f"{outcome_mean(o):,.0f}"),
    ("p95 delay s", lambda o: f"{p95(o.delays):,.0f}"),
    ("utilization", lambda o: f"{o.steady_utilization():.1%}"),
    ("(whole window)", lambda o: f"{o.utilization():.1%}"),
    ("preemptions", lambda o: f"{o.preemptions} ({o.preempted_share():.1%})"),
    ("lost GPU-h", lambda o: f"{o.lost_work / 3.6e6:.1f}"),
    ("makespan h", lambda o: f"{o.makespan_s / 3600:.1f}"),
)


def report(name: str, outcome: Outcome) -> None:
    cells = "  ".join(f"{title} {cell(outcome):>9}" for title, cell in COLUMNS)
    print(f"  {name:<26} {cells}  [{outcome.wall_s:.0f} s wall]", flush=True)


def summary(results: dict[tuple[float, str], list[Outcome]]) -> None:
    """Markdown rows per load and scheduler, means over the seeds: the columns, then mean delay per team."""
    print(
        "\n| load | scheduler | mean delay | p95 delay | utilization | preemptions | lost GPU-h | makespan |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (load, name), outcomes in results.items():

        def avg(metric, outcomes=outcomes) -> float:
            return statistics.fmean(metric(o) for o in outcomes)

        print(
            f"| {load:.0%} (realized {avg(Outcome.steady_offered):.1%}) | {name} "
            f"| {avg(outcome_mean):,.0f} s | {avg(lambda o: p95(o.delays)):,.0f} s "
            f"| {avg(Outcome.steady_utilization):.1%} "
            f"| {avg(lambda o: o.preemptions):.0f} ({avg(Outcome.preempted_share):.1%}) "
            f"| {avg(lambda o: o.lost_work) / 3.6e6:.1f} | {avg(lambda o: o.makespan_s) / 3600:.1f} h |"
        )
    teams = " | ".join(f"{team} ({share:.0%} of jobs)" for team, share in TEAMS.items())
    print(f"\n| load | scheduler | {teams} |")
    print(f"|---|---|{'---:|' * len(TEAMS)}")
    for (load, name), outcomes in results.items():
        cells = " | ".join(
            f"{statistics.fmean(statistics.fmean(o.team_delays[team]) for o in outcomes):,.0f} s"
            for team in TEAMS
        )
        print(f"| {load:.0%} | {name} | {cells} |")
    for load in dict.fromkeys(load for load, _ in results):
        ours, easy = results[load, SCHEDULERS[3].name], results[load, SCHEDULERS[1].name]
        ratios = [outcome_mean(e) / max(outcome_mean(o), 1e-9) for e, o in zip(easy, ours, strict=True)]
        overall = statistics.fmean(map(outcome_mean, easy)) / max(
            statistics.fmean(map(outcome_mean, ours)), 1e-9
        )
        print(
            f"load {load:.0%}: mean delay whole-GPU EASY / ours {overall:.1f}x over the seeds "
            f"(per seed {', '.join(f'{r:.1f}' for r in ratios)}; target >= 5x at 90 %)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, nargs="+", default=[1])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--nodes", type=int, default=16, help="8-card nodes")
    parser.add_argument(
        "--load", type=float, nargs="+", default=[0.9], help="offered milli-GPU load / capacity"
    )
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument(
        "--reclaim-grace",
        type=lambda text: None if text == "none" else float(text),
        default=QueueMode().reclaim_grace_s,
        help="our QueueMode.reclaim_grace_s (s, or none)",
    )
    parser.add_argument(
        "--only", nargs="+", type=int, choices=range(len(SCHEDULERS)), help="indices into SCHEDULERS"
    )
    args = parser.parse_args(argv)

    capacity = args.nodes * GPUS_PER_NODE * MILLI_PER_GPU
    schedulers = [SCHEDULERS[i] for i in args.only] if args.only else list(SCHEDULERS)
    ours = schedulers[-1] if schedulers[-1].quotas else None
    if ours is not None:
        schedulers[-1] = replace(ours, mode=replace(ours.mode, reclaim_grace_s=args.reclaim_grace))
    results: dict[tuple[float, str], list[Outcome]] = {}
    for load in args.load:
        for seed in args.seed:
            jobs = generate(seed, args.jobs, capacity, load, trace_shapes())
            span = (jobs[-1].request.submitted_at - jobs[0].request.submitted_at) / 3600
            print(
                f"{args.jobs} jobs over {span:.1f} h on {args.nodes} x {GPUS_PER_NODE} GPUs, offered load "
                f"{load:.0%}, seed {seed}, policy {args.policy}, our reclaim grace {args.reclaim_grace} s",
                flush=True,
            )
            for scheduler in schedulers:
                outcome = run(jobs, args.nodes, scheduler, args.policy)
                report(scheduler.name, outcome)
                results.setdefault((load, scheduler.name), []).append(outcome)
    if not args.only:
        summary(results)


if __name__ == "__main__":
    main()
