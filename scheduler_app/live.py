"""Live updates: every state change is pushed to its team's websocket group after commit."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def publish_after_commit(team_id: int, message: dict) -> None:
    """Send once the transaction commits, so nobody sees a change that was rolled back."""

    def send() -> None:
        async_to_sync(get_channel_layer().group_send)(team_group(team_id), {"type": "team.event", **message})

    transaction.on_commit(send)
