"""The demo's week of history: finished requests, so that its what-if, budgets and lists start from a
cluster that has been working, not from seven requests.

The workload generator (core.workload) draws a week of the demo teams' jobs, which the scheduler's own
passes (core.simulator) place on the demo's cluster; the week is then shifted to end a few minutes ago
and recorded in bulk (services.history). The passes run without preemption, so that each request ran
once, on one set of cards. Deterministic: the same cluster gives the same week.
"""

import datetime as dt
import random
from collections import defaultdict
from dataclasses import replace

from scheduler_app.choices import BillingMode, CapacityType, RequestState, TaskType
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.queueing import DEFAULT_POLICY, QueueMode
from scheduler_app.core.simulator import Run, simulate
from scheduler_app.core.workload import Durations, Job, generate
from scheduler_app.models import Gpu, GpuRequest, Pool
from scheduler_app.passes.cluster_state import empty_cluster, quota_specs
from scheduler_app.services.history import PastRequest, PastSlice, record_past_requests
from teams.models import Membership, Team

WEEK_S = 7 * 24 * 3600
SEED = 35
# Offered load: a little over half the cluster's milli-GPU capacity over the week, with the bursts of
# Poisson arrivals: work queues for hours at times (what a what-if is for), and the queue drains.
LOAD = 0.55
# (cards, milli-GPU per card) -> weight: mostly single cards and slices, a few gangs of 2, 4 and 8 cards.
SHAPES = {(1, 125): 10, (1, 250): 15, (1, 500): 20, (1, 1000): 35, (2, 1000): 10, (4, 1000): 7, (8, 1000): 3}
TEAM_SHARES = {"vision": 0.55, "language": 0.45}
# A team's week (about 460 requests): training runs of 4-24 h, evaluations and experiments of 30 min to 4 h.
DURATIONS = Durations(long_share=0.5, long_s=(4 * 3600, 24 * 3600), short_s=(30 * 60, 4 * 3600))
SPOT_SHARE = 0.3  # of the single-card jobs, billed spot on spot capacity (checkpointing every 15 min)
SPOT_CHECKPOINT_S = 900
FAILED_SHARE = 0.05  # ended with exit status 1
ENDED_AGO = dt.timedelta(minutes=5)  # the last recorded run ended this long before the seed
# Other than the live demo requests' names, which tests and docs look up.
NAMES = {
    ("vision", TaskType.TRAINING): ["resnet152-train", "vit-finetune", "detector-train", "segmenter-sweep"],
    ("vision", TaskType.INFERENCE): ["detector-eval", "clip-embed", "batch-classify"],
    ("language", TaskType.TRAINING): ["llama-lora-sweep", "bert-pretrain", "t5-distill"],
    ("language", TaskType.INFERENCE): ["perplexity-eval", "rag-eval", "summarize-batch"],
}


def history_missing(now: dt.datetime) -> bool:
    """No request older than a day: a fresh demo (or one seeded before it had a history)."""
    return not GpuRequest.objects.filter(created_at__lt=now - dt.timedelta(days=1)).exists()


def seed_history(now: dt.datetime, command: str) -> list[GpuRequest]:
    """Record the week (see the module); `command` runs N seconds with `--seconds N` appended."""
    return record_past_requests(plan_history(now, command))


def plan_history(now: dt.datetime, command: str) -> list[PastRequest]:
    """The week's requests as they ran on today's cluster, ending ENDED_AGO before `now`."""
    pools = list(Pool.objects.all())
    jobs, runs = _week(
        empty_cluster(),
        quota_specs(),
        frozenset(p.name for p in pools if p.capacity_type == CapacityType.SPOT),
        frozenset(p.name for p in pools if p.capacity_type == CapacityType.ON_DEMAND),
    )
    epoch = (now - ENDED_AGO).replace(microsecond=0) - dt.timedelta(seconds=max(r.end for r in runs.values()))
    cards = _cards()
    members = _members()
    rng = random.Random(SEED)
    past = []
    for job in jobs:
        spec, run = job.request, runs[job.request.id]
        request = GpuRequest(
            team=members[spec.team][0],
            user=rng.choice(members[spec.team][1]),
            name=rng.choice(NAMES[spec.team, spec.task_type]),
            task_type=spec.task_type,
            gpu_milli=spec.gpu_milli,
            num_gpus=spec.num_gpus,
            billing_mode=spec.billing_mode,
            checkpoint_interval_s=SPOT_CHECKPOINT_S if spec.billing_mode == BillingMode.SPOT else None,
            max_duration_s=spec.max_duration_s,
            command=f"{command} --seconds {job.duration_s}",
            created_at=epoch + dt.timedelta(seconds=spec.submitted_at),
        )
        failed = rng.random() < FAILED_SHARE
        past.append(
            PastRequest(
                request,
                started_at=epoch + dt.timedelta(seconds=run.start),
                ended_at=epoch + dt.timedelta(seconds=run.end),
                outcome=RequestState.FAILED if failed else RequestState.SUCCEEDED,
                exit_code=1 if failed else 0,
                slices=_slices(run, cards),
            )
        )
    return past


# The week depends only on the cluster and its quotas: a process that seeds again (the test suite) runs the
# simulation once.
_WEEKS: dict[str, tuple[list[Job], dict]] = {}


def _week(nodes, quotas, spot_pools: frozenset[str], on_demand_pools: frozenset[str]):
    """(the week's jobs in submit order, request id -> its Run): drawn, then placed by the passes."""
    key = repr((nodes, quotas, sorted(spot_pools), sorted(on_demand_pools)))
    if key in _WEEKS:
        return _WEEKS[key]
    rng = random.Random(SEED)
    capacity = sum(len(node.gpus) for node in nodes) * MILLI_PER_GPU
    jobs = []
    for job in generate(SEED, 4000, capacity, LOAD, SHAPES, TEAM_SHARES, DURATIONS):
        if job.request.submitted_at >= WEEK_S:
            break
        spot = bool(spot_pools) and job.request.num_gpus == 1 and rng.random() < SPOT_SHARE
        trains = job.duration_s >= DURATIONS.long_s[0] or job.request.gpu_milli == MILLI_PER_GPU
        spec = replace(
            job.request,
            cpu_milli=GpuRequest._meta.get_field("cpu_milli").default,
            memory_mib=GpuRequest._meta.get_field("memory_mib").default,
            pools=spot_pools if spot else on_demand_pools,
            billing_mode=BillingMode.SPOT if spot else BillingMode.ON_DEMAND,
            task_type=TaskType.TRAINING if trains else TaskType.INFERENCE,
        )
        jobs.append(Job(spec, job.duration_s))
    outcome = simulate(jobs, nodes, QueueMode(preemption=False), DEFAULT_POLICY, quotas, whole=False)
    _WEEKS[key] = jobs, {run.request_id: run for run in outcome.runs}
    return _WEEKS[key]


def _cards() -> dict[tuple[str, int], int]:
    """(node name, position on the node, as the core counts cards) -> the card's id."""
    by_node = defaultdict(list)
    for gpu_id, node in Gpu.objects.order_by("node__name", "index").values_list("pk", "node__name"):
        by_node[node].append(gpu_id)
    return {(node, i): gpu_id for node, ids in by_node.items() for i, gpu_id in enumerate(ids)}


def _members() -> dict[str, tuple[Team, list]]:
    """team slug -> (the team, its members by username), for the demo's teams."""
    out: dict[str, tuple[Team, list]] = {}
    memberships = Membership.objects.filter(team__slug__in=TEAM_SHARES).select_related("team", "user")
    for membership in memberships.order_by("team__slug", "user__username"):
        out.setdefault(membership.team.slug, (membership.team, []))[1].append(membership.user)
    return out


def _slices(run: Run, cards: dict[tuple[str, int], int]) -> tuple[PastSlice, ...]:
    return tuple(
        PastSlice(cards[run.node, index], run.milli, run.gpu_memory_mib, run.borrowed) for index in run.gpus
    )
