"""Live streams over websockets: one per team for its members, one cluster-wide for operators.

On connect a client gets a snapshot (the last tick's frame, scoped to what it may
see), then every second the values that changed (`tick`) and each state change
as it commits (`event`). The one thing a client may send is
`{"action": "snapshot"}`, to start over from the whole frame; anything else gets
an `error` frame naming what was wrong, and changes nothing.
"""

import asyncio
import json
import weakref

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from infra.live import operator_group, team_group
from scheduler_app.live.ticker import latest_frame, snapshot_for
from teams.permissions import can_operate
from teams.selectors import team_for_member

UNAUTHENTICATED = 4401
FORBIDDEN = 4403
ACTIONS = ("snapshot",)
MAX_CLIENT_FRAME_CHARS = 1024
# Group adds and discards at once per event loop. redis-py's pool refuses a command past 100 open
# connections instead of waiting: 500 pages closing together (bench.fanout) failed their discards
# and stayed in the groups, each tick still sent to them until the group expired.
MEMBERSHIP_CHANGES_AT_ONCE = 32
_membership_slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def membership_slot() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    if loop not in _membership_slots:
        _membership_slots[loop] = asyncio.Semaphore(MEMBERSHIP_CHANGES_AT_ONCE)
    return _membership_slots[loop]


class LiveStreamConsumer(AsyncJsonWebsocketConsumer):
    """Shared by both streams: subclasses decide who may connect and which groups they join."""

    groups_joined: list[str] = []
    team_ids: set[int] | None = None  # None: every team's allocations (operators)

    async def authorize(self, user) -> int | None:
        """Set groups_joined and team_ids; return a close code to refuse the connection."""
        raise NotImplementedError

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        refusal = await self.authorize(user)
        if refusal is not None:
            await self.close(code=refusal)
            return
        async with membership_slot():
            for group in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_snapshot()

    async def disconnect(self, code):
        async with membership_slot():
            for group in self.groups_joined:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if text_data is None:
            await self.send_error("binary_frame", "Send text frames of JSON; binary frames are not read.")
            return
        if len(text_data) > MAX_CLIENT_FRAME_CHARS:
            await self.send_error("too_long", f"A message holds at most {MAX_CLIENT_FRAME_CHARS} characters.")
            return
        try:
            content = json.loads(text_data)
        except ValueError:
            await self.send_error("not_json", "The message is not JSON.")
            return
        if not isinstance(content, dict) or content.get("action") not in ACTIONS:
            await self.send_error("unknown_action", 'This stream reads only {"action": "snapshot"}.')
            return
        await self.send_snapshot()

    async def send_error(self, code: str, message: str) -> None:
        await self.send_json({"type": "error", "code": code, "message": message})

    async def send_snapshot(self) -> None:
        frame = await database_sync_to_async(latest_frame)()
        await self.send_json(snapshot_for(frame, team_ids=self.team_ids))

    async def team_event(self, message):
        await self.send_json({**message, "type": "event"})

    async def live_tick(self, message):
        await self.send(text_data=message["text"])  # serialized once by the ticker for every client


class TeamEventsConsumer(LiveStreamConsumer):
    """A team's allocations and state changes, plus cluster aggregates, for its members only."""

    async def authorize(self, user):
        slug = self.scope["url_route"]["kwargs"]["team_slug"]
        team = await database_sync_to_async(team_for_member)(user, slug)
        if team is None:
            return FORBIDDEN
        self.team_ids = {team.id}
        self.groups_joined = [team_group(team.id)]
        return None


class ClusterConsumer(LiveStreamConsumer):
    """Every team's allocations and every state change, for operators (staff) only."""

    async def authorize(self, user):
        if not can_operate(user):
            return FORBIDDEN
        self.team_ids = None
        self.groups_joined = [operator_group()]
        return None
