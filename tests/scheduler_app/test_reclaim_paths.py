"""Paths to a reclaim (all reach reclaim_node): the operator page and the fault-injection command; the CLI's
is in tests/sdk/test_cli_reclaim.py, the API's and the agent's in test_migration.py."""

import datetime as dt
import io
from decimal import Decimal

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from billing_app.services import set_pool_price
from infra.money import usd
from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.selectors import request_events
from scheduler_app.services.agents import record_checkpoint, report_finished, report_started, stop_time
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from tests.scheduler_app.test_agent_api import agent_client


@pytest.fixture
def spot_node(make_node):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    return make_node("spot-1", gpus=1, pool=spot)


@pytest.fixture
def job(spot_node, member, team):
    request = submit_request(
        user=member,
        team=team,
        name="train",
        gpu_milli=500,
        billing_mode=BillingMode.SPOT,
        checkpoint_interval_s=600,
    )
    allocate(request, [Slice(spot_node.gpus.get().pk, 500, 1024)])
    report_started(spot_node, request.pk)
    return request


def test_an_operator_reclaims_a_spot_node_from_its_page(client, operator, spot_node, job):
    client.force_login(operator)
    assert "Reclaim this node" in client.get(reverse("operator_node", args=[spot_node.pk])).text

    response = client.post(
        reverse("operator_node_reclaim", args=[spot_node.pk]), {"grace_s": 90}, follow=True
    )

    assert "1 job(s) checkpoint and stop by" in response.text
    spot_node.refresh_from_db()
    job.refresh_from_db()
    assert spot_node.status == NodeStatus.RECLAIMED
    assert job.state == RequestState.MIGRATING


def test_the_reclaim_form_refuses_a_negative_grace_and_changes_nothing(client, operator, spot_node, job):
    client.force_login(operator)

    response = client.post(reverse("operator_node_reclaim", args=[spot_node.pk]), {"grace_s": -5})

    assert response.status_code == 400
    assert "greater than or equal to 0" in response.text
    spot_node.refresh_from_db()
    assert spot_node.status == NodeStatus.READY


def test_members_cannot_reclaim_from_the_page(client, member, spot_node, job):
    client.force_login(member)

    response = client.post(reverse("operator_node_reclaim", args=[spot_node.pk]), {"grace_s": 90})

    assert response.status_code == 403
    spot_node.refresh_from_db()
    assert spot_node.status == NodeStatus.READY


def test_inject_fault_reclaim_sends_the_notice_and_the_same_notice_again_does_nothing(spot_node, job):
    out = io.StringIO()

    call_command("inject_fault", "reclaim", "spot-1", "--grace", "30", "--notice-id", "f-1", stdout=out)
    call_command("inject_fault", "reclaim", "spot-1", "--grace", "30", "--notice-id", "f-1", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("spot-1: reclaimed, 1 job(s) stop by")
    assert lines[1].startswith("spot-1: reclaimed, 0 job(s) stop by")
    job.refresh_from_db()
    assert job.state == RequestState.MIGRATING


def test_inject_fault_names_an_unknown_node_and_an_on_demand_one(make_node, db):
    make_node("od-1", gpus=1)

    with pytest.raises(CommandError, match="No node named nowhere"):
        call_command("inject_fault", "reclaim", "nowhere")
    with pytest.raises(CommandError, match=r"od-1: .*drain it instead"):
        call_command("inject_fault", "reclaim", "od-1")


@pytest.fixture
def priced(spot_node):
    """$1 per GPU-hour on the spot pool from now (before the job is placed)."""
    return set_pool_price(spot_node.pool, "1.00", actor=None)


def test_the_request_page_shows_each_move_with_its_work_lost_and_each_segments_cost(
    client, member, spot_node, priced, job
):
    checkpoint = timezone.now()
    record_checkpoint(spot_node, job.pk, checkpoint)
    reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    report_finished(spot_node, job.pk, -15)
    client.force_login(member)

    page = client.get(reverse("request_detail", args=[job.pk])).text

    assert "checkpointed at" in page
    assert "Work lost:" in page and f"since the checkpoint of {checkpoint:%H:%M:%S} UTC" in page
    segment = job.allocations.get()
    assert segment.ended_at is not None
    seconds = (segment.ended_at - segment.started_at).total_seconds()
    cost = usd(Decimal(0.5 * seconds / 3600))  # half a card at $1 per GPU-hour
    assert f'class="segment-cost">{cost}<' in page


@pytest.fixture
def moving(spot_node, job):
    """The job told to checkpoint and stop: its node reclaimed with two minutes' notice."""
    record_checkpoint(spot_node, job.pk, timezone.now() - dt.timedelta(seconds=20))
    reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    job.refresh_from_db()
    return job


def test_a_moved_job_stops_when_its_agent_saw_it_exit_not_when_the_report_came(spot_node, job):
    began = job.allocations.get().started_at
    checkpoint, exited = began + dt.timedelta(seconds=10), began + dt.timedelta(seconds=22)
    with time_machine.travel(began + dt.timedelta(seconds=15), tick=False):  # the notice
        record_checkpoint(spot_node, job.pk, checkpoint)
        reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    with time_machine.travel(began + dt.timedelta(seconds=30), tick=False):  # the report, 8 s after the exit
        report_finished(spot_node, job.pk, 143, stopped_at=exited)

    job.refresh_from_db()
    assert job.state == RequestState.PENDING
    assert job.allocations.get().ended_at == exited  # billed to its exit, not to the report
    move = request_events(job).filter(to_state=RequestState.PENDING).last()
    assert move.data["stopped_at"] == exited.isoformat() and move.data["work_lost_s"] == 12


def test_a_reported_exit_time_is_kept_between_the_metering_settle_time_and_now(settings):
    now = timezone.now()
    settle = dt.timedelta(seconds=settings.METERING_SETTLE_S)

    assert stop_time(None, now) == now
    assert stop_time(now - dt.timedelta(seconds=1), now) == now - dt.timedelta(seconds=1)
    assert stop_time(now + dt.timedelta(minutes=5), now) == now  # a clock ahead: never in the future
    assert stop_time(now - settle - dt.timedelta(hours=1), now) == now - settle  # never before billed time


def test_the_finished_endpoint_refuses_a_stop_time_without_a_timezone(spot_node, moving):
    answer = agent_client(spot_node).post(
        f"/api/v1/agent/requests/{moving.pk}/finished/",
        {"exit_code": 143, "stopped_at": "2026-01-01T00:00:00"},
        format="json",
    )

    assert answer.status_code == 400 and "stopped_at" in answer.json()["error"]["fields"]
    moving.refresh_from_db()
    assert moving.state == RequestState.MIGRATING


def test_a_job_killed_by_its_host_memory_limit_while_being_moved_fails_and_is_not_requeued(spot_node, moving):
    report_finished(spot_node, moving.pk, -9, stopped_at=timezone.now(), host_memory_exceeded_mib=4096)

    moving.refresh_from_db()
    assert (moving.state, moving.exit_code) == (RequestState.FAILED, -9)
    assert request_events(moving).last().reason == "exceeded its host memory limit (4096 MiB)"
    assert not request_events(moving).filter(from_state=RequestState.MIGRATING, to_state=RequestState.PENDING)
    assert not moving.allocations.committed().exists()


def test_a_job_that_finished_before_its_reclaim_but_was_reported_after_is_not_run_again(spot_node, job):
    began = job.allocations.get().started_at
    finished, noticed = began + dt.timedelta(seconds=20), began + dt.timedelta(seconds=25)
    with time_machine.travel(noticed, tick=False):
        reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    with time_machine.travel(noticed + dt.timedelta(seconds=3), tick=False):  # the exit, reported late
        report_finished(spot_node, job.pk, 0, stopped_at=finished)

    job.refresh_from_db()
    assert job.state == RequestState.SUCCEEDED and job.exit_code == 0
    assert (
        not request_events(job)
        .filter(from_state=RequestState.MIGRATING, to_state=RequestState.PENDING)
        .exists()
    )
    assert job.allocations.get().ended_at is not None


def test_a_job_that_failed_before_its_reclaim_ends_failed_not_moved(spot_node, job):
    began = job.allocations.get().started_at
    with time_machine.travel(began + dt.timedelta(seconds=25), tick=False):
        reclaim_node(spot_node, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
        report_finished(spot_node, job.pk, 3, stopped_at=began + dt.timedelta(seconds=10))

    job.refresh_from_db()
    assert job.state == RequestState.FAILED and job.exit_code == 3
