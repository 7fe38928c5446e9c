"""Django's Redis cache, building its redis client once per connection pool instead of per call, and
connecting through infra.redis_clients (every call bounded; none for a moment after Redis did not answer).

Django's RedisCacheClient makes a new `redis.Redis` for every cache operation; building one (its
response callbacks and options) cost about as much CPU as the round trip itself, and an API call
makes three (token, throttle, pass queue). A client over a pool is thread-safe, and Django
already keeps one cache object per thread.
"""

import re

from django.core.cache.backends import redis

from infra import redis_clients


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


# One fixed-window hit in one round trip (infra.rate_limits.hit has the rules): the anchor is set if
# missing, the window's counter incremented and given its expiry on its first hit. Values stay plain
# strings and integers, so the cache API reads the counter (cache.decr in take_back).
_HIT = """
local anchor = redis.call('GET', KEYS[1])
if not anchor then
  anchor = ARGV[1]
  redis.call('SET', KEYS[1], anchor, 'EX', ARGV[3])
end
local index = math.floor((tonumber(ARGV[1]) - tonumber(anchor)) / tonumber(ARGV[2]))
if index < 0 then index = 0 end
local counter = ARGV[4] .. anchor .. ':' .. index
local hits = redis.call('INCR', counter)
if hits == 1 then redis.call('EXPIRE', counter, 2 * tonumber(ARGV[2])) end
return {anchor, index, hits}
"""


class RedisCache(redis.RedisCache):
    def __init__(self, server, params):
        first = re.split("[;,]", server)[0] if isinstance(server, str) else server[0]  # as Django splits
        options = {**redis_clients.pool_options(first), **params.get("OPTIONS", {})}
        super().__init__(server, {**params, "OPTIONS": options})
        self._class = _ClientPerPool
        self._hit_script = None

    def count_hit(self, key: str, duration_s: int, now: float, anchor_ttl_s: int) -> tuple[float, int, int]:
        """Count one hit of `key`'s windows, anchored at its first hit: (anchor, window index, hits)."""
        client = self._cache.get_client(write=True)
        if self._hit_script is None:
            self._hit_script = client.register_script(_HIT)
        counters = self.make_key(f"{key}:")  # + anchor:index, as make_key would name the counter
        anchor, index, hits = self._hit_script(
            # Not the cache API's `:anchor` (a pickled float): processes of either kind may share Redis.
            keys=[self.make_key(f"{key}:anchored-at")],
            args=[repr(now), duration_s, anchor_ttl_s, counters],
            client=client,
        )
        return float(anchor), int(index), int(hits)
