"""JupyterLab through the portal: `/requests/<id>/lab/…` over HTTP and websockets, proxied to the
request's Jupyter server that the node's agent runs in the allocation (agent/lab.py).

Authorised like the request page: the request's team and operators, while it runs interactive;
anyone else, signed in or not, gets 403 (a websocket at its handshake). A websocket closes when the API
token it came with is revoked or the browser that opened it signs out, as a terminal does. The first
request of a user opens a Lab session (kind "lab", in the event log); the rest of its page's requests
reuse it, and it closes when the request stops running.

Each HTTP request and each websocket is one stream of that session: a channel of its own on the
channel layer and a websocket the agent connects for it (`ws/agent/sessions/<key>/<stream>/`),
relayed as sessions are (live/sessions.py). The request's head goes in the stream's spec, its body in
binary frames, then `{"type": "eof"}`; the response comes back as the raw bytes Jupyter wrote. A
websocket's messages go as binary frames prefixed `t` (text) or `b` (binary). Jupyter's token stays
on the node: the agent adds it.
"""

import asyncio
import contextlib
import json
import logging
import re
import uuid
from http.cookies import SimpleCookie

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from scheduler_app.live.sessions import AGENT_WAIT_S, HeldBySignIn, Window, _caller, node_group, user_group
from scheduler_app.services.sessions import open_lab, record_activity
from teams.permissions import NotAllowed

PATH = re.compile(r"^/requests/(\d+)/lab(/|$)")
MAX_BODY = 64 * 1024 * 1024
CHUNK = 64 * 1024
DROPPED = {"connection", "keep-alive", "transfer-encoding", "upgrade", "host", "authorization", "te",
           "trailer", "proxy-authorization", "content-length", "cookie"}  # fmt: skip
EXECUTE = re.compile(rb'"msg_type":\s*"execute_request"')
TEXT, BINARY = b"t", b"b"

log = logging.getLogger(__name__)


class TunnelError(Exception):
    pass


def _lab_session(scope, request_id: int):
    """(The caller's Lab session, the API token it came with or ""); (None, "") for anyone refused."""
    user, secret = _caller(scope)
    if user is None:
        return None, ""
    try:
        return open_lab(user, request_id), secret
    except NotAllowed:
        return None, ""


class Tunnel:
    """One stream to the request's Jupyter through the node's agent, with the relay's window: each data
    message received counts as passed on when the next is asked for."""

    def __init__(self):
        self.layer = get_channel_layer()
        self.window = Window(self.layer)
        self.peer: str | None = None
        self.closed = False
        self.holding = False  # a data message received, not yet passed on

    async def open(self, session, exchange: dict) -> None:
        self.channel = await self.layer.new_channel()
        await self.window.open()
        stream = str(uuid.uuid4())
        await self.layer.group_add(user_group(stream), self.channel)
        try:
            spec = {"session": str(session.key), "stream": stream, "request_id": session.request_id}
            await self.layer.group_send(
                node_group(session.node_id), {"type": "session.open", **spec, "kind": "lab", "lab": exchange}
            )
            try:
                ready = await asyncio.wait_for(self.layer.receive(self.channel), AGENT_WAIT_S)
            except TimeoutError:
                raise TunnelError("The node's agent did not answer: is it connected to the portal?") from None
        finally:
            await self.layer.group_discard(user_group(stream), self.channel)
        self.peer, self.window.peer_acks = ready["channel"], ready["acks"]
        await self.send({"type": "relay.peer", "channel": self.channel, "acks": self.window.acks})

    async def receive(self) -> dict:
        """The agent's next message: relay.data, relay.control or relay.closed."""
        if self.holding:
            await self.window.passed_on()
        message = await self.layer.receive(self.channel)
        self.holding = message["type"] == "relay.data"
        if message["type"] == "relay.closed":
            self.closed = True
        return message

    async def send(self, message: dict) -> None:
        if not await self.window.send(self.peer, message):
            raise TunnelError("the agent's side stopped reading")

    async def send_bytes(self, data: bytes) -> None:
        await self.send({"type": "relay.data", "bytes": data})

    async def send_control(self, frame: dict) -> None:
        await self.send({"type": "relay.control", "text": json.dumps(frame)})

    async def close(self) -> None:
        self.window.close()
        if self.peer is not None and not self.closed:
            self.closed = True
            with contextlib.suppress(ChannelFull):
                await self.layer.send(self.peer, {"type": "relay.closed"})


def _headers(scope) -> list[tuple[str, str]]:
    """The browser's headers for Jupyter: not the portal's own cookies, nor what concerns one hop."""
    kept = []
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin1"), raw_value.decode("latin1")
        if name.lower() == "cookie":
            cookies = SimpleCookie()
            cookies.load(value)
            own = {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}
            theirs = "; ".join(f"{k}={m.coded_value}" for k, m in cookies.items() if k not in own)
            if theirs:
                kept.append(("Cookie", theirs))
        elif name.lower() not in DROPPED:
            kept.append((name, value))
    return kept


def _target(scope) -> str:
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    return (path + (b"?" + query if query else b"")).decode("latin1")


async def _answer(send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")]})  # fmt: skip
    await send({"type": "http.response.body", "body": text.encode()})


def _same_origin(scope) -> bool:
    """A browser's request that changes something comes from the portal's own pages."""
    headers = dict(scope["headers"])
    origin = headers.get(b"origin")
    return origin is None or origin.split(b"://", 1)[-1] == headers.get(b"host")


async def lab_http(scope, receive, send) -> None:
    """The ASGI application of `/requests/<id>/lab/…` (portal/asgi.py routes it here)."""
    request_id = int(PATH.match(scope["path"]).group(1))
    session, _ = await database_sync_to_async(_lab_session)(scope, request_id)
    if session is None:
        await _answer(send, 403, "Only the request's team and operators open its JupyterLab, while it runs.")
        return
    if scope["method"] not in ("GET", "HEAD", "OPTIONS") and not _same_origin(scope):
        await _answer(send, 403, "Cross-origin request refused.")
        return
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            await _answer(send, 413, "The request's body is too large.")
            return
        if not message.get("more_body"):
            break
    tunnel = Tunnel()
    try:
        exchange = {
            "mode": "http",
            "method": scope["method"],
            "path": _target(scope),
            "headers": _headers(scope),
        }
        await tunnel.open(session, exchange)
        for start in range(0, len(body), CHUNK):
            await tunnel.send_bytes(bytes(body[start : start + CHUNK]))
        await tunnel.send_control({"type": "eof"})
        await _relay_response(tunnel, send)
    except TunnelError as error:
        log.warning(
            "Lab of request %s: %s %s answered 502: %s", request_id, scope["method"], scope["path"], error
        )
        await _answer(send, 502, str(error))
    finally:
        await tunnel.close()


async def _relay_response(tunnel: Tunnel, send) -> None:
    """Jupyter's HTTP/1.0 response: its head parsed once whole, its body streamed as it comes."""
    head = bytearray()
    started = False
    while True:
        message = await tunnel.receive()
        if message["type"] == "relay.control":
            frame = json.loads(message["text"])
            raise TunnelError(frame.get("message") or "JupyterLab did not answer.")
        if message["type"] != "relay.data":
            break
        if started:
            await send({"type": "http.response.body", "body": message["bytes"], "more_body": True})
            continue
        head += message["bytes"]
        if b"\r\n\r\n" not in head:
            continue
        raw, rest = bytes(head).split(b"\r\n\r\n", 1)
        status_line, *lines = raw.decode("latin1").split("\r\n")
        headers = []
        for line in lines:
            name, _, value = line.partition(":")
            if name.strip().lower() not in DROPPED - {"content-length", "cookie"}:
                headers.append((name.strip().lower().encode("latin1"), value.strip().encode("latin1")))
        await send({"type": "http.response.start", "status": int(status_line.split()[1]), "headers": headers})
        started = True
        if rest:
            await send({"type": "http.response.body", "body": rest, "more_body": True})
    if not started:
        raise TunnelError("JupyterLab closed the connection without an answer.")
    await send({"type": "http.response.body", "body": b""})


class LabWebsocketConsumer(HeldBySignIn, AsyncWebsocketConsumer):
    """`/requests/<id>/lab/…` websockets (kernels, terminals, events): accepted once Jupyter accepted the
    agent's, with the subprotocol Jupyter chose; closed when the token or sign-in it came with ends."""

    async def connect(self):
        self.tunnel = None
        self.reading = None
        self.groups_joined: list[str] = []
        self.recording: set[asyncio.Task] = set()  # activity writes in flight (the loop keeps weak refs)
        request_id = self.scope["url_route"]["kwargs"]["request_id"]
        self.session, secret = await database_sync_to_async(_lab_session)(self.scope, request_id)
        if self.session is None:
            await self.close()  # before accepting: the handshake is answered 403
            return
        await self.hold_by_sign_in(secret, request_id)
        self.tunnel = Tunnel()
        exchange = {
            "mode": "websocket",
            "path": _target(self.scope),
            "subprotocols": self.scope.get("subprotocols", []),
        }
        try:
            await self.tunnel.open(self.session, exchange)
            answer = await asyncio.wait_for(self.tunnel.receive(), AGENT_WAIT_S * 4)
        except (TimeoutError, TunnelError):
            await self.close()
            return
        frame = json.loads(answer["text"]) if answer["type"] == "relay.control" else {}
        if frame.get("type") != "open":
            await self.close()
            return
        await self.accept(subprotocol=frame.get("subprotocol"))
        self.reading = asyncio.create_task(self._from_jupyter())

    async def _from_jupyter(self) -> None:
        while (message := await self.tunnel.receive())["type"] == "relay.data":
            data = message["bytes"]
            if data[:1] == TEXT:
                await self.send(text_data=data[1:].decode())
            else:
                await self.send(bytes_data=data[1:])
        await self.close()

    async def receive(self, text_data=None, bytes_data=None):
        data = TEXT + text_data.encode() if text_data is not None else BINARY + bytes_data
        if EXECUTE.search(data, 0, 4096):
            task = asyncio.create_task(
                database_sync_to_async(record_activity)(self.session.request_id, timezone.now())
            )
            self.recording.add(task)
            task.add_done_callback(self.recording.discard)
        try:
            await self.tunnel.send_bytes(data)
        except TunnelError:
            await self.close()

    async def sign_in_ended(self, reason: str) -> None:
        await self.close(code=4401)

    async def disconnect(self, code):
        if self.reading is not None:
            self.reading.cancel()
        if self.tunnel is not None:
            await self.tunnel.close()
        await self.leave_groups()
