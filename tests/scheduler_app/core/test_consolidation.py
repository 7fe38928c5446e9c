"""The consolidation planner on small clusters whose best plans are worked out by hand."""

import pytest

from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.consolidation import Resident, fragmented, plan_moves
from scheduler_app.core.placement import Placer

CARD_MIB = 40_960


def cluster(cards: dict[str, int], running: list[tuple], policy: str = "best-fit", cpu: int = 32_000):
    """A Placer on empty nodes (name -> cards), and the residents placed on them: (id, node, cards,
    milli per card[, movable[, cpu]])."""
    nodes = [
        NodeState(name, "default", cpu, 262_144, [GpuState(i, "A100", CARD_MIB) for i in range(n)])
        for name, n in cards.items()
    ]
    placer = Placer(nodes, policy)
    residents = []
    for id_, node, gpus, milli, *rest in running:
        movable, cpu_milli = rest[0] if rest else True, rest[1] if len(rest) > 1 else 0
        spec = RequestSpec(id_, milli, len(gpus), cpu_milli=cpu_milli)
        placement = Placement(id_, node, tuple(gpus), milli, CARD_MIB * milli // 1000)
        placer.apply(spec, placement)
        residents.append(Resident(spec, placement, movable))
    return placer, residents


def free(placer: Placer) -> list[tuple]:
    return [
        (n.free_cpu_milli, [(g.free_milli, g.free_memory_mib) for g in n.gpus]) for n in placer.index.nodes
    ]


def moved(plan, residents) -> dict:
    return {residents[m.resident].request.id: (m.to.node, m.to.gpus) for m in plan.moves}


def test_the_fewest_moves_free_the_card_with_the_fewest_residents():
    # a: 500 + 250 (250 free); b: 250 (750 free). A whole card is asked for: 1000 free in all.
    placer, residents = cluster(
        {"a": 1, "b": 1}, [("a1", "a", [0], 500), ("a2", "a", [0], 250), ("b1", "b", [0], 250)]
    )
    whole = RequestSpec("w", 1000)
    before = free(placer)

    assert fragmented(placer, whole)
    plan = plan_moves(placer, whole, residents, max_moves=2)

    assert moved(plan, residents) == {"b1": ("a", (0,))}  # one move, not a1 and a2
    assert (plan.placement.node, plan.placement.gpus) == ("b", (0,))
    assert free(placer) == before  # a plan changes nothing


def test_a_resident_that_may_not_move_is_worked_around_within_the_bound():
    placer, residents = cluster(
        {"a": 1, "b": 1}, [("a1", "a", [0], 500), ("a2", "a", [0], 250), ("b1", "b", [0], 250, False)]
    )
    whole = RequestSpec("w", 1000)

    assert plan_moves(placer, whole, residents, max_moves=1) is None  # b1 pinned; a needs two moves
    plan = plan_moves(placer, whole, residents, max_moves=2)
    assert moved(plan, residents) == {"a1": ("b", (0,)), "a2": ("b", (0,))}
    assert plan.placement.node == "a"


def test_no_plan_when_moves_cannot_help():
    # 400 + 400 free in all, enough for 700, but neither 600 can go where the other 400 is free.
    placer, residents = cluster({"a": 1, "b": 1}, [("a1", "a", [0], 600), ("b1", "b", [0], 600)])
    assert fragmented(placer, RequestSpec("w", 700))
    assert plan_moves(placer, RequestSpec("w", 700), residents, max_moves=4) is None
    # Not fragmented: the free share does not add up.
    assert not fragmented(placer, RequestSpec("g", 1000, 2))
    assert plan_moves(placer, RequestSpec("g", 1000, 2), residents, max_moves=4) is None


def test_a_request_that_fits_already_is_not_fragmented():
    placer, _ = cluster({"a": 2}, [("a1", "a", [0], 500)])
    assert not fragmented(placer, RequestSpec("w", 1000))


def test_a_gang_gets_the_cards_whose_residents_are_fewest():
    # a: cards 0, 1 each hold a quarter; card 2 two quarters; card 3 empty. b: one card, empty.
    # A 2-card gang on a: card 3 and card 0 or 1 (one move); b cannot hold two cards.
    placer, residents = cluster(
        {"a": 4, "b": 1},
        [("q0", "a", [0], 250), ("q1", "a", [1], 250), ("q2", "a", [2], 250), ("q3", "a", [2], 250)],
    )
    gang = RequestSpec("g", 1000, 2)

    plan = plan_moves(placer, gang, residents, max_moves=2)

    assert len(plan.moves) == 1 and plan.placement.node == "a" and 3 in plan.placement.gpus
    (move,) = plan.moves
    assert residents[move.resident].placement.gpus[0] in plan.placement.gpus  # it left the gang's card
    assert move.to.gpus[0] not in plan.placement.gpus or move.to.node == "b"


def test_host_cpu_short_moves_one_more_resident():
    # Card room on a needs one move (a1), but a's host CPU is held by a CPU-only resident too.
    placer, residents = cluster(
        {"a": 1, "b": 1},
        [("a1", "a", [0], 500, True, 8_000), ("c", "a", [], 0, True, 20_000), ("b1", "b", [0], 500, False)],
    )
    asking = RequestSpec("w", 1000, cpu_milli=16_000)

    assert plan_moves(placer, asking, residents, max_moves=1) is None
    plan = plan_moves(placer, asking, residents, max_moves=2)
    assert set(moved(plan, residents)) == {"a1", "c"}


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "fgd", "fgd-plus"])
def test_every_policy_carries_the_plan_out(policy):
    placer, residents = cluster(
        {"a": 2, "b": 2},
        [("a1", "a", [0], 500), ("a2", "a", [1], 500), ("b1", "b", [0], 500), ("b2", "b", [1], 250)],
        policy=policy,
    )
    gang = RequestSpec("g", 1000, 2)
    plan = plan_moves(placer, gang, residents, max_moves=2)

    assert len(plan.moves) == 2
    for move in plan.moves:
        placer.release(residents[move.resident].request, residents[move.resident].placement)
    placer.apply(gang, plan.placement)
    for move in plan.moves:
        placer.apply(residents[move.resident].request, move.to)  # no over-commit: the core asserts it
