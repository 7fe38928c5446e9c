"""The periodic metering (Celery beat every METERING_INTERVAL_S; the embedded worker likewise)."""

import datetime as dt

from django.utils import timezone

from billing_app.budgets import check_budgets
from billing_app.metering import meter_usage


def metering_upkeep(now: dt.datetime | None = None) -> dict[str, int]:
    """Bill the slices' time into the ledger, then check the budgets on it. Idempotent: see metering."""
    now = now or timezone.now()
    return {"entries": meter_usage(now), "crossings": len(check_budgets(now))}
