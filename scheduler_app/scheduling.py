"""One database scheduling pass: load the cluster, let the pure core decide, apply it in one transaction.

The core decides on a snapshot; the apply step re-checks everything under row
locks (cards first, in id order, then requests, in id order), so two passes
running at once never double-book a card: the later one finds the capacity
gone and leaves that request pending for the next pass.
"""

import datetime as dt
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from scheduler_app.choices import BillingMode, CapacityType, RequestState
from scheduler_app.cluster_state import ClusterSnapshot, load_cluster_snapshot
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import PassPlan, Preemption, Start, plan_pass
from scheduler_app.events import build_event, record_events
from scheduler_app.lifecycle import ACTIVE_STATES, check_transition
from scheduler_app.models import Allocation, Gpu, GpuRequest
from scheduler_app.pass_state import store_pass_state

ACTOR = "scheduler"


@dataclass(frozen=True)
class PassResult:
    started: int
    preempted: int
    waiting: int
    conflicts: int  # starts dropped because a concurrent writer took the capacity first


def run_scheduling_pass(*, policy: str = DEFAULT_POLICY, now: dt.datetime | None = None) -> PassResult:
    now = now or timezone.now()
    with transaction.atomic():
        snapshot = load_cluster_snapshot()
        plan = plan_pass(
            snapshot.nodes,
            snapshot.pending,
            snapshot.running,
            snapshot.quotas,
            now.timestamp(),
            policy,
            workload=snapshot.workload,
        )
        result = _apply(plan, snapshot, now)
        store_pass_state(snapshot, plan, result, now, policy)
        return result


def _apply(plan: PassPlan, snapshot: ClusterSnapshot, now: dt.datetime) -> PassResult:
    touched = sorted(
        {snapshot.gpu_ids[(s.placement.node, i)] for s in plan.starts for i in s.placement.gpus}
        | {
            snapshot.gpu_ids[(p.allocation.placement.node, i)]
            for p in plan.preemptions
            for i in p.allocation.placement.gpus
        }
    )
    list(Gpu.objects.select_for_update().filter(pk__in=touched).order_by("pk").values_list("pk", flat=True))
    committed = {gpu_id: [0, 0] for gpu_id in touched}
    for row in (
        Allocation.objects.filter(gpu_id__in=touched, ended_at__isnull=True)
        .values("gpu_id")
        .annotate(milli=Sum("milli"), mem=Sum("gpu_memory_mib"))
    ):
        committed[row["gpu_id"]] = [row["milli"], row["mem"]]
    memory = dict(Gpu.objects.filter(pk__in=touched).values_list("pk", "memory_mib"))

    events = []
    preempted = _requeue_victims(plan.preemptions, snapshot, committed, now, events)
    claimable = set(
        GpuRequest.objects.select_for_update()
        .filter(
            pk__in=[w.request_id for w in plan.waiting]
            + [s.request.id for s in plan.starts]
            + list(snapshot.unplaceable)
        )
        .filter(state=RequestState.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    started, allocations = [], []
    for start in plan.starts:
        pieces = _pieces(start, snapshot)
        if start.request.id not in claimable or not _fits(pieces, committed, memory):
            continue
        for gpu_id, milli, mem in pieces:
            committed[gpu_id][0] += milli
            committed[gpu_id][1] += mem
        billing = _billing_mode(start, snapshot)
        allocations += [
            Allocation(
                request_id=start.request.id,
                gpu_id=gpu_id,
                milli=milli,
                gpu_memory_mib=mem,
                billing_mode=billing,
                borrowed=start.borrowed,
                started_at=now,
            )
            for gpu_id, milli, mem in pieces
        ]
        started.append(start.request.id)
        where = ", ".join(f"{start.placement.node}/gpu{i}" for i in start.placement.gpus)
        note = " (borrowed capacity above quota: preemptible)" if start.borrowed else ""
        events.append(
            build_event(
                snapshot.requests[start.request.id],
                RequestState.SCHEDULED,
                from_state=RequestState.PENDING,
                actor_name=ACTOR,
                reason=f"placed on {where}{note}",
            )
        )
    check_transition(RequestState.PENDING, RequestState.SCHEDULED)
    Allocation.objects.bulk_create(allocations)
    GpuRequest.objects.filter(pk__in=started).update(
        state=RequestState.SCHEDULED, scheduled_at=now, pending_reason="", estimated_start_at=None
    )
    waiting = _explain_waiting(plan, snapshot, claimable)
    record_events(events)
    return PassResult(len(started), preempted, waiting, len(plan.starts) - len(started))


def format_utc(timestamp: float) -> str:
    """How a pending reason shows a time: minutes, UTC, unambiguous."""
    return f"{dt.datetime.fromtimestamp(timestamp, tz=dt.UTC):%Y-%m-%d %H:%M} UTC"


def _pieces(start: Start, snapshot: ClusterSnapshot) -> list[tuple[int, int, int]]:
    p = start.placement
    return [(snapshot.gpu_ids[(p.node, i)], p.milli, p.gpu_memory_mib) for i in p.gpus]


def _fits(pieces, committed, memory) -> bool:
    return all(
        committed[gpu_id][0] + milli <= MILLI_PER_GPU and committed[gpu_id][1] + mem <= memory[gpu_id]
        for gpu_id, milli, mem in pieces
    )


def _billing_mode(start: Start, snapshot: ClusterSnapshot) -> str:
    """What the segment is billed as: the capacity it runs on (spot work that fell back pays on-demand)."""
    capacity = snapshot.pool_capacity[snapshot.node_pool[start.placement.node]]
    return BillingMode.SPOT if capacity == CapacityType.SPOT else BillingMode.ON_DEMAND


def _requeue_victims(preemptions: list[Preemption], snapshot, committed, now, events) -> int:
    """Close the victims' segments and put them back in the queue, asking them to checkpoint first."""
    ids = [p.allocation.request.id for p in preemptions]
    live = set(
        GpuRequest.objects.select_for_update()
        .filter(pk__in=ids, state__in=ACTIVE_STATES)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    done = 0
    for preemption in preemptions:
        request = snapshot.requests[preemption.allocation.request.id]
        if request.pk not in live:
            continue
        check_transition(request.state, RequestState.PENDING)
        for piece in Allocation.objects.filter(request=request, ended_at__isnull=True):
            committed.setdefault(piece.gpu_id, [0, 0])
            committed[piece.gpu_id][0] -= piece.milli
            committed[piece.gpu_id][1] -= piece.gpu_memory_mib
        Allocation.objects.filter(request=request, ended_at__isnull=True).update(ended_at=now)
        reason = f"preempted: {preemption.reason}; checkpoint and requeue"
        GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.PENDING, pending_reason=reason)
        events.append(
            build_event(
                request, RequestState.PENDING, from_state=request.state, actor_name=ACTOR, reason=reason
            )
        )
        done += 1
    return done


def _explain_waiting(plan: PassPlan, snapshot: ClusterSnapshot, claimable: set[int]) -> int:
    """Store each waiting request's reason and estimated start, where they changed."""
    changed = []
    for waiting in plan.waiting:
        request = snapshot.requests.get(waiting.request_id)
        if request is None or waiting.request_id not in claimable:
            continue
        estimate = (
            dt.datetime.fromtimestamp(waiting.estimated_start, tz=dt.UTC)
            if waiting.estimated_start is not None
            else None
        )
        reason = waiting.reason(
            clock=lambda t: f"{dt.datetime.fromtimestamp(t, tz=dt.UTC):%Y-%m-%d %H:%M} UTC"
        )[:300]
        if (request.pending_reason, request.estimated_start_at) != (reason, estimate):
            request.pending_reason, request.estimated_start_at = reason, estimate
            changed.append(request)
    for request_id, reason in snapshot.unplaceable.items():
        request = snapshot.requests[request_id]
        if request_id in claimable and request.pending_reason != reason:
            request.pending_reason, request.estimated_start_at = reason, None
            changed.append(request)
    GpuRequest.objects.bulk_update(changed, ["pending_reason", "estimated_start_at"], batch_size=500)
    return len(plan.waiting) + len(snapshot.unplaceable)
