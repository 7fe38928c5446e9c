"""DESIGN rule 2: a lost node leaves each allocation requeued, never orphaned."""

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import Event
from scheduler_app.choices import CapacityType, NodeStatus, RequestState
from scheduler_app.models import Allocation, Node
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool, issue_agent_credential, set_node_status
from scheduler_app.services.migration import reclaim_node
from scheduler_app.services.node_health import check_heartbeats, handle_node_loss, register_agent
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


def lost_by_the_watchdog(node, now):
    """The node's agent last heard from two minutes before `now`; the watchdog's checks lose it."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - dt.timedelta(seconds=120))
    check_heartbeats(now)
    check_heartbeats(now + dt.timedelta(seconds=300))
    node.refresh_from_db()
    assert node.status == NodeStatus.LOST


def its_cards(node) -> list[dict]:
    """The registration its agent sends: the node's cards as NVML reports them."""
    return [
        {"uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib, "mig_mode": "disabled"}
        for g in node.gpus.all()
    ]


def test_with_return_to_service_a_node_lost_for_its_silence_returns_when_its_agent_registers(
    make_node, settings
):
    settings.NODE_RETURN_TO_SERVICE = True
    node = make_node(gpus=1)
    lost_by_the_watchdog(node, timezone.now())
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(node)}")

    answer = agent.post("/api/v1/agent/register/", {"gpus": its_cards(node)}, format="json")

    node.refresh_from_db()
    assert answer.status_code == 200 and answer.json()["node_status"] == NodeStatus.READY
    assert node.status == NodeStatus.READY
    back = Event.objects.filter(object_id=node.pk, from_state="lost", to_state="ready").get()
    assert back.actor_label == "node agent"
    assert back.reason.startswith("its agent registered again after it was lost at ")
    assert "(no heartbeat since " in back.reason and "NODE_RETURN_TO_SERVICE is on" in back.reason


def test_without_return_to_service_a_node_lost_for_its_silence_stays_lost_when_its_agent_registers(
    make_node, settings
):
    settings.NODE_RETURN_TO_SERVICE = False
    node = make_node(gpus=1)
    lost_by_the_watchdog(node, timezone.now())

    node, _ = register_agent(node, its_cards(node))

    assert node.status == NodeStatus.LOST
    assert node.last_heartbeat_at > timezone.now() - dt.timedelta(seconds=60)  # heard, not resumed


def test_a_heartbeat_alone_does_not_return_a_lost_node(make_node, settings):
    settings.NODE_RETURN_TO_SERVICE = True
    node = make_node(gpus=1)
    lost_by_the_watchdog(node, timezone.now())
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_agent_credential(node)}")

    answer = agent.post("/api/v1/agent/heartbeat/")

    assert answer.json()["node_status"] == NodeStatus.LOST


def test_with_return_to_service_a_node_an_operator_marked_lost_stays_lost(make_node, settings, operator):
    settings.NODE_RETURN_TO_SERVICE = True
    node = make_node(gpus=1)
    set_node_status(node, NodeStatus.LOST, actor=operator, reason="bad DIMM: keep it out")

    node, _ = register_agent(node, its_cards(node))

    assert node.status == NodeStatus.LOST


def test_with_return_to_service_drained_and_reclaimed_nodes_stay_out_when_their_agents_register(
    make_node, settings, operator
):
    settings.NODE_RETURN_TO_SERVICE = True
    drained = make_node("node-1", gpus=1)
    set_node_status(drained, NodeStatus.DRAINING, actor=operator, reason="maintenance")
    spot = create_pool(name="spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    reclaimed = make_node("spot-1", gpus=1, pool=spot)
    reclaim_node(reclaimed, deadline=timezone.now(), source="cloud")

    drained, _ = register_agent(drained, its_cards(drained))
    reclaimed, _ = register_agent(reclaimed, its_cards(reclaimed))

    assert (drained.status, reclaimed.status) == (NodeStatus.DRAINING, NodeStatus.RECLAIMED)
