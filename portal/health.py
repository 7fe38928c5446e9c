"""Health of this process for probes: liveness asks nothing; readiness checks each service it needs."""

import json
import logging

import redis
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection

log = logging.getLogger(__name__)

LIVE = {"status": "ok"}
LIVE_PATH = "/healthz/live"


class AnswersLiveness:
    """ASGI wrapper answering LIVE_PATH on the event loop itself; every other request goes to `app`.

    Why: Django's views run on the server's few HTTP threads (infra.http_threads). When every thread
    waits on a service, a liveness probe queued behind them answered after 13 s, and an orchestrator
    would restart a process that is alive. Here it is answered before any thread is involved.
    """

    def __init__(self, app):
        self.app = app
        self.body = json.dumps(LIVE).encode()

    async def __call__(self, scope, receive, send):
        if scope["path"] != LIVE_PATH:
            return await self.app(scope, receive, send)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(self.body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else self.body})


def database_status() -> str:
    """'ok', or 'error' when the database (or a free pooled connection) cannot be had; the probe is
    public, so the driver's words (hosts, users) go to the log only."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        log.warning("readiness: the database cannot be reached: %s", error)
        return "error"
    return "ok"


def redis_status() -> str:
    """'ok', 'error' (the details are logged), or 'not used' in the embedded default (no REDIS_URL)."""
    if not settings.REDIS_URL:
        return "not used"
    timeout = settings.REDIS_TIMEOUT_S
    try:  # a client of its own, not infra.redis_clients': the probe asks Redis every time
        with redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=timeout, socket_timeout=timeout, retry=None
        ) as client:
            client.ping()
    except redis.RedisError as error:
        log.warning("readiness: Redis cannot be reached: %s", error)
        return "error"
    return "ok"


def readiness() -> dict:
    """{"status": "ok"|"unavailable", "database": …, "redis": …}: unavailable when any service is in error."""
    services = {"database": database_status(), "redis": redis_status()}
    ready = all(state != "error" for state in services.values())
    return {"status": "ok" if ready else "unavailable", **services}
