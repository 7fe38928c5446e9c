"""Celery tasks of billing: thin wrappers over one service each."""

from celery import shared_task

from billing_app.upkeep import metering_upkeep


@shared_task(name="billing_app.meter_usage", ignore_result=True)
def meter_usage() -> dict:
    return metering_upkeep()
