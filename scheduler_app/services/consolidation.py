"""Consolidation's plans in the database: the plans that no longer hold ended (`end_stale_plans`), the
plans a pass holds (`record_rooms`), the moves due at a checkpoint (`moves_due`) and the moves made
(`record_moved`); what a pass may move is read by scheduler_app.passes.consolidation.

A plan is open from the pass that makes it until its request leaves the queue, one of its jobs ends
before it moved, or a pass no longer holds it (the room would not be made, or is not needed). A job
moves through "checkpoint, then move" (services.migration): at its next checkpoint report, or at its
interval's end, while the plan is still open and its request still waits.
"""

import datetime as dt
from collections.abc import Iterable

from django.utils import timezone

from scheduler_app.choices import RequestState
from scheduler_app.core.queueing import Room
from scheduler_app.models import GpuRequest, RoomMove, RoomPlan
from scheduler_app.rules.lifecycle import ACTIVE_STATES


def end_stale_plans(now: dt.datetime) -> None:
    """End the plans whose request left the queue, and those with a job that ended before it moved."""
    open_plans = RoomPlan.objects.filter(ended_at__isnull=True)
    open_plans.filter(request__state__in=ACTIVE_STATES).update(ended_at=now, outcome="its request started")
    open_plans.exclude(request__state__in=[RequestState.PENDING, *ACTIVE_STATES]).update(
        ended_at=now, outcome="its request left the queue"
    )
    ended_first = RoomMove.objects.filter(plan__ended_at__isnull=True, moved_at__isnull=True).exclude(
        request__state__in=ACTIVE_STATES
    )
    for plan_id, request_id in ended_first.values_list("plan_id", "request_id"):
        RoomPlan.objects.filter(pk=plan_id, ended_at__isnull=True).update(
            ended_at=now, outcome=f"request {request_id} ended before it moved"
        )


def record_rooms(rooms: Iterable[Room], starting: Iterable[int], now: dt.datetime) -> None:
    """Store the pass's new plans, for requests still pending, and end the open ones it no longer holds:
    neither kept nor starting (a start may wait for its cards' work to stop; the plan ends when its
    request has left the queue)."""
    rooms = list(rooms)
    kept = {room.request_id for room in rooms if not room.new} | set(starting)
    open_plans = RoomPlan.objects.filter(ended_at__isnull=True, request__state=RequestState.PENDING)
    stale = [pk for pk, request_id in open_plans.values_list("pk", "request_id") if request_id not in kept]
    RoomPlan.objects.filter(pk__in=stale, ended_at__isnull=True).update(
        ended_at=now, outcome="no longer holds: the room is not needed or would not be made"
    )
    new = [room for room in rooms if room.new]
    # A cancel may have committed since the pass read its requests: a new plan is stored only for a
    # request still pending, locked until the pass commits (the pass locked them with its starts).
    waiting = set(
        GpuRequest.objects.select_for_update()
        .filter(pk__in=[room.request_id for room in new], state=RequestState.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for room in new:
        if room.request_id not in waiting:
            continue
        p = room.placement
        plan = RoomPlan.objects.create(
            request_id=room.request_id,
            node=p.node,
            gpus=list(p.gpus),
            milli=p.milli,
            gpu_memory_mib=p.gpu_memory_mib,
            ready_by=dt.datetime.fromtimestamp(room.ready_at, tz=dt.UTC),
            created_at=now,
        )
        RoomMove.objects.bulk_create([RoomMove(plan=plan, request_id=pk) for pk in room.moving])


def moves_due(request_ids: Iterable[int]) -> dict[int, str]:
    """Per request due to move at its next checkpoint for an open plan whose request still waits: why."""
    due = RoomMove.objects.filter(
        request_id__in=list(request_ids),
        moved_at__isnull=True,
        plan__ended_at__isnull=True,
        plan__request__state=RequestState.PENDING,
    ).values_list("request_id", "plan__request_id", "plan__request__name")
    return {pk: f"moved to make room for request {room_for} ({name})" for pk, room_for, name in due}


def record_moved(request_ids: Iterable[int], at: dt.datetime | None = None) -> None:
    """The jobs left their cards (requeued): their open moves are made."""
    RoomMove.objects.filter(
        request_id__in=list(request_ids), moved_at__isnull=True, plan__ended_at__isnull=True
    ).update(moved_at=at or timezone.now())
