"""Celery tasks of billing: thin wrappers that call one service each."""

from celery import shared_task

from billing_app.feeds import advance_spot_feeds as run_advance_spot_feeds


@shared_task(name="billing_app.advance_spot_feeds", ignore_result=True)
def advance_spot_feeds() -> dict:
    return run_advance_spot_feeds()
