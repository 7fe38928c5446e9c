"""One database scheduling pass: load the cluster, let the pure core decide, apply it in one transaction.

The cluster is read from the state the last pass stored plus the requests submitted, withdrawn or
ended since, when the event log shows nothing else changed (`pass_state`); else loaded whole.

The core decides on a snapshot; the apply step re-checks everything under row
locks (cards first, in id order, then requests, in id order), so two passes
running at once never double-book a card: the later one finds the capacity
gone and leaves that request pending for the next pass.
"""

import datetime as dt
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from scheduler_app.choices import BillingMode, CapacityType
from scheduler_app.cluster_state import ClusterSnapshot, load_cluster_snapshot
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import PassPlan, Start, plan_pass
from scheduler_app.models import GpuRequest
from scheduler_app.pass_state import snapshot_since_last_pass, store_pass_state
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import requeue

ACTOR = "scheduler"
PASS_LOCK_ID = 7_0001  # the advisory lock key of scheduling passes


@dataclass(frozen=True)
class PassResult:
    started: int
    preempted: int
    waiting: int
    conflicts: int  # starts refused under the locks: a concurrent writer took the capacity first


def run_scheduling_pass(*, policy: str = DEFAULT_POLICY, now: dt.datetime | None = None) -> PassResult:
    now = now or timezone.now()
    with transaction.atomic():
        _one_pass_at_a_time()
        snapshot = snapshot_since_last_pass() or load_cluster_snapshot()
        plan = plan_pass(
            snapshot.nodes,
            snapshot.pending,
            snapshot.running,
            snapshot.quotas,
            now.timestamp(),
            policy,
            workload=snapshot.workload,
        )
        result, refused = _apply(plan, snapshot, now)
        store_pass_state(snapshot, plan, result, now, policy)
    _explain_waiting(plan, snapshot, refused)
    return result


def _one_pass_at_a_time() -> None:
    """Passes wait for each other (PostgreSQL advisory lock, until commit): two at once would plan on
    the same snapshot and refuse each other's starts. SQLite's write transactions already queue."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK_ID])


def _apply(plan: PassPlan, snapshot: ClusterSnapshot, now: dt.datetime) -> tuple[PassResult, dict[int, str]]:
    """Requeue the victims, then place the starts, through the lifecycle owner's bulk forms; return
    the result and the starts refused under the locks.

    The rows the pass changes (victims and starts) are locked first, in one id-ordered statement, so
    the pass cannot deadlock with a bulk cancel, node loss or any other writer that locks requests in
    id order; `place` then finds them locked already. Requests that only wait are not locked here: a
    cancel of one need not wait for the pass to commit.
    """
    victims = {
        p.allocation.request.id: f"preempted: {p.reason}; checkpoint and requeue" for p in plan.preemptions
    }
    changing = set(victims) | {start.request.id for start in plan.starts}
    list(GpuRequest.objects.select_for_update().filter(pk__in=changing).order_by("pk").values_list("pk"))
    preempted = len(requeue(list(victims), reasons=victims, actor_name=ACTOR, now=now)) if victims else 0
    placed = place(
        [
            PlannedStart(
                start.request.id,
                tuple(Slice(*piece) for piece in _pieces(start, snapshot)),
                _billing_mode(start, snapshot),
                start.borrowed,
                " (borrowed capacity above quota: preemptible)" if start.borrowed else "",
            )
            for start in plan.starts
        ],
        actor_name=ACTOR,
        now=now,
    )
    waiting = len(plan.waiting) + len(snapshot.unplaceable)
    return PassResult(len(placed.started), preempted, waiting, len(placed.refused)), placed.refused


def format_utc(timestamp: float) -> str:
    """How a pending reason shows a time: minutes, UTC, unambiguous."""
    return f"{dt.datetime.fromtimestamp(timestamp, tz=dt.UTC):%Y-%m-%d %H:%M} UTC"


def _pieces(start: Start, snapshot: ClusterSnapshot) -> list[tuple[int, int, int]]:
    p = start.placement
    return [(snapshot.gpu_ids[(p.node, i)], p.milli, p.gpu_memory_mib) for i in p.gpus]


def _billing_mode(start: Start, snapshot: ClusterSnapshot) -> str:
    """What the segment is billed as: the capacity it runs on (spot work that fell back pays on-demand)."""
    capacity = snapshot.pool_capacity[snapshot.node_pool[start.placement.node]]
    return BillingMode.SPOT if capacity == CapacityType.SPOT else BillingMode.ON_DEMAND


def _explain_waiting(plan: PassPlan, snapshot: ClusterSnapshot, refused: dict[int, str]) -> None:
    """Store each waiting request's reason and estimated start, where they changed; a start refused
    under the locks (a concurrent writer took the capacity) says so and is retried next pass.

    Its own short transaction after the pass's: a row another writer holds (a cancel, a later pass
    placing it) is skipped rather than waited for, and one no longer pending is left; the next pass
    explains it again."""
    reasons: dict[int, tuple[str, dt.datetime | None]] = {}
    for waiting in plan.waiting:
        estimate = (
            dt.datetime.fromtimestamp(waiting.estimated_start, tz=dt.UTC)
            if waiting.estimated_start is not None
            else None
        )
        reasons[waiting.request_id] = (waiting.reason(format_utc), estimate)
    for request_id, why in refused.items():
        reasons[request_id] = (f"placement refused under lock ({why}); retried next pass", None)
    for request_id, why in snapshot.unplaceable.items():
        reasons[request_id] = (why, None)
    with transaction.atomic():
        GpuRequest.objects.explain_pending(reasons)
