"""Requests whose capacity is offline (its nodes lost, draining or reclaimed) say so, in the pass's
pending reason and in the estimate, and start once a node is back."""

import datetime as dt

import pytest
from django.utils import timezone

from scheduler_app.choices import CapacityType, NodeStatus, RequestState
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool, set_node_status
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.node_health import handle_node_loss
from scheduler_app.services.requests import submit_request

OUT_AT = dt.datetime(2025, 1, 7, 23, 11, 30, tzinfo=dt.UTC)
SPOT = {"billing_mode": "spot", "checkpoint_interval_s": 600}


def lose(node, operator):
    handle_node_loss(node, reason="no heartbeat since 23:06:00 UTC")


def drain(node, operator):
    set_node_status(node, NodeStatus.DRAINING, actor=operator, reason="firmware update")


def reclaim(node, operator):
    reclaim_node(node, deadline=timezone.now(), source="cloud")


# How each pool goes offline, whose requests may use it, and what they are told.
OUT = {
    "lost": (lose, CapacityType.ON_DEMAND, {}, "the 3 nodes of pool a100-80gb are offline (lost since {at})"),
    "draining": (
        drain,
        CapacityType.ON_DEMAND,
        {},
        "the 3 nodes of pool a100-80gb are draining (since {at})",
    ),
    "reclaimed": (
        reclaim,
        CapacityType.SPOT,
        SPOT,
        "the 3 nodes of pool a100-80gb are reclaimed (since {at})",
    ),
}


@pytest.fixture(params=OUT)
def offline_pool(request, make_node, operator, time_machine):
    """Pool a100-80gb (on-demand, or spot to be reclaimed), its 3 nodes put out of service at 23:11:30 UTC by
    the owner of that change; (request fields that may use it, the reason they are given)."""
    take_out, capacity, fields, reason = OUT[request.param]
    pool = create_pool(name="a100-80gb", gpu_model="A100-80GB", capacity_type=capacity)
    nodes = [make_node(f"a100-{i}", gpus=2, pool=pool) for i in range(3)]
    time_machine.move_to(OUT_AT, tick=False)
    for node in nodes:
        take_out(node, operator)
    time_machine.move_to(OUT_AT + dt.timedelta(minutes=5), tick=False)
    return nodes, fields, reason.format(at="2025-01-07 23:11 UTC")


def submit(member, team, name="job", **fields):
    return submit_request(
        user=member, team=team, name=name, task_type="training", **({"gpu_milli": 500} | fields)
    )


def test_the_pass_says_the_pool_is_offline_and_why(offline_pool, member, team):
    _, fields, reason = offline_pool
    request = submit(member, team, **fields)

    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.PENDING
    assert request.pending_reason == f"{reason}; 0 requests ahead of you; estimated start unknown"


def test_the_pass_after_a_submit_says_it_too(offline_pool, member, team):
    # given a pass that stored its state, then a second submit (the incremental pass)
    _, fields, reason = offline_pool
    submit(member, team, "first", **fields)
    run_scheduling_pass()
    second = submit(member, team, "second", **fields)

    run_scheduling_pass()

    second.refresh_from_db()
    assert second.pending_reason == f"{reason}; 1 request ahead of you; estimated start unknown"


@pytest.mark.parametrize("stored", [False, True], ids=["dry run", "after a pass"])
def test_the_estimate_says_the_pool_is_offline_and_why(offline_pool, member, team, stored):
    _, fields, reason = offline_pool
    if stored:
        run_scheduling_pass()

    estimate = estimate_request(user=member, team=team, name="probe", gpu_milli=500, **fields)

    assert not estimate.starts_now and estimate.estimated_start_at is None
    assert estimate.reason == f"{reason}; 0 requests ahead of you; estimated start unknown"


def test_a_request_no_node_could_ever_hold_still_says_so(offline_pool, member, team):
    # given nodes of two cards, offline or not, and a request for four
    _, fields, _ = offline_pool
    request = submit(member, team, num_gpus=4, gpu_milli=1000, **fields)

    run_scheduling_pass()

    request.refresh_from_db()
    assert "can ever hold 4 GPU(s) of 1000 milli-GPU; 0 requests ahead" in request.pending_reason


def test_the_request_starts_once_a_node_is_back(offline_pool, member, team, operator):
    nodes, fields, _ = offline_pool
    request = submit(member, team, **fields)
    run_scheduling_pass()

    set_node_status(nodes[0], NodeStatus.READY, actor=operator, reason="back")
    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
