"""The embedded default's node agents: the real agent (agent.node_agent.NodeAgent) on simulated NVML,
one thread per node, talking HTTP to the portal this process serves, so the demo cluster runs its
requests' commands, reports their output and exits, and its utilization moves.

Their jobs are isolated as a real node's are (agent.isolation) when the portal runs as root: each
drops to its team's identity with an allow-listed environment, in its own cgroup and namespaces that
hide the portal's var directory. Otherwise, and where team identities could not run the demo's
Python, they run unisolated, and the nodes show it.

The demo's nodes stop and start with the portal, so they always come back on a restart: a node lost
meanwhile (the watchdog's first check after a long stop loses them all) returns to service once its
agent has registered again, whatever NODE_RETURN_TO_SERVICE says about real nodes.
"""

import logging
import os
import stat
import sys
import sysconfig
import threading
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection
from gpu_portal_sdk.errors import PortalError
from gpu_portal_sdk.node import NodeClient

from agent.isolation import DEFAULT_PATH, Isolation, IsolationUnavailable
from agent.isolation.identity import Identities
from agent.node_agent import NodeAgent
from agent.nvml import load_nvml
from agent.simnvml import SimCard
from scheduler_app.choices import NodeStatus
from scheduler_app.models import Node
from scheduler_app.services.inventory import reissue_agent_credential, set_node_status

log = logging.getLogger(__name__)

DEMO = "demo agents"
START_DELAY_S = 2.0  # the server's first seconds: let it listen before the agents knock
SYSTEM_PYTHON = Path("/usr/bin/python3.11")  # Debian's, of the same minor version as the portal's


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

    def register(self, gpus, isolation=None):
        answer = super().register(gpus, isolation=isolation)
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

    def __init__(self, portal_url: str, *, interval_s: float = 2.0, grace_s: float = 10.0):
        isolation = demo_isolation()
        self.agents: list[NodeAgent] = []
        self.threads: list[threading.Thread] = []
        for node in Node.objects.prefetch_related("gpus").order_by("name"):
            credential = reissue_agent_credential(node, actor_name=DEMO)
            agent = NodeAgent(
                DemoNodeClient(portal_url, credential, node_pk=node.pk),
                load_nvml(simulated_cards(node), seed=node.pk),
                isolation=isolation,
                interval_s=interval_s,
                grace_s=grace_s,
                mps=False,
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


def demo_isolation() -> Isolation:
    """The demo nodes' isolation: full when the portal runs as root and a Python that the team
    identities may run is at hand, unisolated otherwise (said in the log and on the nodes' pages).

    The demo's commands say `python`: a directory in the jobs' PATH holds a `python` that links to one,
    with this checkout and the portal's packages on PYTHONPATH, so `python -m agent.demo_job` runs."""
    var = Path(settings.VAR_DIR)
    python = next((p for p in (Path(sys.executable).resolve(), SYSTEM_PYTHON) if _open_to_all(p)), None)
    job_bin = var / "job-bin"
    job_bin.mkdir(parents=True, exist_ok=True)
    link = job_bin / "python"
    link.unlink(missing_ok=True)
    link.symlink_to(python or Path(sys.executable).resolve())
    packages = [str(settings.BASE_DIR), str(settings.BASE_DIR / "sdk"), sysconfig.get_paths()["purelib"]]
    options = {
        "work_root": str(var / "work"),
        "path": f"{job_bin}:{DEFAULT_PATH}",
        "environment": {"PYTHONPATH": os.pathsep.join(packages)},
    }
    try:
        if python is None or not all(_open_to_all(Path(p)) for p in (job_bin, *packages)):
            raise IsolationUnavailable(f"no Python that other users may run (tried {sys.executable})")
        identities = Identities(home_root=str(var / "home"))
        isolation = Isolation.detect(identities=identities, hide=(str(var),), **options)
        _close_var(var)
        return isolation
    except IsolationUnavailable as error:
        log.warning("the demo's jobs run unisolated, as the portal's own user: %s", error)
        return Isolation(**options)


def _open_to_all(path: Path) -> bool:
    """Any user may reach `path` (every directory above it passable) and read or run it."""
    if not path.exists():
        return False
    for parent in path.parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH))


def _close_var(var: Path) -> None:
    """Jobs pass through the portal's var directory to their own directories in it, but may not list
    it or read the files the portal keeps there (its database), bubblewrap or not."""
    os.chmod(var, 0o711)
    for entry in var.iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o600)
