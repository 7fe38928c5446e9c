"""The after-fault checker (invariants.after_fault) finds each kind of planted defect, and nothing on a
cluster where every rule holds."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.invariants import billing_error_seconds, billing_errors, settled_by
from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry
from scheduler_app.choices import BillingMode
from scheduler_app.models import Allocation
from scheduler_app.rules.invariants import after_fault, double_runs, lost_requests, requests_on_two_nodes
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import requeue

HOUR_AGO = dt.timedelta(hours=1)


@pytest.fixture
def running(team, member, make_node):
    """A request holding half of node-1's first card since an hour ago."""
    card = make_node("node-1", gpus=1).gpus.get()
    request = submit_request(user=member, team=team, name="train", gpu_milli=500)
    allocate(request, [Slice(card.pk, 500, 10_000)])
    Allocation.objects.filter(request=request).update(started_at=timezone.now() - HOUR_AGO)
    return request


def later() -> dt.datetime:
    return settled_by()


def test_a_healthy_cluster_passes_every_after_fault_rule(running):
    requeue([running.pk], reason="node lost")
    meter_usage(later())

    assert after_fault(accepted=[running.pk], running={}, now=later()) == []


def test_a_request_running_in_two_sessions_is_a_double_run(running):
    assert double_runs({running.pk: {"session 1 on GPU-a"}}) == []
    assert double_runs({running.pk: {"session 1 on GPU-a", "session 2 on GPU-b"}}) == [
        f"request #{running.pk} runs 2 times: ['session 1 on GPU-a', 'session 2 on GPU-b']"
    ]


def test_a_process_of_a_request_without_a_slice_is_a_stale_run(running):
    requeue([running.pk], reason="node lost")

    assert double_runs({running.pk: {"session 7 on GPU-a"}}) == [
        f"request #{running.pk} runs (['session 7 on GPU-a']) without holding a slice"
    ]


@pytest.mark.breaks_invariants
def test_open_slices_on_two_nodes_are_found(running, make_node):
    other = make_node("node-2", gpus=1).gpus.get()
    Allocation.objects.create(
        request=running, gpu=other, milli=500, gpu_memory_mib=10_000, billing_mode=BillingMode.ON_DEMAND
    )

    assert requests_on_two_nodes() == [f"train (#{running.pk}) holds open slices on 2 nodes"]


def test_an_accepted_request_that_is_gone_is_lost(running):
    assert lost_requests([running.pk]) == []
    assert lost_requests([running.pk, running.pk + 1000]) == [
        f"accepted request #{running.pk + 1000} is gone"
    ]


def test_a_ledger_short_of_its_slice_is_a_billing_error_in_seconds(running):
    requeue([running.pk], reason="node lost")
    meter_usage(later())
    entry = LedgerEntry.objects.get()
    entry.end -= dt.timedelta(seconds=90)
    entry.seconds -= 90
    entry.save()

    (problem,) = billing_errors(later())
    assert problem.startswith(f"slice #{entry.allocation_id}: billed ")
    assert billing_error_seconds(later()) == Decimal(90)
