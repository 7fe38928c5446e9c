"""A job killed by its cgroup's memory limit: the agent's "finished" report names the limit, and the
request ends failed saying so, whatever the exit status, with the report's usual idempotency and fencing
(generation, another node). A job being moved that is killed so ends failed too, not requeued: see
test_reclaim_paths.py."""

import pytest
from django.utils import timezone

from scheduler_app.choices import RequestState
from scheduler_app.selectors import request_events
from scheduler_app.services.agents import report_finished, report_started
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request
from scheduler_app.services.transitions import stop_gracefully
from tests.scheduler_app.test_agent_api import AGENT, agent_client, events_of

REASON = "exceeded its host memory limit (4096 MiB)"


@pytest.fixture
def placed(place):
    """A request of the member's team scheduled on node-1 (tests/agent_fixtures.py: node, place)."""
    return place("python train.py")


def finished(node, request, **body):
    return agent_client(node).post(AGENT + f"requests/{request.pk}/finished/", body, format="json")


def last_reason(request) -> str:
    return request_events(request).last().reason


@pytest.mark.parametrize("exit_code", [-9, 137, 0])
def test_a_host_memory_kill_fails_the_request_saying_so_and_keeps_the_exit_status(placed, node, exit_code):
    report_started(node, placed.pk)

    response = finished(node, placed, exit_code=exit_code, host_memory_exceeded_mib=4096)

    assert response.status_code == 200, response.json()
    assert response.json() == {"request_id": placed.pk, "state": "failed"}
    placed.refresh_from_db()
    assert (placed.state, placed.exit_code) == (RequestState.FAILED, exit_code)
    assert last_reason(placed) == REASON
    assert not placed.allocations.committed().exists()


def test_a_host_memory_kill_before_started_got_through_fails_it_from_scheduled(placed, node):
    finished(node, placed, exit_code=-9, host_memory_exceeded_mib=4096)

    placed.refresh_from_db()
    assert placed.state == RequestState.FAILED and last_reason(placed) == REASON
    assert events_of(placed) == ["pending", "scheduled", "failed"]


def test_a_repeated_host_memory_kill_report_changes_nothing(placed, node):
    report_started(node, placed.pk)
    finished(node, placed, exit_code=-9, host_memory_exceeded_mib=4096)

    again = finished(node, placed, exit_code=0, host_memory_exceeded_mib=8192)

    assert again.json()["state"] == "failed"
    placed.refresh_from_db()
    assert placed.exit_code == -9
    assert events_of(placed) == ["pending", "scheduled", "running", "failed"]
    assert last_reason(placed) == REASON


def test_a_host_memory_kill_after_the_user_released_it_keeps_the_users_decision(placed, node, member):
    report_started(node, placed.pk)
    release_request(placed, user=member)

    finished(node, placed, exit_code=-9, host_memory_exceeded_mib=4096)

    placed.refresh_from_db()
    assert (placed.state, placed.exit_code) == (RequestState.RELEASED, -9)


def test_a_host_memory_kill_of_an_earlier_run_does_not_end_the_current_one(placed, node):
    report_started(node, placed.pk)

    response = finished(node, placed, exit_code=-9, host_memory_exceeded_mib=4096, generation=0)

    assert response.json()["state"] == "running"
    placed.refresh_from_db()
    assert placed.state == RequestState.RUNNING and placed.exit_code is None


def test_another_node_cannot_report_a_host_memory_kill(placed, node, make_node):
    other_node = make_node("node-2", gpus=1)
    report_started(node, placed.pk)

    response = finished(other_node, placed, exit_code=-9, host_memory_exceeded_mib=4096)

    assert response.status_code == 404
    placed.refresh_from_db()
    assert placed.state == RequestState.RUNNING


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4096", True, 2**31, [4096], {"mib": 4096}])
def test_a_bad_host_memory_limit_is_refused_and_changes_nothing(placed, node, bad):
    report_started(node, placed.pk)

    response = finished(node, placed, exit_code=-9, host_memory_exceeded_mib=bad)

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["host_memory_exceeded_mib"]
    placed.refresh_from_db()
    assert placed.state == RequestState.RUNNING and placed.exit_code is None


def test_a_null_host_memory_limit_is_an_ordinary_finish(placed, node):
    report_started(node, placed.pk)

    finished(node, placed, exit_code=0, host_memory_exceeded_mib=None)

    placed.refresh_from_db()
    assert placed.state == RequestState.SUCCEEDED


def test_the_service_refuses_a_bad_limit_from_any_caller(placed, node):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        report_finished(node, placed.pk, -9, host_memory_exceeded_mib=0)

    assert "host_memory_exceeded_mib" in refused.value.message_dict


def test_a_host_memory_kill_of_a_run_stopped_for_a_move_does_not_end_its_next_run(node, member, team):
    from scheduler_app.services.requests import submit_request

    request = submit_request(user=member, team=team, name="train", gpu_milli=500)
    allocate(request, [Slice(node.gpus.get(index=0).pk, 500, 1024)])
    report_started(node, request.pk, generation=1)
    stop_gracefully([request.pk], deadline=timezone.now(), reason="moved")
    report_finished(node, request.pk, -15, generation=1)
    request.refresh_from_db()
    allocate(request, [Slice(node.gpus.get(index=1).pk, 500, 1024)])
    report_started(node, request.pk, generation=2)

    finished(node, request, exit_code=-9, host_memory_exceeded_mib=4096, generation=1)

    request.refresh_from_db()
    assert (request.state, request.placements) == (RequestState.RUNNING, 2)
