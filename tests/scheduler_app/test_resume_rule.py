"""The after-fault resume rule (scheduler_app.rules.invariants.unresumed_moves): the run after a move starts
from the checkpoint the move recorded, as the agent reports when it starts it."""

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app.choices import BillingMode, CapacityType, RequestState
from scheduler_app.rules.invariants import after_fault, unresumed_moves
from scheduler_app.services.agents import record_checkpoint, report_finished, report_started
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request
from tests.scheduler_app.test_agent_api import agent_client


@pytest.fixture
def spot_nodes(make_node):
    spot = create_pool(name="spot-a100", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    return make_node("spot-1", gpus=1, pool=spot), make_node("spot-2", gpus=1, pool=spot)


def _moved(spot_nodes, member, team, *, checkpoint: dt.datetime | None):
    """A job placed on spot-1 (checkpointed at `checkpoint`), reclaimed, stopped and placed on spot-2."""
    first, second = spot_nodes
    request = submit_request(
        user=member, team=team, name="train", gpu_milli=500, billing_mode=BillingMode.SPOT,
        checkpoint_interval_s=600,
    )  # fmt: skip
    allocate(request, [Slice(first.gpus.get().pk, 500, 1024)])
    report_started(first, request.pk)
    if checkpoint:
        record_checkpoint(first, request.pk, checkpoint)
    reclaim_node(first, deadline=timezone.now() + dt.timedelta(minutes=2), source="operator")
    report_finished(first, request.pk, -15)
    request.refresh_from_db()
    assert request.state == RequestState.PENDING
    allocate(request, [Slice(second.gpus.get().pk, 500, 1024)])
    return request, second


def test_a_run_that_resumes_from_the_moves_checkpoint_keeps_the_rule(spot_nodes, member, team):
    checkpoint = timezone.now() - dt.timedelta(seconds=30)
    request, second = _moved(spot_nodes, member, team, checkpoint=checkpoint)

    report_started(second, request.pk, resumed_from=checkpoint)

    assert unresumed_moves() == []
    assert after_fault() == []


def test_a_run_that_restarts_from_the_beginning_after_a_move_breaks_the_rule(spot_nodes, member, team):
    checkpoint = timezone.now() - dt.timedelta(seconds=30)
    request, second = _moved(spot_nodes, member, team, checkpoint=checkpoint)

    report_started(second, request.pk, resumed_from=None)

    [problem] = unresumed_moves()
    assert f"request #{request.pk} restarted from the beginning" in problem
    assert problem in after_fault()


def test_a_run_that_resumes_from_an_older_checkpoint_breaks_the_rule(spot_nodes, member, team):
    checkpoint = timezone.now() - dt.timedelta(seconds=30)
    request, second = _moved(spot_nodes, member, team, checkpoint=checkpoint)

    report_started(second, request.pk, resumed_from=checkpoint - dt.timedelta(minutes=5))

    [problem] = unresumed_moves()
    assert f"request #{request.pk} resumed from" in problem and "before its checkpoint" in problem


def test_a_move_without_a_checkpoint_may_restart_from_the_beginning(spot_nodes, member, team):
    request, second = _moved(spot_nodes, member, team, checkpoint=None)

    report_started(second, request.pk)

    assert unresumed_moves() == []


def test_the_agent_endpoint_records_what_the_run_resumed_from(spot_nodes, member, team):
    checkpoint = timezone.now() - dt.timedelta(seconds=30)
    request, second = _moved(spot_nodes, member, team, checkpoint=checkpoint)

    answer = agent_client(second).post(
        f"/api/v1/agent/requests/{request.pk}/started/", {"resumed_from": "yesterday"}, format="json"
    )
    assert answer.status_code == 400 and "resumed_from" in answer.json()["error"]["fields"]
    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED

    answer = agent_client(second).post(
        f"/api/v1/agent/requests/{request.pk}/started/",
        {"resumed_from": checkpoint.isoformat()},
        format="json",
    )
    assert answer.status_code == 200
    assert unresumed_moves() == []
