"""The periodic telemetry upkeep (Celery beat every TELEMETRY_INTERVAL_S; the embedded worker likewise)."""

import datetime as dt

from django.utils import timezone

from telemetry.derived_metrics import check_running_work
from telemetry.rollups import prune, roll_up


def telemetry_upkeep(now: dt.datetime | None = None) -> dict[str, dict[str, int]]:
    """Roll up the recent samples, check the running work on them, then drop what outlived its retention.

    Idempotent: a rerun rewrites the same rollups and raises no notice twice (one per episode)."""
    now = now or timezone.now()
    return {"rolled_up": roll_up(now), "notices": check_running_work(now), "pruned": prune(now)}
