"""Lost nodes lose no work: their allocations are closed and their requests requeued (DESIGN rule 2).

A node whose agent stopped heartbeating is first marked suspect (no new work),
then lost; a node that never reported (registered, agent not started yet) is
left alone.
"""

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.dispatch import schedule_soon
from scheduler_app.events import build_event, record_events
from scheduler_app.lifecycle import ACTIVE_STATES, check_transition
from scheduler_app.models import Allocation, GpuRequest, Node
from scheduler_app.services import set_node_status

WATCHDOG = "heartbeat watchdog"


def handle_node_loss(node: Node, *, status: str = NodeStatus.LOST, reason: str, actor=None) -> int:
    """Mark the node lost (or reclaimed) and requeue every request that had a card on it; returns how many."""
    now = timezone.now()
    with transaction.atomic():
        set_node_status(node, status, actor=actor, actor_name=WATCHDOG, reason=reason)
        request_ids = Allocation.objects.filter(gpu__node=node, ended_at__isnull=True).values_list(
            "request_id", flat=True
        )
        victims = list(
            GpuRequest.objects.select_for_update()
            .filter(pk__in=list(request_ids), state__in=ACTIVE_STATES)
            .select_related("team")
            .order_by("pk")
        )
        note = f"node {node.name} {status}: {reason}; restart from the last checkpoint"
        events = []
        for request in victims:
            check_transition(request.state, RequestState.PENDING)
            events.append(
                build_event(
                    request,
                    RequestState.PENDING,
                    from_state=request.state,
                    actor=actor,
                    actor_name=WATCHDOG,
                    reason=note,
                )
            )
        # The whole gang is requeued, including cards on other nodes: a gang runs all together or not at all.
        Allocation.objects.filter(request__in=victims, ended_at__isnull=True).update(ended_at=now)
        GpuRequest.objects.filter(pk__in=[r.pk for r in victims]).update(
            state=RequestState.PENDING, pending_reason=note[:300], estimated_start_at=None
        )
        record_events(events)
        schedule_soon()
    return len(victims)


def check_heartbeats(now: dt.datetime | None = None) -> dict[str, int]:
    """Silent ready nodes become suspect; suspect nodes silent past the lost threshold are lost."""
    now = now or timezone.now()
    suspect_before = now - dt.timedelta(seconds=settings.NODE_SUSPECT_AFTER_S)
    lost_before = now - dt.timedelta(seconds=settings.NODE_LOST_AFTER_S)
    suspect = lost = 0
    for node in Node.objects.filter(status=NodeStatus.READY, last_heartbeat_at__lt=suspect_before):
        set_node_status(
            node,
            NodeStatus.SUSPECT,
            actor_name=WATCHDOG,
            reason=f"no heartbeat since {node.last_heartbeat_at:%H:%M:%S} UTC",
        )
        suspect += 1
    for node in Node.objects.filter(status=NodeStatus.SUSPECT, last_heartbeat_at__lt=lost_before):
        handle_node_loss(node, reason=f"no heartbeat since {node.last_heartbeat_at:%H:%M:%S} UTC")
        lost += 1
    return {"suspect": suspect, "lost": lost}
