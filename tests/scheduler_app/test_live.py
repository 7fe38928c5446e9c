"""Live updates leave after commit, in order, from the serving loop when there is one."""

import asyncio
import threading

import pytest
from channels.layers import get_channel_layer
from django.db import transaction

from infra import live


@pytest.fixture
def loop_in_thread():
    """An event loop running in a thread of its own, as an ASGI server's is."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


def listen(loop, group: str, count: int):
    """Join `group` on `loop`; returns a future of its next `count` messages."""
    layer = get_channel_layer()

    async def join():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    channel = asyncio.run_coroutine_threadsafe(join(), loop).result(5)

    async def collect():
        return [await layer.receive(channel) for _ in range(count)]

    return asyncio.run_coroutine_threadsafe(collect(), loop)


@pytest.mark.django_db(transaction=True)
def test_updates_go_out_in_order_from_the_serving_loop_after_commit(loop_in_thread, monkeypatch):
    monkeypatch.setattr(live, "serving_loop", lambda: loop_in_thread)
    received = listen(loop_in_thread, live.team_group(7), 40)

    with transaction.atomic():
        for n in range(40):
            live.publish_after_commit(7, {"n": n})
        assert not received.done()  # nothing before the commit

    assert [message["n"] for message in received.result(10)] == list(range(40))


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_change_is_never_published(loop_in_thread, monkeypatch):
    monkeypatch.setattr(live, "serving_loop", lambda: loop_in_thread)
    received = listen(loop_in_thread, live.team_group(8), 1)

    with pytest.raises(RuntimeError), transaction.atomic():
        live.publish_after_commit(8, {"n": "rolled back"})
        raise RuntimeError
    with transaction.atomic():
        live.publish_after_commit(8, {"n": "kept"})

    assert [message["n"] for message in received.result(10)] == ["kept"]
