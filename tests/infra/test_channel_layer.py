import asyncio
import os
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from infra.live import _send_all


def test_channel_layer_matches_configuration_and_delivers():
    layer = get_channel_layer()
    expected = "RedisChannelLayer" if os.environ.get("REDIS_URL") else "ThreadSafeInMemoryChannelLayer"
    assert type(layer).__name__ == expected

    async def roundtrip():
        channel = await layer.new_channel()
        await layer.group_add("test-group", channel)
        await layer.group_send("test-group", {"type": "ping", "n": 7})
        message = await layer.receive(channel)
        await layer.group_discard("test-group", channel)
        return message

    assert async_to_sync(roundtrip)() == {"type": "ping", "n": 7}


def test_a_send_from_another_threads_loop_wakes_a_receiver_waiting_on_this_one():
    """What the embedded worker and live ticker do: publish from a thread while consumers wait."""
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("threads", channel)
        waiting = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0.05)  # the receiver now waits on this loop
        sender = threading.Thread(
            target=lambda: async_to_sync(layer.group_send)("threads", {"type": "ping", "n": 8})
        )
        started = time.monotonic()
        sender.start()
        message = await asyncio.wait_for(waiting, timeout=5)
        await layer.group_discard("threads", channel)
        sender.join()
        return message, time.monotonic() - started

    message, seconds = async_to_sync(scenario)()

    assert message == {"type": "ping", "n": 8}
    assert seconds < 2  # a plain asyncio queue would leave the receiver asleep until timeout


def test_live_updates_go_only_to_groups_someone_listens_to(monkeypatch):
    """The layer names the listened groups (on Redis in one round trip); a group nobody joined gets no
    group_send at all. Both layers: the in-memory one in the SQLite pass, Redis's in the other."""
    layer = get_channel_layer()
    sent = []
    group_send = layer.group_send

    async def counting_send(group, message):
        sent.append(group)
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", counting_send)

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("team-listened", channel)
        listened = await layer.groups_with_members(["team-listened", "team-nobody", "team-listened"])
        await _send_all(
            [
                ("team-nobody", {"type": "team.event", "n": 1}),
                ("team-listened", {"type": "team.event", "n": 2}),
            ]
        )
        message = await layer.receive(channel)
        await layer.group_discard("team-listened", channel)
        return listened, message

    listened, message = async_to_sync(scenario)()

    assert listened == {"team-listened"}
    assert sent == ["team-listened"]
    assert message == {"type": "team.event", "n": 2}


@pytest.mark.postgres  # the PostgreSQL + Redis pass: the Redis layer
def test_a_message_popped_for_a_receive_cancelled_meanwhile_still_reaches_its_channel(settings):
    """One receive pops all the process's messages off Redis. channels_redis lost the one Redis had
    popped and answered when that receive was cancelled before reading the answer (issue 366); the
    waiting receive of its channel then waited for good."""
    from infra.channel_layers import RedisChannelLayer

    layer, sender = RedisChannelLayer([settings.REDIS_URL]), RedisChannelLayer([settings.REDIS_URL])

    async def scenario():
        popper, other = await layer.new_channel(), await layer.new_channel()
        popping = asyncio.ensure_future(layer.receive(popper))
        waiting = asyncio.ensure_future(layer.receive(other))
        await asyncio.sleep(0.3)  # the first receive waits in Redis's blocking pop, the other on it
        # a message for the other channel, sent while this loop is held: Redis pops it for the pop
        # that waits, and answers; then that receive is cancelled before this loop reads the answer
        sending = threading.Thread(target=lambda: asyncio.run(sender.send(other, {"type": "ping"})))
        sending.start()
        sending.join()
        time.sleep(0.2)
        popping.cancel()
        return await asyncio.wait_for(waiting, timeout=10)

    assert async_to_sync(scenario)() == {"type": "ping"}
