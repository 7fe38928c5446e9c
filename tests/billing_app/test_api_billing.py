"""Statements, CSV, budgets and the billing switch over REST: money as decimal strings, another team's
never visible, operators see every team's."""

import csv
import datetime as dt
import io

import pytest

from billing_app.metering import meter_usage
from billing_app.models import CapacityMove
from scheduler_app.choices import BillingMode
from scheduler_app.models import Allocation
from tests.billing_app.conftest import T0, finish

H = dt.timedelta(hours=1)


@pytest.fixture
def billed(pool, price_history, start_running, member, team_admin):
    """A month with two jobs: bob's 2 h of a half card and alice's 1 h of a whole one, at 4 USD/GPU-h."""
    price_history(pool, (T0 - H, "4.00"))
    finish(start_running(milli=500, name="bob-job"), T0 + 2 * H)
    finish(start_running(milli=1000, user=team_admin, name="alice-job"), T0 + H)
    meter_usage(T0 + 10 * H)


def month():
    return f"{T0:%Y-%m}"


def test_a_member_reads_the_teams_statement_with_strings_for_money(api_client, member, billed):
    answer = api_client(member).get(f"/api/v1/teams/vision/statement/?month={month()}")

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["total_usd"] == "8.00"
    assert body["by_user"] == [{"user": "alice", "usd": "4.00"}, {"user": "bob", "usd": "4.00"}]
    assert body["by_billing_mode"] == [{"billing_mode": "on-demand", "usd": "8.00"}]
    assert body["gpu_hours"] == "2.000"


def test_a_members_own_statement(api_client, member, billed):
    body = api_client(member).get(f"/api/v1/teams/vision/statement/?month={month()}&user=bob").json()
    assert (body["user"], body["total_usd"]) == ("bob", "4.00")


def test_the_csv_rows_add_up_to_the_statement(api_client, member, billed):
    answer = api_client(member).get(f"/api/v1/teams/vision/statement.csv?month={month()}")

    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert len(rows) == 2
    assert sum(float(r["amount_usd"]) for r in rows) == pytest.approx(8.0)
    assert {r["user"] for r in rows} == {"alice", "bob"}


def test_another_teams_ledger_and_budget_are_not_found(api_client, outsider, billed):
    client = api_client(outsider)
    for path in ("statement/", "statement.csv", "budget/"):
        assert client.get(f"/api/v1/teams/vision/{path}").status_code == 404
    assert (
        client.put("/api/v1/teams/vision/budget/", {"monthly_usd": "10.00"}, format="json").status_code == 404
    )


def test_operators_see_every_teams_statement(api_client, operator, member, outsider, billed):
    body = api_client(operator).get(f"/api/v1/statements/?month={month()}").json()
    assert {(s["team"], s["total_usd"]) for s in body} == {("vision", "8.00"), ("language", "0.00")}
    assert api_client(member).get("/api/v1/statements/").status_code == 403


def test_bad_month_or_user_is_a_clear_error(api_client, member, billed):
    client = api_client(member)
    bad_month = client.get("/api/v1/teams/vision/statement/?month=2026-13").json()
    assert bad_month["error"]["code"] == "validation_error" and "month" in bad_month["error"]["fields"]
    bad_user = client.get("/api/v1/teams/vision/statement/?user=mallory").json()
    assert "not a member" in bad_user["error"]["fields"]["user"][0]


def test_a_team_admin_sets_the_budget_and_a_member_cannot(api_client, team_admin, member, billed):
    answer = api_client(team_admin).put(
        "/api/v1/teams/vision/budget/",
        {"monthly_usd": "100.00", "policy": "block_on_demand", "thresholds_percent": [50, 90]},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["monthly_usd"], body["policy"], body["thresholds_percent"]) == (
        "100.00",
        "block_on_demand",
        [50, 90],
    )
    assert body["days"][-1]["left_usd"] is not None

    refused = api_client(member).put("/api/v1/teams/vision/budget/", {"monthly_usd": "1.00"}, format="json")
    assert refused.status_code == 403
    as_number = api_client(team_admin).put("/api/v1/teams/vision/budget/", {"monthly_usd": 5}, format="json")
    assert as_number.status_code == 400


def test_switching_billing_over_the_api(api_client, member, pool, price_history, start_running):
    price_history(pool, (T0 - H, "4.00"))
    request = start_running(milli=250, at=dt.datetime.now(dt.UTC) - H)
    client = api_client(member)

    no_interval = client.post(
        f"/api/v1/requests/{request.pk}/billing-mode/", {"billing_mode": "spot"}, format="json"
    )
    assert no_interval.status_code == 400
    assert "checkpoint" in no_interval.json()["error"]["fields"]["checkpoint_interval_s"][0]

    answer = client.post(
        f"/api/v1/requests/{request.pk}/billing-mode/",
        {"billing_mode": "spot", "checkpoint_interval_s": 900},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"billing_mode": "spot", "checkpoint_interval_s": 900}
    assert list(
        Allocation.objects.filter(request=request)
        .order_by("started_at")
        .values_list("billing_mode", flat=True)
    ) == [
        BillingMode.ON_DEMAND,
        BillingMode.SPOT,
    ]


def test_an_outsider_cannot_switch_another_teams_billing(api_client, outsider, start_running):
    request = start_running()
    answer = api_client(outsider).post(
        f"/api/v1/requests/{request.pk}/billing-mode/", {"billing_mode": "spot"}, format="json"
    )
    assert answer.status_code == 404
    assert request.allocations.get().billing_mode == BillingMode.ON_DEMAND


def test_back_to_on_demand_on_spot_capacity_asks_for_a_move(
    api_client, member, spot_pool, make_node, start_running
):
    gpu = make_node(name="spot-1", gpus=1, pool=spot_pool).gpus.get()
    request = start_running(milli=500, billing=BillingMode.SPOT, gpu=gpu)

    answer = api_client(member).post(
        f"/api/v1/requests/{request.pk}/billing-mode/", {"billing_mode": "on-demand"}, format="json"
    )

    assert answer.status_code == 200, answer.content
    move = CapacityMove.objects.get(request=request)
    assert (move.to_capacity_type, move.done_at) == ("on-demand", None)
    assert request.allocations.filter(ended_at__isnull=True).get().billing_mode == BillingMode.ON_DEMAND


def test_a_finished_request_cannot_switch(api_client, member, start_running):
    request = start_running()
    finish(request, T0 + H)
    answer = api_client(member).post(
        f"/api/v1/requests/{request.pk}/billing-mode/",
        {"billing_mode": "spot", "checkpoint_interval_s": 60},
        format="json",
    )
    assert answer.status_code == 409


def test_an_operator_reads_any_teams_statement_and_budget(api_client, operator, billed):
    client = api_client(operator)
    assert client.get(f"/api/v1/teams/vision/statement/?month={month()}").json()["total_usd"] == "8.00"
    assert client.get("/api/v1/teams/vision/budget/").status_code == 200


def test_errors_of_list_items_are_named_by_their_place_as_the_schema_says(api_client, team_admin, billed):
    answer = api_client(team_admin).put(
        "/api/v1/teams/vision/budget/",
        {"monthly_usd": "100.00", "thresholds_percent": [50, 5000, -1]},
        format="json",
    )

    assert answer.status_code == 400
    fields = answer.json()["error"]["fields"]
    assert set(fields) == {"thresholds_percent.1", "thresholds_percent.2"}
    assert all(isinstance(m, str) for messages in fields.values() for m in messages)
    assert answer.json()["error"]["message"].startswith("thresholds_percent.1: ")
