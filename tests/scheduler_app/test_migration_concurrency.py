"""Checkpoint, then move, under real concurrency: writers on separate connections race on one node's work."""

import datetime as dt
import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.services.agents import report_finished, report_started
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.migration import expire_stops, reclaim_node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import stop_gracefully

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 6


def race(targets) -> list[str]:
    """Run each target in its own thread (own DB connection), all released at once."""
    barrier = threading.Barrier(len(targets))
    outcomes = [""] * len(targets)

    def run(i, target):
        try:
            barrier.wait()
            target()
            outcomes[i] = "ok"
        except Exception as error:
            outcomes[i] = f"{type(error).__name__}: {error}"
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


@pytest.fixture
def spot_node(make_node):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    return make_node("spot-1", gpus=2, pool=spot)


def running(node, member, team, index):
    request = submit_request(
        user=member,
        team=team,
        name=f"job-{index}",
        gpu_milli=500,
        billing_mode=BillingMode.SPOT,
        checkpoint_interval_s=600,
    )
    allocate(request, [Slice(node.gpus.get(index=index).pk, 500, 1024)])
    report_started(node, request.pk)
    return request


def events(request, to_state, **more) -> int:
    of_request = Event.objects.filter(content_type__model="gpurequest", object_id=request.pk)
    return of_request.filter(to_state=to_state, **more).count()


def test_one_reclaim_notice_delivered_at_once_many_times_stops_each_job_once(spot_node, member, team):
    assert connection.vendor == "postgresql"
    jobs = [running(spot_node, member, team, i) for i in range(2)]
    deadline = timezone.now() + dt.timedelta(minutes=2)

    outcomes = race(
        [lambda: reclaim_node(spot_node, deadline=deadline, source="aws", notice_id="i-9")] * WRITERS
    )

    assert outcomes == ["ok"] * WRITERS
    node_events = Event.objects.filter(content_type__model="node", object_id=spot_node.pk)
    assert node_events.filter(to_state=NodeStatus.RECLAIMED).count() == 1
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.stop_by) == (RequestState.MIGRATING, deadline)
        assert events(job, RequestState.MIGRATING) == 1


def test_a_stop_report_racing_the_deadline_watchdog_requeues_once(spot_node, member, team, settings):
    settings.STOP_REPORT_SLACK_S = 0
    job = running(spot_node, member, team, 0)
    deadline = timezone.now() + dt.timedelta(seconds=1)
    stop_gracefully([job.pk], deadline=deadline, reason="race")
    after = deadline + dt.timedelta(seconds=1)

    outcomes = race(
        [lambda: report_finished(spot_node, job.pk, -9), lambda: expire_stops(after)] * (WRITERS // 2)
    )

    assert outcomes == ["ok"] * WRITERS
    job.refresh_from_db()
    assert job.state == RequestState.PENDING
    assert events(job, RequestState.PENDING, from_state=RequestState.MIGRATING) == 1
    assert job.allocations.filter(ended_at__isnull=True).count() == 0
