"""A Slurm pool of MIG instances against the real daemons: the partition's typed gres imported as cards
with their layouts in a fixed MIG pool, a request for a 1g.10gb instance submitted as that typed gres,
and the portal following the instance Slurm gave when it is not the one planned. The invariants are
checked after each test (tests/conftest.py), and here against Slurm directly."""

import pytest

from scheduler_app.models import Gpu
from scheduler_app.services.inventory import create_pool
from scheduler_app.services.requests import cancel_request
from slurm_backend.invariants import differences
from slurm_backend.models import SlurmNode
from slurm_backend.services import connect_pool
from slurm_backend.sync import sync_pool
from tests.slurm_backend.conftest import run_until_ended, run_until_running, slurm, submit
from tests.waiting import wait_until

MIG = "SLURM_MIG_CONF"  # the MIG cluster's, for slurm()
ONE_G = ",".join(f"1g.10gb@{i}" for i in range(7))


@pytest.fixture
def mig_pool(db, operator, slurm_cluster, no_slurm_jobs, tmp_path, settings):
    """Pool "slurm" of A100-80GB cards connected to the MIG test cluster's partition mig."""
    settings.SLURM_STOP_GRACE_S = 2
    pool = create_pool(name="slurm", gpu_model="A100-80GB", capacity_type="on-demand")
    output = tmp_path / "slurm-output"
    output.mkdir()
    connection, problems = connect_pool(
        pool,
        actor=operator,
        url=f"unix:{slurm_cluster['SLURM_MIG_REST_SOCKET']}",
        partition="mig",
        output_dir=str(output),
        card_memory_mib=81920,
    )
    assert problems == []
    return connection


def test_connecting_a_mig_partition_imports_its_instances_as_cards_of_a_fixed_mig_pool(mig_pool):
    pool = mig_pool.pool
    pool.refresh_from_db()

    cards = Gpu.objects.filter(node__pool=pool).order_by("index")

    assert (pool.mig_mode, pool.granularity_milli) == ("fixed", 142)  # one compute slice of 7
    assert [(g.node.name, g.index, g.mig_layout) for g in cards] == [
        ("n3", 0, ONE_G),
        ("n3", 1, "3g.40gb@0,3g.40gb@4"),
    ]
    assert SlurmNode.objects.get(node__name="n3").gres.startswith("gpu:a100_1g.10gb:7")


def test_a_1g_request_runs_on_the_instance_slurm_gives_and_the_portal_follows_it(
    mig_pool, slurm_cluster, team_accounts, member, team
):
    # The 3g instances taken, the request goes to a 1g whatever card the pass prefers. Outside the
    # portal, a job takes the first 1g instance (gres index 0: card 0's 1g.10gb@0): the portal, which
    # does not know of it, plans that one, and Slurm gives the next free one.
    large = [submit(member, team, f"large{i}", "sleep 300", gpu_milli=426) for i in range(2)]  # 3 slices
    for request in large:
        run_until_running(mig_pool, request)
    assert sorted(r.allocations.get().mig_instance for r in large) == ["3g.40gb@0", "3g.40gb@4"]
    outside = slurm(
        slurm_cluster,
        "sbatch", "--parsable", "--partition=mig", "--gres=gpu:a100_1g.10gb:1", "--chdir=/tmp",
        "--output=/dev/null", "--wrap", "sleep 300", conf=MIG,
    ).strip()  # fmt: skip
    wait_until(
        lambda: (
            slurm(slurm_cluster, "squeue", "-h", "-j", outside, "-o", "%T", conf=MIG).strip() == "RUNNING"
        ),
        what="the outside job running",
    )
    sync_pool(mig_pool)
    # The outside job holds its 1g instance's share of card 0, as capacity held outside the portal.
    assert Gpu.objects.get(node__name="n3", index=0).foreign_milli == 142
    request = submit(member, team, "small", "sleep 300", gpu_milli=142, gpu_memory_mib=10240)

    job = run_until_running(mig_pool, request)

    assert slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id), "-o", "%b %N", conf=MIG).split() == [
        "gres:gpu:a100_1g.10gb:1",
        "n3",
    ]
    shown = slurm(slurm_cluster, "scontrol", "show", "job", "-d", str(job.job_id), conf=MIG)
    assert "GRES=gpu:a100_1g.10gb:1(IDX:1)" in shown
    piece = request.allocations.get(ended_at__isnull=True)
    assert (piece.gpu.index, piece.mig_instance, piece.milli) == (0, "1g.10gb@1", 142)
    assert request.allocations.get(ended_at__isnull=False).mig_instance == "1g.10gb@0"  # the plan
    assert job.cards == "0:1g.10gb@1"
    assert differences(mig_pool) == []

    for each in [request, *large]:
        cancel_request(each, user=member)
    run_until_ended(mig_pool, job)
    slurm(slurm_cluster, "scancel", outside, conf=MIG)
    wait_until(
        lambda: not slurm(slurm_cluster, "squeue", "-h", "-j", outside, "-t", "R,CG", conf=MIG).strip(),
        what="the outside job gone",
    )
    sync_pool(mig_pool)
    assert Gpu.objects.get(node__name="n3", index=0).foreign_milli == 0
