"""The periodic metering (Celery beat every METERING_INTERVAL_S; the embedded worker likewise)."""

import datetime as dt

from django.utils import timezone

from billing_app.budgets import check_budgets
from billing_app.ledger import spend_message
from billing_app.metering import meter_usage
from infra.live import publish_events_after_commit
from teams.models import Team


def metering_upkeep(now: dt.datetime | None = None) -> dict[str, int]:
    """Bill the slices' time into the ledger, check the budgets on it, then send each team whose spend
    moved its new figures, once a run. Idempotent: see metering."""
    now = now or timezone.now()
    entries = meter_usage(now)
    crossings = check_budgets(now)
    publish_spend({entry.team_id for entry in entries}, now)
    return {"entries": len(entries), "crossings": len(crossings)}


def publish_spend(team_ids: set[int], now: dt.datetime) -> None:
    """One spend message per team to its stream (and the operators'), for the budget pages open now."""
    teams = Team.objects.filter(pk__in=team_ids).order_by("pk")
    publish_events_after_commit((team.pk, spend_message(team, now)) for team in teams)
