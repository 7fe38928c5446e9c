"""A Slurm pool against the real daemons: its nodes imported from the partition, fractional and gang
requests run as Slurm jobs pinned where the portal placed them, a cancel, a release and a failing
exit ending in their states. The invariants are checked after each test (tests/conftest.py)."""

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.models import Allocation, Node
from scheduler_app.services.requests import cancel_request, release_request
from slurm_backend.models import SlurmJob, SlurmNode
from tests.slurm_backend.conftest import (
    log_of,
    run_until_ended,
    run_until_running,
    slurm,
    state_of,
    submit,
    sync_until,
)


def test_connecting_imports_the_partitions_nodes_with_their_cards_and_shard_granularity(slurm_pool):
    pool = slurm_pool.pool
    pool.refresh_from_db()

    nodes = Node.objects.filter(pool=pool).order_by("name")

    assert [(n.name, n.gpus.count(), n.status) for n in nodes] == [("n1", 4, "ready"), ("n2", 4, "ready")]
    assert (pool.backend, pool.granularity_milli) == ("slurm", 125)  # 8 shards per card
    assert set(SlurmNode.objects.values_list("status", flat=True)) == {NodeStatus.READY}


def test_four_quarter_card_requests_of_two_teams_share_one_card_through_shards(
    slurm_pool, slurm_cluster, team_accounts, member, outsider, team, other_team
):
    requests = [
        submit(user, t, f"q{i}", "id -un; sleep 300")
        for i, (user, t) in enumerate(
            [(member, team), (member, team), (outsider, other_team), (outsider, other_team)]
        )
    ]

    sync_until(
        slurm_pool,
        lambda: all(state_of(r) == RequestState.RUNNING and "gpp-" in log_of(r) for r in requests),
        what="four running requests whose log names their user",
    )

    queue = slurm(slurm_cluster, "squeue", "-h", "-o", "%j %b %N").split("\n")
    listed = sorted(line.split() for line in queue if line)
    assert listed == sorted(
        [f"portal-{r.pk}-1", "gres:shard:2", r.allocations.get().gpu.node.name] for r in requests
    )
    assert len({r.allocations.get().gpu_id for r in requests}) == 1  # one card in the portal's picture
    assert len({(j.node_id, j.cards) for j in SlurmJob.objects.all()}) == 1  # and in Slurm's
    assert [log_of(r).split()[0] for r in requests] == [
        "gpp-vision",
        "gpp-vision",
        "gpp-language",
        "gpp-language",
    ]


def test_a_two_card_gang_runs_on_one_node(slurm_pool, slurm_cluster, team_accounts, member, team):
    gang = submit(member, team, "gang", "sleep 300", gpu_milli=1000, num_gpus=2)

    job = run_until_running(slurm_pool, gang, what="the gang running")

    assert slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id), "-o", "%b %N").split() == [
        "gres:gpu:2",
        job.node.name,
    ]
    assert len(job.cards.split(",")) == 2
    assert set(Allocation.objects.filter(request=gang).values_list("gpu__node", flat=True)) == {job.node_id}


def test_a_cancel_ends_the_slurm_job_and_the_request_stays_cancelled(
    slurm_pool, slurm_cluster, team_accounts, member, team
):
    request = submit(member, team, "long", "sleep 300", gpu_milli=500)
    job = run_until_running(slurm_pool, request)

    cancel_request(request, user=member)
    run_until_ended(slurm_pool, job)

    assert slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id)).strip() == ""
    request.refresh_from_db()
    assert request.state == RequestState.CANCELLED
    assert request.exit_code is not None  # the stopped job's status, kept on the cancelled request


def test_a_failing_exit_ends_failed_with_its_status_and_log(slurm_pool, team_accounts, member, team):
    request = submit(member, team, "broken", "echo boom; exit 3", gpu_milli=125)

    sync_until(slurm_pool, lambda: state_of(request) == RequestState.FAILED, what="the request failed")

    request.refresh_from_db()
    assert request.exit_code == 3
    assert "boom" in log_of(request)
    assert request.allocations.filter(ended_at__isnull=True).count() == 0


def test_a_release_cancels_the_slurm_job_and_the_request_ends_released(
    slurm_pool, slurm_cluster, team_accounts, member, team
):
    request = submit(member, team, "done", "sleep 300")
    job = run_until_running(slurm_pool, request)

    release_request(request, user=member)
    run_until_ended(slurm_pool, job)

    assert slurm(slurm_cluster, "squeue", "-h", "-j", str(job.job_id)).strip() == ""
    assert state_of(request) == RequestState.RELEASED
    assert Event.objects.filter(object_id=request.pk).latest("pk").reason == "released by user"
