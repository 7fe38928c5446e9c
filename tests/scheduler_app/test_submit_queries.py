"""The submit path reads only what it does not already hold (bench.load measures what that buys)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import validated_request

SHARE = {"name": "train", "task_type": "training", "gpu_milli": 250}


def selects(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]


def assert_one_locked_read(captured) -> None:
    """The request's row is read once: the visible row, locked (where the database has row locks)."""
    request_reads = [sql for sql in selects(captured) if 'FROM "scheduler_app_gpurequest"' in sql]
    assert len(request_reads) == 1, request_reads
    if connection.vendor == "postgresql":
        assert 'FOR UPDATE OF "scheduler_app_gpurequest"' in request_reads[0], request_reads


def test_validating_a_share_reads_only_the_membership_the_pool_and_the_budgets(team, member, pool, make_node):
    make_node()

    with CaptureQueriesContext(connection) as captured:
        validated_request(user=member, team=team, pool_name="a100", **SHARE)

    reads = selects(captured)
    assert len(reads) == 3, reads
    assert "portal_membership" in reads[0]
    assert "scheduler_app_pool" in reads[1]
    assert "billing_app_budget" in reads[2]  # a team without budgets: one read, no spend summed


@pytest.mark.parametrize("extra", [{"gpu_model": "A100-80GB"}, {"gpu_memory_mib": 40_000}])
def test_a_model_or_memory_ask_costs_one_look_at_the_cards(team, member, pool, make_node, extra):
    make_node()

    with CaptureQueriesContext(connection) as captured:
        validated_request(user=member, team=team, pool_name="a100", **SHARE, **extra)

    card_reads = [sql for sql in selects(captured) if "scheduler_app_gpu" in sql]
    assert len(card_reads) == 1, card_reads


def test_an_api_submit_asks_the_membership_once(api_client, member, make_node):
    """The team is found through the user's memberships; that answers the submit's own check too."""
    make_node()
    client = api_client(member)

    with CaptureQueriesContext(connection) as captured:
        answer = client.post("/api/v1/requests/", SHARE, format="json")

    assert answer.status_code == 201, answer.content
    membership_reads = [sql for sql in selects(captured) if "portal_membership" in sql]
    assert len(membership_reads) == 1, membership_reads


def test_cancel_answers_from_the_row_it_moved(api_client, member, team):
    client = api_client(member)
    created = client.post("/api/v1/requests/", SHARE, format="json").json()

    with CaptureQueriesContext(connection) as captured:
        answer = client.post(f"/api/v1/requests/{created['id']}/cancel/")

    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert_one_locked_read(captured)


@pytest.mark.parametrize(("action", "status"), [("cancel", 200), ("release", 409)])
def test_cancel_and_release_ask_the_membership_only_through_the_visible_row(
    api_client, member, team, action, status
):
    """The request is found through the user's memberships; that answers the permission check too
    (a pending request has nothing to release: refused after the check)."""
    client = api_client(member)
    created = client.post("/api/v1/requests/", SHARE, format="json").json()

    with CaptureQueriesContext(connection) as captured:
        answer = client.post(f"/api/v1/requests/{created['id']}/{action}/")

    assert answer.status_code == status, answer.content
    membership_reads = [sql for sql in selects(captured) if "portal_membership" in sql]
    assert len(membership_reads) == 1, membership_reads
    assert 'FROM "scheduler_app_gpurequest"' in membership_reads[0]


def test_release_moves_the_row_it_locked_without_reading_it_again(api_client, member, team, make_node):
    make_node()
    client = api_client(member)
    created = client.post("/api/v1/requests/", SHARE, format="json").json()
    run_scheduling_pass()

    with CaptureQueriesContext(connection) as captured:
        answer = client.post(f"/api/v1/requests/{created['id']}/release/")

    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"  # it never started
    assert_one_locked_read(captured)
