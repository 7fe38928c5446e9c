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
    real = metering.meter_allocations
    dying = threading.local()

    def meter(ids, now):
        if getattr(dying, "after", None) == 0:
            raise RuntimeError("worker killed")
        if getattr(dying, "after", None) is not None:
            dying.after -= 1
        return real(ids, now)

    monkeypatch.setattr(metering, "METERING_CHUNK", 2)  # two chunks: a worker can die between them
    monkeypatch.setattr(metering, "meter_allocations", meter)
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


def test_metering_racing_the_lifecycle_neither_deadlocks_nor_bills_past_an_end(
    pool, price_history, start_running, make_node
):
    now = dt.datetime.now(dt.UTC)
    price_history(pool, (now - 3 * H, "3.60"))
    gpus = list(make_node(name="life", gpus=4).gpus.order_by("index"))
    requests = [start_running(milli=250, gpu=gpu, name=f"r{i}", at=now - 2 * H) for i, gpu in enumerate(gpus)]
    errors = []
    barrier = threading.Barrier(2)

    def meter():
        try:
            barrier.wait()
            for _ in range(20):
                metering.meter_usage(dt.datetime.now(dt.UTC))
        except Exception as error:  # a deadlock would surface here
            errors.append(repr(error))
        finally:
            connections.close_all()

    def end_them():
        try:
            barrier.wait()
            for request in reversed(requests):  # the other order from the metering's
                finish(request, dt.datetime.now(dt.UTC))  # slices close at the time of the change
        except Exception as error:
            errors.append(repr(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=meter), threading.Thread(target=end_them)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    metering.meter_usage(dt.datetime.now(dt.UTC) + H)

    assert errors == []
    for request in requests:
        [segment] = request.allocations.all()
        billed = LedgerEntry.objects.filter(allocation=segment).aggregate(s=Sum("seconds"))["s"]
        assert billed == metering.exact_seconds(segment.started_at, segment.ended_at)
