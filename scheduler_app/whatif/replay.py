"""What-if on the cluster's own history: the requests placed in a period, replayed through the
pure core's simulator (core.simulator.simulate: the scheduler's own passes) under another policy, other
quotas or more or fewer nodes, side by side with what really happened; and the cheapest addition of
nodes that brings the p95 queueing delay under a target.

Reads only. A recorded request becomes a simulated job: its submit time, shape and team, and as its
duration the time its slices really ran (all segments; one still running: until now). Both sides count
the same requests: delay is submit to first placement (s); utilization is their slices' milli-GPU-seconds
over the cluster's in the time the history covers; cost is what the cluster's cards cost over that time
at each pool's price in force at its end (USD, Decimal; unpriced pools are named, not counted).

The history covers the period from the cluster's first trace (its first node registered or request
submitted) if that came after the period's start: a cluster that has existed for 15 minutes is priced
and measured over those 15 minutes, not over the week asked for.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from statistics import fmean

from django.core.exceptions import ValidationError
from django.db.models import Count, Min
from django.utils import timezone

from infra.echo import echoed
from infra.times import BadTime, parse_time
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.cluster import NodeState
from scheduler_app.core.placement import POLICIES, candidate_gpus, node_admits
from scheduler_app.core.queue_ledger import TeamQuota as QuotaSpec
from scheduler_app.core.queueing import DEFAULT_POLICY, EASY_BACKFILL, STRICT_FIFO, QueueMode
from scheduler_app.core.simulator import Outcome, p95, simulate
from scheduler_app.core.workload import Job
from scheduler_app.models import Allocation, GpuRequest, Node, Pool
from scheduler_app.passes.cluster_state import empty_cluster, quota_specs, request_specs
from scheduler_app.rules.billing import billing
from teams.models import Team

QUEUE_MODES = {
    "fair": QueueMode(),
    "fifo-backfill": QueueMode(fair_share=False, preemption=False),
    "easy-backfill": EASY_BACKFILL,
    "strict-fifo": STRICT_FIFO,
}
MAX_PERIOD = dt.timedelta(days=31)
MAX_NODE_CHANGE = 100
# The recommendation tries adding 1..MAX_ADDED_NODES nodes to one priced pool at a time.
MAX_ADDED_NODES = 4
CENT = Decimal("0.01")

Progress = Callable[[float], object]  # fraction done, 0..1


@dataclass(frozen=True)
class Scenario:
    """What to replay: the period [start, end), and what differs from today's cluster."""

    start: dt.datetime
    end: dt.datetime
    policy: str = DEFAULT_POLICY
    queue: str = "fair"
    quotas: tuple[QuotaSpec, ...] = ()  # overrides of today's quotas, per (team, pool)
    node_changes: tuple[tuple[str, int], ...] = ()  # (pool, +/- nodes)
    target_p95_s: float | None = None


def parse_scenario(data: dict, now: dt.datetime | None = None) -> Scenario:
    """The scenario from plain JSON (API body, the page's form); ValidationError naming each bad field."""
    now = now or timezone.now()
    errors: dict[str, list[str]] = defaultdict(list)
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    start = _time(data.get("start"), "start", errors)
    end = _time(data.get("end"), "end", errors)
    if start and end:
        if start >= end:
            errors["end"].append("Must be after the start.")
        elif end - start > MAX_PERIOD:
            errors["end"].append(f"A period is at most {MAX_PERIOD.days} days.")
        elif start >= now:
            errors["start"].append("Must be in the past: the what-if replays recorded history.")
    policy = data.get("policy") or DEFAULT_POLICY
    if not isinstance(policy, str) or policy not in POLICIES:
        errors["policy"].append(f"Unknown policy; one of {', '.join(sorted(POLICIES))}.")
    queue = data.get("queue") or "fair"
    if not isinstance(queue, str) or queue not in QUEUE_MODES:
        errors["queue"].append(f"Unknown queue mode; one of {', '.join(QUEUE_MODES)}.")
    pools = {p.name: p for p in Pool.objects.all()}
    quotas = _quotas(data.get("quotas") or [], pools, errors)
    changes = _node_changes(data.get("nodes") or {}, pools, errors)
    target = data.get("target_p95_s")
    if target is not None and (
        isinstance(target, bool) or not isinstance(target, int | float) or not 0 < target < 10**8
    ):
        errors["target_p95_s"].append("A number of seconds above 0, or null.")
    if errors:
        raise ValidationError(dict(errors))
    return Scenario(start, min(end, now), policy, queue, quotas, changes, target)


def scenario_json(scenario: Scenario) -> dict:
    """The scenario as parse_scenario reads it back (what a WhatIfRun keeps)."""
    return {
        "start": scenario.start.isoformat(),
        "end": scenario.end.isoformat(),
        "policy": scenario.policy,
        "queue": scenario.queue,
        "quotas": [
            {"team": q.team, "pool": q.pool, "guaranteed_milli": q.guaranteed_milli} for q in scenario.quotas
        ],
        "nodes": dict(scenario.node_changes),
        "target_p95_s": scenario.target_p95_s,
    }


def _time(value, name: str, errors) -> dt.datetime | None:
    try:
        return parse_time(value)
    except BadTime as problem:
        errors[name].append(problem.sentence())
    return None


def _quotas(rows, pools: dict[str, Pool], errors) -> tuple[QuotaSpec, ...]:
    teams = set(Team.objects.values_list("slug", flat=True))
    out = []
    if not isinstance(rows, list):
        errors["quotas"].append("A list of {team, pool, guaranteed_milli}.")
        return ()
    for row in rows:
        if not isinstance(row, dict):
            errors["quotas"].append("Each quota is an object {team, pool, guaranteed_milli}.")
            continue
        team, pool, milli = row.get("team"), row.get("pool"), row.get("guaranteed_milli")
        if not isinstance(team, str) or team not in teams:
            errors["quotas"].append(f"No team {echoed(team)!r} (use its slug).")
        elif not isinstance(pool, str) or pool not in pools:
            errors["quotas"].append(f"No pool {echoed(pool)!r}.")
        elif isinstance(milli, bool) or not isinstance(milli, int) or not 0 <= milli <= 10**9:
            errors["quotas"].append(
                f"{team} in {pool}: guaranteed_milli is a whole number of milli-GPU, 0 or more."
            )
        else:
            out.append(QuotaSpec(team, pool, milli))
    return tuple(out)


def _node_changes(changes, pools: dict[str, Pool], errors) -> tuple[tuple[str, int], ...]:
    if not isinstance(changes, dict):
        errors["nodes"].append("An object {pool: nodes to add (negative: to remove)}.")
        return ()
    counts = dict(
        Node.objects.values_list("pool__name").annotate(n=Count("id")).values_list("pool__name", "n")
    )
    out = []
    for pool, delta in changes.items():
        if pool not in pools:
            errors["nodes"].append(f"No pool {echoed(pool)!r}.")
        elif isinstance(delta, bool) or not isinstance(delta, int) or abs(delta) > MAX_NODE_CHANGE:
            errors["nodes"].append(
                f"{pool}: a whole number of nodes between -{MAX_NODE_CHANGE} and {MAX_NODE_CHANGE}."
            )
        elif counts.get(pool, 0) + delta < 0:
            errors["nodes"].append(f"{pool} has {counts.get(pool, 0)} nodes: cannot remove {-delta}.")
        elif delta > 0 and counts.get(pool, 0) == 0:
            errors["nodes"].append(f"{pool} has no node to copy: register one first.")
        elif delta:
            out.append((pool, delta))
    return tuple(sorted(out))


def placed_in(scenario: Scenario):
    """The requests submitted in the period that were placed at least once: what the what-if replays."""
    return GpuRequest.objects.filter(
        created_at__gte=scenario.start,
        created_at__lt=scenario.end,
        pk__in=Allocation.objects.values("request_id"),
    ).order_by("created_at", "id")


@dataclass
class History:
    """A period's placed requests as simulator jobs, what really happened to them, and today's cluster."""

    scenario: Scenario
    jobs: list[Job]
    team_of: dict[int, str]
    actual_delay: dict[int, float]  # submit to first placement, s
    # The replayed requests' slices: milli x time inside the period (what the simulator counts too).
    actual_allocated_milli_s: float
    nodes: list[NodeState]  # empty
    quotas: list[QuotaSpec]
    prices: dict[str, Decimal] = field(default_factory=dict)  # pool -> USD per GPU-hour, priced pools only
    covered_from: dt.datetime | None = None  # where the history begins within the period (None: its start)

    @property
    def window(self) -> tuple[float, float]:
        """The time the history covers, [covered_from, end) as timestamps: what is measured and priced."""
        start = max(self.scenario.start, self.covered_from or self.scenario.start)
        return start.timestamp(), self.scenario.end.timestamp()


def cluster_began() -> dt.datetime | None:
    """The cluster's first trace: its first node registered or request submitted (None: neither yet)."""
    firsts = [
        Node.objects.aggregate(first=Min("created_at"))["first"],
        GpuRequest.objects.aggregate(first=Min("created_at"))["first"],
    ]
    return min((first for first in firsts if first is not None), default=None)


def load_history(scenario: Scenario, now: dt.datetime | None = None) -> History:
    """Read the period's placed requests, their slices' segments, today's nodes, quotas and prices."""
    now = now or timezone.now()
    pools = list(Pool.objects.all())
    requests = placed_in(scenario)
    segments: dict[int, set[tuple]] = defaultdict(set)
    allocated_milli_s = 0.0
    for rid, milli, started, ended in Allocation.objects.filter(request__in=requests).values_list(
        "request_id", "milli", "started_at", "ended_at"
    ):
        ended = ended or now
        segments[rid].add((started, ended))  # a gang's cards share one segment
        inside = min(ended, scenario.end) - max(started, scenario.start)
        allocated_milli_s += milli * max(0.0, inside.total_seconds())
    jobs, team_of, actual_delay = [], {}, {}
    for spec in request_specs(requests, pools):
        ran = sum((end - start).total_seconds() for start, end in segments[spec.id])
        jobs.append(Job(spec, max(1, round(ran))))
        team_of[spec.id] = spec.team
        first = min(start for start, _ in segments[spec.id]).timestamp()
        actual_delay[spec.id] = max(0.0, first - spec.submitted_at)
    return History(
        scenario,
        jobs,
        team_of,
        actual_delay,
        allocated_milli_s,
        empty_cluster(),
        quota_specs(),
        billing().gpu_hour_prices(pools, scenario.end),  # an unpriced pool costs nothing; the result names it
        cluster_began(),
    )


def cluster_for(nodes: Sequence[NodeState], changes: Sequence[tuple[str, int]]) -> list[NodeState]:
    """Today's nodes with `changes` applied: removing drops a pool's last nodes; adding copies its first."""
    cluster = list(nodes)
    for pool, delta in changes:
        in_pool = [n for n in cluster if n.pool == pool]
        if delta < 0:
            dropped = {n.name for n in in_pool[delta:]}
            cluster = [n for n in cluster if n.name not in dropped]
        for i in range(delta):
            cluster.append(
                replace(
                    in_pool[0],
                    name=f"{pool}-what-if-{len(in_pool) + i + 1:02d}",
                    gpus=[replace(g) for g in in_pool[0].gpus],
                )
            )
    return cluster


def fits_somewhere(job: Job, nodes: Sequence[NodeState]) -> bool:
    """Whether the request fits some node of this cluster when it is empty."""
    request = job.request
    return any(node_admits(request, n) and len(candidate_gpus(request, n)) >= request.num_gpus for n in nodes)


def run(scenario: Scenario, progress: Progress = lambda fraction: None) -> dict:
    """The what-if's result (JSON-ready): actual and scenario side by side, and the recommendation."""
    history = load_history(scenario)
    if not history.jobs:
        raise ValidationError({"start": ["No request was placed in this period: nothing to replay."]})
    nodes = cluster_for(history.nodes, scenario.node_changes)
    jobs = [job for job in history.jobs if fits_somewhere(job, nodes)]
    candidates = _candidates(history, jobs) if scenario.target_p95_s is not None else []
    steps = 1 + len(candidates)
    scenario_delays = {}
    if jobs:
        outcome = _simulate(history, jobs, nodes, lambda done, total: progress(done / total / steps))
        scenario_delays = outcome.delay_by_request
        allocated = outcome.allocated_in_window
    else:
        allocated = 0.0
    lo, hi = history.window
    result = {
        "period": {"start": scenario.start.isoformat(), "end": scenario.end.isoformat()},
        "covered": {
            "start": dt.datetime.fromtimestamp(lo, dt.UTC).isoformat(),
            "end": scenario.end.isoformat(),
            "seconds": round(hi - lo),
        },
        "requests": len(history.jobs),
        "unplaceable": len(history.jobs) - len(jobs),
        "teams": sorted(set(history.team_of.values())),
        "actual": _measure(history, history.actual_delay, history.nodes, history.actual_allocated_milli_s),
        "scenario": _measure(history, scenario_delays, nodes, allocated),
        "unpriced_pools": sorted({n.pool for n in nodes} - set(history.prices)),
    }
    result["recommendation"] = _recommend(
        history, jobs, nodes, candidates, result["scenario"], progress, steps
    )
    progress(1.0)
    return result


def _simulate(history: History, jobs: list[Job], nodes: list[NodeState], progress) -> Outcome:
    scenario = history.scenario
    overridden = {(q.team, q.pool) for q in scenario.quotas}
    quotas = [q for q in history.quotas if (q.team, q.pool) not in overridden] + list(scenario.quotas)
    mode = QUEUE_MODES[scenario.queue]
    return simulate(jobs, nodes, mode, scenario.policy, quotas, False, history.window, progress)


def _delays(values: list[float]) -> dict:
    if not values:
        return {"requests": 0, "mean_delay_s": None, "p95_delay_s": None}
    tail = values[0] if len(values) == 1 else p95(values)
    return {"requests": len(values), "mean_delay_s": round(fmean(values), 1), "p95_delay_s": round(tail, 1)}


def _measure(history: History, delays: dict, nodes: list[NodeState], allocated_milli_s: float) -> dict:
    per_team = defaultdict(list)
    for rid, delay in delays.items():
        per_team[history.team_of[rid]].append(delay)
    gpus = sum(len(n.gpus) for n in nodes)
    lo, hi = history.window
    utilization = allocated_milli_s / (gpus * MILLI_PER_GPU * (hi - lo)) if gpus else 0.0
    return {
        **_delays(list(delays.values())),
        "teams": {team: _delays(values) for team, values in sorted(per_team.items())},
        "gpus": gpus,
        "utilization": round(utilization, 4),
        "unallocated_gpus": round(gpus * (1 - utilization), 2),
        "cost_usd": str(_cost(history, nodes)),
    }


def _cost(history: History, nodes: Sequence[NodeState]) -> Decimal:
    """What these cards cost over the time the history covers at their pools' prices (unpriced pools:
    nothing)."""
    lo, hi = history.window
    hours = Decimal(round(hi - lo)) / 3600
    priced = [n for n in nodes if n.pool in history.prices]
    # Whole cards of capacity, not a slice: no share premium applies.
    hourly = billing().usd_per_hour
    total = sum((hourly(history.prices[n.pool], MILLI_PER_GPU, len(n.gpus)) for n in priced), Decimal(0))
    return (total * hours).quantize(CENT)


def _candidates(history: History, jobs: list[Job]) -> list[tuple[Decimal, int, str, int]]:
    """(extra cost, extra GPUs, pool, nodes added): 1..MAX_ADDED_NODES nodes of each priced pool that some
    job may run in (nodes no job may use cannot lower a delay), cheapest first."""
    usable = {n.pool for n in history.nodes} & set(history.prices)
    if all(job.request.pools for job in jobs):
        usable &= {pool for job in jobs for pool in job.request.pools}
    out = []
    for pool in sorted(usable):
        template = next(n for n in history.nodes if n.pool == pool)
        for count in range(1, MAX_ADDED_NODES + 1):
            added = [template] * count
            out.append((_cost(history, added), len(template.gpus) * count, pool, count))
    return sorted(out)


def _recommend(
    history, jobs, nodes, candidates, measured: dict, progress: Progress, steps: int
) -> dict | None:
    """The cheapest candidate addition (tried in cost order) whose replay brings the p95 under the target."""
    target = history.scenario.target_p95_s
    if target is None:
        return None
    answer = {
        "target_p95_s": target,
        "change": None,
        "cost_usd": "0.00",
        "p95_delay_s": measured["p95_delay_s"],
    }
    if measured["p95_delay_s"] is not None and measured["p95_delay_s"] <= target:
        return {**answer, "meets": True, "message": "The scenario already meets the target: no nodes to add."}
    for step, (cost, gpus, pool, count) in enumerate(candidates, start=1):
        bigger = cluster_for(nodes, [(pool, count)])
        outcome = _simulate(
            history, jobs, bigger, lambda done, total, s=step: progress((s + done / total) / steps)
        )
        tail = _delays(list(outcome.delay_by_request.values()))["p95_delay_s"]
        if tail is not None and tail <= target:
            change = {"pool": pool, "nodes": count, "gpus": gpus}
            nodes_text = f"{count} node{'s' if count > 1 else ''}"
            message = (
                f"Add {nodes_text} to {pool} ({gpus} GPUs, {cost} USD over the time the history covers)."
            )
            return {
                **answer,
                "meets": True,
                "change": change,
                "cost_usd": str(cost),
                "p95_delay_s": tail,
                "message": message,
            }
    tried = f"up to {MAX_ADDED_NODES} nodes of one priced pool"
    return {**answer, "meets": False, "message": f"No addition of {tried} brings the p95 under {target:g} s."}
