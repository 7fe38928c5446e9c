"""The team event stream: members get their team's changes; anonymous and foreign sockets are refused."""

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from portal.routing import websocket_urlpatterns
from scheduler_app.consumers import FORBIDDEN
from scheduler_app.services.requests import submit_request

pytestmark = pytest.mark.django_db(transaction=True)


def connect(user, slug="vision"):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/teams/{slug}/events/")
    communicator.scope["user"] = user
    return communicator


@pytest.mark.parametrize("who", ["anonymous", "outsider"])
def test_foreign_or_anonymous_socket_is_refused(team, request, who):
    user = AnonymousUser() if who == "anonymous" else request.getfixturevalue(who)

    async def scenario():
        connected, code = await connect(user).connect()
        return connected, code

    assert async_to_sync(scenario)() == (False, FORBIDDEN)


def test_member_receives_their_teams_request_events(team, member):
    async def scenario():
        socket = connect(member)
        connected, _ = await socket.connect()
        assert connected
        from channels.db import database_sync_to_async

        await database_sync_to_async(submit_request)(
            user=member, team=team, name="live", task_type="training", gpu_milli=125
        )
        message = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return message

    message = async_to_sync(scenario)()

    assert message["to"] == "pending"
    assert message["actor"] == "bob"
    assert message["object"] == "gpurequest"


def test_stream_refuses_input_with_a_clear_error(team, member):
    async def scenario():
        socket = connect(member)
        await socket.connect()
        await socket.send_json_to({"cancel": 1})
        reply = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return reply

    assert async_to_sync(scenario)() == {"error": "This stream is read-only; send nothing."}
