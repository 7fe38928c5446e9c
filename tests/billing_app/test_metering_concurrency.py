"""Metering under real concurrency: workers on separate connections meter the same slices at once,
and one of them dies midway; every second is billed exactly once."""

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.db import connections
from django.db.models import Count, Sum

from billing_app import metering
from billing_app.models import LedgerEntry
from tests.billing_app.conftest import T0, finish

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

H = dt.timedelta(hours=1)
WORKERS = 6


def test_racing_and_dying_workers_bill_each_second_once(
    pool, price_history, start_running, make_node, monkeypatch
):
    price_history(pool, (T0 - H, "3.60"), (T0 + H, "7.20"))
    gpus = list(make_node(name="race", gpus=4).gpus.order_by("index"))
    for i, gpu in enumerate(gpus):
        finish(start_running(milli=500, gpu=gpu, name=f"j{i}"), T0 + 2 * H)
    real = metering.meter_allocation
    dying = threading.local()

    def meter(pk, now):
        if getattr(dying, "after", None) == 0:
            raise RuntimeError("worker killed")
        if getattr(dying, "after", None) is not None:
            dying.after -= 1
        return real(pk, now)

    monkeypatch.setattr(metering, "meter_allocation", meter)
    barrier = threading.Barrier(WORKERS)
    failures = []

    def worker(i):
        if i % 2:
            dying.after = 1  # this one dies at its second allocation
        try:
            barrier.wait()
            metering.meter_usage(T0 + (1 + i % 3) * H)
        except RuntimeError as error:
            failures.append(str(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    metering.meter_usage(T0 + 10 * H)

    assert failures and set(failures) == {"worker killed"}
    per_slice = LedgerEntry.objects.values("allocation").annotate(seconds=Sum("seconds"), n=Count("id"))
    assert sorted(row["seconds"] for row in per_slice) == [Decimal(7200)] * 4
    # 0.5 card for 1 h at 3.60 and 1 h at 7.20, four times.
    assert LedgerEntry.objects.aggregate(t=Sum("amount_usd"))["t"] == Decimal("21.6")
