"""Django's PostgreSQL backend, whose connection pool tests a connection it lends without a round trip."""

import select

import psycopg
from django.db.backends.postgresql import base


def idle_connection_is_alive(conn: psycopg.Connection) -> None:
    """Raise (closing the connection, so the pool replaces it) unless it can still serve a request.

    A pooled connection is idle, and PostgreSQL writes nothing to an idle session it keeps. When it
    ends one (a restart, a failover, pg_terminate_backend), it writes the error and closes the
    socket, so a socket with something to read means the session is gone. Checking that costs one
    non-blocking poll. Django's CONN_HEALTH_CHECKS has the pool send an empty query instead, which
    is a round trip to PostgreSQL on every request.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the pooled connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        conn.close()
        raise psycopg.OperationalError("PostgreSQL ended the pooled connection's session")


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        # Django builds the pool with psycopg_pool's empty-query check or none, and takes no other.
        if pool is not None and pool._check is not idle_connection_is_alive:
            pool._check = idle_connection_is_alive
        return pool
