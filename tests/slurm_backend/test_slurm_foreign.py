"""Work the portal did not submit to a Slurm pool's nodes (here root's own sbatch jobs) is capacity held
outside the portal: read from Slurm's job list at each sync, never planned on, cleared when it ends; the
invariant check compares it with Slurm's jobs. The reading of slurmrestd's job entries is checked
first on entries as the test cluster's slurmrestd writes them."""

import pytest

from scheduler_app.choices import RequestState
from scheduler_app.models import Gpu, Node
from slurm_backend.foreign import card_shares, expand_hostlist, foreign_holds, host_share
from slurm_backend.invariants import differences
from slurm_backend.sync import sync_pool
from tests.slurm_backend.conftest import run_until_running, slurm, state_of, submit, sync_until
from tests.waiting import wait_until

# Three jobs as slurmrestd v0.0.38 lists them (the fields read here, from the test cluster).
LISTED = {
    1: {
        "job_id": 1,
        "job_state": "RUNNING",
        "nodes": "n1",
        "gres_detail": ["shard:8(IDX:0)"],
        "tres_alloc_str": "cpu=1,node=1,billing=1",
    },
    2: {
        "job_id": 2,
        "job_state": "RUNNING",
        "nodes": "n2",
        "gres_detail": ["gpu:fake:2(IDX:0-1)"],
        "tres_alloc_str": "cpu=1,node=1,billing=1",
    },
    3: {
        "job_id": 3,
        "job_state": "RUNNING",
        "nodes": "n2",
        "gres_detail": ["shard:3(IDX:2)"],
        "tres_alloc_str": "cpu=2,mem=1000M,node=1,billing=2",
    },
}


def test_slurm_node_lists_expand_to_names():
    assert expand_hostlist("n1") == ["n1"]
    assert expand_hostlist("n[1-3,5],gpu[08-10]") == ["n1", "n2", "n3", "n5", "gpu08", "gpu09", "gpu10"]
    assert expand_hostlist("") == []


def test_shards_count_in_the_pools_granularity_and_cards_whole():
    assert card_shares(["shard:3(IDX:2)"], 125) == {2: 375}
    assert card_shares(["gpu:fake:2(IDX:0-1)"], 125) == {0: 1000, 1: 1000}
    assert card_shares(["shard:5(IDX:0-1)"], 125) == {0: 375, 1: 250}
    assert card_shares(["gpu:fake:1"], 125) == {}  # Slurm does not say which card


def test_host_share_is_what_slurm_allocated_per_node():
    assert host_share(LISTED[3], 1) == (2000, 1000)
    assert host_share({"tres_alloc_str": "cpu=8,mem=4G,node=2"}, 2) == (4000, 2048)
    assert host_share({}, 1) == (0, 0)


def test_only_jobs_that_are_not_the_portals_and_hold_their_gres_count():
    listed = {
        **LISTED,
        4: {**LISTED[1], "job_id": 4, "job_state": "PENDING", "nodes": ""},
        5: {**LISTED[2], "job_id": 5, "nodes": "n1", "gres_detail": ["gpu:fake:1(IDX:3)"]},
        6: {**LISTED[1], "job_id": 6, "job_state": "COMPLETED"},
    }

    cards, host = foreign_holds(listed, own={5}, granularity_milli=125)

    assert {name: dict(held) for name, held in cards.items()} == {
        "n1": {0: 1000},
        "n2": {0: 1000, 1: 1000, 2: 375},
    }
    assert dict(host) == {"n1": [1000, 0], "n2": [3000, 1000]}


def foreign_of(name: str) -> list[int]:
    return list(Gpu.objects.filter(node__name=name).order_by("index").values_list("foreign_milli", flat=True))


def sbatch(cluster, node: str, gres: str) -> str:
    """A job outside the portal: root's own, straight to the partition."""
    return slurm(
        cluster,
        "sbatch",
        "--parsable",
        "-p",
        "gpu",
        "-w",
        node,
        f"--gres={gres}",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 300",
    ).strip()


def running(cluster) -> set[str]:
    return set(slurm(cluster, "squeue", "-h", "-t", "R", "-o", "%i").split())


@pytest.fixture
def foreign_jobs(slurm_pool, slurm_cluster):
    """Outside the portal: n1 whole (8 shards of one card, the other three cards), n2 two cards and
    half a card (4 shards), all running; cancelled at the end whatever happens."""
    ids = [
        sbatch(slurm_cluster, "n1", "shard:8"),
        sbatch(slurm_cluster, "n1", "gpu:3"),
        sbatch(slurm_cluster, "n2", "gpu:2"),
        sbatch(slurm_cluster, "n2", "shard:4"),
    ]
    try:
        wait_until(lambda: running(slurm_cluster) >= set(ids), what="the foreign jobs running")
        yield ids
    finally:
        slurm(slurm_cluster, "scancel", *ids)


def test_foreign_work_is_never_planned_on_and_its_share_clears_when_it_ends(
    slurm_pool, slurm_cluster, foreign_jobs, team_accounts, member, team
):
    assert sync_pool(slurm_pool) == ""
    n2 = Node.objects.get(name="n2")

    assert foreign_of("n1") == [1000, 1000, 1000, 1000]
    assert sorted(foreign_of("n2")) == [0, 500, 1000, 1000]
    assert Gpu.objects.get(node=n2, foreign_milli=500).foreign_memory_mib == 16384 // 2
    assert differences(slurm_pool) == []

    whole = submit(member, team, "whole", "sleep 300", gpu_milli=1000)
    gang = submit(member, team, "gang", "sleep 300", gpu_milli=1000, num_gpus=2)
    run_until_running(slurm_pool, whole)

    [piece] = whole.allocations.filter(ended_at__isnull=True)
    assert (piece.gpu.node.name, piece.gpu.foreign_milli) == ("n2", 0)
    assert state_of(gang) == RequestState.PENDING  # no node has two cards free of foreign work
    assert differences(slurm_pool) == []

    slurm(slurm_cluster, "scancel", *foreign_jobs)
    sync_until(slurm_pool, lambda: state_of(gang) == RequestState.RUNNING, what="the gang running")

    assert foreign_of("n1") == [0, 0, 0, 0] and foreign_of("n2") == [0, 0, 0, 0]
    assert differences(slurm_pool) == []
