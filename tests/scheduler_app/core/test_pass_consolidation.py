"""Consolidation inside a pass (actions/consolidate.py): which plan a pass holds for a request the
scattered free share cannot hold, the room it reserves, and the bounds, on clusters worked out by hand."""

from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.placement import apply_placement
from scheduler_app.core.queueing import Consolidation, OpenRoom, RunningAllocation, TeamQuota, plan_pass

CARD_MIB = 40_960
NOW = 10_000.0
READY = NOW + 900  # when the movable jobs reach their next checkpoint


def cluster(cards: dict[str, int], running: list[tuple]):
    """Nodes (name -> cards) with the running work taken out, and that work: (id, node, card, milli[,
    team[, borrowed]]); with no quotas all work borrows."""
    nodes = {
        name: NodeState(name, "a100", 32_000, 262_144, [GpuState(i, "A100", CARD_MIB) for i in range(n)])
        for name, n in cards.items()
    }
    allocations = []
    for id_, node, card, milli, *rest in running:
        team, borrowed = rest[0] if rest else "ml", rest[1] if len(rest) > 1 else True
        spec = RequestSpec(id_, milli, 1, team=team, submitted_at=0.0)
        placement = Placement(id_, node, (card,), milli, CARD_MIB * milli // 1000)
        apply_placement(nodes[node], spec, placement)
        allocations.append(RunningAllocation(spec, placement, started_at=0.0, borrowed=borrowed))
    return list(nodes.values()), allocations


def rules(movable=("a1", "b1"), **options) -> Consolidation:
    return Consolidation(dict.fromkeys(movable, READY), frozenset({"a100"}), **options)


def whole(id_="w", team="ml", submitted_at=1.0) -> RequestSpec:
    return RequestSpec(id_, 1000, 1, team=team, submitted_at=submitted_at)


def test_a_request_the_scattered_share_cannot_hold_waits_for_the_fewest_moves_with_its_room_reserved():
    # a: 500 + 250 on its card, b: 250. The whole card fits once b1 moves to a.
    nodes, running = cluster(
        {"a": 1, "b": 1}, [("a1", "a", 0, 500), ("a2", "a", 0, 250), ("b1", "b", 0, 250)]
    )
    later = RequestSpec("half", 500, 1, team="ml", submitted_at=2.0)  # would fit on b only
    quarter = RequestSpec("quarter", 250, 1, team="ml", submitted_at=3.0)

    pending = [whole(), later, quarter]
    plan = plan_pass(nodes, pending, running, [], NOW, consolidation=rules(("a1", "a2", "b1")))

    (room,) = plan.rooms
    assert (room.request_id, room.moving, room.placement.node, room.ready_at, room.new) == (
        "w",
        ("b1",),
        "b",
        READY,
        True,
    )
    waiting = {w.request_id: w for w in plan.waiting}
    assert waiting["w"].cause.startswith("waits for 1 running job (b1) to move at its next checkpoint")
    assert waiting["w"].estimated_start == READY
    # Later requests backfill, but not into the room being made on b.
    assert [(s.request.id, s.placement.node) for s in plan.starts] == [("quarter", "a")]
    assert "half" in waiting


def test_no_plan_when_moves_cannot_help():
    # 250 free on each card: 500 in all, short of a whole card whatever moves.
    nodes, running = cluster({"a": 1, "b": 1}, [("a1", "a", 0, 750), ("b1", "b", 0, 750)])
    plan = plan_pass(nodes, [whole()], running, [], NOW, consolidation=rules())
    assert plan.rooms == []
    assert "waits for" not in plan.waiting[0].cause

    # Enough free share, but only a job that may not move stands in the way.
    nodes, running = cluster({"a": 1, "b": 1}, [("a1", "a", 0, 500), ("b1", "b", 0, 500)])
    plan = plan_pass(nodes, [whole()], running, [], NOW, consolidation=rules(movable=()))
    assert plan.rooms == []
    plan = plan_pass(nodes, [whole()], running, [], NOW, consolidation=rules(movable=("a1",)))
    assert [r.moving for r in plan.rooms] == [("a1",)]


def test_a_pass_plans_no_more_moves_and_tries_no_more_requests_than_its_bounds():
    # Each of two whole cards asked for needs one move; a bound of one move, or of one request tried,
    # plans for the first only.
    nodes, running = cluster(
        {"a": 1, "b": 1, "c": 1, "d": 1},
        [("a1", "a", 0, 500), ("b1", "b", 0, 500), ("c1", "c", 0, 500), ("d1", "d", 0, 500)],
    )
    movable = ("a1", "b1", "c1", "d1")
    two = [whole("w1"), whole("w2", submitted_at=2.0)]
    assert len(plan_pass(nodes, two, running, [], NOW, consolidation=rules(movable)).rooms) == 2
    plan = plan_pass(nodes, two, running, [], NOW, consolidation=rules(movable, max_moves=1))
    assert [r.request_id for r in plan.rooms] == ["w1"]
    plan = plan_pass(nodes, two, running, [], NOW, consolidation=rules(movable, tries=1))
    assert [r.request_id for r in plan.rooms] == ["w1"]


def test_no_job_within_its_quota_is_moved_where_it_would_borrow():
    # a is in pool p1, b in p2. cv is guaranteed half a card in p1 only: a1 runs within it, b1 borrows.
    nodes, running = cluster({"a": 1, "b": 1}, [("a1", "a", 0, 500, "cv", False), ("b1", "b", 0, 500, "cv")])
    nodes[0].pool, nodes[1].pool = "p1", "p2"
    quotas = [TeamQuota("cv", "p1", 500)]
    pools = frozenset({"p1", "p2"})

    # Moving a1 to b would take it out of its guarantee; b1, borrowing already, may move to a.
    plan = plan_pass(
        nodes, [whole()], running, quotas, NOW, consolidation=Consolidation({"a1": READY, "b1": READY}, pools)
    )
    assert [(r.moving, r.placement.node) for r in plan.rooms] == [(("b1",), "b")]

    plan = plan_pass(
        nodes, [whole()], running, quotas, NOW, consolidation=Consolidation({"a1": READY}, pools)
    )
    assert plan.rooms == []


def test_an_open_plan_is_kept_while_its_moves_are_due_and_its_request_starts_first_once_made():
    nodes, running = cluster({"a": 1, "b": 1}, [("a1", "a", 0, 500), ("b1", "b", 0, 500)])
    room = OpenRoom(("b1",), Placement("w", "b", (0,), 1000, CARD_MIB), READY)
    plan = plan_pass(nodes, [whole()], running, [], NOW, consolidation=rules(open={"w": room}))
    assert [(r.request_id, r.moving, r.new) for r in plan.rooms] == [("w", ("b1",), False)]

    # b1 has moved, and back in the queue ahead of w (submitted earlier) it fits only in the room made
    # on b (a filled up meanwhile): w starts there first, b1 waits.
    nodes, running = cluster({"a": 1, "b": 1}, [("a1", "a", 0, 750)])
    moved = RequestSpec("b1", 500, 1, team="ml", submitted_at=0.0)
    made = OpenRoom((), room.placement, READY)
    plan = plan_pass(nodes, [moved, whole()], running, [], NOW, consolidation=rules(open={"w": made}))
    assert [(s.request.id, s.placement.node) for s in plan.starts] == [("w", "b")]
    assert [w.request_id for w in plan.waiting] == ["b1"]
    assert plan.rooms == []


def test_a_plan_never_touches_a_node_another_reservation_holds():
    # The gang first in line cannot fit by moves (1,000 free of 2,000): it reserves b for when b's work
    # ends. Every room for w moves work to or from b, so w gets none while that reservation holds.
    nodes, running = cluster(
        {"a": 1, "b": 2}, [("a1", "a", 0, 500), ("b1", "b", 0, 1000), ("b2", "b", 1, 500)]
    )
    gang = RequestSpec("g", 1000, 2, team="ml", submitted_at=0.5)
    movable = rules(("a1", "b2"))

    plan = plan_pass(nodes, [whole()], running, [], NOW, consolidation=movable)
    assert len(plan.rooms) == 1

    plan = plan_pass(nodes, [gang, whole()], running, [], NOW, consolidation=movable)
    assert [r.request_id for r in plan.reservations] == ["g", "w"]
    assert plan.rooms == []
