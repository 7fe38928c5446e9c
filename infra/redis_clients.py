"""How the portal's Redis clients connect: every connect and reply bounded, and no call at all for a
moment after Redis did not answer.

Why: Redis that accepts connections but never answers (a hung server, a dropped route, a half-open
connection) made every API call wait 6-10 s on it and held the HTTP threads. Here a connect or a
reply waits at most REDIS_TIMEOUT_S, and an address that did not answer in time (or refused) is not
asked again for REDIS_RETRY_AFTER_S: calls fail at once, as a refusal does, so the callers' fallbacks
(this process's rate counters, the periodic pass, the next page load) cost a request nothing. The
first call after that asks Redis again. Readiness (portal.health) asks Redis itself every time.

The cache (infra.redis_cache) and the channel layer (infra.channel_layers) connect through these
classes; the Celery broker's connections have the same bounds in their transport options.
"""

import logging
import threading
import time

from django.conf import settings
from redis import asyncio as redis_asyncio
from redis import connection as redis_sync
from redis.exceptions import ConnectionError, TimeoutError

log = logging.getLogger(__name__)

# Commands that wait on the server up to the timeout they name last (the channel layer's receive
# waits 5 s for a message): their reply may take that long on top of the bound.
BLOCKING_COMMANDS = frozenset({"BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"})

_away_until: dict[str, float] = {}  # address -> time.monotonic() until which it is not asked
_lock = threading.Lock()


def check(address: str) -> None:
    """Raise ConnectionError while `address` did not answer less than REDIS_RETRY_AFTER_S ago."""
    until = _away_until.get(address)
    if until is not None and time.monotonic() < until:
        raise ConnectionError(f"Redis at {address} was away less than {settings.REDIS_RETRY_AFTER_S} s ago")


def found_away(address: str, error: Exception) -> None:
    """`address` refused or did not answer: calls to it fail at once for REDIS_RETRY_AFTER_S."""
    with _lock:
        was_away = time.monotonic() < _away_until.get(address, 0.0)
        _away_until[address] = time.monotonic() + settings.REDIS_RETRY_AFTER_S
    if not was_away:
        log.warning(
            "Redis at %s is away (%s); calls to it fail at once for %s s, then it is asked again",
            address,
            error,
            settings.REDIS_RETRY_AFTER_S,
        )


class _Bounded:
    """Mixin for redis-py's connection classes: check() before connecting or sending, found_away() on
    a connect or reply that failed or timed out."""

    def connect_check_health(self, *args, **kwargs):
        check(self._host_error())
        try:
            return super().connect_check_health(*args, **kwargs)
        except (ConnectionError, TimeoutError) as error:
            found_away(self._host_error(), error)
            raise

    def send_packed_command(self, *args, **kwargs):
        check(self._host_error())
        return super().send_packed_command(*args, **kwargs)

    def read_response(self, *args, **kwargs):
        try:
            return super().read_response(*args, **kwargs)
        except (ConnectionError, TimeoutError) as error:
            found_away(self._host_error(), error)
            raise


class _BoundedAsync:
    """The same for redis.asyncio's connections (the channel layer), where a blocking pop may also
    wait the timeout it names."""

    _waits_s = 0.0  # how long the command just sent may wait on the server before it replies

    async def connect_check_health(self, *args, **kwargs):
        check(self._host_error())
        try:
            return await super().connect_check_health(*args, **kwargs)
        except (ConnectionError, TimeoutError) as error:
            found_away(self._host_error(), error)
            raise

    async def send_packed_command(self, *args, **kwargs):
        check(self._host_error())
        return await super().send_packed_command(*args, **kwargs)

    async def send_command(self, *args, **kwargs):
        blocking = bool(args) and str(args[0]).upper() in BLOCKING_COMMANDS
        self._waits_s = float(args[-1]) if blocking else 0.0
        return await super().send_command(*args, **kwargs)

    async def read_response(self, disable_decoding=False, timeout=None, **kwargs):
        if timeout is None and self._waits_s:
            timeout = self.socket_timeout + self._waits_s
        self._waits_s = 0.0
        try:
            return await super().read_response(disable_decoding, timeout, **kwargs)
        except (ConnectionError, TimeoutError) as error:
            found_away(self._host_error(), error)
            raise


class Connection(_Bounded, redis_sync.Connection):
    pass


class SSLConnection(_Bounded, redis_sync.SSLConnection):
    pass


class UnixDomainSocketConnection(_Bounded, redis_sync.UnixDomainSocketConnection):
    pass


class AsyncConnection(_BoundedAsync, redis_asyncio.Connection):
    pass


class AsyncSSLConnection(_BoundedAsync, redis_asyncio.SSLConnection):
    pass


class AsyncUnixDomainSocketConnection(_BoundedAsync, redis_asyncio.UnixDomainSocketConnection):
    pass


_BOUNDED = {
    redis_sync.Connection: Connection,
    redis_sync.SSLConnection: SSLConnection,
    redis_sync.UnixDomainSocketConnection: UnixDomainSocketConnection,
    redis_asyncio.Connection: AsyncConnection,
    redis_asyncio.SSLConnection: AsyncSSLConnection,
    redis_asyncio.UnixDomainSocketConnection: AsyncUnixDomainSocketConnection,
}


def pool_options(url: str) -> dict:
    """Options for redis-py's ConnectionPool.from_url(url, ...): the bounded connection class of the
    URL's scheme and the timeouts."""
    plain = redis_sync.parse_url(url).get("connection_class", redis_sync.Connection)
    return {"connection_class": _BOUNDED[plain], **_timeouts()}


def async_pool_kwargs(url: str) -> dict:
    """Keyword arguments for redis.asyncio's ConnectionPool(...) on `url`, bounded likewise (its
    from_url would put the plain class of a rediss:// or unix:// URL back)."""
    kwargs = dict(redis_asyncio.connection.parse_url(url))
    plain = kwargs.get("connection_class", redis_asyncio.Connection)
    return {**kwargs, "connection_class": _BOUNDED[plain], **_timeouts()}


def _timeouts() -> dict:
    return {"socket_connect_timeout": settings.REDIS_TIMEOUT_S, "socket_timeout": settings.REDIS_TIMEOUT_S}
