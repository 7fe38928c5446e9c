"""Metering: each segment billed at share * seconds * the price in force, split on every change,
exactly once whatever is replayed or killed midway."""

import datetime as dt
from decimal import Decimal

import pytest
from django.conf import settings
from django.db.models import Sum

from billing_app import metering
from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry, SharePremium
from billing_app.switching import switch_billing_mode
from scheduler_app.choices import BillingMode
from tests.billing_app.conftest import T0, finish

H = dt.timedelta(hours=1)


def total(**filters) -> Decimal:
    return LedgerEntry.objects.filter(**filters).aggregate(t=Sum("amount_usd"))["t"] or Decimal(0)


def rows():
    return list(
        LedgerEntry.objects.order_by("start", "billing_mode").values_list(
            "start", "end", "seconds", "usd_per_gpu_hour", "billing_mode", "amount_usd"
        )
    )


def test_a_segment_costs_share_times_seconds_times_price(pool, price_history, start_running):
    price_history(pool, (T0 - H, "4.00"))
    request = start_running(milli=250)
    finish(request, T0 + 2 * H + dt.timedelta(seconds=1))

    meter_usage(T0 + 10 * H)

    [entry] = LedgerEntry.objects.all()
    assert (entry.seconds, entry.team_id, entry.user_id) == (Decimal(7201), request.team_id, request.user_id)
    # 4 USD/GPU-h * 0.25 * 7201 s / 3600 = 2.000277...
    assert entry.amount_usd == Decimal("2.0002777778")


def test_a_price_change_splits_the_segment_at_its_instant(pool, price_history, start_running):
    price_history(pool, (T0 - H, "4.00"), (T0 + H + dt.timedelta(seconds=30), "2.00"))
    finish(start_running(milli=500), T0 + 2 * H)

    meter_usage(T0 + 10 * H)

    assert [(r[0], r[1], r[3]) for r in rows()] == [
        (T0, T0 + H + dt.timedelta(seconds=30), Decimal("4.000000")),
        (T0 + H + dt.timedelta(seconds=30), T0 + 2 * H, Decimal("2.000000")),
    ]
    # 4 * 0.5 * 3630 s / 3600, then 2 * 0.5 * 3570 s / 3600
    assert total() == Decimal("2.0166666667") + Decimal("0.9916666667")


def test_a_slice_pays_its_sizes_premium_and_a_premium_change_splits_the_segment(
    pool, price_history, start_running
):
    price_history(pool, (T0 - H, "4.00"))
    SharePremium.objects.create(gpu_milli=500, multiplier=Decimal("1.2500"), effective_from=T0 - H)
    SharePremium.objects.create(gpu_milli=500, multiplier=Decimal("0.9000"), effective_from=T0 + H)
    SharePremium.objects.create(
        gpu_milli=250, multiplier=Decimal("3.0000"), effective_from=T0 - H
    )  # not ours
    finish(start_running(milli=500), T0 + 2 * H)

    meter_usage(T0 + 10 * H)

    # As the catalog prices a half card: 4 USD * 1.25 for the first hour, then 4 USD * 0.90.
    assert [(r[0], r[1], r[3]) for r in rows()] == [
        (T0, T0 + H, Decimal("5.000000")),
        (T0 + H, T0 + 2 * H, Decimal("3.600000")),
    ]
    assert total() == Decimal("2.5") + Decimal("1.8")


def test_a_billing_switch_splits_the_segment_and_bills_spot_from_that_second(
    pool, spot_pool, price_history, start_running, member
):
    price_history(pool, (T0 - H, "4.00"))
    price_history(spot_pool, (T0 - H, "1.00"))
    request = start_running(milli=1000)

    switch_billing_mode(request, BillingMode.SPOT, user=member, checkpoint_interval_s=600, now=T0 + H)
    finish(request, T0 + 3 * H)
    meter_usage(T0 + 10 * H)

    assert [(r[0], r[1], r[3], r[4]) for r in rows()] == [
        (T0, T0 + H, Decimal("4.000000"), BillingMode.ON_DEMAND),
        (T0 + H, T0 + 3 * H, Decimal("1.000000"), BillingMode.SPOT),
    ]
    assert total() == Decimal("6.0000000000")


def test_a_month_boundary_splits_the_segment(pool, price_history, start_running):
    price_history(pool, (T0 - 30 * 24 * H, "3.60"))
    end_of_month = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
    finish(start_running(milli=1000, at=end_of_month - H), end_of_month + H)

    meter_usage(end_of_month + 10 * H)

    assert [(r[0], r[1]) for r in rows()] == [
        (end_of_month - H, end_of_month),
        (end_of_month, end_of_month + H),
    ]


def test_an_open_segment_is_billed_up_to_the_settle_interval_and_no_further(
    pool, price_history, start_running
):
    price_history(pool, (T0 - H, "3.60"))
    start_running(milli=1000)

    meter_usage(T0 + H)

    [entry] = LedgerEntry.objects.all()
    assert entry.end == T0 + H - dt.timedelta(seconds=settings.METERING_SETTLE_S)


def test_metering_again_and_in_steps_bills_each_second_once(pool, price_history, start_running):
    price_history(pool, (T0 - H, "4.00"), (T0 + 90 * dt.timedelta(minutes=1), "5.00"))
    finish(start_running(milli=750), T0 + 3 * H)
    meter_usage(T0 + 10 * H)
    once = rows()
    LedgerEntry.objects.all().delete()

    for minute in range(0, 12 * 60, 7):  # a replayed, stepwise history of metering runs
        meter_usage(T0 + dt.timedelta(minutes=minute, seconds=13))
        meter_usage(T0 + dt.timedelta(minutes=minute, seconds=13))
    meter_usage(T0 + 10 * H)

    assert sum(r[2] for r in rows()) == Decimal(3 * 3600)
    assert total() == sum(r[5] for r in once)
    assert meter_usage(T0 + 20 * H) == []


def test_a_run_killed_midway_loses_nothing_and_bills_nothing_twice(
    pool, price_history, start_running, monkeypatch, make_node
):
    price_history(pool, (T0 - H, "2.00"))
    gpu = make_node(name="node-2", gpus=1).gpus.get()
    for i in range(3):
        finish(start_running(milli=250, name=f"j{i}"), T0 + (i + 1) * H)
    finish(start_running(milli=500, gpu=gpu, name="j3"), T0 + H)
    real = metering.meter_allocations
    calls = []

    def dies_on_the_third(ids, now):
        calls.append(ids)
        if len(calls) == 3:
            raise RuntimeError("worker killed")
        return real(ids, now)

    monkeypatch.setattr(metering, "METERING_CHUNK", 1)
    monkeypatch.setattr(metering, "meter_allocations", dies_on_the_third)
    with pytest.raises(RuntimeError):
        meter_usage(T0 + 10 * H)
    assert LedgerEntry.objects.count() == 2  # the two finished chunks kept their entries
    monkeypatch.setattr(metering, "meter_allocations", real)

    meter_usage(T0 + 10 * H)
    meter_usage(T0 + 10 * H)

    # 0.25 * 2 USD * (1 + 2 + 3) h + 0.5 * 2 USD * 1 h
    assert total() == Decimal("4.0000000000")
    assert LedgerEntry.objects.count() == 4


def test_metering_an_open_slice_often_keeps_one_entry_per_price(pool, price_history, start_running):
    price_history(pool, (T0 - H, "3.60"), (T0 + H, "7.20"))
    start_running(milli=1000)

    for minute in range(0, 180, 1):
        meter_usage(T0 + dt.timedelta(minutes=minute, seconds=61))

    assert [(r[0], r[1], r[3]) for r in rows()] == [
        (T0, T0 + H, Decimal("3.600000")),
        (
            T0 + H,
            T0 + dt.timedelta(minutes=179, seconds=1),
            Decimal("7.200000"),
        ),  # the settle interval behind
    ]
    assert total() == Decimal("3.6") + Decimal("14.282")  # 7.2 USD/h for 7141 s


def test_metering_many_slices_costs_the_queries_of_a_few(
    pool, spot_pool, price_history, start_running, make_node, django_assert_max_num_queries
):
    price_history(pool, (T0 - H, "4.00"), (T0 + H, "3.00"))
    price_history(spot_pool, (T0 - H, "1.00"))
    SharePremium.objects.create(gpu_milli=250, multiplier=Decimal("1.1"), effective_from=T0 - H)
    gpus = list(make_node(name="many", gpus=4).gpus.order_by("index"))
    for i in range(12):
        billing = BillingMode.SPOT if i % 3 == 0 else BillingMode.ON_DEMAND
        request = start_running(milli=250, gpu=gpus[i % 4], name=f"j{i}", billing=billing)
        if i % 2:
            finish(request, T0 + 2 * H)
    meter_usage(T0 + 30 * dt.timedelta(minutes=1))  # some entries to extend next time

    with django_assert_max_num_queries(12):  # the ids, then one chunk: locks, watermarks, prices, writes
        written = meter_usage(T0 + 10 * H)

    assert len({entry.allocation_id for entry in written}) == 12
    # every second of every slice once: 6 finished after 2 h, 6 open up to 10 h less the settle time
    open_s = 10 * 3600 - settings.METERING_SETTLE_S
    assert LedgerEntry.objects.aggregate(s=Sum("seconds"))["s"] == Decimal(6 * 7200 + 6 * open_s)
    # at 4.00 then 3.00 on-demand and 1.00 spot (spot billing on on-demand capacity pays the spot price)
    assert {r[3] for r in rows()} == {Decimal("4.400000"), Decimal("3.300000"), Decimal("1.100000")}
