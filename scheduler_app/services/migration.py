"""Checkpoint, then move: requeueing work from its last checkpoint,
spot reclaim notices, moves at the next checkpoint (drain, back to on-demand) and the watchdog of
deadlines and missed checkpoint intervals.

Work lost by a move = when the job stopped - its last checkpoint in this run (or the run's start when
it made none): the figure on each requeue event (`work_lost_s`).
"""

import datetime as dt
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from audit.choices import NoticeKind
from audit.notices import Finding, raise_notices
from infra.conflicts import StateConflict
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Allocation, GpuRequest, Node
from scheduler_app.rules.billing import billing
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.consolidation import moves_due as consolidation_moves_due
from scheduler_app.services.inventory import set_node_status
from scheduler_app.services.segments import resize_next_run
from scheduler_app.services.transitions import requeue, stop_gracefully, transition_requests

WATCHDOG = "migration watchdog"
RECLAIM = "reclaim"
MAX_NOTICE_AHEAD_S = 24 * 3600


def run_starts(request_ids: Iterable[int]) -> dict[int, dt.datetime]:
    """Per request: when its current run began (its open slices' start)."""
    rows = (
        Allocation.objects.committed()
        .filter(request_id__in=list(request_ids))
        .values("request_id")
        .annotate(start=Min("started_at"))
    )
    return {row["request_id"]: row["start"] for row in rows}


def saved_at(request: GpuRequest, run_start: dt.datetime | None) -> dt.datetime | None:
    """Up to when this run's work is safe: its last checkpoint made in this run, else the run's start."""
    basis = run_start or request.started_at
    if request.last_checkpoint_at and (basis is None or request.last_checkpoint_at > basis):
        return request.last_checkpoint_at
    return basis


def work_lost_s(request: GpuRequest, stopped_at: dt.datetime, run_start: dt.datetime | None) -> int:
    """Seconds of work a stop at `stopped_at` loses (see the module's docstring)."""
    basis = saved_at(request, run_start) or stopped_at
    return max(0, int((stopped_at - basis).total_seconds()))


def requeue_from_checkpoint(
    request_ids: Iterable[int],
    *,
    stopped_at: dt.datetime,
    reason: str = "",
    stopping_by: dt.datetime | None = None,
    actor=None,
    actor_name: str = WATCHDOG,
) -> list[GpuRequest]:
    """Requeue active work that stopped at `stopped_at` (its agent reported it, its deadline passed, its
    node was lost): its slices close then, it keeps its checkpoint reference to resume from, and the
    event records the work lost. `reason` defaults to why it was being stopped. With `stopping_by`, only
    work still migrating with a deadline no later than that is requeued (what the watchdog saw may
    have changed since it looked). A pending move to
    on-demand capacity is done by the requeue (the request is billed on-demand: it waits for on-demand
    capacity), and an accepted resize is applied (it is placed again at its new share). Work stopped to
    end (`release_when_stopped`: an idle stop) ends released instead, its checkpoint kept."""
    with transaction.atomic():
        rows = GpuRequest.objects.select_for_update(of=("self",)).filter(
            pk__in=list(request_ids), state__in=ACTIVE_STATES
        )
        if stopping_by is not None:
            rows = rows.filter(state=RequestState.MIGRATING, stop_by__lte=stopping_by)
        locked = list(rows.order_by("pk"))
        ending = {r.pk for r in locked if r.release_when_stopped}
        starts = run_starts(r.pk for r in locked)
        resizes = billing().resizes_due(r.pk for r in locked if r.pk not in ending)
        reasons, data = {}, {}
        for request in locked:
            lost = work_lost_s(request, stopped_at, starts.get(request.pk))
            why = reason or request.stop_reason or "stopped"
            if request.pk in ending:
                kept = (
                    f"its checkpoint of {request.last_checkpoint_at:%H:%M:%S} UTC kept"
                    if request.last_checkpoint_at
                    else "no checkpoint reported"
                )
                reasons[request.pk] = f"{why}; stopped, {kept} ({lost} s of work after it)"
            elif request.last_checkpoint_at:
                resume = f"resumes from its checkpoint of {request.last_checkpoint_at:%H:%M:%S} UTC"
                reasons[request.pk] = f"{why}; {resume} ({lost} s of work lost)"
            else:
                resume = "no checkpoint reported: restarts from the beginning"
                reasons[request.pk] = f"{why}; {resume} ({lost} s of work lost)"
            if offer := resizes.get(request.pk):
                resize_next_run(request.pk, offer.to_milli)
                reasons[request.pk] += (
                    f"; resized from {offer.from_milli} to {offer.to_milli} milli-GPU, as accepted"
                )
            data[request.pk] = {
                "work_lost_s": lost,
                "stopped_at": stopped_at.isoformat(),
                "checkpoint_at": request.last_checkpoint_at.isoformat()
                if request.last_checkpoint_at
                else None,
                "checkpoint_ref": request.checkpoint_ref,
                "stop_by": request.stop_by.isoformat() if request.stop_by else None,
                "before_deadline": request.stop_by is None or stopped_at <= request.stop_by,
            }
        ended = transition_requests(
            ending,
            RequestState.RELEASED,
            from_states=[RequestState.MIGRATING],  # the flag holds only while it migrates
            reasons=reasons,
            data=data,
            actor=actor,
            actor_name=actor_name,
            now=stopped_at,
        )
        moved = requeue(
            [r.pk for r in locked if r.pk not in ending],
            reasons=reasons,
            data=data,
            actor=actor,
            actor_name=actor_name,
            now=stopped_at,
        )
        billing().requeued([r.pk for r in moved], resizes.values(), stopped_at)
    return [*moved, *ended]


def move_reasons(request_ids: Iterable[int]) -> dict[int, str]:
    """Per request due to move at its next checkpoint: why (its node drains; it asked to move to
    on-demand capacity; it accepted a resize; it makes room for a waiting request)."""
    ids = list(request_ids)
    why: dict[int, str] = {}
    for request_id, node in (
        Allocation.objects.committed()
        .filter(request_id__in=ids, gpu__node__status=NodeStatus.DRAINING)
        .values_list("request_id", "gpu__node__name")
    ):
        why[request_id] = f"node {node} is draining: moved at its checkpoint"
    for request_id, reason in billing().moves_due(ids).items():
        why.setdefault(request_id, reason)
    for request_id, reason in consolidation_moves_due(ids).items():
        why.setdefault(request_id, reason)
    return why


def reclaim_node(
    node: Node,
    *,
    deadline: dt.datetime,
    source: str,
    notice_id: str = "",
    actor=None,
    now: dt.datetime | None = None,
) -> int:
    """A reclaim notice for a spot node: the node is marked reclaimed (no new work) and every request on
    it checkpoints and stops by `deadline`, then is requeued. The same notice again changes nothing
    (a second notice may only bring the deadline forward). Returns how many requests were told to stop."""
    now = now or timezone.now()
    if deadline > now + dt.timedelta(seconds=MAX_NOTICE_AHEAD_S):
        raise ValidationError({"deadline": "A reclaim deadline is at most 24 hours ahead."})
    with transaction.atomic():
        locked = Node.objects.select_for_update().select_related("pool").get(pk=node.pk)
        if not locked.pool.is_spot():
            raise StateConflict(
                f"Node {locked.name} is on-demand capacity: drain it instead of reclaiming it."
            )
        if locked.status == NodeStatus.RECLAIMED and (
            (notice_id and notice_id == locked.reclaim_notice_id)
            or (locked.reclaim_deadline and locked.reclaim_deadline <= deadline)
        ):
            return 0
        if locked.status == NodeStatus.LOST:
            raise StateConflict(f"Node {locked.name} is lost: its work was requeued already.")
        locked.reclaim_notice_id, locked.reclaim_deadline = notice_id, deadline
        locked.save(update_fields=["reclaim_notice_id", "reclaim_deadline"])
        why = f"spot node {locked.name} reclaimed ({source}{', notice ' + notice_id if notice_id else ''})"
        set_node_status(locked, NodeStatus.RECLAIMED, actor=actor, actor_name=RECLAIM, reason=why)
        on_node = Allocation.objects.committed().filter(gpu__node=locked).values_list("request_id", flat=True)
        return len(
            stop_gracefully(set(on_node), deadline=deadline, reason=why, actor=actor, actor_name=RECLAIM)
        )


def expire_stops(now: dt.datetime | None = None) -> int:
    """Work still migrating past its deadline (and the agent's time to report it) stopped at the
    deadline: the agent SIGKILLed it then. Requeued from its checkpoint; returns how many."""
    cutoff = (now or timezone.now()) - dt.timedelta(seconds=settings.STOP_REPORT_SLACK_S)
    overdue = GpuRequest.objects.filter(state=RequestState.MIGRATING, stop_by__lte=cutoff)
    done = 0
    for request_id, stop_by in overdue.values_list("pk", "stop_by"):
        done += len(requeue_from_checkpoint([request_id], stopped_at=stop_by, stopping_by=cutoff))
    return done


def check_checkpoints(now: dt.datetime | None = None) -> dict[str, int]:
    """Running work past its checkpoint interval: flagged once per miss (a notice and an Event, live on
    its team's stream), resolved by the next checkpoint; work due to move at its next checkpoint
    moves at its interval's end even without one."""
    now = now or timezone.now()
    running = list(
        GpuRequest.objects.filter(state=RequestState.RUNNING, checkpoint_interval_s__isnull=False).only(
            "pk", "team_id", "name", "checkpoint_interval_s", "last_checkpoint_at", "started_at"
        )
    )
    starts = run_starts(r.pk for r in running)
    findings, due = [], []
    for request in running:
        basis = saved_at(request, starts.get(request.pk))
        if basis is None or (now - basis).total_seconds() < request.checkpoint_interval_s:
            continue
        due.append(request.pk)
        minutes = request.checkpoint_interval_s / 60
        findings.append(
            Finding(
                kind=NoticeKind.CHECKPOINT_MISSED,
                team_id=request.team_id,
                key=f"checkpoint:{request.pk}:{int(basis.timestamp())}",
                subject=request,
                text=f"{request.name} has not checkpointed since {basis:%H:%M:%S} UTC "
                f"(its interval is {minutes:g} min): a reclaim now would lose that work.",
                data={"request_id": request.pk, "since": basis.isoformat()},
            )
        )
    raised = raise_notices(findings, kinds=[NoticeKind.CHECKPOINT_MISSED], now=now)
    moving = move_reasons(due)
    deadline = now + dt.timedelta(seconds=settings.MOVE_AT_CHECKPOINT_GRACE_S)
    for request_id, why in moving.items():
        stop_gracefully([request_id], deadline=deadline, reason=why, actor_name=WATCHDOG, now=now)
    return {"missed": len(raised), "moving": len(moving)}


def watch_migrations(now: dt.datetime | None = None) -> dict[str, int]:
    """The periodic watch (Celery beat's migration-watchdog; the embedded worker likewise)."""
    now = now or timezone.now()
    return {"expired": expire_stops(now), **check_checkpoints(now)}
