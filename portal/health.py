"""Health of this process for probes: liveness asks nothing; readiness checks each service it needs."""

import logging

import redis
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection

log = logging.getLogger(__name__)


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
    timeout = settings.REDIS_CONNECT_TIMEOUT_S
    try:
        with redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=timeout, socket_timeout=timeout
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
