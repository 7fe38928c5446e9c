"""The production cache backend: Django's Redis cache with one redis client per connection pool."""

import os

import pytest

from infra import rate_limits
from infra.redis_cache import RedisCache


@pytest.mark.postgres  # the PostgreSQL + Redis pass: needs a Redis server
def test_one_client_serves_every_operation_and_the_cache_works():
    cache = RedisCache(os.environ["REDIS_URL"], {"KEY_PREFIX": "test-redis-cache"})
    cache.clear()

    assert cache.add("n", 0, 30) is True
    assert cache.add("n", 5, 30) is False
    assert cache.incr("n") == 1
    cache.set("token", {"user": 7}, 30)
    assert cache.get("token") == {"user": 7}
    assert cache.get("missing", "default") == "default"

    writer, reader = cache._cache.get_client(write=True), cache._cache.get_client()
    assert writer is reader  # one server: reads and writes share its pool, hence its client
    cache.clear()


@pytest.mark.postgres
def test_a_rate_hit_is_one_round_trip_and_its_counter_reads_through_the_cache(monkeypatch):
    cache = RedisCache(os.environ["REDIS_URL"], {"KEY_PREFIX": "test-rate-hit"})
    cache.clear()
    monkeypatch.setattr(rate_limits, "cache", cache)
    client = cache._cache.get_client(write=True)
    rate_limits.hit("login:x", 60, now=1000.25)  # the first call may load the script
    sent = []
    execute = client.execute_command
    monkeypatch.setattr(
        client, "execute_command", lambda *args, **kw: sent.append(args[0]) or execute(*args, **kw)
    )

    second = rate_limits.hit("login:x", 60, now=1030.0)
    next_window = rate_limits.hit("login:x", 60, now=1061.0)

    assert sent == ["EVALSHA", "EVALSHA"]
    assert (second.counter, second.hits, second.ends_in_s) == ("login:x:1000.25:0", 2, 30.25)
    assert (next_window.counter, next_window.hits) == ("login:x:1000.25:1", 1)
    rate_limits.take_back(second)
    assert cache.get("login:x:1000.25:0") == 1
    cache.clear()
