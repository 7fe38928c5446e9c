"""The embedded default's node agents: the real agent (agent.node_agent.NodeAgent) on simulated NVML,
one thread per node, talking HTTP to the portal this process serves, so the demo cluster runs its
requests' commands, reports their output and exits, and its utilization moves.

The demo's nodes stop and start with the portal, so they always come back on a restart: a node lost
meanwhile (the watchdog's first check after a long stop loses them all) returns to service once its
agent has registered again, whatever NODE_RETURN_TO_SERVICE says about real nodes."""

import logging
import os
import sys
import threading
from pathlib import Path

from django.db import DatabaseError, connection
from gpu_portal_sdk.errors import PortalError
from gpu_portal_sdk.node import NodeClient

from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from agent.simnvml import SimCard
from scheduler_app.choices import NodeStatus
from scheduler_app.models import Node
from scheduler_app.services.inventory import reissue_agent_credential, set_node_status

log = logging.getLogger(__name__)

DEMO = "demo agents"
START_DELAY_S = 2.0  # the server's first seconds: let it listen before the agents knock


def simulated_cards(node: Node) -> list[SimCard]:
    """Simulated cards that NVML would report for the node's registered ones."""
    return [SimCard(uuid=gpu.uuid, name=gpu.model, memory_mib=gpu.memory_mib) for gpu in node.gpus.all()]


class DemoNodeClient(NodeClient):
    """A demo agent's client: once its agent has registered, a lost demo node is back in service.

    After the registration, not before: until its agent is heard from, the node's last heartbeat is
    as old as the portal's stop, and the watchdog would lose it again at once."""

    def __init__(self, url: str, credential: str, *, node_pk: int):
        super().__init__(url, credential)
        self.node_pk = node_pk

    def register(self, gpus):
        answer = super().register(gpus)
        if answer["node_status"] == NodeStatus.LOST:
            try:
                node = set_node_status(
                    Node.objects.get(pk=self.node_pk),
                    NodeStatus.READY,
                    actor_name=DEMO,
                    reason="its demo agent registered again: demo nodes come back on a restart",
                )
            except DatabaseError as error:  # the agent registers again next round, and this with it
                raise PortalError(f"demo node not back in service yet: {error}") from error
            finally:
                connection.close()  # this agent's thread is done with the database
            answer["node_status"] = node.status
        return answer


class SimulatedAgents:
    """One agent thread per node, lost ones included, each on simulated cards with the node's UUIDs."""

    def __init__(self, portal_url: str, *, workdir: str, interval_s: float = 2.0, grace_s: float = 10.0):
        # The demo's commands say `python`: make it this Python, whatever PATH the portal started with.
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.agents: list[NodeAgent] = []
        self.threads: list[threading.Thread] = []
        for node in Node.objects.prefetch_related("gpus").order_by("name"):
            credential = reissue_agent_credential(node, actor_name=DEMO)
            agent = NodeAgent(
                DemoNodeClient(portal_url, credential, node_pk=node.pk),
                load_nvml(simulated_cards(node), seed=node.pk),
                interval_s=interval_s,
                grace_s=grace_s,
                mps=False,
                workdir=workdir,
            )
            self.agents.append(agent)
            thread = threading.Thread(target=self._run, args=(agent,), name=f"agent-{node.name}", daemon=True)
            self.threads.append(thread)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        log.info("started %d simulated node agents", len(self.threads))

    def stop(self) -> None:
        """Stop every agent; each stops its jobs with their grace period."""
        for agent in self.agents:
            agent.stop()
        for thread in self.threads:
            thread.join()

    @staticmethod
    def _run(agent: NodeAgent) -> None:
        if not agent.stopping.wait(START_DELAY_S):
            agent.run()
