"""insert_rows: the pass's one-statement insert writes what bulk_create would, and hands back the pks."""

import datetime as dt

from django.contrib.contenttypes.models import ContentType

from audit.models import Event
from infra.bulk_insert import insert_rows
from scheduler_app.models import Allocation, GpuRequest


def test_insert_rows_writes_every_column_in_order_and_sets_pks(team):
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    kind = ContentType.objects.get_for_model(GpuRequest)
    rows = [
        Event(
            content_type=kind,
            object_id=40 + i,
            team=team if i % 2 else None,
            actor_label="scheduler",
            from_state="pending" if i else "",
            to_state="scheduled",
            reason=f"placed on card {i}",
            data={"milli": i * 100, "note": "é"} if i else {},
            created_at=at + dt.timedelta(seconds=i),
        )
        for i in range(3)
    ]

    saved = insert_rows(Event, rows)

    assert [e.pk for e in saved] == sorted(e.pk for e in saved) and None not in [e.pk for e in saved]
    stored = list(
        Event.objects.filter(pk__in=[e.pk for e in saved])
        .order_by("pk")
        .values_list("object_id", "team_id", "from_state", "reason", "data", "created_at")
    )
    note, later = "é", dt.timedelta(seconds=1)
    assert stored == [
        (40, None, "", "placed on card 0", {}, at),
        (41, team.pk, "pending", "placed on card 1", {"milli": 100, "note": note}, at + later),
        (42, None, "pending", "placed on card 2", {"milli": 200, "note": note}, at + 2 * later),
    ]
    assert all(not e._state.adding for e in saved)


def test_insert_rows_of_nothing_writes_nothing(db):
    assert insert_rows(Allocation, []) == []
    assert not Allocation.objects.exists()


def test_update_rows_writes_each_rows_own_values_in_one_statement(member, team):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from infra.bulk_insert import update_rows
    from scheduler_app.choices import RequestState
    from scheduler_app.services.requests import submit_request

    rows = [submit_request(user=member, team=team, name=f"job-{i}", gpu_milli=250) for i in range(3)]
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    for i, row in enumerate(rows):
        row.state = RequestState.PENDING  # a str enum, as the code sets it
        row.pending_reason = f"reason é {i}" if i != 1 else ""
        row.estimated_start_at = at + dt.timedelta(hours=i) if i != 2 else None

    with CaptureQueriesContext(connection) as statements:
        update_rows(GpuRequest, rows, ["state", "pending_reason", "estimated_start_at"])

    assert len(statements) == 1
    assert "UPDATE" in statements[0]["sql"]
    stored = list(
        GpuRequest.objects.filter(pk__in=[r.pk for r in rows])
        .order_by("pk")
        .values_list("state", "pending_reason", "estimated_start_at")
    )
    assert stored == [
        ("pending", "reason é 0", at),
        ("pending", "", at + dt.timedelta(hours=1)),
        ("pending", "reason é 2", None),
    ]
