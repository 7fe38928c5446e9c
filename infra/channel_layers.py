"""The channel layers: in production channels_redis's, told which groups anyone listens to; in the
embedded default the in-memory one, made safe to publish to from other threads."""

import asyncio
import time
from collections.abc import Iterable

from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer

from infra import redis_clients

# How long a cancelled receive waits for the answer of the pop it had started (see receive_single).
POP_GRACE_S = 0.1


class RedisChannelLayer(ChannelsRedisLayer):
    """channels_redis's layer, on connections bounded by infra.redis_clients, which can say at once
    which groups have members.

    `hosts` are Redis URLs. Every call waits on Redis at most REDIS_TIMEOUT_S (a receive's blocking
    pop its 5 s more), and none at all for a moment after Redis did not answer.

    Its group_send asks Redis for a group's members (two round trips) for every message, also when
    nobody listens: the API's state changes went to two groups each, about 0.4 ms of a web process's
    CPU, and a pass's thousands of events as many times over. infra.live asks once per batch.
    """

    def __init__(self, hosts: list[str], **config):
        super().__init__(hosts=[redis_clients.async_pool_kwargs(url) for url in hosts], **config)

    async def receive_single(self, channel):
        """channels_redis's, given a moment to finish when the receive waiting on it is cancelled
        (Channels cancels a consumer's receive when its client goes; the relays cancel their readers).

        For the process's own channels one receive at a time pops the process's messages off Redis
        and hands each to its channel's buffer. Cancelled, channels_redis drops the connection, and a
        message Redis had popped for it by then, its answer not yet read, was lost, whichever channel
        it was for (channels_redis issue 366): on a busy loop a relayed response stalled for good.
        Here a pop whose answer is on its way gets POP_GRACE_S to read it, and the message goes to its
        channel's buffer; a pop still waiting for a message is cancelled as before."""
        if "!" not in channel:
            return await super().receive_single(channel)
        popping = asyncio.ensure_future(super().receive_single(channel))
        try:
            return await asyncio.shield(popping)
        except asyncio.CancelledError:
            try:
                await asyncio.wait([popping], timeout=POP_GRACE_S)
            finally:
                if popping.done():
                    self._to_buffers(popping)
                else:
                    popping.cancel()
            raise

    def _to_buffers(self, popping: asyncio.Future) -> None:
        if popping.cancelled() or popping.exception() is not None:
            return
        channels, message = popping.result()
        for channel in channels if isinstance(channels, list) else [channels]:
            self.receive_buffer[channel].put_nowait(message)

    async def groups_with_members(self, groups: Iterable[str]) -> set[str]:
        """Those of `groups` with a member, members past group_expiry dropped first as group_send
        drops them: one round trip per Redis host."""
        by_host: dict[int, list[str]] = {}
        for group in dict.fromkeys(groups):
            by_host.setdefault(self.consistent_hash(group), []).append(group)
        expired_before = int(time.time()) - self.group_expiry
        listened = set()
        for host, names in by_host.items():
            pipe = self.connection(host).pipeline(transaction=False)
            for group in names:
                pipe.zremrangebyscore(self._group_key(group), min=0, max=expired_before)
                pipe.zcard(self._group_key(group))
            members = (await pipe.execute())[1::2]
            listened.update(group for group, count in zip(names, members, strict=True) if count)
        return listened


class ThreadSafeInMemoryChannelLayer(InMemoryChannelLayer):
    """InMemoryChannelLayer whose sends from another thread reach the receiver.

    The embedded worker and live ticker publish from threads of their own, each with its own event
    loop, while websocket consumers wait on the server's loop; an asyncio queue is not thread-safe,
    so a message put from another loop may sit unnoticed. A send for a channel whose receiver waits
    on another loop is handed to that loop.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._receiver_loops: dict[str, asyncio.AbstractEventLoop] = {}

    async def receive(self, channel):
        self._receiver_loops[channel] = asyncio.get_running_loop()
        try:
            return await super().receive(channel)
        finally:
            if channel not in self.channels:  # the channel is gone (disconnected): forget its loop
                self._receiver_loops.pop(channel, None)

    async def groups_with_members(self, groups: Iterable[str]) -> set[str]:
        """Those of `groups` with a member (expired members dropped first, as group_send drops them),
        so infra.live skips the others: a pass publishes thousands of events nobody may be watching."""
        self._clean_expired()
        return {group for group in dict.fromkeys(groups) if self.groups.get(group)}

    async def send(self, channel, message):
        loop = self._receiver_loops.get(channel)
        if loop is None or loop is asyncio.get_running_loop() or loop.is_closed():
            return await super().send(channel, message)
        handed_over = asyncio.run_coroutine_threadsafe(super().send(channel, message), loop)
        return await asyncio.wrap_future(handed_over)
