"""A Slurm node whose slurmd dies: Slurm marks it down (SlurmdTimeout=10 s in the test cluster), the
sync maps it through the lost-node path, and its work is requeued and runs on the other node."""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Node
from scheduler_app.services.requests import submit_request
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import CLUSTER, slurm, sync_until
from tests.slurm_backend.test_slurm_pool import state_of
from tests.waiting import wait_until


@pytest.fixture
def killable_slurmd(slurm_cluster, slurm_pool):
    """kill(name) stops that node's slurmd; afterwards the daemons are started again and the test
    waits until Slurm has the node idle."""
    killed = []

    def kill(name: str) -> None:
        pid_file = Path(slurm_cluster["SLURM_CONF"]).parent / f"slurmd-{name}.pid"
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        killed.append(name)

    yield kill
    for name in killed:
        subprocess.run([CLUSTER, "start"], capture_output=True, text=True, check=True, timeout=120)
        wait_until(
            lambda name=name: slurm(slurm_cluster, "sinfo", "-h", "-n", name, "-o", "%T").strip() == "idle",
            timeout_s=300,  # the controller retries what it sent the dead daemon before it trusts it again
            what=f"{name} idle again",
            step_s=1,
        )


def test_a_killed_slurmd_marks_the_node_lost_and_its_work_runs_again_elsewhere(
    slurm_pool, killable_slurmd, team_accounts, member, team
):
    request = submit_request(
        user=member, team=team, pool_name="slurm", name="victim", gpu_milli=250, command="sleep 300"
    )
    sync_until(slurm_pool, lambda: state_of(request) == RequestState.RUNNING, what="the request running")
    node = SlurmJob.objects.get(request=request).node

    killable_slurmd(node.name)

    sync_until(
        slurm_pool,
        lambda: Node.objects.get(pk=node.pk).status == NodeStatus.LOST,
        what=f"{node.name} lost",
        timeout_s=120,
    )
    requeued = Event.objects.filter(object_id=request.pk, to_state=RequestState.PENDING).latest("pk")
    assert "Slurm" in requeued.reason
    sync_until(
        slurm_pool,
        lambda: (
            state_of(request) == RequestState.RUNNING
            and SlurmJob.objects.filter(request=request).count() == 2
        ),
        what="the request running again",
    )
    again = SlurmJob.objects.get(request=request, generation=2)
    assert again.node_id != node.pk
    assert {a.gpu.node_id for a in request.allocations.filter(ended_at__isnull=True)} == {again.node_id}
