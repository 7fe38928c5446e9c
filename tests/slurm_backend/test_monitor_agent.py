"""The node agent in monitor-only mode on a Slurm node, against the real daemons and the live portal:
it reports the cards' readings under Slurm's card names, so a Slurm job's utilization shows as an
agent job's does, and it never asks for work nor touches the cards the Slurm sync keeps."""

import pytest
from gpu_portal_sdk.node import NodeClient

from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from agent.simnvml import SimCard
from scheduler_app.choices import RequestState
from scheduler_app.models import Gpu
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.requests import submit_request
from tests.agent_fixtures import rounds_until
from tests.slurm_backend.conftest import sync_until


@pytest.fixture
def monitor(live_server, transactional_db, agent_files):
    """monitor(node) -> a monitor-only agent of the node on 4 simulated cards with NVML's own UUIDs,
    whose every call for work fails the test."""

    def make(node):
        cards = [SimCard(uuid=f"GPU-nvml-{node.name}-{i}", memory_mib=16384) for i in range(4)]
        client = NodeClient(live_server.url, issue_agent_credential(node))
        client.work = lambda: pytest.fail("a monitor-only agent asked for work")
        return NodeAgent(client, load_nvml(cards, seed=7), monitor_only=True, interval_s=0.1)

    return make


def test_a_monitor_only_agent_shows_a_slurm_jobs_utilization_and_never_asks_for_work(
    slurm_pool, team_accounts, member, team, monitor, api_client
):
    request = submit_request(
        user=member, team=team, pool_name="slurm", name="watched", gpu_milli=250, command="sleep 300"
    )
    sync_until(slurm_pool, lambda: _state(request) == RequestState.RUNNING, what="the request running")
    node = request.allocations.get().gpu.node
    slurm_cards = list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "memory_mib"))
    agent = monitor(node)
    client = api_client(member)

    def shown() -> bool:
        body = client.get(f"/api/v1/requests/{request.pk}/utilization/").json()
        return body["gpus"][0]["latest"] is not None

    rounds_until(agent, shown, what="the request's card reading shown")

    assert agent.card_names == {f"GPU-nvml-{node.name}-{i}": uuid for i, (uuid, _) in enumerate(slurm_cards)}
    assert (
        list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "memory_mib")) == slurm_cards
    )
    assert _state(request) == RequestState.RUNNING  # the monitor stopped nothing
    node.refresh_from_db()
    assert node.isolation_mode == "unknown"  # it runs no job, so it says nothing of isolation


def _state(request) -> str:
    request.refresh_from_db()
    return request.state
