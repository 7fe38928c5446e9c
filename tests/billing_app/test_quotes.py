"""The comparison: on-demand against spot on one model, expected totals, and the effective spot cost
with reclaims counted from the pool's history (or the prior without one)."""

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest
import time_machine
from django.utils import timezone

from billing_app.models import PoolPrice, SharePremium
from billing_app.quotes import PRIOR_HOURS, PRIOR_RECLAIMS, quote, reclaim_rate
from scheduler_app.choices import BillingMode
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.rules.lifecycle import ACTIVE_STATES
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import requeue, transition_requests

T0 = dt.datetime(2026, 5, 1, 8, 0, tzinfo=dt.UTC)


@pytest.fixture
def priced(pool, spot_pool):
    for target, price in ((pool, "4.00"), (spot_pool, "1.00")):
        PoolPrice.objects.create(pool=target, usd_per_gpu_hour=Decimal(price), effective_from=T0)
    return pool, spot_pool


def expected_spot(per_hour, rate, hours, checkpoint_s, restart_s):
    """The documented model, in exact fractions: T_wall = T / (1 - rate (c/2 + r))."""
    loss = Fraction(checkpoint_s, 7200) + Fraction(restart_s, 3600)
    wall = Fraction(hours) / (1 - Fraction(rate) * loss)
    return wall, Fraction(per_hour) * wall


def cents(value: Fraction) -> Decimal:
    return Decimal(round(value * 100)) / 100


def test_without_history_the_prior_rate_prices_the_reclaims(priced):
    at = T0 + dt.timedelta(hours=1)
    q = quote(
        gpu_model="A100-80GB",
        gpu_milli=500,
        num_gpus=2,
        max_duration_s=36000,
        checkpoint_interval_s=1800,
        restart_overhead_s=300,
        at=at,
    )
    assert (q.on_demand.pool, q.on_demand.usd_per_hour, q.on_demand.expected_total_usd) == (
        "a100",
        Decimal("4.00"),
        Decimal("40.00"),
    )
    assert (q.spot.usd_per_hour, q.spot.expected_total_usd) == (Decimal("1.00"), Decimal("10.00"))
    rate = q.spot_cost.reclaim
    assert (rate.source, rate.reclaims, rate.per_hour) == ("prior", 0, Decimal("0.0417"))
    wall, total = expected_spot(1, rate.per_hour, 10, 1800, 300)
    assert q.spot_cost.effective_total_usd == cents(total) > q.spot.expected_total_usd
    assert q.spot_cost.expected_hours == Decimal(float(wall)).quantize(Decimal("0.0001"))
    assert q.spot_cost.expected_reclaims == (rate.per_hour * q.spot_cost.expected_hours).quantize(
        Decimal("0.01")
    )
    assert q.cheaper == "spot"


def test_reclaims_in_the_pool_history_raise_the_rate_and_the_effective_cost(priced, make_node, team, member):
    _, spot_pool = priced
    make_node(name="spot-1", gpus=1, pool=spot_pool)
    with time_machine.travel(T0 + dt.timedelta(hours=1), tick=False):
        request = submit_request(
            user=member,
            team=team,
            name="job",
            gpu_milli=1000,
            pool_name=spot_pool.name,
            billing_mode=BillingMode.SPOT,
            checkpoint_interval_s=1800,
        )
        run_scheduling_pass()
    with time_machine.travel(T0 + dt.timedelta(hours=3), tick=False):
        requeue([request.pk], reason="spot capacity reclaimed")  # 2 hours of running, then one reclaim
        rate = reclaim_rate(spot_pool)
        assert (rate.reclaims, rate.hours_observed) == (1, Decimal("2.0000"))
        assert rate.per_hour == ((PRIOR_RECLAIMS + 1) / (PRIOR_HOURS + 2)).quantize(Decimal("0.0001"))
        q = quote(gpu_model="A100-80GB", gpu_milli=1000, max_duration_s=36000, checkpoint_interval_s=3600)
    _, total = expected_spot(1, rate.per_hour, 10, 3600, 300)
    assert q.spot_cost.reclaim == rate
    assert q.spot_cost.effective_total_usd == cents(total)
    prior_only = quote(
        gpu_model="A100-80GB",
        gpu_milli=1000,
        max_duration_s=36000,
        checkpoint_interval_s=1800,
        at=T0 + dt.timedelta(hours=1),
    )
    assert q.spot_cost.effective_total_usd > prior_only.spot_cost.effective_total_usd


def test_a_finished_run_is_not_a_reclaim(priced, make_node, team, member):
    _, spot_pool = priced
    make_node(name="spot-1", gpus=1, pool=spot_pool)
    with time_machine.travel(T0 + dt.timedelta(hours=1), tick=False):
        request = submit_request(
            user=member,
            team=team,
            name="job",
            gpu_milli=1000,
            pool_name=spot_pool.name,
            billing_mode=BillingMode.SPOT,
            checkpoint_interval_s=1800,
        )
        run_scheduling_pass()
    with time_machine.travel(T0 + dt.timedelta(hours=2), tick=False):
        transition_requests([request.pk], "cancelled", from_states=ACTIVE_STATES, actor=member, reason="done")
        rate = reclaim_rate(spot_pool)
    assert (rate.reclaims, rate.hours_observed, rate.source) == (0, Decimal("1.0000"), "history + prior")


def test_without_checkpoints_long_work_never_finishes_on_spot(priced):
    q = quote(gpu_model="A100-80GB", gpu_milli=1000, max_duration_s=100 * 3600, at=T0)
    assert q.spot_cost.effective_total_usd is None
    assert "would not finish" in q.spot_cost.note
    assert q.cheaper == "on-demand"


def test_no_duration_still_compares_per_hour_and_premiums_apply(priced):
    SharePremium.objects.create(gpu_milli=125, multiplier=Decimal("1.5"), effective_from=T0)
    q = quote(gpu_model="A100-80GB", gpu_milli=125, num_gpus=8, checkpoint_interval_s=1800, at=T0)
    assert q.on_demand.usd_per_hour == Decimal("6.00")  # 4.00 x 8 x 1/8 x 1.5
    assert q.on_demand.expected_total_usd is None and q.spot_cost.effective_total_usd is None
    assert q.spot_cost.effective_usd_per_hour > q.spot.usd_per_hour


def test_a_model_with_no_spot_pool_has_no_spot_side(priced):
    q = quote(gpu_model="H100", gpu_milli=1000, at=timezone.now())
    assert q.on_demand is None and q.spot is None and q.cheaper == ""


def test_quotes_reuse_the_pool_rate_for_five_minutes(priced, django_assert_num_queries):
    at = T0 + dt.timedelta(hours=1)
    quote(gpu_model="A100-80GB", gpu_milli=1000, max_duration_s=3600, checkpoint_interval_s=1800, at=at)
    with django_assert_num_queries(2):  # the prices in force and the slice premium; not the history
        again = quote(
            gpu_model="A100-80GB", gpu_milli=1000, max_duration_s=3600, checkpoint_interval_s=1800, at=at
        )
    assert again.spot_cost.reclaim.source == "prior"
