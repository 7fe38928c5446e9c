"""bench.trace_replay --consolidate: a pod that failed is placed by carrying out the plan's moves."""

from bench.trace_replay import carry_out
from scheduler_app.core.cluster import GpuState, NodeState, Placement, RequestSpec
from scheduler_app.core.consolidation import Resident, plan_moves
from scheduler_app.core.placement import Placer


def test_carry_out_makes_the_moves_and_places_the_pod():
    nodes = [NodeState(name, "default", 64_000, 262_144, [GpuState(0, "A100", 40_960)]) for name in "ab"]
    placer = Placer(nodes, "best-fit")
    residents = []
    for id_, node, milli in (("a1", "a", 500), ("a2", "a", 250), ("b1", "b", 250)):
        spec, placement = RequestSpec(id_, milli), Placement(id_, node, (0,), milli, 40_960 * milli // 1000)
        placer.apply(spec, placement)
        residents.append(Resident(spec, placement))
    whole = RequestSpec("w", 1000)

    placement = carry_out(placer, whole, residents, plan_moves(placer, whole, residents, 2))

    assert (placement.node, residents[2].placement.node) == ("b", "a")  # b1 moved to a, the pod on b
    assert [g.free_milli for n in nodes for g in n.gpus] == [0, 0]
