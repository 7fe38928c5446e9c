"""The demo's budgets are those its teams would set: a month of their seeded week at today's prices, with
room to grow; so the week raises no alert and an ordinary request's estimate does not warn."""

import datetime as dt
import math
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import Event
from billing_app.budgets import budget_warning, check_budgets
from billing_app.metering import meter_usage, segment_costs_usd
from billing_app.models import Budget
from demo.seed import seed_demo
from scheduler_app.models import Allocation
from teams.models import Team

pytestmark = pytest.mark.django_db

PRICES = [("A100-80GB", "4.0", "1.5"), ("A100-80GB", "5.0", "2.0"), ("RTX-4090", "0.8", "")]


def week_usd(team, now):
    week = Allocation.objects.filter(request__team=team, started_at__gte=now - dt.timedelta(days=7))
    return sum(segment_costs_usd(list(week.select_related("gpu__node__pool")), now), Decimal(0))


def test_each_demo_team_gets_a_month_of_its_week_at_todays_prices_with_a_quarter_more(price_file):
    seed_demo(price_file(PRICES))
    now = timezone.now()

    for team in Team.objects.all():
        budget = Budget.objects.get(team=team, user=None)
        month = week_usd(team, now) * Decimal("365.25") / 12 / 7 * Decimal("1.25")
        assert budget.monthly_usd == math.ceil(month / 100) * 100 > 5000
        assert budget.thresholds_percent == [50, 80, 100]
        # set by the team's admin, as the audit log shows
        admin = team.memberships.get(role="team_admin").user
        assert Event.objects.filter(team=team, to_state="budget_set", actor=admin).count() == 1


def test_the_demos_week_raises_no_budget_alert_and_an_ordinary_estimate_fits(price_file):
    seed_demo(price_file(PRICES))
    meter_usage()

    assert check_budgets() == []
    vision = Team.objects.get(slug="vision")
    alice = vision.memberships.get(user__username="alice").user
    # 8 A100s for 12 hours at 4.50 USD per GPU-hour
    assert budget_warning(vision.pk, alice.pk, Decimal("36.00"), 12 * 3600) == ""


def test_without_prices_the_demo_sets_no_budget(price_file):
    seed_demo(price_file([("H100", "9.0", "3.0")]))

    assert not Budget.objects.exists()
