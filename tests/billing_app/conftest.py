"""Fixtures of the price catalog: a spot pool beside the shared on-demand `pool`, a recorded price
history and running requests to meter (price_file, shared with the demo's tests, is in tests/conftest.py)."""

from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.models import PoolPrice
from scheduler_app.choices import BillingMode, CapacityType, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import transition_requests


@pytest.fixture
def spot_pool(db):
    return create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)


# Mid-month of the month the tests run in: the submit path reads this month's spend at the real now.
T0 = timezone.now().replace(day=10, hour=12, minute=0, second=0, microsecond=0)


@pytest.fixture
def price_history():
    """price_history(pool, (at, "4.00"), ...) -> writes the pool's price rows as a recorded history
    (set_pool_price refuses past starts, which a test of past usage needs)."""

    def write(pool, *points):
        for at, usd in points:
            PoolPrice.objects.create(
                pool=pool, usd_per_gpu_hour=Decimal(usd), effective_from=at, source="test"
            )

    return write


@pytest.fixture
def start_running(team, member, make_node):
    """start_running(milli=250, at=T0, billing="on-demand", gpu=None, user=member, team=team) -> a running
    request placed at `at` through place()."""
    cards = {}

    def start(milli=250, at=T0, billing=BillingMode.ON_DEMAND, gpu=None, user=None, name="job", team=team):
        if gpu is None:
            if "node" not in cards:
                cards["node"] = make_node(gpus=4)
            gpu = cards["node"].gpus.order_by("index").first()
        request = GpuRequest.objects.create(
            team=team,
            user=user or member,
            name=name,
            gpu_milli=milli,
            billing_mode=billing,
            checkpoint_interval_s=600 if billing == BillingMode.SPOT else None,
        )
        placed = place([PlannedStart(request.pk, (Slice(gpu.pk, milli, 1024),), billing)], now=at)
        assert placed.started == [request.pk], placed.refused
        transition_requests([request.pk], RequestState.RUNNING, from_states=[RequestState.SCHEDULED], now=at)
        request.refresh_from_db()
        return request

    return start


def finish(request, at):
    """End the request's work at `at` (its slices close then)."""
    transition_requests([request.pk], RequestState.SUCCEEDED, from_states=[RequestState.RUNNING], now=at)
