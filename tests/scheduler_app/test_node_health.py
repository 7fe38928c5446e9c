"""DESIGN rule 2: a lost node leaves each allocation requeued, never orphaned."""

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Allocation, Node
from scheduler_app.node_health import check_heartbeats, handle_node_loss
from scheduler_app.scheduling import run_scheduling_pass
from scheduler_app.services.requests import submit_request
from scheduler_app.services.transitions import transition_request


@pytest.fixture
def running_on(team, member):
    def make(node, name="job", **fields):
        request = submit_request(
            user=member, team=team, name=name, task_type="training", **({"gpu_milli": 500} | fields)
        )
        run_scheduling_pass()
        request.refresh_from_db()
        assert request.allocations.get(ended_at__isnull=True).gpu.node == node
        transition_request(request, RequestState.RUNNING)
        return request

    return make


def test_lost_node_requeues_its_work_with_the_reason(make_node, running_on):
    node = make_node(gpus=1)
    request = running_on(node)

    requeued = handle_node_loss(node, reason="host unreachable")

    request.refresh_from_db()
    assert requeued == 1
    assert request.state == RequestState.PENDING
    assert "node node-1 lost: host unreachable" in request.pending_reason
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    assert Event.objects.filter(object_id=request.pk, from_state="running", to_state="pending").exists()


def test_requeued_work_lands_on_another_node(make_node, running_on):
    lost = make_node("node-1", gpus=1)
    request = running_on(lost)
    make_node("node-2", gpus=1)

    handle_node_loss(lost, reason="kernel panic")
    run_scheduling_pass()

    request.refresh_from_db()
    assert request.state == RequestState.SCHEDULED
    assert request.allocations.get(ended_at__isnull=True).gpu.node.name == "node-2"


def test_watchdog_marks_silent_nodes_suspect_then_lost(make_node, running_on):
    node = make_node(gpus=1)
    request = running_on(node)
    quiet = make_node("never-reported", gpus=1)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - dt.timedelta(seconds=120))

    assert check_heartbeats(now) == {"suspect": 1, "lost": 0}
    node.refresh_from_db()
    assert node.status == NodeStatus.SUSPECT

    assert check_heartbeats(now + dt.timedelta(seconds=300)) == {"suspect": 0, "lost": 1}
    node.refresh_from_db()
    request.refresh_from_db()
    assert node.status == NodeStatus.LOST
    assert request.state == RequestState.PENDING
    quiet.refresh_from_db()
    assert quiet.status == NodeStatus.READY


def test_fresh_heartbeat_keeps_node_ready(make_node):
    node = make_node(gpus=1)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - dt.timedelta(seconds=10))

    assert check_heartbeats(now) == {"suspect": 0, "lost": 0}
