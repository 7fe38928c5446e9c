"""The invariant queries find each kind of planted defect (and nothing on a healthy cluster).

The defects are planted with raw writes that bypass the services; on PostgreSQL the guard
triggers would refuse them, so they are switched off for the test's own transaction.
"""

import pytest
from django.db import connection

from scheduler_app.choices import BillingMode, RequestState
from scheduler_app.models import Allocation, GpuRequest
from scheduler_app.rules.invariants import (
    active_requests_without_their_slices,
    over_committed_gpus,
    slices_of_inactive_requests,
    terminal_requests_without_end,
    violations,
)
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request

pytestmark = pytest.mark.breaks_invariants


@pytest.fixture
def unguarded(db):
    """Raw writes may break the rules for this test (its transaction is rolled back)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE scheduler_app_allocation DISABLE TRIGGER USER")
            cursor.execute("ALTER TABLE scheduler_app_gpurequest DISABLE TRIGGER USER")


@pytest.fixture
def placed(team, member, make_node):
    gpus = list(make_node().gpus.order_by("index"))

    def place_on(index, milli=500, name="train"):
        request = submit_request(user=member, team=team, name=name, gpu_milli=milli)
        allocate(request, [Slice(gpus[index].pk, milli, 10_000)])
        return request

    place_on.gpus = gpus
    return place_on


def test_a_healthy_cluster_has_no_violation(placed):
    placed(0)

    assert violations() == []


def test_an_open_slice_of_a_cancelled_request_is_found(placed, unguarded):
    request = placed(0)
    GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.CANCELLED)

    [found] = slices_of_inactive_requests()
    assert found == f"train (#{request.pk}, cancelled) holds 500 milli on gpu #{placed.gpus[0].pk}"


def test_a_card_over_its_milli_or_its_memory_is_found(placed, unguarded):
    placed(0, milli=750)
    placed(1, milli=250)
    extra = {"milli": 500, "gpu_memory_mib": 10_000, "billing_mode": BillingMode.ON_DEMAND}
    Allocation.objects.create(request=placed(2), gpu=placed.gpus[0], **extra)
    Allocation.objects.create(request=placed(3), gpu=placed.gpus[1], **(extra | {"gpu_memory_mib": 80_000}))

    found = over_committed_gpus()

    assert found == [
        "node-1/gpu0 holds 1250 milli-GPU and 20000 of 81920 MiB",
        "node-1/gpu1 holds 750 milli-GPU and 90000 of 81920 MiB",
    ]


def test_an_active_request_without_its_slices_is_found(placed, unguarded):
    request = placed(0)
    Allocation.objects.filter(request=request).delete()

    assert active_requests_without_their_slices() == [
        f"train (#{request.pk}, scheduled) holds 0 of its 1 slice(s)"
    ]


def test_a_finished_request_without_an_end_is_found(team, member, unguarded):
    request = submit_request(user=member, team=team, name="done", gpu_milli=125)
    GpuRequest.objects.filter(pk=request.pk).update(state=RequestState.SUCCEEDED)

    assert terminal_requests_without_end() == [f"done (#{request.pk}) is succeeded with no ended_at"]
