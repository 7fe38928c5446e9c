"""Fixtures for the node agent (a pytest plugin of tests/conftest.py, so the browser tests have them too):
the agent against the live portal (pytest-django's live server) on the simulated NVML: real HTTP
through the SDK, real processes, real signals. Each test drives the agent's rounds itself."""

import sys
import time
from pathlib import Path

import pytest
from gpu_portal_sdk.node import NodeClient

from agent.isolation import Isolation
from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from demo.agents import simulated_cards
from scheduler_app.services.inventory import issue_agent_credential
from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import submit_request

REPO = Path(__file__).resolve().parents[1]
DEMO_JOB = f"{sys.executable} -m agent.demo_job"


@pytest.fixture
def agent_files(settings, tmp_path, monkeypatch):
    """Checkpoints go to this test's own folder; the simulator looks at the processes afresh on every
    read (no scan of /proc kept from an earlier test)."""
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    monkeypatch.setattr("agent.simnvml.PROC_SCAN_TTL_S", 0)


def unisolated(work_root) -> Isolation:
    """How the agent tests run their jobs unless a test is about isolation: as the test's own user,
    each in its own work directory, `python -m agent.demo_job` importable."""
    return Isolation(work_root=str(work_root), environment={"PYTHONPATH": str(REPO)})


@pytest.fixture
def node(make_node):
    """node-1, two cards: GPU-node-1-0 and GPU-node-1-1."""
    return make_node("node-1", gpus=2)


@pytest.fixture
def start_agent(live_server, transactional_db, node, agent_files, tmp_path):
    """start_agent(node=node-1, **options) -> a NodeAgent for the node on simulated cards of its UUIDs;
    every agent made is shut down (its jobs stopped) at the end of the test."""
    made = []

    def make(for_node=None, **options):
        for_node = for_node or node
        cards = simulated_cards(for_node)
        options = {"interval_s": 0.1, "grace_s": 1.0, "mps": False, **options}
        options.setdefault("isolation", unisolated(tmp_path / "work"))
        agent = NodeAgent(
            NodeClient(live_server.url, issue_agent_credential(for_node)), load_nvml(cards, seed=7), **options
        )
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.grace_s = 0.2
        agent.shutdown()


def rounds_until(agent, condition, timeout_s=30.0, what="the condition"):
    """Run the agent's rounds until `condition()` is true; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        agent.round()
        if condition():
            return
        time.sleep(agent.interval_s)
    pytest.fail(f"{what} not reached within {timeout_s} s")


@pytest.fixture
def place(member, team, node):
    """place(command, gpu_milli=250, memory_mib=20480, card=0, task_type="training") -> a request
    scheduled on the node's card."""

    def make(command, *, gpu_milli=250, memory_mib=20480, card=0, task_type="training", on=None):
        request = submit_request(
            user=member, team=team, name="job", gpu_milli=gpu_milli, command=command, task_type=task_type
        )
        gpu = (on or node).gpus.get(index=card)
        allocate(request, [Slice(gpu.pk, gpu_milli, memory_mib)])
        request.refresh_from_db()
        return request

    return make
