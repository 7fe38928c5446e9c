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
from tests.slurm_backend.conftest import (
    CLUSTER,
    run_again_elsewhere,
    run_until_running,
    slurm,
    submit,
    sync_until,
)
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
        # start waits until both nodes answer again; no_slurm_jobs then ends what still runs there (the
        # job the dead daemon left, whose signals did not reach it) and waits for the empty partition.
        subprocess.run([CLUSTER, "start"], capture_output=True, text=True, check=True, timeout=120)
        wait_until(
            lambda name=name: (
                slurm(slurm_cluster, "sinfo", "-h", "-n", name, "-o", "%T").strip()
                in ("idle", "mixed", "allocated")
            ),
            timeout_s=120,
            what=f"{name} answering again",
            step_s=1,
        )


def test_a_killed_slurmd_marks_the_node_lost_and_its_work_runs_again_elsewhere(
    slurm_pool, killable_slurmd, team_accounts, member, team
):
    request = submit(member, team, "victim", "sleep 300")
    node = run_until_running(slurm_pool, request).node

    killable_slurmd(node.name)

    sync_until(
        slurm_pool,
        lambda: Node.objects.get(pk=node.pk).status == NodeStatus.LOST,
        what=f"{node.name} lost",
        timeout_s=120,
    )
    requeued = Event.objects.filter(object_id=request.pk, to_state=RequestState.PENDING).latest("pk")
    assert "Slurm" in requeued.reason
    run_again_elsewhere(slurm_pool, request, left=node)
