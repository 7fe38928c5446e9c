"""Fault: the worker is killed (SIGKILL) in the middle of a scheduling pass, and again in the middle of
metering, inside their transactions. PostgreSQL rolls the half-done work back; the next run finishes
it, and nothing is lost, placed twice or billed twice."""

import datetime as dt

import pytest
from django.utils import timezone

from billing_app.metering import meter_usage
from billing_app.models import LedgerEntry
from scheduler_app.choices import BillingMode, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import requeue
from tests.faults.conftest import killed_mid, settle_and_check

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# The Celery task, as the worker runs it, held after its placements are written but not committed.
PASS_HELD_AFTER_PLACING = """
import sys, time
import scheduler_app.passes.run as scheduling
from scheduler_app.tasks import scheduling_pass
placed = scheduling.place
def place_and_hold(*args, **kwargs):
    result = placed(*args, **kwargs)
    print(f"placed {len(result.started)}", flush=True)
    print("MID", flush=True)
    time.sleep(300)
scheduling.place = place_and_hold
scheduling_pass()
"""

# The metering task, one slice a chunk, held inside its third chunk's transaction after writing its
# entries.
METERING_HELD_IN_THE_THIRD_SLICE = """
import time
from django.db import transaction
import billing_app.metering as metering
from billing_app.tasks import meter_usage
metered = metering.meter_allocations
calls = []
def meter_and_hold(allocation_ids, now):
    calls.append(allocation_ids)
    if len(calls) < 3:
        return metered(allocation_ids, now)
    with transaction.atomic():
        written = metered(allocation_ids, now)
        print(f"wrote {len(written)} entries of slice {allocation_ids[0]}", flush=True)
        print("MID", flush=True)
        time.sleep(300)
metering.METERING_CHUNK = 1
metering.meter_allocations = meter_and_hold
meter_usage()
"""


def test_a_worker_killed_mid_pass_leaves_nothing_half_placed_and_the_next_pass_places_all(
    make_node, team, member
):
    make_node("node-1", gpus=2)
    requests = [
        submit_request(user=member, team=team, name=f"job-{i}", gpu_milli=500, task_type="training")
        for i in range(4)
    ]

    printed = killed_mid(PASS_HELD_AFTER_PLACING)

    assert "placed 4" in printed
    states = set(GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list("state", flat=True))
    assert states == {RequestState.PENDING}  # the kill rolled the placements back
    run_scheduling_pass()  # waits, if need be, until PostgreSQL has ended the killed session
    states = list(GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list("state", flat=True))
    assert states == [RequestState.SCHEDULED] * 4
    settle_and_check(accepted=[r.pk for r in requests])


def test_a_worker_killed_mid_metering_bills_every_second_once_on_the_next_run(make_node, team, member):
    node = make_node("node-1", gpus=4)
    began = timezone.now() - dt.timedelta(hours=2)
    requests = [
        submit_request(user=member, team=team, name=f"job-{i}", gpu_milli=500, task_type="training")
        for i in range(5)
    ]
    cards = list(node.gpus.order_by("index"))
    place(
        [
            PlannedStart(r.pk, (Slice(cards[i % 4].pk, 500, 20480),), BillingMode.ON_DEMAND)
            for i, r in enumerate(requests)
        ],
        now=began,
    )
    requeue([r.pk for r in requests[:2]], reason="node lost", now=began + dt.timedelta(minutes=47))

    printed = killed_mid(METERING_HELD_IN_THE_THIRD_SLICE)

    assert "wrote 1 entries" in printed
    assert LedgerEntry.objects.values("allocation").distinct().count() == 2  # the third's was rolled back
    meter_usage()
    meter_usage()  # a retry on top bills nothing twice
    settle_and_check(accepted=[r.pk for r in requests])
