"""A read whose session PostgreSQL ended while the portal held it (pg_terminate_backend, as a restart or
failover does) runs once more on a fresh connection; a write, a statement inside a transaction and a
query that failed for another reason are never run again (infra.postgresql)."""

import pytest
from django.db import OperationalError, connection, transaction

from teams.models import Team
from tests.infra.test_postgresql_pool import _end_session

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _session() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def test_a_read_whose_session_ended_runs_again_on_a_fresh_connection(team):
    ended = _session()
    _end_session(ended)

    assert list(Team.objects.values_list("slug", flat=True)) == ["vision"]

    assert _session() != ended


def test_a_chunked_read_whose_session_ended_runs_again_as_a_server_side_cursor(team):
    _end_session(_session())

    assert [t.slug for t in Team.objects.iterator(chunk_size=1)] == ["vision"]


def test_a_write_whose_session_ended_is_not_run_again(team):
    _end_session(_session())

    with pytest.raises(OperationalError):
        Team.objects.filter(pk=team.pk).update(name="Renamed")

    connection.close()  # as Django does after each request
    assert Team.objects.get().name == "Vision"


def test_a_read_inside_a_transaction_whose_session_ended_is_not_run_again(team):
    with pytest.raises(OperationalError), transaction.atomic():
        _end_session(_session())
        Team.objects.count()


def test_a_read_that_failed_on_a_live_session_is_not_run_again():
    session = _session()
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 50")
        try:
            with pytest.raises(OperationalError, match="statement timeout"):
                cursor.execute("SELECT pg_sleep(1)")
            assert _session() == session
        finally:
            cursor.execute("SET statement_timeout = 0")
