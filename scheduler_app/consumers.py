from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from scheduler_app.live import team_group
from teams.selectors import team_for_member

FORBIDDEN = 4403


class TeamEventsConsumer(AsyncJsonWebsocketConsumer):
    """Streams a team's request and allocation events to its members; anyone else is refused."""

    async def connect(self):
        user = self.scope.get("user")
        slug = self.scope["url_route"]["kwargs"]["team_slug"]
        team = await database_sync_to_async(team_for_member)(user, slug)
        if team is None:
            await self.close(code=FORBIDDEN)
            return
        self.group = team_group(team.id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        await self.send_json({"error": "This stream is read-only; send nothing."})

    async def team_event(self, message):
        await self.send_json({key: value for key, value in message.items() if key != "type"})
