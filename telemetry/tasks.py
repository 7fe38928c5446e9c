"""Celery tasks: thin wrappers that call one service each."""

from celery import shared_task

from telemetry.upkeep import telemetry_upkeep as run_telemetry_upkeep


# The name it had in scheduler_app: beat's schedule (settings.CELERY_BEAT_SCHEDULE), the embedded
# worker and messages already queued all name it so.
@shared_task(name="scheduler_app.telemetry_upkeep", ignore_result=True)
def telemetry_upkeep() -> dict:
    return run_telemetry_upkeep()
