"""JupyterLab's proxy (scheduler_app/live/lab.py): who reaches it (403 for anyone but the request's team
and operators, on HTTP and at the websocket handshake), an HTTP exchange and a websocket relayed through
a stand-in agent, the Lab session's audit and its activity, and its end with the request."""

import asyncio
import datetime as dt
import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from portal.asgi import application
from scheduler_app.live.lab import lab_http
from scheduler_app.models import InteractiveSession
from scheduler_app.services.requests import release_request
from scheduler_app.services.sessions import open_lab
from teams.services import create_api_token, revoke_api_token
from tests.scheduler_app.test_sessions import (  # noqa: F401
    agent_socket,
    close_all,
    interactive,
    refused,
    user_socket,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_channel_layer")]


def http(path, user=None, method="GET", body=b"", headers=(), app=lab_http):
    communicator = HttpCommunicator(app, method, path, body=body, headers=list(headers))
    if app is lab_http:
        communicator.scope["user"] = user or AnonymousUser()
    return communicator


def status_of(communicator) -> int:
    return async_to_sync(communicator.get_response)(timeout=5)["status"]


def test_anonymous_and_other_teams_get_403_on_the_lab_and_its_websockets(interactive, outsider):  # noqa: F811
    request, _ = interactive
    lab = f"/requests/{request.pk}/lab/"
    secret = create_api_token(outsider, name="cli", expires_at=timezone.now() + dt.timedelta(days=1))[1]

    assert status_of(http(lab)) == 403
    assert status_of(http(lab, user=outsider)) == 403
    assert status_of(http(f"{lab}api/contents/x.py", user=outsider, method="PUT", body=b"{}")) == 403
    bearer = [(b"authorization", f"Bearer {secret}".encode())]
    assert status_of(http(f"{lab}api/kernels", headers=bearer)) == 403
    # The whole ASGI application routes the Lab's paths to the proxy, not to Django's login redirect.
    assert status_of(http(f"{lab}lab?reset", app=application)) == 403
    for path in (f"{lab}api/kernels/k1/channels?session_id=s", f"{lab}terminals/websocket/1"):
        assert refused(path)
        assert refused(path, user=outsider)
        assert refused(path, token=secret)
    assert not InteractiveSession.objects.exists()


def test_an_http_exchange_goes_through_the_agent_without_the_portals_cookies(interactive, member, settings):  # noqa: F811
    request, credential = interactive
    cookie = f"{settings.SESSION_COOKIE_NAME}=secret; _xsrf=x1; {settings.CSRF_COOKIE_NAME}=c".encode()

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        assert (await control.connect())[0]
        answers = []
        for body in (b"first", b""):
            user = http(
                f"/requests/{request.pk}/lab/api/contents?type=file",
                user=member,
                method="POST" if body else "GET",
                body=body,
                headers=[(b"cookie", cookie), (b"host", b"testserver"), (b"origin", b"http://testserver")],
            )
            responding = asyncio.ensure_future(user.get_response(timeout=10))
            opened = await control.receive_json_from(timeout=5)
            agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/{opened['stream']}/", credential)
            assert (await agent.connect())[0]
            frames = [await agent.receive_from(timeout=5) for _ in range(2 if body else 1)]
            await agent.send_to(bytes_data=b"HTTP/1.0 201 Created\r\nContent-Type: text/plain\r\n")
            await agent.send_to(bytes_data=b"Connection: close\r\n\r\nhello ")
            await agent.send_to(bytes_data=b"world")
            await agent.disconnect()
            answers.append((opened, frames, await responding))
        await control.disconnect()
        return answers

    (opened, frames, response), (_, get_frames, _) = async_to_sync(scenario)()

    assert opened["kind"] == "lab" and opened["request_id"] == request.pk
    exchange = opened["lab"]
    assert (exchange["mode"], exchange["method"]) == ("http", "POST")
    assert exchange["path"] == f"/requests/{request.pk}/lab/api/contents?type=file"
    assert ["Cookie", "_xsrf=x1"] in exchange["headers"]
    assert not any(name.lower() in ("host", "authorization") for name, _ in exchange["headers"])
    assert frames == [b"first", json.dumps({"type": "eof"})]
    assert get_frames == [json.dumps({"type": "eof"})]
    assert response["status"] == 201 and response["body"] == b"hello world"
    assert (b"content-type", b"text/plain") in response["headers"]
    assert not any(name == b"connection" for name, _ in response["headers"])
    lab = InteractiveSession.objects.get()  # both requests: one Lab session
    assert (lab.kind, lab.user, lab.closed_at) == ("lab", member, None)


def test_a_cross_site_post_is_refused(interactive, member):  # noqa: F811
    request, _ = interactive
    headers = [(b"host", b"portal.example"), (b"origin", b"https://evil.example")]

    assert status_of(http(f"/requests/{request.pk}/lab/api/kernels", member, "POST", b"{}", headers)) == 403


def test_a_kernel_websocket_is_accepted_with_jupyters_subprotocol_and_records_activity(interactive, member):  # noqa: F811
    request, credential = interactive
    execute = json.dumps({"header": {"msg_type": "execute_request"}, "content": {"code": "1"}})

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        user = user_socket(f"/requests/{request.pk}/lab/api/kernels/k1/channels?session_id=s", user=member)
        user.scope["subprotocols"] = ["v1.kernel.websocket.jupyter.org"]
        connecting = asyncio.ensure_future(user.connect(timeout=10))
        opened = await control.receive_json_from(timeout=5)
        agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/{opened['stream']}/", credential)
        await agent.connect()
        await agent.send_to(
            text_data=json.dumps({"type": "open", "subprotocol": "v1.kernel.websocket.jupyter.org"})
        )
        connected, subprotocol = await connecting
        await user.send_to(text_data=execute)
        upstream = await agent.receive_from(timeout=5)
        await agent.send_to(bytes_data=b"b\x00\x01reply")
        reply = await user.receive_from(timeout=5)
        await agent.disconnect()
        closed = await user.receive_output(timeout=5)
        await user.disconnect()  # closed by the server: its consumer still finishes before the loop ends
        await control.disconnect()
        return opened, connected, subprotocol, upstream, reply, closed

    opened, connected, subprotocol, upstream, reply, closed = async_to_sync(scenario)()

    assert opened["lab"] == {
        "mode": "websocket",
        "path": f"/requests/{request.pk}/lab/api/kernels/k1/channels?session_id=s",
        "subprotocols": ["v1.kernel.websocket.jupyter.org"],
    }
    assert connected and subprotocol == "v1.kernel.websocket.jupyter.org"
    assert upstream == b"t" + execute.encode() and reply == b"\x00\x01reply"
    assert closed["type"] == "websocket.close"
    assert InteractiveSession.objects.get().request.last_activity_at is not None


def test_a_kernel_websocket_closes_when_its_token_is_revoked_or_its_browser_signs_out(
    interactive,  # noqa: F811
    member,
    client,
):
    request, credential = interactive
    token, secret = create_api_token(member, name="cli", expires_at=timezone.now() + dt.timedelta(days=1))
    client.force_login(member)
    path = f"/requests/{request.pk}/lab/api/kernels/k1/channels"

    async def kernel_socket(control, **who):
        """A kernel websocket through a stand-in agent, open."""
        socket = user_socket(path, **who)
        connecting = asyncio.ensure_future(socket.connect(timeout=10))
        opened = await control.receive_json_from(timeout=5)
        agent = agent_socket(f"/ws/agent/sessions/{opened['session']}/{opened['stream']}/", credential)
        await agent.connect()
        await agent.send_to(text_data=json.dumps({"type": "open"}))
        assert (await connecting)[0]
        return socket, agent

    async def scenario():
        control = agent_socket("/ws/agent/sessions/", credential)
        await control.connect()
        with_token, its_agent = await kernel_socket(control, token=secret)
        in_browser, browsers_agent = await kernel_socket(control, user=member, browser=client)
        await database_sync_to_async(revoke_api_token)(token, user=member)
        revoked = await with_token.receive_output(timeout=5)
        browser_open = await in_browser.receive_nothing(timeout=0.5)
        await database_sync_to_async(client.post)("/accounts/logout/")
        signed_out = await in_browser.receive_output(timeout=5)
        await close_all(with_token, its_agent, in_browser, browsers_agent, control)
        return revoked, browser_open, signed_out

    revoked, browser_open, signed_out = async_to_sync(scenario)()

    assert revoked == {"type": "websocket.close", "code": 4401}
    assert browser_open
    assert signed_out == {"type": "websocket.close", "code": 4401}


def test_the_lab_session_closes_when_the_request_stops(interactive, member):  # noqa: F811
    request, _ = interactive
    lab = open_lab(member, request.pk)
    assert open_lab(member, request.pk) == lab

    release_request(request, user=member)

    lab.refresh_from_db()
    assert lab.closed_at is not None and lab.close_reason == "the request stopped running"
