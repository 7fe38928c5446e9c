"""The Slurm backend's tests run against real daemons: bin/slurm-test-cluster's two nodes (n1, n2) of 4
fake cards, 8 shards each, and slurmrestd on a Unix socket; beside it the MIG cluster's node n3 in
partition mig, with a slurmrestd of its own. Where the cluster cannot be started the
tests fail; they are never skipped."""

import os
import subprocess
from pathlib import Path

import pytest

from agent.isolation.identity import Identities
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest, LogChunk, Node
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.requests import submit_request
from slurm_backend.models import SlurmConnection, SlurmJob
from slurm_backend.services import connect_pool
from slurm_backend.sync import sync_pool
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "bin" / "slurm-test-cluster"


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """The test cluster, started when it is not running: its SLURM_CONF and slurmrestd socket."""
    started = subprocess.run([CLUSTER, "start"], capture_output=True, text=True, timeout=600)
    if started.returncode != 0:
        pytest.fail(f"the Slurm test cluster did not start:\n{started.stdout}\n{started.stderr}")
    shown = subprocess.run([CLUSTER, "env"], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in shown.split())


def slurm(cluster: dict[str, str], *args: str, conf: str = "SLURM_CONF") -> str:
    """A Slurm command's output, against the test cluster (conf="SLURM_MIG_CONF": the MIG cluster)."""
    env = {**os.environ, "SLURM_CONF": cluster[conf]}
    return subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout


@pytest.fixture
def no_slurm_jobs(slurm_cluster):
    """Each test starts and ends with no job in the partitions: whatever it submitted is cancelled."""

    def clear():
        slurm(slurm_cluster, "scancel", "--partition=gpu")
        slurm(slurm_cluster, "scancel", "--partition=mig", conf="SLURM_MIG_CONF")
        wait_until(
            lambda: (
                not slurm(slurm_cluster, "squeue", "-h")
                and not slurm(slurm_cluster, "squeue", "-h", conf="SLURM_MIG_CONF")
            ),
            what="the partitions empty",
        )

    clear()
    yield
    clear()


@pytest.fixture
def slurm_pool(db, operator, slurm_cluster, no_slurm_jobs, tmp_path, settings):
    """Pool "slurm" connected to the test cluster's partition gpu; jobs write their output in tmp_path."""
    settings.SLURM_STOP_GRACE_S = 2
    pool = create_pool(name="slurm", gpu_model="fake", capacity_type="on-demand")
    output = tmp_path / "slurm-output"
    output.mkdir()
    connection, problems = connect_pool(
        pool,
        actor=operator,
        url=f"unix:{slurm_cluster['SLURM_REST_SOCKET']}",
        partition="gpu",
        output_dir=str(output),
        card_memory_mib=16384,
    )
    assert problems == []
    return connection


@pytest.fixture
def team_accounts(team, other_team):
    """The teams' default Unix accounts (gpp-<slug>) exist on the host, as the Slurm nodes need them."""
    identities = Identities()
    for slug in (team.slug, other_team.slug):
        identities.for_work({"team": slug, "unix_account": ""})


def sync_until(connection: SlurmConnection, condition, what: str, timeout_s: float = 60.0) -> None:
    """Run scheduling passes and syncs of the Slurm pool, as the worker does, until `condition()`."""

    def synced() -> bool:
        run_scheduling_pass()
        sync_pool(connection)
        return condition()

    wait_until(synced, timeout_s=timeout_s, what=what, step_s=0.5)


def submit(user, team, name: str, command: str, gpu_milli: int = 250, **fields) -> GpuRequest:
    """A request on the pool "slurm" the slurm_pool fixture connects."""
    return submit_request(
        user=user, team=team, pool_name="slurm", name=name, gpu_milli=gpu_milli, command=command, **fields
    )


def log_of(request: GpuRequest) -> str:
    return "".join(LogChunk.objects.filter(request=request).order_by("offset").values_list("text", flat=True))


def state_of(request: GpuRequest) -> str:
    request.refresh_from_db()
    return request.state


def run_until_running(
    connection: SlurmConnection, request: GpuRequest, what: str = "the request running"
) -> SlurmJob:
    """Sync until the request runs; its current run's Slurm job."""
    sync_until(connection, lambda: state_of(request) == RequestState.RUNNING, what=what)
    return SlurmJob.objects.get(request=request, generation=request.placements)


def run_until_ended(connection: SlurmConnection, job: SlurmJob) -> SlurmJob:
    """Sync until the portal has read the job's end; the job as it ended."""
    sync_until(connection, lambda: SlurmJob.objects.get(pk=job.pk).ended_at is not None, what="the job ended")
    return SlurmJob.objects.get(pk=job.pk)


def run_again_elsewhere(connection: SlurmConnection, request: GpuRequest, left: Node) -> SlurmJob:
    """Sync until the request's second run runs; asserts it is not on `left`. Its Slurm job."""
    sync_until(
        connection,
        lambda: state_of(request) == RequestState.RUNNING and request.placements == 2,
        what="the request running again",
    )
    again = SlurmJob.objects.get(request=request, generation=2)
    assert again.node_id != left.pk
    assert {a.gpu.node_id for a in request.allocations.filter(ended_at__isnull=True)} == {again.node_id}
    return again
