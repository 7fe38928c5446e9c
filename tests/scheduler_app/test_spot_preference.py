"""Spot work that accepts on-demand fallback (the SDK's and the CLI's default) runs on spot capacity while
spot has room, in the estimate and in the pass alike; it is billed by the capacity that runs it, and every
place that shows its billing mode also shows that capacity."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry
from billing_app.services import set_pool_price
from scheduler_app.choices import BillingMode, CapacityType
from scheduler_app.models import Allocation
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.requests import submit_request

SPOT_WITH_FALLBACK = {
    "task_type": "training",
    "gpu_milli": 250,
    "gpu_model": "A100-80GB",
    "billing_mode": BillingMode.SPOT,
    "allow_on_demand_fallback": True,
    "checkpoint_interval_s": 900,
}


@pytest.fixture
def two_capacities(make_node, pool, operator):
    """The demo's shape: an on-demand A100 node named first, a spot one; both priced, spot cheaper."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("a100-80gb-node-01", gpus=1)
    make_node("a100-80gb-spot-node-02", gpus=1, pool=spot)
    set_pool_price(pool, "4.00", actor=operator)
    set_pool_price(spot, "1.20", actor=operator)
    return spot


@pytest.mark.parametrize("after_a_pass", [False, True], ids=["dry-run", "stored-pass"])
def test_the_estimate_of_spot_work_with_fallback_names_the_free_spot_node(
    two_capacities, member, team, after_a_pass
):
    # given both nodes free (and, in one case, a pass's stored state to estimate on)
    if after_a_pass:
        run_scheduling_pass()
    # when a spot request that accepts fallback is estimated
    estimate = estimate_request(user=member, team=team, **SPOT_WITH_FALLBACK)
    # then it would start on the spot node
    assert (estimate.starts_now, estimate.where) == (True, "a100-80gb-spot-node-02/gpu0")


def test_the_pass_runs_it_on_spot_capacity_billed_spot(two_capacities, member, team, api_client):
    # given both nodes free
    request = submit_request(user=member, team=team, name="spot-job", **SPOT_WITH_FALLBACK)
    # when a pass places it
    run_scheduling_pass()
    # then its slice is on the spot node, billed spot, and the API says it runs on spot capacity
    slice_ = Allocation.objects.get(request=request)
    assert (slice_.gpu.node.name, slice_.billing_mode) == ("a100-80gb-spot-node-02", BillingMode.SPOT)
    shown = api_client(member).get(f"/api/v1/requests/{request.pk}/").json()
    assert (shown["capacity_type"], shown["billing_label"]) == ("spot", "spot")
    assert (shown["segments"][0]["pool"], shown["segments"][0]["capacity_type"]) == ("a100-spot", "spot")


def test_with_spot_full_it_falls_back_to_on_demand_is_billed_so_and_says_so(
    two_capacities, member, team, api_client, client
):
    # given the spot card taken whole
    hog = submit_request(user=member, team=team, name="hog", **(SPOT_WITH_FALLBACK | {"gpu_milli": 1000}))
    run_scheduling_pass()
    # when a spot request with fallback is placed
    request = submit_request(user=member, team=team, name="fell-back", **SPOT_WITH_FALLBACK)
    run_scheduling_pass()
    # then it runs on the on-demand node, its segment is billed at the on-demand price
    slice_ = Allocation.objects.get(request=request)
    assert (slice_.gpu.node.name, slice_.billing_mode) == ("a100-80gb-node-01", BillingMode.ON_DEMAND)
    assert Allocation.objects.get(request=hog).gpu.node.name == "a100-80gb-spot-node-02"
    meter_usage(timezone.now() + dt.timedelta(hours=1))
    assert {e.usd_per_gpu_hour for e in LedgerEntry.objects.filter(request=request)} == {Decimal("4.00")}
    # and the API, the list page and the request page name the capacity that runs it
    label = "spot (running on on-demand: fallback)"
    shown = api_client(member).get("/api/v1/requests/", {"search": "fell-back"}).json()["results"][0]
    assert (shown["billing_mode"], shown["capacity_type"], shown["billing_label"]) == (
        "spot",
        "on-demand",
        label,
    )
    client.force_login(member)
    assert label in client.get(reverse("requests")).text
    page = client.get(reverse("request_detail", args=[request.pk])).text
    assert f'<span id="billing">{label}</span>' in page
