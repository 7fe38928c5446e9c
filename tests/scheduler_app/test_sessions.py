"""Interactive sessions' relay: who may open one, bytes and control frames both ways between the user's
websocket and the agent's, the audit trail, and a revoked token closing its session."""

import asyncio
import datetime as dt
import json
from importlib import import_module

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.test import Client
from django.utils import timezone

from audit.models import Event, Notice
from audit.notices import Finding, raise_notices, request_notice_key
from portal.routing import websocket_urlpatterns
from scheduler_app.live import sessions
from scheduler_app.models import InteractiveSession
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.agents import report_started
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.requests import submit_request
from teams.services import create_api_token, revoke_api_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_channel_layer")]

ORIGIN = [(b"origin", b"http://testserver")]


def user_socket(path, user=None, token=None, browser=None):
    """A user's websocket: signed in as `user` (with the sign-in of the test client `browser`, if
    given), or with an API token, or anonymous."""
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    socket = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path, headers=headers)
    socket.scope["user"] = user or AnonymousUser()
    if browser is not None:
        socket.scope["session"] = import_module(settings.SESSION_ENGINE).SessionStore(
            browser.session.session_key
        )
    return socket


def agent_socket(path, credential, application=None):
    socket = WebsocketCommunicator(
        application or URLRouter(websocket_urlpatterns),
        path,
        headers=[(b"authorization", f"Bearer {credential}".encode())],
    )
    socket.scope["user"] = AnonymousUser()
    return socket


class GoneClient:
    """The portal's websockets as a server serves them to a client that may have closed: once `gone` is
    set, a frame sent to it raises OSError, as uvicorn's ClientDisconnected does (and `refused` is set)."""

    def __init__(self):
        self.gone = asyncio.Event()
        self.refused = asyncio.Event()
        self.application = URLRouter(websocket_urlpatterns)

    async def __call__(self, scope, receive, send):
        async def sending(message):
            if self.gone.is_set() and message["type"] == "websocket.send":
                self.refused.set()
                raise OSError("the client has closed the connection")
            await send(message)

        return await self.application(scope, receive, sending)


@pytest.fixture
def interactive(team, member, make_node):
    """A running interactive request (no command) of the team's on node-1, and the node's credential."""
    node = make_node("node-1", gpus=1)
    request = submit_request(user=member, team=team, name="notebook", task_type="training", gpu_milli=500)
    run_scheduling_pass()
    report_started(node, request.pk)
    return request, issue_agent_credential(node)


async def close_all(*sockets):
    """Disconnect every socket, closed by the server or not, so each consumer finishes before the test's
    event loop ends (else the loop's close cancels one waiting inside the Redis layer's receive)."""
    for socket in sockets:
        await socket.disconnect()


def refused(path, **who):
    async def scenario():
        socket = user_socket(path, **who)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return not connected

    return async_to_sync(scenario)()


def test_anonymous_and_other_teams_are_refused_at_the_handshake(interactive, outsider):
    request, _ = interactive
    secret = create_api_token(outsider, name="cli", expires_at=timezone.now() + dt.timedelta(days=1))[1]

    for path in (f"/ws/requests/{request.pk}/session/", f"/ws/requests/{request.pk}/port-forward/8888/"):
        assert refused(path)
        assert refused(path, user=outsider)
        assert refused(path, token=secret)
        assert refused(path, token="gpp_not-a-token")
    assert not InteractiveSession.objects.exists()


def test_a_request_with_a_command_or_not_running_has_no_sessions(team, member, make_node):
    make_node("node-1", gpus=1)
    batch = submit_request(
        user=member, team=team, name="batch", task_type="training", gpu_milli=500, command="sleep 9"
    )
    run_scheduling_pass()
    waiting = submit_request(user=member, team=team, name="later", task_type="training", gpu_milli=1000)

    assert refused(f"/ws/requests/{batch.pk}/session/", user=member)
    assert refused(f"/ws/requests/{waiting.pk}/session/", user=member)


def test_an_agent_credential_reaches_only_its_own_nodes_sessions(interactive, make_node):
    other_node_credential = issue_agent_credential(make_node("node-2", gpus=1))

    async def scenario():
        socket = agent_socket(
            "/ws/agent/sessions/00000000-0000-0000-0000-000000000000/", other_node_credential
        )
        connected, _ = await socket.connect()
        await socket.disconnect()
        anonymous = agent_socket("/ws/agent/sessions/", "node_wrong")
        anonymous_connected, _ = await anonymous.connect()
        await anonymous.disconnect()
        return connected, anonymous_connected

    assert async_to_sync(scenario)() == (False, False)


def test_a_terminal_relays_bytes_and_control_both_ways_and_is_audited(interactive, member):
    request, credential = interactive

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        assert (await control.connect())[0]
        user = user_socket(f"/ws/requests/{request.pk}/session/", user=member)
        assert (await user.connect())[0]
        await user.send_to(
            text_data=json.dumps({"type": "open", "kind": "terminal", "cols": 100, "rows": 30})
        )
        await user.send_to(bytes_data=b"echo hi\r")  # before the agent's side connects: kept in order
        opened = await control.receive_json_from(timeout=5)
        agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/", credential)
        assert (await agent.connect())[0]
        await agent.send_to(bytes_data=b"$ ")  # the prompt, before the user's side answered ready
        received = await agent.receive_from(timeout=5)
        await user.send_to(text_data=json.dumps({"type": "resize", "cols": 120, "rows": 40}))
        resize = await agent.receive_json_from(timeout=5)
        prompt = await user.receive_from(timeout=5)
        await agent.send_to(text_data=json.dumps({"type": "exit", "status": 3}))
        exit_frame = await user.receive_json_from(timeout=5)
        await agent.disconnect()
        closed = await user.receive_output(timeout=5)
        await user.disconnect()
        await control.disconnect()
        return opened, received, resize, prompt, exit_frame, closed

    opened, received, resize, prompt, exit_frame, closed = async_to_sync(scenario)()

    assert opened["request_id"] == request.pk and opened["kind"] == "terminal" and opened["tty"] is True
    assert (opened["cols"], opened["rows"]) == (100, 30)
    assert received == b"echo hi\r"
    assert resize == {"type": "resize", "cols": 120, "rows": 40}
    assert prompt == b"$ " and exit_frame == {"type": "exit", "status": 3}
    assert closed["type"] == "websocket.close"
    session = InteractiveSession.objects.get()
    assert (session.user, session.kind, session.exit_code) == (member, "terminal", 3)
    assert (session.bytes_in, session.bytes_out) == (len(b"echo hi\r"), 2)
    assert session.closed_at is not None
    events = Event.objects.filter(object_id=session.pk, to_state__startswith="session").order_by("pk")
    assert [(e.to_state, e.actor_label, e.team_id) for e in events] == [
        ("session opened", member.username, request.team_id),
        ("session closed", member.username, request.team_id),
    ]


def test_an_agent_that_closed_before_its_side_relayed_the_users_last_frame_still_ends_the_session(
    interactive, member
):
    """A command exits: the agent sends its status and closes while the portal still has the user's eof
    to pass to it. That send fails, and the status still reaches the user and the session closes."""
    request, credential = interactive

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        user = user_socket(f"/ws/requests/{request.pk}/session/", user=member)
        await user.connect()
        await user.send_to(text_data=json.dumps({"type": "open", "kind": "shell", "command": ["true"]}))
        opened = await control.receive_json_from(timeout=5)
        client = GoneClient()
        agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/", credential, client)
        assert (await agent.connect())[0]
        await agent.send_to(bytes_data=b"done\n")
        output = await user.receive_from(timeout=5)  # both sides know each other now
        client.gone.set()
        await user.send_to(text_data=json.dumps({"type": "eof"}))
        await asyncio.wait_for(client.refused.wait(), 5)
        await agent.send_to(text_data=json.dumps({"type": "exit", "status": 3}))
        exit_frame = await user.receive_json_from(timeout=5)
        await agent.disconnect()
        closed = await user.receive_output(timeout=5)
        await close_all(user, control)
        return output, exit_frame, closed

    output, exit_frame, closed = async_to_sync(scenario)()

    assert output == b"done\n" and exit_frame == {"type": "exit", "status": 3}
    assert closed == {"type": "websocket.close", "code": 1000}
    session = InteractiveSession.objects.get()
    assert (session.exit_code, session.bytes_out) == (3, len(b"done\n"))
    assert session.closed_at is not None


def test_an_operator_opens_a_port_forward_with_its_port(interactive, operator):
    request, credential = interactive

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        user = user_socket(f"/ws/requests/{request.pk}/port-forward/8888/", user=operator)
        assert (await user.connect())[0]
        opened = await control.receive_json_from(timeout=5)
        await user.disconnect()
        await control.disconnect()
        return opened

    opened = async_to_sync(scenario)()

    assert (opened["kind"], opened["port"], opened["tty"]) == ("port-forward", 8888, False)
    assert InteractiveSession.objects.get().closed_at is not None


def test_a_token_revoked_mid_session_closes_it(interactive, member):
    request, credential = interactive
    token, secret = create_api_token(member, name="cli", expires_at=timezone.now() + dt.timedelta(days=1))

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        user = user_socket(f"/ws/requests/{request.pk}/session/", token=secret)
        assert (await user.connect())[0]
        await user.send_to(text_data=json.dumps({"type": "open", "kind": "shell", "command": ["id"]}))
        opened = await control.receive_json_from(timeout=5)
        agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/", credential)
        await agent.connect()
        await database_sync_to_async(revoke_api_token)(token, user=member)
        closed_user = await user.receive_output(timeout=5)
        closed_agent = await agent.receive_output(timeout=5)
        await close_all(user, agent, control)
        return opened, closed_user, closed_agent

    opened, closed_user, closed_agent = async_to_sync(scenario)()

    assert opened["command"] == ["id"] and opened["kind"] == "shell"
    assert closed_user == {"type": "websocket.close", "code": 4401}
    assert closed_agent["type"] == "websocket.close"
    session = InteractiveSession.objects.get()
    assert "revoked" in session.close_reason and session.closed_at is not None


def test_signing_out_closes_the_browsers_terminals(interactive, member, client):
    request, credential = interactive
    client.force_login(member)
    other_browser = Client()
    other_browser.force_login(member)

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        terminals = []
        for browser in (client, other_browser):
            terminal = user_socket(f"/ws/requests/{request.pk}/session/", user=member, browser=browser)
            assert (await terminal.connect())[0]
            await terminal.send_to(text_data=json.dumps({"type": "open", "kind": "shell", "tty": True}))
            opened = await control.receive_json_from(timeout=5)
            agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/", credential)
            await agent.connect()
            terminals.append((terminal, agent))
        await database_sync_to_async(client.post)("/accounts/logout/")
        (signed_out, its_agent), (still_in, _) = terminals
        closed = await signed_out.receive_output(timeout=5)
        closed_agent = await its_agent.receive_output(timeout=5)
        other_open = await still_in.receive_nothing(timeout=0.5)
        await close_all(*(socket for pair in terminals for socket in pair), control)
        return closed, closed_agent, other_open

    closed, closed_agent, other_open = async_to_sync(scenario)()

    assert closed == {"type": "websocket.close", "code": 4401}
    assert closed_agent["type"] == "websocket.close"
    assert other_open  # the same user's terminal in another browser stays until it signs out
    reasons = InteractiveSession.objects.order_by("opened_at").values_list("close_reason", flat=True)
    assert list(reasons) == ["its user signed out", "closed by the user"]


def test_the_terminal_page_is_for_the_team_and_operators_only(
    interactive, member, outsider, operator, client
):
    request, _ = interactive
    page = f"/requests/{request.pk}/terminal/"

    answers = {}
    for user in (member, operator, outsider):
        client.force_login(user)
        answers[user.username] = client.get(page).status_code
    client.logout()

    assert answers == {member.username: 200, operator.username: 200, outsider.username: 403}
    assert client.get(page).status_code == 302  # to the sign-in page


def test_terminal_input_marks_the_request_active_and_withdraws_its_idle_warning(interactive, member):
    request, _ = interactive
    raise_notices(
        [
            Finding(
                "idle",
                request.team_id,
                request_notice_key("idle", request.pk),
                request,
                "Idle: it stops soon.",
            )
        ],
        kinds=["idle"],
    )

    async def scenario():
        user = user_socket(f"/ws/requests/{request.pk}/session/", user=member)
        assert (await user.connect())[0]
        await user.send_to(text_data=json.dumps({"type": "open", "kind": "terminal"}))
        await user.send_to(bytes_data=b"ls\r")
        await user.disconnect()

    before = timezone.now()
    async_to_sync(scenario)()

    request.refresh_from_db()
    assert request.last_activity_at >= before
    assert Notice.objects.get().resolved_at is not None
    assert Event.objects.filter(object_id=request.pk, to_state="active again").count() == 1


class FlakyLayer:
    """A channel layer whose first read fails, as Redis away does; the second brings 8 acknowledgements."""

    def __init__(self):
        self.reads = 0

    async def new_channel(self):
        return "acks!1"

    async def receive(self, channel):
        self.reads += 1
        if self.reads == 1:
            raise ConnectionError("Redis at 127.0.0.1:6379 was away less than 5 s ago")
        if self.reads == 2:
            return {"type": "relay.ack", "count": 8}
        await asyncio.Event().wait()  # nothing more comes


def test_a_windows_acknowledgements_are_read_again_after_the_layer_failed(monkeypatch, caplog):
    monkeypatch.setattr(sessions, "ACK_RETRY_S", 0.01)

    async def full_window_then_acknowledged() -> int:
        window = sessions.Window(FlakyLayer())
        window.unacked = sessions.WINDOW
        await window.open()
        await asyncio.wait_for(window.room.wait(), 5)
        window.close()
        return window.unacked

    assert asyncio.run(full_window_then_acknowledged()) == sessions.WINDOW - 8
    assert "acknowledgements could not be read" in caplog.text
