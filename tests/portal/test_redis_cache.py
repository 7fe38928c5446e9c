"""The production cache backend: Django's Redis cache with one redis client per connection pool."""

import os

import pytest

from portal.redis_cache import RedisCache


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
