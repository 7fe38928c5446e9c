"""Metered spend goes live: a metering run sends each team whose spend moved one message with the
budget page's figures, to the team's stream (and the operators'), and nothing when nothing moved."""

import datetime as dt
from decimal import Decimal

import pytest

from billing_app import upkeep
from billing_app.budgets import set_budget
from billing_app.upkeep import metering_upkeep
from tests.billing_app.conftest import T0, finish
from tests.scheduler_app.test_consumers import frames_after

H = dt.timedelta(hours=1)


@pytest.fixture
def sent(monkeypatch):
    """The (team id, message) pairs the metering run publishes."""
    messages = []
    monkeypatch.setattr(upkeep, "publish_events_after_commit", lambda batch: messages.extend(batch))
    return messages


@pytest.fixture
def two_teams_worked(team, team_admin, other_team, outsider, pool, price_history, start_running):
    """Ours: two half cards for an hour from T0 at 10 USD/GPU-h (10 USD) against a 40 USD budget;
    theirs: a half card running from T0 + 1 h."""
    price_history(pool, (T0 - H, "10.00"))
    set_budget(team, actor=team_admin, monthly_usd="40.00")
    for name in ("a", "b"):
        finish(start_running(milli=500, name=name), T0 + H)
    return start_running(milli=500, at=T0 + H, user=outsider, team=other_team, name="theirs")


def test_a_metering_run_sends_each_team_whose_spend_moved_its_figures_once(
    team, other_team, two_teams_worked, sent
):
    metering_upkeep(T0 + 3 * H)

    assert [team_id for team_id, _ in sent] == [team.pk, other_team.pk]
    ours, theirs = (message for _, message in sent)
    assert ours == {
        "object": "spend",
        "team": "vision",
        "month": f"{T0:%Y-%m}",
        "day": (T0 + 3 * H).date().isoformat(),
        "spend_usd": "10.00",
        "burn_usd_per_hour": "0.00",
        "forecast_usd": "10.00",
        "monthly_usd": "40.00",
        "percent_used": "25.0",
    }
    # Theirs is still running: metered up to the settle interval, burning half a card's price.
    assert (theirs["team"], theirs["spend_usd"], theirs["burn_usd_per_hour"]) == ("language", "9.92", "5.00")
    assert theirs["monthly_usd"] is None and theirs["percent_used"] is None
    assert Decimal(theirs["forecast_usd"]) > Decimal("9.92")


def test_a_run_that_bills_nothing_new_sends_nothing(team, two_teams_worked, sent):
    metering_upkeep(T0 + 3 * H)
    sent.clear()

    metering_upkeep(T0 + 3 * H)  # a retry: every watermark is where it was

    assert sent == []


def test_only_the_team_still_running_is_sent_on_the_next_run(other_team, two_teams_worked, sent):
    metering_upkeep(T0 + 3 * H)
    sent.clear()

    metering_upkeep(T0 + 3 * H + dt.timedelta(minutes=5))

    assert [(team_id, message["team"]) for team_id, message in sent] == [(other_team.pk, "language")]
    assert sent[0][1]["spend_usd"] == "10.33"  # 2 h - 60 s + 5 min of half a card at 10 USD/GPU-h


@pytest.fixture
def half_card_for_an_hour(pool, price_history, start_running):
    price_history(pool, (T0 - H, "10.00"))
    finish(start_running(milli=500), T0 + H)
    return lambda: metering_upkeep(T0 + 2 * H)


@pytest.mark.django_db(transaction=True)  # the consumer reads what the test committed
def test_a_member_receives_the_spend_on_the_teams_stream_as_one_small_event(member, half_card_for_an_hour):
    frames = frames_after(member, half_card_for_an_hour)

    assert [(f["type"], f["object"], f["team"], f["spend_usd"]) for f in frames] == [
        ("event", "spend", "vision", "5.00")
    ]
    assert set(frames[0]) == {
        "type", "object", "team", "month", "day", "spend_usd", "burn_usd_per_hour", "forecast_usd",
        "monthly_usd", "percent_used",
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_another_teams_member_never_receives_the_spend(outsider, half_card_for_an_hour):
    assert frames_after(outsider, half_card_for_an_hour, "/ws/teams/language/events/") == []
