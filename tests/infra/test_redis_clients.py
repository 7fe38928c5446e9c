"""Every Redis client of the portal (infra/redis_clients.py): a Redis that accepts connections and never
answers costs a call one bounded wait, then none until it is asked again."""

import asyncio
import socket
import threading
import time
from contextlib import contextmanager, suppress

import pytest
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from infra import redis_clients
from infra.channel_layers import RedisChannelLayer
from infra.redis_cache import RedisCache

BOUND_S = 0.25


@contextmanager
def black_hole():
    """(Redis URL, address) of a loopback listener that accepts and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []

    def accept():
        with suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0", f"127.0.0.1:{port}"
    finally:
        listener.close()
        for connection in held:
            connection.close()


def seconds(call) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except RedisError as error:
        return time.monotonic() - started, error
    return time.monotonic() - started, None


def test_the_cache_waits_once_for_a_redis_that_never_answers_then_fails_at_once():
    with black_hole() as (url, address):
        cache = RedisCache(url, {})

        first, first_error = seconds(lambda: cache.get("token"))
        then, then_error = seconds(lambda: cache.set("token", 1))
        counted, _ = seconds(lambda: cache.count_hit("k", 60, time.time(), 3600))

    assert isinstance(first_error, TimeoutError) and BOUND_S <= first < BOUND_S + 0.5
    assert isinstance(then_error, ConnectionError) and then < 0.05 and counted < 0.05
    assert f"Redis at {address} was away" in str(then_error)


def test_after_the_pause_redis_is_asked_again():
    with black_hole() as (url, address):
        cache = RedisCache(url, {})
        seconds(lambda: cache.get("token"))
        redis_clients._away_until[address] = time.monotonic() - 0.001  # the pause is over

        again, error = seconds(lambda: cache.get("token"))

    assert isinstance(error, TimeoutError) and again >= BOUND_S


def test_one_address_away_leaves_the_others_alone():
    with black_hole() as (url, _), black_hole() as (other_url, _):
        seconds(lambda: RedisCache(url, {}).get("token"))

        other, error = seconds(lambda: RedisCache(other_url, {}).get("token"))

    assert isinstance(error, TimeoutError) and other >= BOUND_S  # asked, not refused at once


def test_the_channel_layer_waits_once_for_a_redis_that_never_answers_then_fails_at_once():
    with black_hole() as (url, _):
        layer = RedisChannelLayer(hosts=[url])

        async def sends():
            timings = []
            for _ in range(2):
                started = time.monotonic()
                with pytest.raises(RedisError) as error:
                    await layer.group_send("team-1", {"type": "team.event"})
                timings.append((time.monotonic() - started, error.value))
            return timings

        (first, first_error), (then, then_error) = asyncio.run(sends())

    assert isinstance(first_error, TimeoutError) and BOUND_S <= first < BOUND_S + 0.5
    assert isinstance(then_error, ConnectionError) and then < 0.05


@pytest.mark.postgres  # the PostgreSQL + Redis pass: needs a Redis server
def test_a_channel_layer_receive_waits_for_a_message_longer_than_the_bound(settings):
    layer = RedisChannelLayer(hosts=[settings.REDIS_URL])

    async def late_message():
        channel = await layer.new_channel()
        receiving = asyncio.ensure_future(layer.receive(channel))
        # A deliberate bounded wait: the message comes later than one reply may take, and the
        # receive must still be waiting then.
        await asyncio.sleep(3 * BOUND_S)
        assert not receiving.done(), receiving
        await layer.send(channel, {"type": "late"})
        return await asyncio.wait_for(receiving, timeout=10)

    assert asyncio.run(late_message()) == {"type": "late"}
