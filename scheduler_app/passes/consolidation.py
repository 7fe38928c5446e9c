"""What a pass may move to make room for a request the scattered free share cannot hold: the running
jobs that may move, each with when it would (its next checkpoint's deadline), and the open plans
(scheduler_app.services.consolidation owns them)."""

import datetime as dt
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Q

from scheduler_app.choices import Backend, RequestState
from scheduler_app.core.cluster import Placement
from scheduler_app.core.queueing import Consolidation, OpenRoom, RunningAllocation
from scheduler_app.models import GpuRequest, Pool, RoomMove, RoomPlan
from scheduler_app.services.consolidation import end_stale_plans
from scheduler_app.services.migration import saved_at


def consolidation_rules(
    running: Iterable[RunningAllocation], node_pool: dict[str, str], waiting: set[int], now: dt.datetime
) -> Consolidation:
    """End the open plans that no longer hold, then say what the pass may move: running jobs with a
    checkpoint interval, not pinned, on agent pools that allow consolidation, neither moving for an
    open plan nor moved within CONSOLIDATION_MIN_INTERVAL_S; each by the end of its checkpoint
    interval (counted as the watchdog does) and the grace to stop."""
    end_stale_plans(now)
    pools = frozenset(
        Pool.objects.filter(consolidation=True, backend=Backend.AGENT).values_list("name", flat=True)
    )
    runs = {a.request.id: a for a in running if node_pool.get(a.placement.node) in pools}
    since = now - dt.timedelta(seconds=settings.CONSOLIDATION_MIN_INTERVAL_S)
    busy = RoomMove.objects.filter(
        Q(moved_at__gt=since) | Q(moved_at__isnull=True, plan__ended_at__isnull=True)
    ).values("request_id")
    candidates = (
        GpuRequest.objects.filter(
            state=RequestState.RUNNING, pinned=False, checkpoint_interval_s__isnull=False
        )
        .exclude(pk__in=busy)
        .only("pk", "checkpoint_interval_s", "last_checkpoint_at", "started_at")
    )
    grace = settings.MOVE_AT_CHECKPOINT_GRACE_S
    movable = {}
    for request in candidates:
        run = runs.get(request.pk)
        if run is None:
            continue
        basis = saved_at(request, dt.datetime.fromtimestamp(run.started_at, tz=dt.UTC)) or now
        movable[request.pk] = max(now.timestamp(), basis.timestamp() + request.checkpoint_interval_s) + grace
    return Consolidation(
        movable, pools, max_moves=settings.CONSOLIDATION_MAX_MOVES_PER_PASS, open=_open_rooms(waiting)
    )


def _open_rooms(waiting: set[int]) -> dict[int, OpenRoom]:
    """The open plans of waiting requests, with the jobs still to move."""
    rooms = {}
    for plan in RoomPlan.objects.filter(ended_at__isnull=True).prefetch_related("moves"):
        if plan.request_id not in waiting:
            continue
        moving = tuple(m.request_id for m in plan.moves.all() if m.moved_at is None)
        placement = Placement(plan.request_id, plan.node, tuple(plan.gpus), plan.milli, plan.gpu_memory_mib)
        rooms[plan.request_id] = OpenRoom(moving, placement, plan.ready_by.timestamp())
    return rooms
