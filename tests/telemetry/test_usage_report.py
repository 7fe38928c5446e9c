"""POST /api/v1/agent/usage/ (node credentials only): the host's CPU and network and each job's own use
of its cards, stored once; a bad report is refused naming the place, with nothing stored."""

import pytest
from django.utils import timezone

from telemetry.models import AllocationSample, NodeSample
from tests.scheduler_app.test_agent_api import AGENT, agent_client


@pytest.fixture
def agent(node):
    return agent_client(node)


@pytest.fixture
def placed(place):
    """A request of the member's team scheduled on node-1's first card (tests/agent_fixtures.py: node,
    place): 250 milli, 20 GiB."""
    return place("python train.py")


def usage(request_id, uuid="GPU-node-1-0", memory=1000, util=40, at=None):
    return {
        "sampled_at": (at or timezone.now()).isoformat(),
        "host": {"cpu_percent": 12, "net_rx_bytes_per_s": 600_000_000, "net_tx_bytes_per_s": 1000},
        "slices": [
            {"request_id": request_id, "uuid": uuid, "memory_used_mib": memory, "sm_util_percent": util}
        ],
    }


def test_usage_stores_the_hosts_reading_and_each_slices_own_use_once(agent, placed, node):
    body = usage(placed.pk)

    first = agent.post(AGENT + "usage/", body, format="json")
    again = agent.post(AGENT + "usage/", body, format="json")

    assert (first.json(), again.status_code) == ({"accepted": 1}, 200)
    (own,) = AllocationSample.objects.all()
    assert (own.allocation.request_id, own.memory_used_mib, own.sm_util_percent) == (placed.pk, 1000, 40)
    (host,) = NodeSample.objects.all()
    assert (host.node, host.cpu_percent, host.net_rx_bytes_per_s) == (node, 12, 600_000_000)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b, pk: b["slices"][0].update(uuid="GPU-node-1-1"), "slices[0]"),
        (lambda b, pk: b["slices"][0].update(request_id=pk + 1000), "slices[0]"),
        (lambda b, pk: b["slices"][0].update(sm_util_percent=101), "slices[0].sm_util_percent"),
        (lambda b, pk: b["slices"][0].update(memory_used_mib=-1), "slices[0].memory_used_mib"),
        (lambda b, pk: b["host"].update(cpu_percent="busy"), "host.cpu_percent"),
        (lambda b, pk: b["host"].pop("net_rx_bytes_per_s"), "host.net_rx_bytes_per_s"),
        (lambda b, pk: b.update(sampled_at="2001-01-01T00:00:00Z"), "sampled_at"),
    ],
)
def test_a_bad_usage_report_is_refused_naming_the_place_and_stores_nothing(agent, placed, change, field):
    body = usage(placed.pk)
    change(body, placed.pk)

    response = agent.post(AGENT + "usage/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["fields"], response.json()
    assert not AllocationSample.objects.exists() and not NodeSample.objects.exists()


def test_a_node_cannot_report_usage_of_another_nodes_slice(make_node, placed):
    other_node = make_node("node-2", gpus=1)

    response = agent_client(other_node).post(AGENT + "usage/", usage(placed.pk), format="json")

    assert response.status_code == 400
    assert "no open slice of GPU-node-1-0 on node-2" in response.json()["error"]["fields"]["slices[0]"][0]
    assert not AllocationSample.objects.exists()
