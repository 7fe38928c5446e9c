"""The metering as it runs: scheduled by Celery beat, a plain call of the task meters and checks the
budgets, and the embedded worker runs it when due."""

import datetime as dt
import time

import pytest
from django.conf import settings

from billing_app.models import LedgerEntry
from billing_app.tasks import meter_usage
from scheduler_app.passes.dispatch import PASS_ENTRY, EmbeddedWorker, embedded_worker
from tests.billing_app.conftest import finish

H = dt.timedelta(hours=1)


def test_beat_schedules_the_metering_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["metering"]

    assert entry == {"task": "billing_app.meter_usage", "schedule": float(settings.METERING_INTERVAL_S)}
    assert meter_usage.name == entry["task"]


def test_the_task_meters_and_a_second_call_writes_nothing(pool, price_history, start_running):
    now = dt.datetime.now(dt.UTC)
    price_history(pool, (now - 3 * H, "2.00"))
    finish(start_running(milli=500, at=now - 2 * H), now - H)

    assert meter_usage() == {"entries": 1, "crossings": 0}
    assert meter_usage() == {"entries": 0, "crossings": 0}
    assert LedgerEntry.objects.get().amount_usd == 1


@pytest.mark.django_db(transaction=True)  # the worker's thread reads what the test committed
@pytest.mark.usefixtures("sqlite_readers_take_no_table_locks")
def test_the_embedded_worker_meters_when_due(pool, price_history, start_running, monkeypatch, settings):
    now = dt.datetime.now(dt.UTC)
    price_history(pool, (now - 3 * H, "2.00"))
    finish(start_running(milli=500, at=now - 2 * H), now - H)
    settings.REDIS_URL = ""
    worker = EmbeddedWorker(embedded_worker.entries, on_wake=PASS_ENTRY)
    monkeypatch.setattr("scheduler_app.passes.dispatch.embedded_worker", worker)
    worker.start()  # its first round meters: every entry is due from the start
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not LedgerEntry.objects.exists():
            time.sleep(0.05)
    finally:
        worker.stop()

    assert LedgerEntry.objects.get().seconds == 3600
