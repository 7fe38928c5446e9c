"""Django's PostgreSQL backend, whose connection pool tests a connection it lends without a round trip,
and whose cursors retry a read once when PostgreSQL ends the session under it."""

import select

import psycopg
from django.db import InterfaceError, OperationalError
from django.db.backends import utils
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


class RetriesAReadOnce:
    """A cursor whose SELECT, run on its own (autocommit, no atomic block), is run once more on a fresh
    connection when the session it ran on was lost before it answered.

    The pool's check covers a session that ended while idle; this covers one that ends while a request
    holds it (between two of its queries, or during one). Only such a read is safe to repeat: it is a
    transaction of its own, so nothing before it is lost with the session, and it changed nothing, so
    running it again is the same as running it a moment later. A write may have been applied before
    the session ended, and a statement in a transaction needs the transaction's earlier work: those
    fail as before, and the API answers 503 with Retry-After (infra.api.errors). A query that failed
    for another reason (a timeout, a cancel) leaves the session usable and is not repeated either.
    """

    def _execute(self, sql, params, *ignored_wrapper_args):
        try:
            return super()._execute(sql, params, *ignored_wrapper_args)
        except (OperationalError, InterfaceError):
            if not self._may_run_again(sql):
                raise
        name = getattr(self.cursor, "name", None)  # a server-side (chunked) cursor keeps its kind
        self.db.close()  # back to the pool, which drops a lost session
        self.db.ensure_connection()
        self.cursor = self.db.create_cursor(name)
        return super()._execute(sql, params, *ignored_wrapper_args)

    def _may_run_again(self, sql) -> bool:
        session = self.db.connection
        lost = session is None or session.closed
        alone = self.db.autocommit and not self.db.in_atomic_block
        read = isinstance(sql, str) and sql.lstrip()[:6].upper() == "SELECT"
        return lost and alone and read


class CursorWrapper(RetriesAReadOnce, utils.CursorWrapper):
    pass


class CursorDebugWrapper(RetriesAReadOnce, base.CursorDebugWrapper):
    pass


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        # Django builds the pool with psycopg_pool's empty-query check or none, and takes no other.
        if pool is not None and pool._check is not idle_connection_is_alive:
            pool._check = idle_connection_is_alive
        return pool

    def make_cursor(self, cursor):
        return CursorWrapper(cursor, self)

    def make_debug_cursor(self, cursor):
        return CursorDebugWrapper(cursor, self)
