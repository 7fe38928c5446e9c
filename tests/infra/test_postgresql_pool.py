"""The pool's check before it lends a connection: no round trip, yet a session PostgreSQL ended is
never lent."""

import time

import psycopg
import pytest
from django.db import connection

from infra.postgresql.base import idle_connection_is_alive

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _connect() -> psycopg.Connection:
    params = connection.settings_dict
    return psycopg.connect(
        dbname=params["NAME"],
        host=params["HOST"],
        port=params["PORT"] or 5432,
        user=params["USER"],
        autocommit=True,
    )


def test_a_live_idle_connection_passes_without_a_round_trip():
    with _connect() as conn, _connect() as admin:
        conn.execute("SELECT 1")

        def last_activity():
            sql = "SELECT state_change FROM pg_stat_activity WHERE pid = %s"
            return admin.execute(sql, [conn.info.backend_pid]).fetchone()[0]

        before = last_activity()
        idle_connection_is_alive(conn)
        assert last_activity() == before  # an empty query (Django's health check) would move it
        assert conn.execute("SELECT 1").fetchone() == (1,)


def _end_session(pid: int) -> None:
    with _connect() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        deadline = time.monotonic() + 5
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.05)


def test_a_session_the_server_ended_is_refused_and_closed():
    with _connect() as conn:
        _end_session(conn.info.backend_pid)
        with pytest.raises(psycopg.OperationalError, match="ended the pooled connection"):
            idle_connection_is_alive(conn)
        assert conn.closed  # so the pool counts it lost and opens another


def test_a_closed_connection_is_refused():
    conn = _connect()
    conn.close()
    with pytest.raises(psycopg.OperationalError, match="closed"):
        idle_connection_is_alive(conn)


def test_djangos_pool_never_lends_a_session_the_server_ended():
    pool = connection.pool
    conn = pool.getconn()
    ended = conn.info.backend_pid
    pool.putconn(conn)
    _end_session(ended)
    held = []
    try:
        for _ in range(pool.get_stats()["pool_available"]):  # every connection the pool holds now
            conn = pool.getconn(timeout=5)
            held.append(conn)
            assert conn.info.backend_pid != ended
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for conn in held:
            pool.putconn(conn)
