"""Live updates: every state change is pushed to its team's websocket group after commit.

Who sends: in the ASGI server's process, its own event loop (where the websocket consumers and,
in the embedded default, the in-memory channel layer live); in another process on Redis (the
Celery worker), one background thread's loop. Either way the caller only queues the message and
goes on, and one task per loop sends them in order. Elsewhere (tests, management commands without
Redis) it is sent at once.
"""

import asyncio
import logging
import os
import threading
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from infra.http_threads import serving_loop

log = logging.getLogger(__name__)


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


def operator_group() -> str:
    """Staff on the cluster-wide stream: every team's allocations and state changes."""
    return "operators"


def token_group(token_hash: str) -> str:
    """The websockets an API token opened (interactive sessions): told when the token changes."""
    return f"api-token-{token_hash}"


def login_group(session_key: str) -> str:
    """The websockets a browser's sign-in opened (its terminals): told when it signs out."""
    return f"login-{session_key}"


def publish_after_commit(team_id: int, message: dict) -> None:
    """Send to the team's stream once the transaction commits, so nobody sees a change that was
    rolled back.

    Redis being away only logs a warning: the change is saved, and pages show it on their next load.
    """
    _queue_after_commit([(team_group(team_id), message)])


def publish_cluster_after_commit(message: dict) -> None:
    """Send to the operators' cluster-wide stream once the transaction commits."""
    _queue_after_commit([(operator_group(), message)])


def publish_events_after_commit(messages: Iterable[tuple[int | None, dict]]) -> None:
    """State changes, (team id or None, message) each: to the team's stream and to the operators',
    in order, with one commit hook for a whole transaction's (a pass moves thousands)."""
    batch = []
    for team_id, message in messages:
        if team_id is not None:
            batch.append((team_group(team_id), message))
        batch.append((operator_group(), message))
    _queue_after_commit(batch)


def _queue_after_commit(batch: list[tuple[str, dict]]) -> None:
    if batch:
        typed = [(group, {"type": "team.event", **message}) for group, message in batch]
        transaction.on_commit(lambda: send_to_groups(typed))


def send_to_groups(batch: list[tuple[str, dict]]) -> None:
    """Send each (group, channel-layer message) now, in order, as the module docstring says: queued
    to this process's loop where there is one, else at once."""
    loop = serving_loop() or (_background_loop() if settings.REDIS_URL else None)
    if loop is None:
        async_to_sync(_send_all)(batch)
    else:
        _sender_on(loop).put(batch)


async def _send_all(batch: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    try:
        # The Redis layer names the groups anyone listens to in one round trip (infra.channel_layers).
        asked = getattr(layer, "groups_with_members", None)
        listened = await asked(group for group, _ in batch) if asked else None
        for group, message in batch:
            if listened is None or group in listened:
                await layer.group_send(group, message)
    except RedisError as error:
        groups = ", ".join(sorted({group for group, _ in batch}))
        log.warning("cannot reach Redis to publish live updates to %s: %s", groups, error)


class _OrderedSender:
    """Sends queued messages one after another from one task on `loop`; put() is thread-safe."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue | None = None
        loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        self.queue = asyncio.Queue()
        self.loop.create_task(self._run())

    def put(self, batch: list[tuple[str, dict]]) -> None:
        # Scheduled after _start (callbacks run in order), so the queue exists by then.
        self.loop.call_soon_threadsafe(lambda: self.queue.put_nowait(batch))

    async def _run(self) -> None:
        while True:
            batch = await self.queue.get()
            try:
                await _send_all(batch)
            except Exception:  # one bad batch must not stop the updates that follow
                log.exception("live updates failed")


_senders: dict[asyncio.AbstractEventLoop, _OrderedSender] = {}
_lock = threading.Lock()
_own: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None


def _sender_on(loop: asyncio.AbstractEventLoop) -> _OrderedSender:
    with _lock:
        if loop not in _senders:
            _senders[loop] = _OrderedSender(loop)
        return _senders[loop]


def _background_loop() -> asyncio.AbstractEventLoop:
    """This process's own loop for live updates, in a daemon thread started on first use (and again
    should that thread have died)."""
    global _own
    with _lock:
        if _own is None or not _own[1].is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="live-updates", daemon=True)
            thread.start()
            _own = (loop, thread)
        return _own[0]


def _forget_loops_after_fork() -> None:
    """A forked child (a Celery pool process) has none of its parent's threads."""
    global _own
    _senders.clear()
    _own = None


os.register_at_fork(after_in_child=_forget_loops_after_fork)
