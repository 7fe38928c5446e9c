"""The relay of interactive sessions: a user's websocket (the browser terminal, `gpu-portal shell`,
`gpu-portal port-forward`) on one side, the node agent's websocket on the other, joined through the
channel layer, so the two may sit in different server processes.

The agent keeps one control websocket open to the portal (`AgentControlConsumer`: a connection from
the node out, which works behind NAT and opens no port on the node); a session opened by a user is
announced there, and the agent connects a websocket of its own for it (`AgentSessionConsumer`).
Frames: binary for the bytes of the terminal or TCP stream; JSON text for control: from the user
`{"type": "open", "kind", "command", "tty", "cols", "rows"}` (first, on the terminal endpoint),
`{"type": "resize", "cols", "rows"}`, `{"type": "eof"}`; from the agent `{"type": "exit", "status"}` and
`{"type": "error", "message"}`.

Between the two sides a window keeps the relay from losing frames (`Window`): a side sends at most
WINDOW data messages that the other has not yet passed on to its client. Over Redis a channel's
messages beyond its capacity are dropped, not refused, once its process has read them from Redis; with
the window a client that reads slowly holds the other side back instead, down to its websocket.

Who may connect is asked at the handshake, so a refused client gets HTTP 403 there: the request's
team and operators, signed in (the browser's session) or with an API token (`Authorization: Bearer
gpp_…`). A session opened with a token ends when the token is revoked or its user may no longer open
it (teams.receivers tells the token's group); one a browser opened, when that browser signs out.
"""

import asyncio
import contextlib
import json
import logging

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.exceptions import ObjectDoesNotExist, ValidationError

from infra.live import login_group, token_group
from scheduler_app.choices import SessionKind
from scheduler_app.constants import ACTIVITY_RESOLUTION_S
from scheduler_app.models import GpuRequest
from scheduler_app.permissions import can_open_session
from scheduler_app.services.inventory import node_for_agent_token
from scheduler_app.services.sessions import close_session, open_session, record_activity, session_for_node
from teams.permissions import NotAllowed
from teams.services import user_for_api_token
from teams.tokens import hash_token

log = logging.getLogger(__name__)

AGENT_WAIT_S = 15.0  # how long a session waits for the node's agent to connect its side
MAX_CONTROL_CHARS = 16 * 1024
MAX_SIZE = 1000  # columns or rows of a terminal
FULL_WAIT_S = 10.0  # how long a frame waits for room in the peer's channel (backpressure) before the end
WINDOW = 32  # data messages in flight to the peer, not yet passed on: well under a channel's capacity (100)
ACK_EVERY = 8  # data messages passed on to the client between two acknowledgements
ACK_RETRY_S = 1.0  # after the channel layer failed to read an acknowledgement


def node_group(node_id: int) -> str:
    return f"node-sessions-{node_id}"


def user_group(key) -> str:
    return f"session-{key}-user"


def agent_group(key) -> str:
    return f"session-{key}-agent"


def bearer(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin1").partition(" ")
            if scheme.lower() == "bearer":
                return secret.strip()
    return ""


def _caller(scope):
    """(user, token secret): the signed-in user, else the API token's; (None, "") for anyone else."""
    secret = bearer(scope)
    if secret:
        return user_for_api_token(secret), secret
    user = scope.get("user")
    return (user, "") if user is not None and user.is_authenticated else (None, "")


def _may_open(user, request_id: int) -> bool:
    try:
        request = GpuRequest.objects.select_related("team").get(pk=request_id)
    except ObjectDoesNotExist:
        return False
    return can_open_session(user, request)


def _still_allowed(secret: str, request_id: int) -> bool:
    user = user_for_api_token(secret)
    return user is not None and _may_open(user, request_id)


class HeldBySignIn:
    """For a websocket consumer that lives only as long as what let it in: an API token (until it is
    revoked or its user may no longer open the request's sessions) or a browser's sign-in (until that
    browser signs out); teams.receivers tells their groups. `sign_in_ended(reason)` ends it. The groups
    it joins (`join_group`, from an empty `groups_joined`) it leaves on disconnect (`leave_groups`)."""

    async def join_group(self, group: str) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined.append(group)

    async def leave_groups(self) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def hold_by_sign_in(self, secret: str, request_id: int) -> None:
        self.secret, self.request_id = secret, request_id
        if secret:
            await self.join_group(token_group(hash_token(secret)))
        elif session_key := getattr(self.scope.get("session"), "session_key", None):
            await self.join_group(login_group(session_key))

    async def token_changed(self, event):
        if not await database_sync_to_async(_still_allowed)(self.secret, self.request_id):
            await self.sign_in_ended("its API token was revoked, or its user may no longer open it")

    async def login_ended(self, event):
        await self.sign_in_ended("its user signed out")


class Window:
    """One side's end of the relay's flow control. Sending: `send` waits, up to FULL_WAIT_S, while WINDOW
    data messages are unacknowledged; acknowledgements arrive on a channel of their own (`acks`, told
    to the peer in the handshake), read by a task here, since a consumer waiting in a handler reads no
    messages of its own. Receiving: `passed_on` after each of the peer's data messages reached the
    client; every ACK_EVERY it acknowledges them to the peer's `acks` channel."""

    def __init__(self, layer):
        self.layer = layer
        self.acks: str | None = None
        self.peer_acks: str | None = None
        self.unacked = 0
        self.unsent_acks = 0
        self.room = asyncio.Event()
        self.reader: asyncio.Task | None = None

    async def open(self) -> str:
        self.acks = await self.layer.new_channel()
        self.reader = asyncio.create_task(self._read_acks())
        return self.acks

    async def _read_acks(self) -> None:
        """Until cancelled: a layer that fails (Redis away) is asked again after a pause, meanwhile
        the window stays as it is, so a send waits and, past FULL_WAIT_S, ends the session."""
        while True:
            try:
                message = await self.layer.receive(self.acks)
            except Exception as error:  # any layer's failure: this task has no caller to raise to
                log.warning("A session's acknowledgements could not be read (%s); reading again", error)
                await asyncio.sleep(ACK_RETRY_S)
                continue
            self.unacked -= message["count"]
            self.room.set()

    async def send(self, peer: str, message: dict) -> bool:
        """Send `message` to the peer's channel; False when it stayed full, or the window closed, for
        FULL_WAIT_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FULL_WAIT_S
        data = message["type"] == "relay.data"
        while data and self.unacked >= WINDOW:
            self.room.clear()
            try:
                await asyncio.wait_for(self.room.wait(), deadline - loop.time())
            except TimeoutError:
                return False
        while True:
            try:
                await self.layer.send(peer, message)
                break
            except ChannelFull:
                if loop.time() > deadline:
                    return False
                await asyncio.sleep(0.01)
        self.unacked += data
        return True

    async def passed_on(self) -> None:
        self.unsent_acks += 1
        if self.peer_acks is not None and self.unsent_acks >= ACK_EVERY:
            count, self.unsent_acks = self.unsent_acks, 0
            with contextlib.suppress(ChannelFull):
                await self.layer.send(self.peer_acks, {"type": "relay.ack", "count": count})

    def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()


class RelayConsumer(AsyncWebsocketConsumer):
    """What both sides share: sending to the peer's channel, waiting while it is full, and a client
    that went being no error.

    Each side opens its `window` when it connects and closes it on disconnect.

    A client may close right after its last frame (the agent, after a command's exit status) while its
    side still has the peer's frames to pass on. The ASGI server raises OSError on a send to a closed
    connection; raised out of a handler it would end the consumer before it reads what the client sent
    last, and without its `disconnect`, so the peer would wait and the session stay open. Swallowed,
    the consumer reads on: the last frames, then the disconnect that ends the session.
    """

    peer: str | None = None
    window: Window | None = None

    async def open_window(self) -> str:
        """The window's acknowledgement channel, for the handshake."""
        self.window = Window(self.channel_layer)
        return await self.window.open()

    def close_window(self) -> None:
        if self.window is not None:
            self.window.close()

    async def send(self, text_data=None, bytes_data=None, close=False):
        with contextlib.suppress(OSError):
            await super().send(text_data, bytes_data, close)

    async def close(self, code=None, reason=None):
        with contextlib.suppress(OSError):
            await super().close(code, reason)

    async def send_peer(self, message: dict) -> bool:
        return self.peer is not None and await self.window.send(self.peer, message)

    async def relay_data(self, event):
        await self.send(bytes_data=event["bytes"])
        await self.window.passed_on()


class UserSessionConsumer(HeldBySignIn, RelayConsumer):
    """The user's side: `ws/requests/<id>/session/` (a terminal or a command; the first frame says
    which) and `ws/requests/<id>/port-forward/<port>/` (one TCP connection)."""

    async def connect(self):
        self.key = None
        self.buffered: list[dict] = []
        self.bytes_in = self.bytes_out = 0
        self.exit_code = None
        self.ended = False
        self.waiting: asyncio.Task | None = None
        self.groups_joined: list[str] = []
        self.next_activity = 0.0  # the loop's time from which input is reported as activity again
        arguments = self.scope["url_route"]["kwargs"]
        self.request_id = arguments["request_id"]
        user, secret = await database_sync_to_async(_caller)(self.scope)
        if user is None or not await database_sync_to_async(_may_open)(user, self.request_id):
            await self.close()  # before accepting: the handshake is answered 403
            return
        self.user = user
        await self.hold_by_sign_in(secret, self.request_id)
        await self.open_window()
        await self.accept()
        if "port" in arguments:
            await self._open({"kind": SessionKind.PORT_FORWARD, "port": arguments["port"]})

    async def _open(self, frame: dict) -> None:
        kind = frame.get("kind", SessionKind.TERMINAL)
        command = frame.get("command") or []
        try:
            session = await database_sync_to_async(open_session)(
                self.user, self.request_id, kind=kind, command=command, port=frame.get("port")
            )
        except (NotAllowed, ValidationError) as error:
            message = error.messages[0] if isinstance(error, ValidationError) else str(error)
            await self._fail(message)
            return
        self.key = session.key
        await self._active()
        await self.join_group(user_group(self.key))
        tty = bool(frame.get("tty", kind == SessionKind.TERMINAL))
        await self.channel_layer.group_send(
            node_group(session.node_id),
            {
                "type": "session.open",
                "session": str(self.key),
                "request_id": self.request_id,
                "kind": kind,
                "command": command,
                "port": session.port,
                "tty": tty,
                "cols": _size(frame.get("cols"), 80),
                "rows": _size(frame.get("rows"), 24),
            },
        )
        self.waiting = asyncio.create_task(self._wait_for_agent())

    async def _wait_for_agent(self) -> None:
        await asyncio.sleep(AGENT_WAIT_S)
        if self.peer is None:
            await self._fail("The node's agent did not answer: is it connected to the portal?")

    async def _fail(self, message: str) -> None:
        await self.send(text_data=json.dumps({"type": "error", "message": message}))
        await self._end(f"refused: {message}")
        await self.close(code=4000)

    async def receive(self, text_data=None, bytes_data=None):
        if bytes_data is not None:
            if self.key is None:
                return
            self.bytes_in += len(bytes_data)
            await self._active()
            await self._to_agent({"type": "relay.data", "bytes": bytes_data})
            return
        frame = _control(text_data)
        if frame is None:
            return
        if frame["type"] == "open" and self.key is None and not self.ended:
            await self._open(frame)
        elif frame["type"] == "resize" and self.key is not None:
            message = {
                "type": "resize",
                "cols": _size(frame.get("cols"), 80),
                "rows": _size(frame.get("rows"), 24),
            }
            await self._to_agent({"type": "relay.control", "text": json.dumps(message)})
        elif frame["type"] == "eof" and self.key is not None:
            await self._to_agent({"type": "relay.control", "text": json.dumps({"type": "eof"})})

    async def _active(self) -> None:
        """The user's input keeps the request from being idle: told to the database at most once per
        ACTIVITY_RESOLUTION_S from here, so typing costs no query per key."""
        now = asyncio.get_running_loop().time()
        if now >= self.next_activity:
            self.next_activity = now + ACTIVITY_RESOLUTION_S
            await database_sync_to_async(record_activity)(self.request_id)

    async def _to_agent(self, message: dict) -> None:
        if self.peer is None:
            self.buffered.append(message)
        elif not await self.send_peer(message):
            await self._end("the agent's side stopped reading")
            await self.close(code=4000)

    async def relay_ready(self, event):
        """The agent's side connected: what the user sent meanwhile goes first, in order."""
        if self.peer is not None or self.ended:
            return
        self.peer, self.window.peer_acks = event["channel"], event["acks"]
        if self.waiting is not None:
            self.waiting.cancel()
        await self.send_peer({"type": "relay.peer", "channel": self.channel_name, "acks": self.window.acks})
        buffered, self.buffered = self.buffered, []
        for message in buffered:
            await self._to_agent(message)

    async def relay_data(self, event):
        self.bytes_out += len(event["bytes"])
        await super().relay_data(event)

    async def relay_control(self, event):
        frame = json.loads(event["text"])
        if frame.get("type") == "exit" and isinstance(frame.get("status"), int):
            self.exit_code = frame["status"]
        await self.send(text_data=event["text"])

    async def relay_closed(self, event):
        self.peer = None  # nothing more to tell it
        await self._end(event.get("reason") or "ended in the allocation")
        await self.close(code=1000)

    async def sign_in_ended(self, reason: str) -> None:
        await self._end(reason)
        await self.close(code=4401)

    async def disconnect(self, code):
        if self.waiting is not None:
            self.waiting.cancel()
        await self._end("closed by the user")
        await self.leave_groups()
        self.close_window()

    async def _end(self, reason: str) -> None:
        """Once: the agent's side is told to end, and the session is closed in the database."""
        if self.ended:
            return
        self.ended = True
        if self.peer is not None:
            with contextlib.suppress(ChannelFull):
                await self.channel_layer.send(self.peer, {"type": "relay.closed"})
            self.peer = None
        if self.key is not None:
            await database_sync_to_async(close_session)(
                self.key,
                reason=reason,
                exit_code=self.exit_code,
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
            )


def _size(value, default: int) -> int:
    return value if isinstance(value, int) and 1 <= value <= MAX_SIZE else default


def _control(text: str | None) -> dict | None:
    if text is None or len(text) > MAX_CONTROL_CHARS:
        return None
    try:
        frame = json.loads(text)
    except ValueError:
        return None
    return frame if isinstance(frame, dict) and isinstance(frame.get("type"), str) else None


def _node(scope):
    return node_for_agent_token(bearer(scope))


class AgentControlConsumer(AsyncWebsocketConsumer):
    """`ws/agent/sessions/`: the node's agent hears here of each session opened on its node."""

    async def connect(self):
        self.group = None
        node = await database_sync_to_async(_node)(self.scope)
        if node is None:
            await self.close()
            return
        self.group = node_group(node.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def receive(self, text_data=None, bytes_data=None):
        pass  # the agent says nothing here; it answers by connecting the session's own websocket

    async def session_open(self, event):
        await self.send(text_data=json.dumps({k: v for k, v in event.items() if k != "type"}))

    async def disconnect(self, code):
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)


class AgentSessionConsumer(RelayConsumer):
    """`ws/agent/sessions/<key>/` (and `<key>/<stream>/`): the agent's side of one session, or of one
    stream of a Lab session, on its own node."""

    async def connect(self):
        self.key = self.scope["url_route"]["kwargs"]["key"]
        stream = self.scope["url_route"]["kwargs"].get("stream")  # one of a Lab session's (live/lab.py)
        self.closed_by_user = False
        self.buffered: list[dict] = []
        node = await database_sync_to_async(_node)(self.scope)
        session = node and await database_sync_to_async(session_for_node)(node, self.key)
        if session is None:
            await self.close()
            return
        await self.accept()
        ready = {"type": "relay.ready", "channel": self.channel_name, "acks": await self.open_window()}
        await self.channel_layer.group_send(user_group(stream or self.key), ready)

    async def receive(self, text_data=None, bytes_data=None):
        if bytes_data is not None:
            message = {"type": "relay.data", "bytes": bytes_data}
        elif _control(text_data) is not None:
            message = {"type": "relay.control", "text": text_data}
        else:
            return
        if self.peer is None:
            self.buffered.append(message)  # the user's side answers ready with its channel shortly
        elif not await self.send_peer(message):
            await self.close(code=4000)

    async def relay_peer(self, event):
        self.peer, self.window.peer_acks = event["channel"], event["acks"]
        buffered, self.buffered = self.buffered, []
        for message in buffered:
            await self.send_peer(message)

    async def relay_control(self, event):
        await self.send(text_data=event["text"])

    async def relay_closed(self, event):
        self.peer = None
        self.closed_by_user = True
        await self.close(code=1000)

    async def disconnect(self, code):
        if self.peer is not None and not self.closed_by_user:
            with contextlib.suppress(ChannelFull):
                await self.channel_layer.send(self.peer, {"type": "relay.closed"})
        self.close_window()
