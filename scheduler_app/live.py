"""Live updates: every state change is pushed to its team's websocket group after commit."""

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def publish_all_after_commit(messages: Iterable[tuple[int, dict]]) -> None:
    """Send each (team id, message) to its team's group, in order, once the transaction commits, so
    nobody sees a change that was rolled back; one hop into the event loop for them all (a pass
    moving thousands of requests paid a thread start per message).

    Redis being away only logs a warning: the change is saved, and pages show it on their next load.
    """
    messages = list(messages)
    if not messages:
        return

    async def send_all() -> None:
        layer = get_channel_layer()
        for team_id, message in messages:
            await layer.group_send(team_group(team_id), {"type": "team.event", **message})

    def send() -> None:
        try:
            async_to_sync(send_all)()
        except RedisError as error:
            teams = sorted({team_id for team_id, _ in messages})
            log.warning("cannot reach Redis to publish live updates for teams %s: %s", teams, error)

    transaction.on_commit(send)
