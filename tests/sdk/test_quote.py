"""The SDK's quote(...) and the estimate's quote: Decimals from the portal's strings, bad shapes refused."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from gpu_portal_sdk import Quote, ValidationError

from billing_app.models import PoolPrice
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool


@pytest.fixture
def priced(pool):
    spot_pool = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    start = timezone.now() - dt.timedelta(hours=1)
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=start)
    PoolPrice.objects.create(pool=spot_pool, usd_per_gpu_hour=Decimal("1.00"), effective_from=start)
    return spot_pool


def test_quote_returns_decimals_with_reclaims_counted(connect, member, priced):
    q = connect(member).quote(
        "A100-80GB", min_gpu=0.5, num_gpus=1, max_duration_s=7200, checkpoint_interval_s=1800
    )
    assert isinstance(q, Quote)
    assert (q.on_demand.pool, q.on_demand.usd_per_hour, q.on_demand.expected_total_usd) == (
        "a100",
        Decimal("2.00"),
        Decimal("4.00"),
    )
    assert q.spot.expected_total_usd == Decimal("1.00")
    cost = q.spot_cost
    assert cost.reclaim_source == "prior" and isinstance(cost.reclaims_per_hour, Decimal)
    assert cost.effective_total_usd > q.spot.expected_total_usd
    assert q.cheaper == "spot"


def test_bad_shapes_are_refused(connect, member, priced):
    manager = connect(member)
    with pytest.raises(ValidationError) as error:
        manager.quote("Z80", min_gpu=0.5)
    assert "gpu_model" in error.value.fields
    with pytest.raises(ValidationError) as error:
        manager.quote("A100-80GB", min_gpu=0)
    assert "min_gpu" in error.value.fields
    with pytest.raises(ValidationError) as error:
        manager.quote("A100-80GB", min_gpu=2, num_gpus=2)
    assert "min_gpu" in error.value.fields


def test_quote_takes_min_gpu_above_one_as_whole_cards_like_request_allocation(connect, member, priced):
    # given a member who would ask request_allocation(min_gpu=1.5): two whole cards
    manager = connect(member)

    # when the same shape is quoted
    q = manager.quote("A100-80GB", min_gpu=1.5, max_duration_s=3600)

    # then it is priced as two whole cards, as min_gpu=1 with num_gpus=2 is
    assert (q.gpu_milli, q.num_gpus) == (1000, 2)
    assert q == manager.quote("A100-80GB", min_gpu=1, num_gpus=2, max_duration_s=3600)
    assert q.on_demand.usd_per_hour == Decimal("8.00")
