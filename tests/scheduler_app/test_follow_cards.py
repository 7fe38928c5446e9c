"""placement.follow_cards: a cluster manager that picks other cards of the node than the portal planned
(Slurm's shards) moves the run's slices there, under the cards' locks, never over a card's capacity;
follow_instances does it for MIG instances, only to a free instance of the same profile."""

import pytest

from audit.models import Event
from scheduler_app.constants import CARDS_EVENT
from scheduler_app.models import Allocation
from scheduler_app.services.inventory import set_mig_layout, update_pool
from scheduler_app.services.placement import Slice, allocate, follow_cards, follow_instances
from scheduler_app.services.requests import submit_request


def test_a_slice_moves_to_the_card_the_cluster_manager_gave(make_node, member, team):
    node = make_node(gpus=2)
    first, second = node.gpus.order_by("index")
    request = submit_request(user=member, team=team, pool_name="a100", name="r", gpu_milli=500)
    allocate(request, [Slice(first.pk, 500, 40960)])

    refused = follow_cards(node, request.pk, 1, [1], actor_name="slurm")

    assert refused == ""
    assert list(Allocation.objects.committed().filter(request=request).values_list("gpu_id", "milli")) == [
        (second.pk, 500)
    ]
    assert Allocation.objects.get(request=request, gpu=first).ended_at is not None
    assert Event.objects.get(object_id=request.pk, to_state=CARDS_EVENT).data == {
        "cards": [1],
        "node": "node-1",
    }
    assert follow_cards(node, request.pk, 1, [1], actor_name="slurm") == ""  # already there: nothing more
    assert Allocation.objects.filter(request=request).count() == 2


def test_a_move_that_would_overcommit_the_card_is_refused(make_node, member, team):
    node = make_node(gpus=2)
    first, second = node.gpus.order_by("index")
    request = submit_request(user=member, team=team, pool_name="a100", name="r", gpu_milli=500)
    full = submit_request(user=member, team=team, pool_name="a100", name="full", gpu_milli=1000)
    allocate(request, [Slice(first.pk, 500, 40960)])
    allocate(full, [Slice(second.pk, 1000, 81920)])

    refused = follow_cards(node, request.pk, 1, [1], actor_name="slurm")

    assert "has no room" in refused
    assert Allocation.objects.committed().get(request=request).gpu_id == first.pk


def test_a_report_of_an_earlier_run_moves_nothing(make_node, member, team):
    node = make_node(gpus=2)
    first = node.gpus.get(index=0)
    request = submit_request(user=member, team=team, pool_name="a100", name="r", gpu_milli=500)
    allocate(request, [Slice(first.pk, 500, 40960)])

    assert "no longer current" in follow_cards(node, request.pk, 7, [1], actor_name="slurm")
    assert Allocation.objects.committed().get(request=request).gpu_id == first.pk


@pytest.fixture
def mig_node(make_node, pool, operator):
    """A node of two A100-80GB cards in fixed MIG mode: card 0 holds 3g.40gb twice, card 1 seven 1g.10gb."""
    update_pool(pool, actor=operator, mig_mode="fixed")
    node = make_node(gpus=2)
    first, second = node.gpus.order_by("index")
    set_mig_layout(first, "3g.40gb@0,3g.40gb@4", actor=operator)
    set_mig_layout(second, ",".join(f"1g.10gb@{i}" for i in range(7)), actor=operator)
    return node


def test_a_mig_slice_moves_to_the_instance_of_its_profile_the_cluster_manager_gave(mig_node, member, team):
    second = mig_node.gpus.get(index=1)
    request = submit_request(user=member, team=team, pool_name="a100", name="r", gpu_milli=142)
    allocate(request, [Slice(second.pk, 142, 10240, mig_instance="1g.10gb@0")])

    refused = follow_instances(mig_node, request.pk, 1, [(1, "1g.10gb@3")], actor_name="slurm")

    assert refused == ""
    assert list(
        Allocation.objects.committed()
        .filter(request=request)
        .values_list("gpu_id", "mig_instance", "mig_slots")
    ) == [(second.pk, "1g.10gb@3", 1)]
    assert Allocation.objects.get(request=request, mig_instance="1g.10gb@0").ended_at is not None
    assert Event.objects.get(object_id=request.pk, to_state=CARDS_EVENT).data == {
        "instances": [[1, "1g.10gb@3"]],
        "node": "node-1",
    }
    assert follow_instances(mig_node, request.pk, 1, [(1, "1g.10gb@3")], actor_name="slurm") == ""
    assert Allocation.objects.filter(request=request).count() == 2


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ((0, "3g.40gb@0"), "is not a 1g.10gb"),
        ((1, "1g.10gb@1"), "held by another slice"),
        ((0, "1g.10gb@0"), "has no MIG instance 1g.10gb@0"),
        ((5, "1g.10gb@0"), "no card for MIG instance"),
    ],
)
def test_a_mig_move_to_another_profile_a_held_or_an_unknown_instance_is_refused(
    mig_node, member, team, given, why
):
    second = mig_node.gpus.get(index=1)
    request = submit_request(user=member, team=team, pool_name="a100", name="r", gpu_milli=142)
    other = submit_request(user=member, team=team, pool_name="a100", name="other", gpu_milli=142)
    allocate(request, [Slice(second.pk, 142, 10240, mig_instance="1g.10gb@0")])
    allocate(other, [Slice(second.pk, 142, 10240, mig_instance="1g.10gb@1")])

    refused = follow_instances(mig_node, request.pk, 1, [given], actor_name="slurm")

    assert why in refused
    assert list(Allocation.objects.filter(request=request).values_list("mig_instance", "ended_at")) == [
        ("1g.10gb@0", None)
    ]
