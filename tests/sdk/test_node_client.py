"""NodeClient's isolation and host-memory reports against the live portal, and the positional calls the
agent makes today still working unchanged."""

import datetime as dt

import pytest
from gpu_portal_sdk import ValidationError
from gpu_portal_sdk.node import NodeClient

from scheduler_app.choices import RequestState
from scheduler_app.models import Node
from scheduler_app.selectors import request_events
from scheduler_app.services.inventory import issue_agent_credential

CARD = {"uuid": "GPU-node-1-0", "model": "A100-80GB", "memory_mib": 81920, "mig_mode": "disabled"}


@pytest.fixture
def client(live_server, transactional_db, node):
    return NodeClient(live_server.url, issue_agent_credential(node))


def test_register_sends_the_isolation_when_given(client, node):
    answer = client.register([CARD], {"mode": "isolated", "namespaces": False, "cgroup": "v1"})

    assert answer["node"] == "node-1"
    assert Node.objects.get(pk=node.pk).isolation() == {
        "mode": "isolated",
        "namespaces": False,
        "cgroup": "v1",
    }


def test_register_without_isolation_is_the_call_an_older_agent_makes(client, node):
    client.register([CARD], isolation={"mode": "unisolated", "namespaces": False, "cgroup": "none"})

    client.register([CARD])

    assert Node.objects.get(pk=node.pk).isolation_mode == "unknown"


def test_a_bad_isolation_is_the_portals_validation_error(client, node):
    with pytest.raises(ValidationError) as refused:
        client.register([CARD], {"mode": "isolated", "namespaces": "yes", "cgroup": "v1"})

    assert "isolation.namespaces" in refused.value.fields
    assert Node.objects.get(pk=node.pk).isolation_mode == "unknown"


def test_finished_reports_a_host_memory_kill(client, node, place):
    request = place("python train.py")
    client.started(request.pk, 1)
    ended = dt.datetime.now(dt.UTC)

    answer = client.finished(request.pk, -9, 1, ended, host_memory_exceeded_mib=2048)

    assert answer == {"request_id": request.pk, "state": "failed"}
    request.refresh_from_db()
    assert (request.state, request.exit_code) == (RequestState.FAILED, -9)
    assert request_events(request).last().reason == "exceeded its host memory limit (2048 MiB)"


def test_finished_called_positionally_as_the_agent_does_is_an_ordinary_end(client, node, place):
    request = place("python train.py")
    client.started(request.pk, 1)

    client.finished(request.pk, 3, 1, dt.datetime.now(dt.UTC))

    request.refresh_from_db()
    assert request.state == RequestState.FAILED
    assert request_events(request).last().reason == "process exited with status 3"
