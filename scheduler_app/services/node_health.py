"""Lost nodes lose no work: their allocations are closed and their requests requeued (DESIGN rule 2).

A node whose agent stopped heartbeating is first marked suspect (no new work),
then lost; a node that never reported (registered, agent not started yet) is
left alone. A lost node stays lost until an operator resumes it, or, with
NODE_RETURN_TO_SERVICE (Slurm's ReturnToService), until its agent registers
again, when only its silence lost it.
"""

import datetime as dt
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler_app.choices import NodeStatus
from scheduler_app.constants import HEARTBEAT_WATCHDOG as WATCHDOG
from scheduler_app.models import Allocation, Node
from scheduler_app.selectors import lost_for_silence
from scheduler_app.services.agents import match_cards, record_isolation
from scheduler_app.services.inventory import AGENT, record_heartbeat, set_node_status
from scheduler_app.services.migration import requeue_from_checkpoint


def handle_node_loss(node: Node, *, status: str = NodeStatus.LOST, reason: str, actor=None) -> int:
    """Mark the node lost (or reclaimed) and requeue every request that had a card on it; returns how many.

    The whole gang is requeued, cards on other nodes included: a gang runs all together or not at all.
    """
    with transaction.atomic():
        set_node_status(node, status, actor=actor, actor_name=WATCHDOG, reason=reason)
        on_node = Allocation.objects.committed().filter(gpu__node=node).values_list("request_id", flat=True)
        note = f"node {node.name} {status}: {reason}"
        stopped_at = timezone.now()
        return len(
            requeue_from_checkpoint(
                list(on_node), stopped_at=stopped_at, reason=note, actor=actor, actor_name=WATCHDOG
            )
        )


def check_heartbeats(now: dt.datetime | None = None) -> dict[str, int]:
    """Silent ready nodes become suspect; suspect nodes silent past the lost threshold are lost."""
    now = now or timezone.now()
    suspect_before = now - dt.timedelta(seconds=settings.NODE_SUSPECT_AFTER_S)
    lost_before = now - dt.timedelta(seconds=settings.NODE_LOST_AFTER_S)
    suspect = lost = 0
    for node in Node.objects.filter(status=NodeStatus.READY, last_heartbeat_at__lt=suspect_before):
        with transaction.atomic():
            if _still_silent(node, NodeStatus.READY, suspect_before):
                set_node_status(
                    node,
                    NodeStatus.SUSPECT,
                    actor_name=WATCHDOG,
                    reason=f"no heartbeat since {node.last_heartbeat_at:%H:%M:%S} UTC",
                )
                suspect += 1
    for node in Node.objects.filter(status=NodeStatus.SUSPECT, last_heartbeat_at__lt=lost_before):
        with transaction.atomic():
            if _still_silent(node, NodeStatus.SUSPECT, lost_before):
                handle_node_loss(node, reason=f"no heartbeat since {node.last_heartbeat_at:%H:%M:%S} UTC")
                lost += 1
    return {"suspect": suspect, "lost": lost}


def _still_silent(node: Node, status: str, silent_before: dt.datetime) -> bool:
    """Lock the node and check again: a heartbeat that arrived since the watchdog looked wins."""
    locked = Node.objects.select_for_update().get(pk=node.pk)
    return locked.status == status and locked.last_heartbeat_at < silent_before


def register_agent(
    node: Node, cards: Sequence[Mapping], isolation: Mapping | None = None
) -> tuple[Node, dict[str, list[str]]]:
    """The node's agent (re)started and reported its cards and how it isolates jobs: the cards are
    reconciled, or on a Slurm node only matched to Slurm's (see match_cards), the isolation recorded
    (record_isolation), and the call counts as a heartbeat. With NODE_RETURN_TO_SERVICE, a node the
    watchdog lost for its silence is back in service, logged; one an operator marked lost stays lost
    either way."""
    with transaction.atomic():
        changes = match_cards(node, cards)  # reconciling locks the node until the end of the transaction
        node = record_heartbeat(record_isolation(node, isolation))
        node.refresh_from_db()
        if settings.NODE_RETURN_TO_SERVICE and (loss := lost_for_silence(node)):
            node = set_node_status(
                node,
                NodeStatus.READY,
                actor_name=AGENT,
                reason=f"its agent registered again after it was lost at {loss.created_at:%H:%M} UTC "
                f"({loss.reason}); NODE_RETURN_TO_SERVICE is on",
            )
    return node, changes
