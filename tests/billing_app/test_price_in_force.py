"""billing_app.prices: the price in force at every instant of a range, across history boundaries."""

import datetime as dt
from decimal import Decimal

import pytest

from billing_app.models import PoolPrice, SharePremium
from billing_app.prices import (
    NoPriceInForce,
    price_changes,
    price_in_force,
    share_multiplier,
    slice_usd_per_hour,
)
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
SECOND = dt.timedelta(seconds=1)


def seconds(n: int) -> dt.datetime:
    return T0 + n * SECOND


@pytest.fixture
def history(pool):
    """On-demand `pool`: 2.00 from T0, 3.00 from T0+10 s, 2.50 from T0+20 s (set twice at that instant:
    the later row, 2.50, wins)."""
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("2.00"), effective_from=seconds(0))
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("3.00"), effective_from=seconds(10))
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("9.99"), effective_from=seconds(20))
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("2.50"), effective_from=seconds(20))
    return pool


def expected(n: int) -> Decimal:
    return Decimal("2.00") if n < 10 else Decimal("3.00") if n < 20 else Decimal("2.50")


def test_price_in_force_at_every_second_of_a_range_across_boundaries(history):
    for n in range(0, 31):
        assert price_in_force(history, CapacityType.ON_DEMAND, seconds(n)) == expected(n), n
    # A boundary applies from its instant on, not a microsecond before.
    tiny = dt.timedelta(microseconds=1)
    assert price_in_force(history, CapacityType.ON_DEMAND, seconds(10) - tiny) == Decimal("2.00")
    assert price_in_force(history, CapacityType.ON_DEMAND, seconds(10)) == Decimal("3.00")


def test_before_the_first_price_there_is_none(history):
    with pytest.raises(NoPriceInForce, match="a100"):
        price_in_force(history, CapacityType.ON_DEMAND, seconds(-1))


def test_naive_instant_is_refused(history):
    with pytest.raises(ValueError, match="timezone"):
        price_in_force(history, CapacityType.ON_DEMAND, dt.datetime(2026, 3, 1, 12, 0, 5))


def test_other_capacity_type_is_the_lowest_of_that_model(history):
    spot_a = create_pool(name="a100-spot-a", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    spot_b = create_pool(name="a100-spot-b", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    PoolPrice.objects.create(pool=spot_a, usd_per_gpu_hour=Decimal("1.20"), effective_from=seconds(0))
    PoolPrice.objects.create(pool=spot_b, usd_per_gpu_hour=Decimal("1.50"), effective_from=seconds(0))
    PoolPrice.objects.create(pool=spot_b, usd_per_gpu_hour=Decimal("1.00"), effective_from=seconds(5))
    # An on-demand card billed at spot pays the cheapest spot price of its model at that instant.
    assert price_in_force(history, CapacityType.SPOT, seconds(4)) == Decimal("1.20")
    assert price_in_force(history, CapacityType.SPOT, seconds(5)) == Decimal("1.00")
    assert price_in_force("A100-80GB", CapacityType.ON_DEMAND, seconds(15)) == Decimal("3.00")
    # A spot pool's own history, not the model's lowest.
    assert price_in_force(spot_a, CapacityType.SPOT, seconds(6)) == Decimal("1.20")
    with pytest.raises(NoPriceInForce, match="H100"):
        price_in_force("H100", CapacityType.SPOT, seconds(6))


def test_price_changes_split_a_range(history):
    assert price_changes(history, seconds(5), seconds(25)) == [
        (seconds(5), Decimal("2.00")),
        (seconds(10), Decimal("3.00")),
        (seconds(20), Decimal("2.50")),
    ]
    assert price_changes(history, seconds(10), seconds(20)) == [(seconds(10), Decimal("3.00"))]


def test_a_slice_pays_its_share_times_its_premium(history):
    assert share_multiplier(500, seconds(0)) == Decimal(1)
    SharePremium.objects.create(gpu_milli=125, multiplier=Decimal("1.2"), effective_from=seconds(12))
    at = seconds(15)
    assert slice_usd_per_hour(history, CapacityType.ON_DEMAND, 500, at, num_gpus=2) == Decimal("3.00")
    assert slice_usd_per_hour(history, CapacityType.ON_DEMAND, 125, at) == Decimal("0.45")
    assert slice_usd_per_hour(history, CapacityType.ON_DEMAND, 125, seconds(11)) == Decimal("0.375")
