"""Capacity held outside the portal (another user's job in a shared partition, work a cluster manager ran
there): recorded per card and node through its one owner, never planned on, shown beside the portal's own
slices, and counted by the over-commit invariant."""

import pytest
from django.urls import reverse

from audit.models import Event
from scheduler_app.choices import NodeStatus, RequestState
from scheduler_app.live.ticker import current_frame
from scheduler_app.models import Gpu, Node
from scheduler_app.passes.cluster_state import load_cluster_snapshot
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.rules.invariants import over_committed_gpus
from scheduler_app.selectors import cluster_picture, nodes_for_operators
from scheduler_app.services.inventory import FOREIGN_EVENT, record_foreign_use, set_node_status
from scheduler_app.services.placement import OverCommitError, Slice, allocate
from scheduler_app.services.requests import submit_request


def held(node: Node) -> list[tuple[int, int]]:
    return list(node.gpus.order_by("index").values_list("foreign_milli", "foreign_memory_mib"))


def test_recording_replaces_what_was_held_caps_it_at_the_card_and_logs_only_changes(make_node):
    node = make_node(gpus=3, memory_mib=16384)

    first = record_foreign_use(
        node, {0: (1000, 16384), 2: (1500, 99999)}, cpu_milli=2000, memory_mib=4096, actor_name="slurm"
    )
    again = record_foreign_use(
        node, {0: (1000, 16384), 2: (1500, 99999)}, cpu_milli=2000, memory_mib=4096, actor_name="slurm"
    )

    assert (first, again) == (True, False)
    assert held(node) == [(1000, 16384), (0, 0), (1000, 16384)]
    node.refresh_from_db()
    assert (node.foreign_cpu_milli, node.foreign_memory_mib) == (2000, 4096)
    [event] = Event.objects.filter(object_id=node.pk, to_state=FOREIGN_EVENT)
    assert event.actor_label == "slurm"
    assert event.data == {
        "cards": {"0": [1000, 16384], "2": [1000, 16384]},
        "cpu_milli": 2000,
        "memory_mib": 4096,
    }

    assert record_foreign_use(node, {}, actor_name="slurm") is True
    assert held(node) == [(0, 0)] * 3
    node.refresh_from_db()
    assert (node.foreign_cpu_milli, node.foreign_memory_mib) == (0, 0)


def test_the_snapshot_subtracts_foreign_capacity_from_cards_and_host(make_node):
    node = make_node(gpus=2, memory_mib=16384)
    record_foreign_use(node, {1: (375, 6144)}, cpu_milli=3000, memory_mib=8192, actor_name="slurm")

    [state] = load_cluster_snapshot().nodes

    assert [(g.free_milli, g.free_memory_mib) for g in state.gpus] == [(1000, 16384), (625, 10240)]
    assert (state.free_cpu_milli, state.free_memory_mib) == (64_000 - 3000, 512 * 1024 - 8192)


def test_a_pass_never_places_work_on_the_share_foreign_work_holds(team, member, make_node):
    node = make_node(gpus=2, memory_mib=16384)
    record_foreign_use(node, {0: (1000, 16384), 1: (500, 8192)}, actor_name="slurm")
    half = submit_request(user=member, team=team, name="half", gpu_milli=500)
    whole = submit_request(user=member, team=team, name="whole", gpu_milli=1000)

    run_scheduling_pass()

    half.refresh_from_db()
    whole.refresh_from_db()
    assert half.state == RequestState.SCHEDULED
    assert half.allocations.get().gpu.index == 1
    assert whole.state == RequestState.PENDING


def test_placing_under_the_locks_refuses_a_card_foreign_work_holds(team, member, make_node):
    gpu = make_node(gpus=1, memory_mib=16384).gpus.get()
    record_foreign_use(gpu.node, {0: (750, 4096)}, actor_name="slurm")
    request = submit_request(user=member, team=team, name="late", gpu_milli=500)

    with pytest.raises(OverCommitError, match="has 250 milli-GPU free, not 500"):
        allocate(request, [Slice(gpu.pk, 500, 4096)])

    request.refresh_from_db()
    assert request.state == RequestState.PENDING


def test_a_quarter_fits_beside_foreign_work_but_not_its_memory(team, member, make_node):
    gpu = make_node(gpus=1, memory_mib=16384).gpus.get()
    record_foreign_use(gpu.node, {0: (750, 14336)}, actor_name="slurm")
    request = submit_request(user=member, team=team, name="quarter", gpu_milli=250)

    with pytest.raises(OverCommitError, match="has 2048 MiB free, not 4096"):
        allocate(request, [Slice(gpu.pk, 250, 4096)])
    [piece] = allocate(request, [Slice(gpu.pk, 250, 2048)])

    assert (piece.milli, piece.gpu_memory_mib) == (250, 2048)


def test_pool_totals_and_the_live_frame_count_foreign_capacity_out_of_free(operator, make_node):
    ready = make_node("node-1", gpus=2)
    drained = make_node("node-2", gpus=2)
    record_foreign_use(ready, {0: (1000, 81920), 1: (250, 0)}, actor_name="slurm")
    record_foreign_use(drained, {0: (500, 0)}, actor_name="slurm")
    set_node_status(drained, NodeStatus.DRAINING, actor=operator)

    [pool] = cluster_picture(operator).pools
    frame = current_frame()

    assert (pool.total_milli, pool.allocated_milli, pool.foreign_milli, pool.free_milli) == (
        4000,
        0,
        1750,
        750,
    )
    assert frame["pools"]["a100"]["free_milli"] == 750
    by_name = {n.name: n.foreign_milli for n in nodes_for_operators()}
    assert by_name == {"node-1": 1250, "node-2": 500}


@pytest.mark.breaks_invariants
def test_the_over_commit_invariant_counts_foreign_capacity(team, member, make_node):
    gpu = make_node(gpus=1, memory_mib=16384).gpus.get()
    request = submit_request(user=member, team=team, name="first", gpu_milli=500)
    allocate(request, [Slice(gpu.pk, 500, 8192)])
    assert over_committed_gpus() == []

    Gpu.objects.filter(pk=gpu.pk).update(foreign_milli=625, foreign_memory_mib=4096)  # a later foreign job

    assert over_committed_gpus() == [
        f"{gpu} holds 1125 milli-GPU and 12288 of 16384 MiB (625 milli-GPU, 4096 MiB outside the portal)"
    ]


def test_operators_and_the_cluster_page_see_what_is_held_outside_the_portal(client, operator, make_node):
    node = make_node(gpus=2, memory_mib=16384)
    record_foreign_use(node, {1: (1000, 16384)}, cpu_milli=1000, actor_name="slurm")
    client.force_login(operator)

    page = client.get(reverse("operator_node", args=[node.pk])).content.decode()
    cards = client.get(reverse("cluster_nodes"), {"pool": "a100"}).content.decode()

    assert "1000 milli-GPU, 16" in page and "1000 CPU milli-cores" in page
    assert 'data-foreign="1000"' in cards and "held outside the portal" in cards
