"""One database scheduling pass: load the cluster, let the pure core decide, apply it in one transaction.

The cluster is read from the state the last pass stored plus the requests submitted, withdrawn or
ended since, when the event log shows nothing else changed (`stored_state`); else loaded whole.

The core decides on a snapshot; the apply step re-checks everything under row
locks (cards first, in id order, then requests, in id order), so two passes
running at once never double-book a card: the later one finds the capacity
gone and leaves that request pending for the next pass.
"""

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from infra.gc_pause import collector_paused
from scheduler_app.choices import Backend, BillingMode, CapacityType, RequestState
from scheduler_app.core.mig import mig_slice
from scheduler_app.core.placement import DEFAULT_POLICY
from scheduler_app.core.queueing import PassPlan, Start, plan_pass
from scheduler_app.models import Allocation, GpuRequest, Pool
from scheduler_app.passes.cluster_state import ClusterSnapshot, format_utc, load_cluster_snapshot
from scheduler_app.passes.consolidation import consolidation_rules
from scheduler_app.passes.dispatch import sync_backends_soon
from scheduler_app.passes.stored_state import snapshot_since_last_pass, store_pass_state
from scheduler_app.services.consolidation import record_rooms
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import stop_gracefully

ACTOR = "scheduler"
PASS_LOCK_ID = 7_0001  # the advisory lock key of scheduling passes
# When a pass last brought every waiting request's reason up to date (a timestamp, the pass's clock).
REASONS_REFRESHED_KEY = "scheduler:reasons-refreshed-at"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassResult:
    started: int
    preempted: int
    waiting: int
    conflicts: int  # starts refused under the locks: a concurrent writer took the capacity first


def run_scheduling_pass(*, policy: str = DEFAULT_POLICY, now: dt.datetime | None = None) -> PassResult:
    """One pass. The cyclic collector is paused while it works, not while it waits for the pass before
    it (`infra.gc_pause`: about a fifth of a large pass's time otherwise)."""
    now = now or timezone.now()
    with transaction.atomic():
        _one_pass_at_a_time()
        with collector_paused():
            snapshot = snapshot_since_last_pass() or load_cluster_snapshot()
            waiting = {request.id for request in snapshot.pending}
            rules = consolidation_rules(snapshot.running, snapshot.node_pool, waiting, now)
            plan = plan_pass(
                snapshot.nodes,
                snapshot.pending,
                snapshot.running,
                snapshot.quotas,
                now.timestamp(),
                policy,
                workload=snapshot.workload,
                offline=snapshot.offline,
                consolidation=rules,
            )
            result, refused, held_back = _apply(plan, snapshot, now)
            record_rooms(plan.rooms, [start.request.id for start in plan.starts], now)
            store_pass_state(snapshot, plan, result, now, policy)
    if result.started or result.preempted:
        sync_backends_soon(Pool.objects.exclude(backend=Backend.AGENT).values_list("backend", flat=True))
    with collector_paused():
        _explain_waiting(plan, snapshot, refused, held_back, now)
    return result


def _one_pass_at_a_time() -> None:
    """Passes wait for each other (PostgreSQL advisory lock, until commit): two at once would plan on
    the same snapshot and refuse each other's starts. SQLite's write transactions already queue."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK_ID])


def _apply(
    plan: PassPlan, snapshot: ClusterSnapshot, now: dt.datetime
) -> tuple[PassResult, dict[int, str], dict[int, str]]:
    """Stop the victims (checkpoint, then move: their slices close when they stopped), then place the
    starts, through the lifecycle owner's bulk forms; return the result, the starts refused under the
    locks and the starts held back because stopping work still holds their cards (with why).

    The rows the pass changes (victims, starts and the requests of new room plans) are locked first, in
    one id-ordered statement, so the pass cannot deadlock with a bulk cancel, node loss or any other
    writer that locks requests in id order; `place` then finds them locked already. Requests that only
    wait are not locked here: a cancel of one need not wait for the pass to commit.
    """
    victims = {p.allocation.request.id: f"preempted: {p.reason}" for p in plan.preemptions}
    changing = set(victims) | {start.request.id for start in plan.starts}
    changing |= {room.request_id for room in plan.rooms if room.new}  # (record_rooms re-reads them)
    list(
        GpuRequest.objects.select_for_update().filter(pk__in_array=changing).order_by("pk").values_list("pk")
    )
    preempted = 0
    if victims:
        grace = dt.timedelta(seconds=settings.PREEMPTION_GRACE_S)
        stopped = stop_gracefully(
            list(victims), deadline=now + grace, reasons=victims, actor_name=ACTOR, now=now
        )
        preempted = len(stopped)
        for request in stopped:
            if request.stop_by is not None:
                snapshot.stopping.update(dict.fromkeys(_held_cards(request.pk), request.stop_by))
    starts, held_back = [], {}
    for start in plan.starts:
        pieces = _pieces(start, snapshot)
        deadlines = [snapshot.stopping[piece[0]] for piece in pieces if piece[0] in snapshot.stopping]
        if deadlines:
            held_back[start.request.id] = (
                "waits for preempted or reclaimed work on its cards to checkpoint and stop "
                f"(by {max(deadlines):%H:%M:%S} UTC)"
            )
            continue
        starts.append(
            PlannedStart(
                start.request.id,
                tuple(Slice(*piece) for piece in pieces),
                _billing_mode(start, snapshot),
                start.borrowed,
                " (borrowed capacity above quota: preemptible)" if start.borrowed else "",
            )
        )
    placed = place(starts, actor_name=ACTOR, now=now)
    waiting = len(plan.waiting) + len(snapshot.unplaceable)
    result = PassResult(len(placed.started), preempted, waiting, len(placed.refused) + len(held_back))
    return result, placed.refused, held_back


def _held_cards(request_id: int) -> list[int]:
    return list(Allocation.objects.committed().filter(request_id=request_id).values_list("gpu_id", flat=True))


def _pieces(start: Start, snapshot: ClusterSnapshot) -> list[tuple]:
    p = start.placement
    pieces = [(snapshot.gpu_ids[(p.node, i)], p.milli, p.gpu_memory_mib) for i in p.gpus]
    if p.mig:
        return [
            (*piece, *mig_slice(instance, layout))
            for piece, (instance, layout) in zip(pieces, p.mig, strict=True)
        ]
    return pieces


def _billing_mode(start: Start, snapshot: ClusterSnapshot) -> str:
    """What the segment is billed as: the capacity it runs on (spot work that fell back pays on-demand)."""
    capacity = snapshot.pool_capacity[snapshot.node_pool[start.placement.node]]
    return BillingMode.SPOT if capacity == CapacityType.SPOT else BillingMode.ON_DEMAND


def _explain_waiting(
    plan: PassPlan,
    snapshot: ClusterSnapshot,
    refused: dict[int, str],
    held_back: dict[int, str],
    now: dt.datetime,
) -> None:
    """Store each waiting request's reason and estimated start, where they changed; a start refused
    under the locks (a concurrent writer took the capacity) says so and is retried next pass.

    Every waiting request is brought up to date by the first pass of each SCHEDULER_INTERVAL_S; the
    passes in between (bursts of submits trigger about one a second) explain only the requests that
    have no reason yet, besides the refused and held-back starts. On a deep queue nearly every
    reason moves with each submit ahead of it (its place in line, its estimate), and rewriting
    thousands of rows every second cost the database more than the passes themselves.

    Its own short transaction after the pass's: a row another writer holds (a cancel, a later pass
    placing it) is skipped rather than waited for, and one no longer pending is left; the next pass
    explains it again."""
    if _all_reasons_due(now):
        explained = None
    else:
        pending = GpuRequest.objects.filter(state=RequestState.PENDING, pending_reason="")
        explained = set(pending.values_list("pk", flat=True))
    reasons: dict[int, tuple[str, dt.datetime | None]] = {}
    for waiting in plan.waiting:
        if explained is not None and waiting.request_id not in explained:
            continue
        estimate = (
            dt.datetime.fromtimestamp(waiting.estimated_start, tz=dt.UTC)
            if waiting.estimated_start is not None
            else None
        )
        reasons[waiting.request_id] = (waiting.reason(format_utc), estimate)
    for request_id, why in refused.items():
        reasons[request_id] = (f"placement refused under lock ({why}); retried next pass", None)
    for request_id, why in held_back.items():
        reasons[request_id] = (why, None)
    for request_id, why in snapshot.unplaceable.items():
        if explained is None or request_id in explained:
            reasons[request_id] = (why, None)
    with transaction.atomic():
        GpuRequest.objects.explain_pending(reasons)


def _all_reasons_due(now: dt.datetime) -> bool:
    """Whether this pass brings every waiting request's reason up to date (see _explain_waiting):
    the first at or after SCHEDULER_INTERVAL_S since the last that did, or since a time after `now`
    (a clock set back). Also when the shared cache cannot say."""
    try:
        last = cache.get(REASONS_REFRESHED_KEY)
        if last is not None and 0 <= now.timestamp() - last < settings.SCHEDULER_INTERVAL_S:
            return False
        cache.set(REASONS_REFRESHED_KEY, now.timestamp(), timeout=None)
    except RedisError as error:
        log.warning(
            "cannot reach Redis for the last full explanation of the queue; explaining all: %s", error
        )
    return True
