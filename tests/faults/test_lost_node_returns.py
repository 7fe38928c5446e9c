"""Fault: a node drops off the network with its agent and jobs still running; the portal declares it
lost and moves its work. When it comes back, its stale job is stopped and nothing runs twice."""

import datetime as dt

from django.conf import settings
from django.utils import timezone

from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.node_health import check_heartbeats
from tests.agent_fixtures import DEMO_JOB, rounds_until
from tests.faults.conftest import running_here, settle_and_check


def test_a_lost_node_that_returns_stops_its_stale_job_and_the_work_runs_once(
    start_agent, place, make_node, node
):
    spare = make_node("node-2", gpus=1)
    request = place(f"{DEMO_JOB} --seconds 120")
    returning = start_agent()
    rounds_until(returning, lambda: request.pk in returning.jobs, what="the job running on node-1")
    stale = returning.jobs[request.pk]

    # The node goes silent (no more rounds) while its job runs on; the watchdog loses it.
    silent = timezone.now() + dt.timedelta(seconds=settings.NODE_SUSPECT_AFTER_S + 1)
    check_heartbeats(silent)
    check_heartbeats(silent + dt.timedelta(seconds=settings.NODE_LOST_AFTER_S + 1))
    run_scheduling_pass()
    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
    assert request.allocations.get(ended_at__isnull=True).gpu.node == spare
    moved = start_agent(for_node=spare)
    rounds_until(moved, lambda: request.pk in moved.jobs, what="the job started on node-2")
    assert len(running_here()[request.pk]) == 2  # the partition: both run until node-1 hears of it

    rounds_until(returning, lambda: request.pk not in returning.jobs, what="the stale job stopped")

    assert stale.exit_code == 143  # SIGTERM: it had its grace to checkpoint
    assert len(running_here()[request.pk]) == 1
    node.refresh_from_db()
    assert node.status == NodeStatus.LOST  # back, but an operator decides when it takes work again
    moved.round()
    request.refresh_from_db()
    assert request.state == RequestState.RUNNING and request.pk in moved.jobs
    settle_and_check()
