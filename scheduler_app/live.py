"""Live updates: every state change is pushed to its team's websocket group after commit."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def publish_after_commit(team_id: int, message: dict) -> None:
    """Send once the transaction commits, so nobody sees a change that was rolled back.

    Redis being away only logs a warning: the change is saved, and pages show it on their next load.
    """

    def send() -> None:
        try:
            async_to_sync(get_channel_layer().group_send)(
                team_group(team_id), {"type": "team.event", **message}
            )
        except RedisError as error:
            log.warning("cannot reach Redis to publish a live update for team %s: %s", team_id, error)

    transaction.on_commit(send)
