"""placement.follow_cards: a cluster manager that picks other cards of the node than the portal planned
(Slurm's shards) moves the run's slices there, under the cards' locks, never over a card's capacity."""

from audit.models import Event
from scheduler_app.constants import CARDS_EVENT
from scheduler_app.models import Allocation
from scheduler_app.services.placement import Slice, allocate, follow_cards
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
