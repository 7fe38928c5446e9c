"""The request lifecycle owner: every change of a request's state goes through a function here, which
also closes its slices, stamps it, writes the events and publishes the live updates."""

import datetime as dt
from collections.abc import Iterable
from contextlib import nullcontext

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.events import build_event, event_about, record_events
from infra.conflicts import StateConflict
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.passes.dispatch import schedule_soon
from scheduler_app.rules.lifecycle import ACTIVE_STATES, check_transition
from scheduler_app.services.consolidation import record_moved
from scheduler_app.services.segments import close_segments
from scheduler_app.services.sessions import close_labs

# What `_move` writes on the request row (mark_scheduled also stamps scheduled_at and counts the run).
MOVED_FIELDS = [
    "state",
    "started_at",
    "ended_at",
    "pending_reason",
    "estimated_start_at",
    "stop_by",
    "stop_reason",
    "release_when_stopped",
]


def transition_request(
    request: GpuRequest,
    to_state: str,
    *,
    locked: GpuRequest | None = None,
    actor=None,
    reason: str = "",
    actor_name: str = "",
    data: dict | None = None,
    now: dt.datetime | None = None,
) -> GpuRequest:
    """The one way a single request changes state; IllegalTransition (nothing written) if not allowed.
    `data` goes on its event. `locked`: the row of `request`, locked by the caller in the transaction it
    has open (it chose `to_state` from the locked state), so the row is not read again. `now`: when it
    happened (a reported end), if not now."""
    # A caller that holds the row lock has its transaction open already: no savepoint for it.
    with transaction.atomic() if locked is None else nullcontext():
        if locked is None:
            locked = GpuRequest.objects.select_for_update().get(pk=request.pk)
        check_transition(locked.state, to_state)
        _refuse_scheduling_without_cards(to_state)
        _move(
            [locked],
            to_state,
            actor=actor,
            actor_name=actor_name,
            reasons={locked.pk: reason},
            data={locked.pk: data} if data is not None else None,
            now=now,
        )
    for field in GpuRequest._meta.concrete_fields:  # the caller's object as saved; relations stay loaded
        setattr(request, field.attname, getattr(locked, field.attname))
    return request


def transition_requests(
    request_ids: Iterable[int],
    to_state: str,
    *,
    from_states: Iterable[str],
    actor=None,
    actor_name: str = "",
    reason: str = "",
    reasons: dict[int, str] | None = None,
    data: dict[int, dict] | None = None,
    now: dt.datetime | None = None,
) -> list[GpuRequest]:
    """The bulk form: lock the rows in id order and move those still in `from_states`; returns them.

    Requests that left `from_states` meanwhile (another writer got there first)
    are skipped, not an error: a pass or the watchdog acts on a snapshot.
    """
    _refuse_scheduling_without_cards(to_state)
    sources = set(from_states)
    for source in sources:
        check_transition(source, to_state)
    with transaction.atomic():
        locked = _lock_requests(request_ids, sources)
        why = {r.pk: (reasons or {}).get(r.pk, reason) for r in locked}
        _move(locked, to_state, actor=actor, actor_name=actor_name, reasons=why, data=data, now=now)
    return locked


def mark_scheduled(
    team_of: dict[int, int],
    *,
    reasons: dict[int, str],
    actor_name: str = "",
    now: dt.datetime | None = None,
) -> None:
    """Pending requests (id -> team id) that services.placement.place locked and gave slices become
    scheduled, with every consequence of that move (stamps as `_move` sets them, events, live
    updates). Only place calls it: a request is scheduled only by placing it on cards.

    One UPDATE, not `_move`: a pass schedules thousands, and loading each row to write it back cost
    most of the pass's time in the database layer."""
    if not team_of:
        return
    check_transition(RequestState.PENDING, RequestState.SCHEDULED)
    now = now or timezone.now()
    GpuRequest.objects.filter(pk__in_array=list(team_of)).update(
        state=RequestState.SCHEDULED,
        scheduled_at=Coalesce("scheduled_at", Value(now)),
        pending_reason="",
        estimated_start_at=None,
        stop_by=None,
        stop_reason="",
        release_when_stopped=False,
        placements=F("placements") + 1,  # a new run: reports about an earlier one no longer touch it
    )
    record_events(
        [
            event_about(
                GpuRequest,
                pk,
                RequestState.SCHEDULED,
                team_id=team_id,
                from_state=RequestState.PENDING,
                actor_name=actor_name,
                reason=reasons[pk],
            )
            for pk, team_id in team_of.items()
        ]
    )


def _lock_requests(request_ids: Iterable[int], states) -> list[GpuRequest]:
    """The requests still in `states`, locked in id order (so bulk writers never deadlock), with teams."""
    return list(
        GpuRequest.objects.select_for_update(of=("self",))
        .filter(pk__in_array=list(request_ids), state__in=states)
        .select_related("team")
        .order_by("pk")
    )


def _refuse_scheduling_without_cards(to_state: str) -> None:
    if to_state == RequestState.SCHEDULED:
        raise StateConflict("A request is scheduled only by placing it on cards (services.placement.place).")


def requeue(
    request_ids: Iterable[int],
    *,
    reason: str = "",
    reasons: dict[int, str] | None = None,
    data: dict[int, dict] | None = None,
    actor=None,
    actor_name: str = "",
    now: dt.datetime | None = None,
) -> list[GpuRequest]:
    """Put active requests back in the queue at once: their slices close and the reason (one for all,
    or one per request) becomes their pending reason; `data` per request goes on its event. Work that
    may checkpoint first goes through stop_gracefully, and services.migration.requeue_from_checkpoint
    requeues it when it stopped. A job moving to make room for another (consolidation) has moved."""
    requeued = transition_requests(
        request_ids,
        RequestState.PENDING,
        from_states=ACTIVE_STATES,
        actor=actor,
        actor_name=actor_name,
        reason=reason,
        reasons=reasons,
        data=data,
        now=now,
    )
    record_moved([r.pk for r in requeued], now)
    return requeued


def stop_gracefully(
    request_ids: Iterable[int],
    *,
    deadline: dt.datetime,
    reason: str = "",
    reasons: dict[int, str] | None = None,
    actor=None,
    actor_name: str = "",
    release: bool = False,
    now: dt.datetime | None = None,
) -> list[GpuRequest]:
    """Checkpoint, then move: running work becomes migrating with `stop_by` = deadline; its agent
    SIGTERMs the job with the time left and SIGKILLs it at the deadline. Its slices stay open (and
    billed) until it stopped; services.migration.requeue_from_checkpoint requeues it then, or, with
    `release`, ends it released (an idle stop: checkpointed, not run again). Work not started yet
    (scheduled) has nothing to checkpoint: requeued at once. Work already stopping keeps the earlier
    deadline. Returns the requests acted on."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock_requests(request_ids, ACTIVE_STATES)
        why = {r.pk: (reasons or {}).get(r.pk, reason) for r in locked}
        by_state = {state: [r for r in locked if r.state == state] for state in ACTIVE_STATES}
        _move(
            by_state[RequestState.SCHEDULED],
            RequestState.PENDING,
            actor=actor,
            actor_name=actor_name,
            reasons=why,
            now=now,
        )
        running = by_state[RequestState.RUNNING]
        for request in running:
            request.stop_by, request.stop_reason = deadline, why[request.pk][:300]
            request.release_when_stopped = release
        until = f"checkpoint and stop by {deadline:%H:%M:%S} UTC"
        _move(
            running,
            RequestState.MIGRATING,
            actor=actor,
            actor_name=actor_name,
            reasons={pk: f"{text}; {until}" for pk, text in why.items()},
            data={r.pk: {"stop_by": deadline.isoformat()} for r in running},
            now=now,
        )
        sooner = [r for r in by_state[RequestState.MIGRATING] if r.stop_by is None or r.stop_by > deadline]
        for request in sooner:
            request.stop_by = deadline
        GpuRequest.objects.save_fields(sooner, ["stop_by"])
    return locked


def _move(
    locked: list[GpuRequest],
    to_state: str,
    *,
    actor=None,
    actor_name: str = "",
    reasons: dict[int, str],
    data: dict[int, dict] | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Move rows already locked by the caller, with every consequence: stamps, the pending reason,
    slices closed when the request leaves the active states, events, live updates, a pass when
    capacity came free."""
    if not locked:
        return
    now = now or timezone.now()
    leaving = [r.pk for r in locked if r.state in ACTIVE_STATES and to_state not in ACTIVE_STATES]
    if leaving:
        close_segments(leaving, now)
    if stopping_labs := [r.pk for r in locked if r.state == RequestState.RUNNING and to_state != r.state]:
        close_labs(stopping_labs)
    events = []
    for request in locked:
        from_state, request.state = request.state, to_state
        if to_state == RequestState.RUNNING and request.started_at is None:
            request.started_at = now  # (scheduled_at: mark_scheduled)
        if request.is_terminal():
            request.ended_at = now
        request.pending_reason = reasons[request.pk][:300] if to_state == RequestState.PENDING else ""
        request.estimated_start_at = None
        if to_state != RequestState.MIGRATING:
            request.stop_by, request.stop_reason, request.release_when_stopped = None, "", False
        events.append(
            build_event(
                request,
                to_state,
                from_state=from_state,
                actor=actor,
                actor_name=actor_name,
                reason=reasons[request.pk],
                data=(data or {}).get(request.pk),
            )
        )
    GpuRequest.objects.save_fields(locked, MOVED_FIELDS)
    record_events(events)
    if leaving:
        schedule_soon()
