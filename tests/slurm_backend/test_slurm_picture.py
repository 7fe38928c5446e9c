"""The portal's picture of a Slurm pool is Slurm's: a slice follows the card Slurm gave its job within
the node, and the invariant check's Slurm part (slurm_backend.invariants.differences, also run after
every test through scheduler_app's invariants) finds no difference, and does find one made behind
the portal's back."""

from audit.models import Event
from scheduler_app.choices import RequestState
from scheduler_app.constants import CARDS_EVENT
from scheduler_app.models import Allocation, Node
from scheduler_app.services.placement import Slice, allocate
from slurm_backend.invariants import differences
from slurm_backend.models import SlurmJob
from tests.slurm_backend.conftest import run_until_running, slurm, state_of, submit, sync_until
from tests.waiting import wait_until


def test_a_slice_planned_on_one_card_follows_the_card_slurm_gave_its_shards(
    slurm_pool, team_accounts, member, team
):
    request = submit(member, team, "elsewhere", "sleep 300")
    planned = Node.objects.get(pool=slurm_pool.pool, name="n1").gpus.get(index=3)
    allocate(request, [Slice(planned.pk, 250, 4096)], actor_name="operator")  # 1/4 of a 16 GiB card

    job = run_until_running(slurm_pool, request)

    assert job.cards != "3"  # Slurm gives the shards of the first card with room: not the one planned
    held = Allocation.objects.get(request=request, ended_at__isnull=True)
    assert (held.gpu.node.name, str(held.gpu.index), held.milli) == ("n1", job.cards, 250)
    assert Allocation.objects.get(request=request, gpu=planned).ended_at is not None
    moved = Event.objects.get(object_id=request.pk, to_state=CARDS_EVENT)
    assert moved.actor_label == "slurm" and moved.data["cards"] == [int(job.cards)]
    assert differences(slurm_pool) == []


def test_the_slurm_check_finds_no_difference_and_one_made_behind_the_portals_back(
    slurm_pool, slurm_cluster, team_accounts, member, team
):
    fraction = submit(member, team, "part", "sleep 300", gpu_milli=375)
    gang = submit(member, team, "big", "sleep 300 # two cards", gpu_milli=1000, num_gpus=2)
    sync_until(
        slurm_pool,
        lambda: state_of(fraction) == state_of(gang) == RequestState.RUNNING,
        what="both running",
    )
    assert differences(slurm_pool) == []

    job = SlurmJob.objects.get(request=fraction)

    slurm(slurm_cluster, "scancel", str(job.job_id))
    wait_until(
        lambda: not slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id)).strip(),
        what="the job gone from Slurm",
    )

    assert [p for p in differences(slurm_pool) if "no running Slurm job" in p] != []
    sync_until(slurm_pool, lambda: state_of(fraction) == RequestState.FAILED, what="the request failed")
    assert differences(slurm_pool) == []
