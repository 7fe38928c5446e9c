"""Budgets: each threshold raises an event, a notice, a live message and an email once a month;
the 100 % policy holds in the submit path and stops running work after its grace period."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError

from audit.models import Event, Notice
from billing_app import budgets
from billing_app.budgets import budget_warning, check_budgets, set_budget
from billing_app.choices import BudgetPolicy
from billing_app.metering import meter_usage
from billing_app.services import set_pool_price
from scheduler_app.choices import BillingMode, RequestState
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import submit_request
from teams.permissions import NotAllowed
from tests.billing_app.conftest import T0, finish

H = dt.timedelta(hours=1)


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(
        budgets, "publish_after_commit", lambda team_id, message: sent.append((team_id, message))
    )
    return sent


@pytest.fixture
def spent(pool, price_history, start_running):
    """spent(hours) -> a whole card at 10 USD/GPU-h ran `hours` from T0 and was metered."""
    price_history(pool, (T0 - H, "10.00"))

    def spend(hours, name="job"):
        finish(start_running(milli=1000, name=name), T0 + hours * H)
        meter_usage(T0 + 20 * H)

    return spend


def test_each_threshold_alerts_once_a_month(
    team, team_admin, spent, published, django_capture_on_commit_callbacks
):
    team_admin.email = "alice@example.org"
    team_admin.save()
    set_budget(team, actor=team_admin, monthly_usd="100.00")
    spent(5.5)  # 55 USD

    with django_capture_on_commit_callbacks(execute=True):
        first = check_budgets(T0 + 20 * H)
        again = check_budgets(T0 + 21 * H)

    assert [c.threshold_percent for c in first] == [50]
    assert again == []
    assert Event.objects.filter(to_state="budget_crossed").count() == 1
    notice = Notice.objects.get(kind="budget")
    assert "55.0 %" in notice.text and "past 50 %" in notice.text
    assert next(m for team_id, m in published if m["object"] == "notice")["id"] == notice.pk
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.org"]


def test_crossing_80_then_100_raises_each(team, team_admin, spent, published):
    set_budget(team, actor=team_admin, monthly_usd="10.00")
    spent(0.85)
    assert [c.threshold_percent for c in check_budgets(T0 + 20 * H)] == [50, 80]
    spent(0.2, name="more")
    assert [c.threshold_percent for c in check_budgets(T0 + 20 * H)] == [100]


def test_crossing_80_percent_raises_an_event_a_notice_a_live_message_and_an_email(
    team, team_admin, spent, published, django_capture_on_commit_callbacks
):
    team_admin.email = "alice@example.org"
    team_admin.save()
    set_budget(team, actor=team_admin, monthly_usd="10.00", thresholds_percent=[80])
    spent(0.81)  # 8.10 USD

    with django_capture_on_commit_callbacks(execute=True):
        assert [c.threshold_percent for c in check_budgets(T0 + 20 * H)] == [80]

    event = Event.objects.get(to_state="budget_crossed")
    notice = Notice.objects.get(kind="budget", team=team)
    assert "past 80 %" in event.reason and "81.0 % spent" in notice.text
    assert [(team_id, m["object"], m["id"]) for team_id, m in published] == [(team.pk, "notice", notice.pk)]
    assert [(m.to, m.body) for m in mail.outbox] == [(["alice@example.org"], notice.text)]


def test_a_new_month_alerts_again(team, team_admin, pool, price_history, start_running, published):
    price_history(pool, (T0 - 40 * 24 * H, "10.00"))
    set_budget(team, actor=team_admin, monthly_usd="10.00", thresholds_percent=[50])
    last_month = T0 - dt.timedelta(days=30)
    finish(start_running(milli=1000, at=last_month, name="old"), last_month + 0.6 * H)
    meter_usage(last_month + 2 * H)
    assert [c.threshold_percent for c in check_budgets(last_month + 2 * H)] == [50]
    assert check_budgets(T0) == []  # this month: nothing spent yet

    finish(start_running(milli=1000, name="new"), T0 + 0.6 * H)
    meter_usage(T0 + 2 * H)

    assert [c.threshold_percent for c in check_budgets(T0 + 2 * H)] == [50]


def test_only_team_admins_set_a_budget_and_bad_values_write_nothing(team, member, team_admin):
    with pytest.raises(NotAllowed):
        set_budget(team, actor=member, monthly_usd="10")
    for bad in ({"monthly_usd": "-1"}, {"monthly_usd": "1.001"}, {"monthly_usd": 1.5}):
        with pytest.raises(ValidationError):
            set_budget(team, actor=team_admin, **bad)
    with pytest.raises(ValidationError) as error:
        set_budget(team, actor=team_admin, monthly_usd="10", thresholds_percent=[0, 50], policy="nope")
    assert set(error.value.message_dict) == {"thresholds_percent", "policy"}
    with pytest.raises(ValidationError) as error:
        set_budget(team, actor=team_admin, monthly_usd="10", thresholds_percent=[50, "80"])
    assert set(error.value.message_dict) == {"thresholds_percent"}
    assert not team.budgets.exists()


def submit(team, user, **fields):
    return submit_request(user=user, team=team, name="new", gpu_milli=500, **fields)


def test_block_policy_refuses_on_demand_but_lets_spot_in(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="10.00", policy=BudgetPolicy.BLOCK_ON_DEMAND)
    spent(1.5)

    with pytest.raises(ValidationError) as error:
        submit(team, member)
    assert "new on-demand requests are blocked" in error.value.message_dict["billing_mode"][0]
    spot = submit(team, member, billing_mode=BillingMode.SPOT, checkpoint_interval_s=600)
    assert spot.billing_mode == BillingMode.SPOT


def test_block_policy_lets_on_demand_in_while_budget_remains(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="10.00", policy=BudgetPolicy.BLOCK_ON_DEMAND)
    spent(0.5)
    assert submit(team, member).billing_mode == BillingMode.ON_DEMAND


def test_switch_policy_turns_new_requests_into_spot(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="10.00", policy=BudgetPolicy.SWITCH_TO_SPOT)
    spent(1.5)

    assert submit(team, member, checkpoint_interval_s=600).billing_mode == BillingMode.SPOT
    with pytest.raises(ValidationError) as error:
        submit(team, member)
    assert "checkpoint interval" in error.value.message_dict["checkpoint_interval_s"][0]


def test_a_members_own_budget_binds_only_that_member(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="5.00", user=member, policy=BudgetPolicy.BLOCK_ON_DEMAND)
    spent(1)  # the member's job: 10 USD

    with pytest.raises(ValidationError):
        submit(team, member)
    assert submit(team, team_admin).billing_mode == BillingMode.ON_DEMAND


def test_stop_policy_stops_running_work_after_the_grace_period(
    team, team_admin, spent, start_running, published
):
    set_budget(team, actor=team_admin, monthly_usd="10.00", policy=BudgetPolicy.STOP_RUNNING, grace_s=1800)
    spent(1.5)
    running = start_running(milli=250, at=T0 + 19 * H, name="still running")

    check_budgets(T0 + 20 * H)
    running.refresh_from_db()
    assert running.state == RequestState.RUNNING  # within the grace period

    check_budgets(T0 + 20 * H + dt.timedelta(seconds=1800))
    running.refresh_from_db()
    assert running.state == RequestState.CANCELLED
    assert "budget of 10.00 USD" in Event.objects.filter(to_state="cancelled").get().reason


def test_alert_only_policy_stops_nothing(team, team_admin, spent, start_running, published):
    set_budget(team, actor=team_admin, monthly_usd="10.00", grace_s=0)
    spent(1.5)
    running = start_running(milli=250, at=T0 + 19 * H, name="still running")
    check_budgets(T0 + 30 * H)
    running.refresh_from_db()
    assert running.state == RequestState.RUNNING


def test_a_request_that_would_overrun_the_budget_is_warned_about(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="100.00")
    spent(9)  # 90 USD

    warning = budget_warning(team.pk, member.pk, Decimal("2.50"), 5 * 3600, at=T0 + 20 * H)
    assert "12.50 USD" in warning and "10.00 USD is left" in warning
    assert budget_warning(team.pk, member.pk, Decimal("2.50"), 3600, at=T0 + 20 * H) == ""


def test_another_teams_spend_does_not_count(team, team_admin, other_team, spent, published):
    set_budget(team, actor=team_admin, monthly_usd="10.00")
    spent(1.5)
    assert budgets.month_spend(other_team.pk, T0) == 0
    assert budgets.month_spend(team.pk, T0) == Decimal("15")


def test_the_estimate_api_warns_before_a_request_overruns_the_budget(
    api_client, team, team_admin, member, pool, make_node
):
    # Spend is read for the real month: price the pool from now, no usage yet; a 10 USD budget.
    make_node()
    set_pool_price(pool, "4.00", actor=None)
    set_budget(team, actor=team_admin, monthly_usd="10.00")
    client = api_client(member)
    shape = {"name": "big", "gpu_milli": 500, "pool": "a100", "billing_mode": "on-demand"}

    long = client.post(
        "/api/v1/requests/estimate/", {**shape, "max_duration_s": 6 * 3600}, format="json"
    ).json()
    short = client.post("/api/v1/requests/estimate/", {**shape, "max_duration_s": 3600}, format="json").json()

    # 0.5 card * 4 USD/GPU-h * 6 h = 12 USD > 10 USD left; 1 h = 2 USD fits.
    assert "may cost 12.00 USD; 10.00 USD is left" in long["budget_warning"]
    assert long["budget_warning"] in long["summary"]
    assert short["budget_warning"] == ""


def test_the_scheduler_holds_pending_on_demand_work_of_a_blocked_team(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="10.00", policy=BudgetPolicy.BLOCK_ON_DEMAND)
    waiting = submit(team, member)  # submitted while budget remained
    spot = submit(team, member, billing_mode=BillingMode.SPOT, checkpoint_interval_s=600)
    spent(1.5)  # now spent: 15 of 10 USD

    run_scheduling_pass()

    waiting.refresh_from_db()
    assert waiting.state == RequestState.PENDING
    assert "budget of 10.00 USD is spent" in waiting.pending_reason
    spot.refresh_from_db()
    assert "budget" not in spot.pending_reason  # spot work is not held


def test_the_scheduler_starts_on_demand_work_under_the_budget(team, team_admin, member, spent):
    set_budget(team, actor=team_admin, monthly_usd="100.00", policy=BudgetPolicy.BLOCK_ON_DEMAND)
    spent(1.5)
    request = submit(team, member)

    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
