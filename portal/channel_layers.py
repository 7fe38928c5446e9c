"""The embedded default's channel layer: the in-memory one, made safe to publish to from other threads."""

import asyncio

from channels.layers import InMemoryChannelLayer


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

    async def send(self, channel, message):
        loop = self._receiver_loops.get(channel)
        if loop is None or loop is asyncio.get_running_loop() or loop.is_closed():
            return await super().send(channel, message)
        handed_over = asyncio.run_coroutine_threadsafe(super().send(channel, message), loop)
        return await asyncio.wrap_future(handed_over)
