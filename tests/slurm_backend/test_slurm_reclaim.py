"""A spot reclaim on a Slurm pool: the node is drained in Slurm too (scontrol), its work checkpoints on
TERM and moves, and the moved run resumes from that checkpoint on the other node (the resume rule,
scheduler_app.rules.invariants.unresumed_moves, is checked after the test)."""

import datetime as dt
import os
import shutil
import tempfile

import pytest
from django.utils import timezone

from scheduler_app.choices import BillingMode, CapacityType, NodeStatus, RequestState
from scheduler_app.models import Node
from scheduler_app.rules.invariants import unresumed_moves
from scheduler_app.services.inventory import update_pool
from scheduler_app.services.migration import reclaim_node
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import log_of, run_again_elsewhere, slurm, state_of, submit, sync_until

RESUMABLE = (
    'if [ -e "$GPU_PORTAL_CHECKPOINT_DIR/.checkpointed" ]; then echo resumed; else echo fresh; fi; '
    "trap 'touch \"$GPU_PORTAL_CHECKPOINT_DIR/.checkpointed\"; echo saved; exit 0' TERM; "
    'touch "$GPU_PORTAL_CHECKPOINT_DIR/.checkpointed"; while true; do sleep 1; done'
)


@pytest.fixture
def shared_checkpoints(settings):
    """CHECKPOINT_ROOT where the jobs' accounts make their directories (mode 1777, as /tmp)."""
    root = tempfile.mkdtemp(prefix="gpu-portal-checkpoints-", dir="/tmp")
    os.chmod(root, 0o1777)
    settings.CHECKPOINT_ROOT = root
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def resumed_nodes(slurm_cluster, monkeypatch):
    """scontrol on this host reaches the test cluster; the nodes drained by the test are resumed."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    yield
    for name in ("n1", "n2"):
        if "drain" in slurm(slurm_cluster, "sinfo", "-h", "-n", name, "-o", "%T"):
            slurm(slurm_cluster, "scontrol", "update", f"NodeName={name}", "State=RESUME")


def test_a_spot_reclaim_drains_the_node_in_slurm_and_the_work_resumes_elsewhere_from_its_checkpoint(
    slurm_pool, slurm_cluster, resumed_nodes, shared_checkpoints, team_accounts, member, team, operator
):
    update_pool(slurm_pool.pool, actor=operator, capacity_type=CapacityType.SPOT)
    request = submit(
        member, team, "resumable", RESUMABLE, billing_mode=BillingMode.SPOT, checkpoint_interval_s=60
    )
    sync_until(
        slurm_pool,
        lambda: state_of(request) == RequestState.RUNNING and request.last_checkpoint_at is not None,
        what="the job running and checkpointed",
    )
    node = SlurmJob.objects.get(request=request).node

    reclaim_node(node, deadline=timezone.now() + dt.timedelta(seconds=60), source="test notice")
    run_again_elsewhere(slurm_pool, request, left=node)
    sync_until(slurm_pool, lambda: "resumed" in log_of(request), what="the second run's first words")

    state, reason = slurm(slurm_cluster, "sinfo", "-h", "-n", node.name, "-o", "%T|%E").strip().split("|")
    assert state in ("drained", "draining") and "spot reclaim" in reason
    assert Node.objects.get(pk=node.pk).status == NodeStatus.RECLAIMED
    said = [word for word in log_of(request).split() if word in ("fresh", "saved", "resumed")]
    assert said == ["fresh", "saved", "resumed"]  # Slurm's own line on the stop stands between
    assert unresumed_moves() == []
