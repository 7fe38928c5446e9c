"""Live updates: every state change is pushed to its team's websocket group after commit."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def operator_group() -> str:
    """Staff on the cluster-wide stream: every team's allocations and state changes."""
    return "operators"


def publish_after_commit(team_id: int, message: dict) -> None:
    """Send once the transaction commits, so nobody sees a change that was rolled back.

    Redis being away only logs a warning: the change is saved, and pages show it on their next load.
    """

    _send_after_commit(team_group(team_id), message)


def publish_cluster_after_commit(message: dict) -> None:
    """Send a state change to the operators' cluster-wide stream once the transaction commits."""
    _send_after_commit(operator_group(), message)


def _send_after_commit(group: str, message: dict) -> None:
    def send() -> None:
        try:
            async_to_sync(get_channel_layer().group_send)(group, {"type": "team.event", **message})
        except RedisError as error:
            log.warning("cannot reach Redis to publish a live update to %s: %s", group, error)

    transaction.on_commit(send)
