"""The budget page, the statement CSV, the billing switch on a request's page, and spend on the home page."""

import datetime as dt

import pytest
from django.test import Client

from billing_app.budgets import check_budgets, set_budget
from billing_app.metering import meter_usage
from billing_app.models import Budget
from scheduler_app.choices import BillingMode
from tests.billing_app.conftest import T0, finish, price_history, start_running  # noqa: F401 (fixtures)

H = dt.timedelta(hours=1)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def billed(pool, price_history, start_running):  # noqa: F811
    price_history(pool, (T0 - H, "4.00"))
    finish(start_running(milli=500), T0 + H)
    meter_usage(T0 + 10 * H)


def test_the_budget_page_shows_spend_breakdowns_and_the_chart(member, billed, settings):
    page = signed_in(member).get("/teams/vision/budget/")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="burn-down"' in html and "vendor/plotly/plotly.min.js" in html and "js/budget.js" in html
    assert page.context["view"].spend_usd == 2  # half a card, an hour, at 4 USD/GPU-h
    assert [row["user"] for row in page.context["view"].statement.by_user] == ["bob"]
    assert "Set the budget" not in html  # a member reads, the admins set


def test_the_budget_page_shows_the_teams_budget_alerts_and_follows_its_stream(
    member, team_admin, team, billed, django_capture_on_commit_callbacks
):
    set_budget(team, actor=team_admin, monthly_usd="2.50")  # 2 USD spent: 80 %
    with django_capture_on_commit_callbacks(execute=True):
        check_budgets(T0 + 10 * H)

    page = signed_in(member).get("/teams/vision/budget/")

    alerts = page.content.decode().split('id="budget-alerts"')[1].split('id="budget-live"')[0]
    assert "80.0 % spent" in alerts and "past 80 %" in alerts and "past 50 %" in alerts
    assert page.context["streams"] == ["/ws/teams/vision/events/"]
    assert "js/live.js" in page.content.decode()


def test_a_team_admin_sets_the_budget_from_the_page(team_admin, team, billed):
    client = signed_in(team_admin)
    answer = client.post(
        "/teams/vision/budget/set/",
        {"monthly_usd": "20.00", "thresholds": "50, 80, 100", "policy": "switch_to_spot", "grace_s": "0"},
    )
    assert answer.status_code == 302
    budget = Budget.objects.get(team=team)
    assert (str(budget.monthly_usd), budget.thresholds_percent, budget.policy) == (
        "20.00",
        [50, 80, 100],
        "switch_to_spot",
    )
    assert "10.0" in client.get("/").content.decode()  # the home page: 2 of 20 USD


def test_bad_budget_input_says_what_is_wrong_and_writes_nothing(team_admin, team):
    answer = signed_in(team_admin).post(
        "/teams/vision/budget/set/",
        {"monthly_usd": "20", "thresholds": "fifty", "policy": "alert_only", "grace_s": "0"},
    )
    assert answer.status_code == 400
    assert "Give whole percentages" in answer.content.decode()
    assert not Budget.objects.exists()


def test_a_member_cannot_set_the_budget(member, team):
    answer = signed_in(member).post(
        "/teams/vision/budget/set/",
        {"monthly_usd": "20", "thresholds": "50", "policy": "alert_only", "grace_s": "0"},
    )
    assert answer.status_code == 403
    assert not Budget.objects.exists()


def test_another_teams_budget_and_statement_are_not_found(outsider, billed):
    client = signed_in(outsider)
    assert client.get("/teams/vision/budget/").status_code == 404
    assert client.get("/teams/vision/statement.csv").status_code == 404


def test_the_statement_csv_from_the_page(member, billed):
    answer = signed_in(member).get(f"/teams/vision/statement.csv?month={T0:%Y-%m}")
    assert answer.status_code == 200
    header, row = answer.content.decode().strip().splitlines()
    assert header.startswith("start,end,seconds,team,user") and ",bob," in row
    assert signed_in(member).get("/teams/vision/statement.csv?month=June").status_code == 400


def test_switching_billing_from_the_request_page(member, start_running):  # noqa: F811
    request = start_running(milli=250, at=dt.datetime.now(dt.UTC) - H)
    client = signed_in(member)
    assert "Switch to spot billing" in client.get(f"/requests/{request.pk}/").content.decode()

    switch = f"/requests/{request.pk}/billing/"
    client.post(switch, {"billing_mode": "spot", "checkpoint_interval_min": "abc"})
    assert request.allocations.get(ended_at__isnull=True).billing_mode == BillingMode.ON_DEMAND
    client.post(switch, {"billing_mode": "spot", "checkpoint_interval_min": "10"})
    assert request.allocations.get(ended_at__isnull=True).billing_mode == BillingMode.SPOT
    assert "Switch to on-demand billing" in client.get(f"/requests/{request.pk}/").content.decode()


def test_switching_to_spot_from_the_request_page_asks_the_checkpoint_interval_in_minutes(
    member,
    start_running,  # noqa: F811
):
    request = start_running(milli=250, at=dt.datetime.now(dt.UTC) - H)
    client = signed_in(member)
    assert 'name="checkpoint_interval_min"' in client.get(f"/requests/{request.pk}/").content.decode()

    client.post(f"/requests/{request.pk}/billing/", {"billing_mode": "spot", "checkpoint_interval_min": "15"})

    request.refresh_from_db()
    assert (request.billing_mode, request.checkpoint_interval_s) == (BillingMode.SPOT, 900)


def test_an_outsider_cannot_switch_from_the_page(outsider, start_running):  # noqa: F811
    request = start_running()
    assert (
        signed_in(outsider).post(f"/requests/{request.pk}/billing/", {"billing_mode": "spot"}).status_code
        == 404
    )
