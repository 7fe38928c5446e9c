"""Celery tasks of billing: thin wrappers that call one service each."""

from celery import shared_task

from billing_app.feeds import advance_spot_feeds as run_advance_spot_feeds
from billing_app.resizing import offer_resizes as run_offer_resizes
from billing_app.upkeep import metering_upkeep


@shared_task(name="billing_app.advance_spot_feeds", ignore_result=True)
def advance_spot_feeds() -> dict:
    return run_advance_spot_feeds()


@shared_task(name="billing_app.offer_resizes", ignore_result=True)
def offer_resizes() -> int:
    """Resize offers from the last hour of telemetry (idempotent: one open offer per request)."""
    return len(run_offer_resizes())


@shared_task(name="billing_app.meter_usage", ignore_result=True)
def meter_usage() -> dict:
    return metering_upkeep()
