"""Django's Redis cache, building its redis client once per connection pool instead of per call.

Django's RedisCacheClient makes a new `redis.Redis` for every cache operation; building one (its
response callbacks and options) cost about as much CPU as the round trip itself, and an API call
makes three or four (token, throttle, pass queue). A client over a pool is thread-safe, and Django
already keeps one cache object per thread.
"""

from django.core.cache.backends import redis


class _ClientPerPool(redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = _ClientPerPool
