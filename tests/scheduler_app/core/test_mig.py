"""MIG geometry and placement on small hand-checked clusters (core/mig.py through the Placer).

An 80 GB card: 7 compute slices (1g = 142 milli-GPU, 2g = 285, 3g = 428, 4g = 571, 7g = 1000)
and 8 memory slices of 10240 MiB. A request's memory in proportion to its share: 1/8 -> 10240 MiB.
"""

import pytest

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import Shape, WorkloadMix, node_fragmentation
from scheduler_app.core.mig import (
    DYNAMIC,
    FIXED,
    GEOMETRIES,
    LayoutError,
    MigCard,
    format_layout,
    hold,
    parse_layout,
    smallest_profile,
)
from scheduler_app.core.placement import POLICIES, Placer

GB80, GB40 = 81920, 40960
EIGHTH, QUARTER, THREE_EIGHTHS = 125, 250, 375


def mig_node(mode, *layouts, memory_mib=GB80, name="n1"):
    gpus = [
        GpuState(i, "A100-80GB", memory_mib, mig=MigCard(mode, memory_mib, parse_layout(text, memory_mib)))
        for i, text in enumerate(layouts)
    ]
    return NodeState(name, "mig", 64_000, 512 * 1024, gpus)


def instance(placement):
    (taken, _layout), *_ = placement.mig
    return str(taken)


def layouts(node):
    return [format_layout(g.mig.layout) for g in node.gpus]


# Geometry as data (NVIDIA MIG user guide, "Supported MIG Profiles").


def test_eighty_gb_geometry_lists_the_guides_profiles_slices_and_offsets():
    table = {p.name: (p.compute, p.memory, p.starts, p.milli) for p in GEOMETRIES[80]}
    assert table == {
        "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6), 142),
        "1g.20gb": (1, 2, (0, 2, 4, 6), 142),
        "2g.20gb": (2, 2, (0, 2, 4), 285),
        "3g.40gb": (3, 4, (0, 4), 428),
        "4g.40gb": (4, 4, (0,), 571),
        "7g.80gb": (7, 8, (0,), 1000),
    }
    assert [p.name for p in GEOMETRIES[40]] == [
        "1g.5gb",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]


@pytest.mark.parametrize(
    ("text", "memory_mib", "why"),
    [
        ("3g.40gb@2", GB80, "3g.40gb may start only at memory slice 0, 4"),
        ("3g.40gb@0,2g.20gb@2", GB80, "2g.20gb@2 overlaps 3g.40gb@0"),
        ("3g.40gb@0", GB40, "unknown profile '3g.40gb'"),
        ("7g.80gb", GB80, "7g.80gb may start only at memory slice 0, not ''"),
        ("1g.10gb@0", 24576, "no MIG geometry"),
    ],
)
def test_invalid_layouts_are_refused_with_the_reason(text, memory_mib, why):
    with pytest.raises(LayoutError, match=why):
        parse_layout(text, memory_mib)


def test_a_full_valid_layout_parses_in_slice_order():
    assert format_layout(parse_layout("3g.40gb@4, 4g.40gb@0", GB80)) == "4g.40gb@0,3g.40gb@4"


@pytest.mark.parametrize(
    ("milli", "memory_mib", "card", "profile"),
    [
        (EIGHTH, GB80 // 8, GB80, "1g.10gb"),
        (QUARTER, GB80 // 4, GB80, "2g.20gb"),
        (THREE_EIGHTHS, GB80 * 3 // 8, GB80, "3g.40gb"),
        (EIGHTH, 20_000, GB80, "1g.20gb"),  # a small share with much memory: the 2-slice 1g
        (500, GB80 // 2, GB80, "4g.40gb"),
        (EIGHTH, GB40 // 8, GB40, "1g.5gb"),
    ],
)
def test_the_smallest_profile_covers_share_and_memory(milli, memory_mib, card, profile):
    geometry = GEOMETRIES[80 if card == GB80 else 40]
    assert smallest_profile(geometry, milli, memory_mib, card).name == profile


# Fixed layouts: which instance a request gets.


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_fixed_layout_gives_eighth_quarter_and_three_eighths_their_smallest_instances(policy):
    node = mig_node(FIXED, "3g.40gb@0,2g.20gb@4,1g.10gb@6")
    placer = Placer([node], policy)

    got = [placer.place(RequestSpec(i, milli)) for i, milli in enumerate((EIGHTH, QUARTER, THREE_EIGHTHS))]

    assert [instance(p) for p in got] == ["1g.10gb@6", "2g.20gb@4", "3g.40gb@0"]
    assert [(p.milli, p.gpu_memory_mib) for p in got] == [(142, 10240), (285, 20480), (428, 40960)]
    assert placer.place(RequestSpec(9, EIGHTH)) is None  # every instance is held: none is shared
    assert layouts(node) == ["3g.40gb@0,2g.20gb@4,1g.10gb@6"]  # a fixed layout never changes


def test_fixed_layout_without_a_small_instance_gives_the_smallest_larger_one_lowest_start_first():
    node = mig_node(FIXED, "3g.40gb@0,3g.40gb@4")
    placer = Placer([node], "fgd-plus")

    assert instance(placer.place(RequestSpec(1, EIGHTH))) == "3g.40gb@0"
    assert instance(placer.place(RequestSpec(2, EIGHTH))) == "3g.40gb@4"
    assert placer.place(RequestSpec(3, EIGHTH)) is None


def test_releasing_a_placement_frees_its_instance_for_the_next_request():
    node = mig_node(FIXED, "7g.80gb@0")
    placer = Placer([node], "fgd-plus")
    first = RequestSpec(1, 1000)
    placement = placer.place(first)
    assert placer.place(RequestSpec(2, EIGHTH)) is None

    placer.release(first, placement)

    assert instance(placer.place(RequestSpec(2, EIGHTH))) == "7g.80gb@0"


def test_a_gang_on_mig_cards_takes_a_full_instance_on_each():
    node = mig_node(FIXED, "7g.80gb@0", "4g.40gb@0", "7g.80gb@0")
    placement = Placer([node], "fgd-plus").place(RequestSpec(1, 1000, num_gpus=2))

    assert placement.gpus == (0, 2)  # a 4g is not a whole card
    assert [str(i) for i, _ in placement.mig] == ["7g.80gb@0", "7g.80gb@0"]


# Dynamic: the scheduler chooses the layout, re-partitioning only idle cards.


def test_dynamic_idle_card_is_repartitioned_for_the_request():
    node = mig_node(DYNAMIC, "3g.40gb@0,3g.40gb@4")

    placement = Placer([node], "fgd-plus").place(RequestSpec(1, EIGHTH))

    assert instance(placement) == "1g.10gb@0"
    assert layouts(node) == [",".join(f"1g.10gb@{s}" for s in range(7))]


def test_dynamic_busy_card_keeps_its_layout_and_gives_a_free_larger_instance():
    node = mig_node(DYNAMIC, "3g.40gb@0,3g.40gb@4")
    placer = Placer([node], "fgd-plus")
    placer.place(RequestSpec(1, THREE_EIGHTHS))

    placement = placer.place(RequestSpec(2, EIGHTH))

    assert instance(placement) == "3g.40gb@4"
    assert placement.mig[0][1] is None
    assert layouts(node) == ["3g.40gb@0,3g.40gb@4"]


def test_dynamic_busy_card_adds_the_smallest_profile_in_free_slices():
    node = mig_node(DYNAMIC, "3g.40gb@0")
    placer = Placer([node], "fgd-plus")
    placer.place(RequestSpec(1, THREE_EIGHTHS))

    assert instance(placer.place(RequestSpec(2, QUARTER))) == "2g.20gb@4"
    assert layouts(node) == ["3g.40gb@0,2g.20gb@4"]


# What the geometry leaves usable.


def test_free_slices_count_only_as_the_instances_their_offsets_allow():
    # 1g at slice 1 and 3g at 4 in use: slices 0, 2 and 3 are free (3 compute slices are too), yet
    # 3g may start only at 0 or 4; what is left holds at most a 2g (at 2).
    node = mig_node(DYNAMIC, "1g.10gb@1,3g.40gb@4")
    node.gpus[0].mig.used = {1, 4}
    card = GpuState(0, "A100-80GB", GB80, mig=node.gpus[0].mig)
    node.gpus[0] = card
    placer = Placer([node], "fgd-plus")

    assert (card.free_milli, card.free_memory_mib) == (285, 20480)
    assert placer.place(RequestSpec(1, THREE_EIGHTHS)) is None
    assert instance(placer.place(RequestSpec(2, QUARTER))) == "2g.20gb@2"


def test_fragmentation_counts_a_mig_card_by_what_its_geometry_leaves_usable():
    node = mig_node(DYNAMIC, "1g.10gb@1,3g.40gb@4")
    node.gpus[0].mig.used = {1, 4}
    node.gpus[0] = GpuState(0, "A100-80GB", GB80, mig=node.gpus[0].mig)
    three_eighths = WorkloadMix((Shape(0, THREE_EIGHTHS, 1),), (1.0,))
    quarter = WorkloadMix((Shape(0, QUARTER, 1),), (1.0,))

    assert node_fragmentation(node, three_eighths) == 285  # no 3g fits: all of the free 2g is fragment
    assert node_fragmentation(node, quarter) == 0


def test_a_running_slice_outside_the_layout_still_holds_its_instance():
    card = GpuState(0, "A100-80GB", GB80, mig=MigCard(FIXED, GB80, []))

    hold(card, "3g.40gb@4")

    assert format_layout(card.mig.layout) == "3g.40gb@4"
    assert (card.free_milli, card.mig.used) == (0, {4})


@pytest.mark.parametrize("seed", range(5))
def test_random_place_and_release_never_shares_or_overlaps_an_instance(seed):
    import random

    rng = random.Random(seed)
    fixed = mig_node(FIXED, "3g.40gb@0,2g.20gb@4,1g.10gb@6", "7g.80gb@0", name="fixed")
    dynamic = mig_node(DYNAMIC, "", "4g.40gb@0,3g.40gb@4", name="dynamic")
    plain = NodeState("plain", "whole", 64_000, 512 * 1024, [GpuState(0, "A100-80GB", GB80)])
    placer = Placer([fixed, dynamic, plain], "fgd-plus")
    running = []
    for i in range(300):
        if running and rng.random() < 0.45:
            request, placement = running.pop(rng.randrange(len(running)))
            placer.release(request, placement)
        else:
            request = RequestSpec(i, rng.choice([125, 250, 375, 500, 1000]))
            if (placement := placer.place(request)) is not None:
                running.append((request, placement))
        for gpu in (g for node in (fixed, dynamic) for g in node.gpus):
            used = [inst for inst in gpu.mig.layout if inst.start in gpu.mig.used]
            slots = [slot for inst in used for slot in inst.slots]
            assert len(slots) == len(set(slots)), "overlapping instances in use"
            assert len(used) == len(gpu.mig.used), "an instance in use left the layout"
            assert (gpu.free_milli, gpu.free_memory_mib) == gpu.mig.best_free()
    held = [(p.node, p.gpus[0], str(inst)) for _, p in running if p.mig for inst, _ in p.mig]
    assert len(held) == len(set(held)), "an instance held by two requests"
