import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import Shape, WorkloadMix
from scheduler_app.core.placement import (
    DEFAULT_POLICY,
    POLICIES,
    Placer,
    choose_placement,
    first_fit,
    scarce_gang_share,
)


def make_node(name, free_milli, model="A100", pool="default", cpu=32_000, memory=131_072):
    gpus = [GpuState(i, model, 40_960, free_milli=f) for i, f in enumerate(free_milli)]
    for g in gpus:
        g.free_memory_mib = g.memory_mib * g.free_milli // 1000
    return NodeState(name, pool, cpu, memory, gpus)


def req(milli=1000, num=1, **kw):
    return RequestSpec(kw.pop("id", "r"), milli, num, **kw)


def test_default_policy_is_registered():
    assert DEFAULT_POLICY in POLICIES
    assert {"first-fit", "best-fit", "fgd", "fgd-plus"} <= set(POLICIES)


def test_unknown_policy_name_raises_value_error():
    with pytest.raises(ValueError, match="unknown placement policy"):
        choose_placement([make_node("a", [1000])], req(), policy="worst-fit")


def test_first_fit_takes_the_first_node_and_lowest_cards():
    nodes = [make_node("a", [200, 1000]), make_node("b", [1000, 1000])]
    placement = choose_placement(nodes, req(500), "first-fit")
    assert (placement.node, placement.gpus) == ("a", (1,))


def test_first_fit_engine_agrees_with_the_plain_function():
    nodes = [make_node("a", [200, 700]), make_node("b", [1000, 1000, 1000])]
    for request in (req(500), req(1000, 2), req(0, 0, cpu_milli=1_000), req(900)):
        assert choose_placement(nodes, request, "first-fit") == first_fit(nodes, request)


def test_best_fit_takes_the_node_left_fullest_and_tightest_card():
    nodes = [make_node("roomy", [1000, 1000]), make_node("tight", [1000, 600, 300])]
    placement = choose_placement(nodes, req(300), "best-fit")
    assert (placement.node, placement.gpus) == ("tight", (2,))


def test_fgd_places_where_fragmentation_grows_least():
    # given every future request is a 500-milli slice: a card with 800 free wastes
    # 300 after taking one, while splitting a fresh card leaves two usable halves
    mix = WorkloadMix((Shape(0, 500, 1),), (1.0,))
    nodes = [make_node("a", [800]), make_node("b", [1000])]
    # when
    placement = choose_placement(nodes, req(500), "fgd", mix)
    # then best-fit would pick the 800 card; fgd keeps both halves usable
    assert placement.node == "b"
    assert choose_placement(nodes, req(500), "best-fit").node == "a"


def test_fgd_chooses_the_card_within_a_node_by_fragmentation():
    # given 500-milli slices are typical: the 200 free on card 1 is already fragment
    mix = WorkloadMix((Shape(0, 500, 1),), (1.0,))
    nodes = [make_node("a", [1000, 200])]
    # when a 150 slice comes, it goes there (fragment shrinks) rather than the lowest index
    assert choose_placement(nodes, req(150), "fgd", mix).gpus == (1,)
    assert choose_placement(nodes, req(150), "first-fit").gpus == (0,)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_multi_gpu_request_takes_whole_cards_on_one_node_or_nothing(policy):
    # given 4 free cards in total, but at most 2 on one node
    nodes = [make_node("a", [1000, 1000, 300]), make_node("b", [1000, 1000])]
    # then a 3-card gang fits nowhere, a 2-card gang lands on one node
    assert choose_placement(nodes, req(1000, 3), policy) is None
    placement = choose_placement(nodes, req(1000, 2), policy)
    assert len(placement.gpus) == 2 and placement.milli == 1000
    node = next(n for n in nodes if n.name == placement.node)
    assert all(node.gpus[i].free_milli == 1000 for i in placement.gpus)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_gpu_model_constraint_is_honoured(policy):
    nodes = [make_node("a100", [1000], model="A100"), make_node("v100", [1000], model="V100")]
    assert choose_placement(nodes, req(500, models=frozenset({"V100"})), policy).node == "v100"
    assert choose_placement(nodes, req(500, models=frozenset({"H100"})), policy) is None


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_pool_constraint_is_honoured(policy):
    nodes = [make_node("od", [1000], pool="on-demand"), make_node("sp", [1000], pool="spot")]
    assert choose_placement(nodes, req(500, pools=frozenset({"spot"})), policy).node == "sp"
    assert choose_placement(nodes, req(500, pools=frozenset({"gone"})), policy) is None


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_host_cpu_and_memory_must_fit(policy):
    nodes = [make_node("small", [1000], cpu=4_000, memory=8_192), make_node("big", [1000], cpu=64_000)]
    assert choose_placement(nodes, req(500, cpu_milli=8_000), policy).node == "big"
    assert choose_placement(nodes, req(500, memory_mib=16_384), policy).node == "big"
    assert choose_placement(nodes, req(500, cpu_milli=128_000), policy) is None


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_card_memory_must_fit(policy):
    nodes = [make_node("a", [1000, 1000])]
    nodes[0].gpus[0].free_memory_mib = 1_024
    assert choose_placement(nodes, req(200, gpu_memory_mib=4_096), policy).gpus == (1,)


def test_training_packs_onto_a_used_card():
    nodes = [make_node("a", [1000, 500])]
    assert choose_placement(nodes, req(300, task_type="training"), DEFAULT_POLICY).gpus == (1,)


def test_inference_spreads_onto_an_unshared_card():
    nodes = [make_node("a", [1000, 500])]
    assert choose_placement(nodes, req(300, task_type="inference"), DEFAULT_POLICY).gpus == (0,)


def test_inference_packs_when_that_is_the_only_way_to_fit():
    nodes = [make_node("a", [600, 500])]
    assert choose_placement(nodes, req(300, task_type="inference"), DEFAULT_POLICY).gpus == (1,)


def test_training_packs_onto_the_fuller_node():
    nodes = [make_node("empty", [1000, 1000]), make_node("used", [1000, 0])]
    assert choose_placement(nodes, req(1000, task_type="training"), DEFAULT_POLICY).node == "used"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_decisions_are_deterministic(policy):
    mix = WorkloadMix((Shape(0, 1000, 1), Shape(0, 470, 1), Shape(0, 810, 1)), (0.5, 0.3, 0.2))
    requests = [
        req(m, id=i, task_type=t) for i, (m, t) in enumerate([(470, "training"), (810, "inference")] * 6)
    ]

    def run():
        placer = Placer([make_node(f"n{k}", [1000] * 4) for k in range(3)], policy, mix)
        return [placer.place(r) for r in requests]

    assert run() == run()


def test_placer_reflects_releases():
    nodes = [make_node("a", [1000])]
    placer = Placer(nodes, "fgd-plus")
    first = placer.place(req(1000, id=1))
    assert placer.place(req(1000, id=2)) is None
    placer.release(req(1000, id=1), first)
    assert placer.place(req(1000, id=2)).node == "a"


operations = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from([50, 125, 250, 470, 500, 810, 1000]),
        st.integers(0, 3),
        st.sampled_from(["training", "inference"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations, policy=st.sampled_from(sorted(POLICIES)))
def test_any_placements_and_releases_keep_free_milli_within_a_card(ops, policy):
    # given a small cluster and a random stream of placements and releases
    nodes = [make_node("a", [1000, 1000, 1000, 1000]), make_node("b", [1000, 1000])]
    mix = WorkloadMix((Shape(0, 500, 1), Shape(0, 1000, 2)), (0.7, 0.3))
    placer = Placer(nodes, policy, mix)
    running = []
    for i, (release, milli, num, task) in enumerate(ops):
        if release and running:
            placer.release(*running.pop(0))
            continue
        request = req(1000 if num > 1 else milli, num, id=i, task_type=task)
        placement = placer.place(request)
        if placement is not None:
            running.append((request, placement))
        # then no card is ever over-committed or over-released
        assert all(0 <= g.free_milli <= 1000 for n in nodes for g in n.gpus)


def test_cpu_only_request_avoids_starving_idle_cards_of_cpu():
    # given whole-card requests need 4 cores each; node "lean" has 8 cores for its
    # 2 idle cards, node "rich" plenty
    mix = WorkloadMix((Shape(4_000, 1000, 1),), (1.0,))
    nodes = [make_node("lean", [1000, 1000], cpu=8_000), make_node("rich", [1000, 1000], cpu=64_000)]
    cpu_only = req(0, 0, cpu_milli=4_000)
    # when / then: FGD sees no difference (one whole-card request still fits on "lean")
    # and takes the first node; fgd-plus sees a card on "lean" stranded
    assert choose_placement(nodes, cpu_only, "fgd", mix).node == "lean"
    assert choose_placement(nodes, cpu_only, DEFAULT_POLICY, mix).node == "rich"


def test_cpu_only_request_that_strands_no_card_takes_the_node_with_least_free_cpu():
    # given whole-card requests need 16 cores each: neither node loses a usable card to a 20-core
    # CPU-only request. "cards" has 4 idle cards and 90 cores, "cpu" no cards and 100 cores.
    mix = WorkloadMix((Shape(16_000, 1000, 1),), (1.0,))
    nodes = [make_node("cpu", [], cpu=100_000), make_node("cards", [1000] * 4, cpu=90_000)]
    cpu_only = req(0, 0, cpu_milli=20_000)
    # when / then: packing alone would take "cpu" (no idle card is left fuller); fgd-plus takes the
    # least free CPU, keeping the larger block whole for requests that need much CPU at once
    assert choose_placement(nodes, cpu_only, "best-fit", mix).node == "cpu"
    assert choose_placement(nodes, cpu_only, DEFAULT_POLICY, mix).node == "cards"


def test_cpu_only_request_keeps_a_scarce_gangs_host_over_fgds_rank():
    # given a gang of 4 cards and 50 cores that only "g8" (8 idle cards, 64 cores) can host, and
    # whole-card requests of 16 cores. A 20-core CPU-only request leaves "g4" (4 cards, 32 cores)
    # unable to feed any card, so FGD's rank prefers "g8", which then cannot host the gang (44 cores).
    mix = WorkloadMix((Shape(16_000, 1000, 1),), (1.0,), gangs=((Shape(50_000, 1000, 4), 0),))
    nodes = [make_node("g8", [1000] * 8, cpu=64_000), make_node("g4", [1000] * 4, cpu=32_000)]
    cpu_only = req(0, 0, cpu_milli=20_000)
    assert choose_placement(nodes, cpu_only, "fgd", mix).node == "g8"
    # when / then: fgd-plus keeps the gang's only host; a GPU request is still ranked by FGD first
    assert choose_placement(nodes, cpu_only, DEFAULT_POLICY, mix).node == "g4"
    assert choose_placement(nodes, req(1000, cpu_milli=20_000), DEFAULT_POLICY, mix).node == "g8"


@pytest.mark.parametrize(("cpu_per_gpu", "expected"), [(8.0, "roomy"), (10.0, "starved"), (12.0, "roomy")])
def test_cpu_only_request_ranks_by_cards_stranded_where_cpu_runs_out_first(cpu_per_gpu, expected):
    # given whole-card requests of 16 cores, and two nodes of 4 idle cards: "roomy" (48 cores)
    # feeds 3 of its cards, "starved" (20 cores) only 1. A 20-core CPU-only request leaves roomy
    # feeding 1 card (2 more stranded) and starved none (1 more); FGD's rank sees only that
    # starved stops fitting the shape at all, and prefers roomy.
    # The cluster has 68 cores for 8 cards (8.5 per card): pressure is cpu_per_gpu / 8.5.
    nodes = [make_node("roomy", [1000] * 4, cpu=48_000), make_node("starved", [1000] * 4, cpu=20_000)]
    mix = WorkloadMix((Shape(16_000, 1000, 1),), (1.0,), cpu_per_gpu=cpu_per_gpu)
    cpu_only = req(0, 0, cpu_milli=20_000)
    assert choose_placement(nodes, cpu_only, "fgd", mix).node == "roomy"
    # when / then: at pressure 0.94 fgd-plus keeps FGD's rank; at 1.18 (CPU runs out before GPU) it
    # strands fewer cards; at 1.41 every gang shape counts as scarce (share 1) and FGD's rank is back
    assert choose_placement(nodes, cpu_only, DEFAULT_POLICY, mix).node == expected
    # and a GPU request is still ranked by FGD first
    assert choose_placement(nodes, req(1000, cpu_milli=20_000), DEFAULT_POLICY, mix).node == "roomy"


def test_slices_keep_the_only_node_that_can_host_a_rare_gang():
    # given a gang of 8 cards needing 100 cores and 512 GiB, which only "big" can host;
    # best-fit alone would pick "big" (it is left fuller)
    mix = WorkloadMix(
        (Shape(0, 1000, 1),),
        (1.0,),
        gangs=((Shape(100_000, 1000, 8), 524_288),),
    )
    big = make_node("big", [1000] * 8, cpu=128_000, memory=1_048_576)
    wide = make_node("wide", [1000] * 16, cpu=200_000, memory=65_536)
    # when
    placement = choose_placement([big, wide], req(1000, cpu_milli=1_000), DEFAULT_POLICY, mix)
    # then
    assert placement.node == "wide"
    gang = req(1000, 8, cpu_milli=100_000, memory_mib=524_288)
    assert choose_placement([big, wide], gang, DEFAULT_POLICY, mix).node == "big"


def test_unconstrained_request_leaves_the_model_that_pinned_requests_need():
    # given a fifth of the GPU asked for is pinned to model "T4"; an unconstrained whole card
    # scores the same on both nodes (FGD's rank ties), and the T4 node comes first
    mix = WorkloadMix((Shape(0, 1000, 1),), (1.0,), pinned=((frozenset({"T4"}), 0.2),))
    nodes = [make_node("t4", [1000, 1000], model="T4"), make_node("a100", [1000, 1000])]
    # when / then: fgd takes the first node, fgd-plus the model nobody is pinned to
    assert choose_placement(nodes, req(1000), "fgd", mix).node == "t4"
    assert choose_placement(nodes, req(1000), DEFAULT_POLICY, mix).node == "a100"
    # and a request pinned to T4 still goes there
    assert choose_placement(nodes, req(1000, models=frozenset({"T4"})), DEFAULT_POLICY, mix).node == "t4"


def test_unconstrained_request_takes_the_model_with_the_least_pinned_demand_per_free_card():
    # given as much demand pinned to each model, but the T4 node has one card free and the A100 two
    mix = WorkloadMix(
        (Shape(0, 1000, 1),), (1.0,), pinned=((frozenset({"T4"}), 0.2), (frozenset({"A100"}), 0.2))
    )
    nodes = [make_node("t4", [1000, 0, 0], model="T4"), make_node("a100", [1000, 1000, 0])]
    # then: pressure 0.2 / 1 card on T4, 0.2 / 2 cards on A100
    assert choose_placement(nodes, req(1000), DEFAULT_POLICY, mix).node == "a100"


def gang_cluster():
    """Ten nodes of 8 cards and 96 cores; only the first two (model "A") can host the gang shape."""
    return [make_node(f"a{i}", [1000] * 8, model="A", cpu=96_000) for i in range(2)] + [
        make_node(f"b{i}", [1000] * 8, model="B", cpu=96_000) for i in range(8)
    ]


@pytest.mark.parametrize(("cpu_per_gpu", "expected"), [(6.0, "a0"), (12.0, "b0")])
def test_cpu_only_pods_keep_gang_hosts_when_cpu_is_pressed(cpu_per_gpu, expected):
    # given a gang of 8 "A" cards and 90 cores, 2 hosts of 10 nodes; the cluster has 12 cores per card.
    # Calm (6 cores asked per card: pressure 0.5): kept only while at most 10 % = 1 node hosts it.
    # Pressed (12 per card: pressure 1.0): 30 % = 3 nodes, so the 2 hosts are kept.
    mix = WorkloadMix(
        (Shape(10_000, 0, 0),),
        (1.0,),
        gangs=((Shape(90_000, 1000, 8, frozenset({"A"})), 0),),
        cpu_per_gpu=cpu_per_gpu,
    )
    # when a CPU-only pod of 10 cores comes (every tie-break before gang room ties; ties go first)
    placement = choose_placement(gang_cluster(), req(0, 0, cpu_milli=10_000), DEFAULT_POLICY, mix)
    # then
    assert placement.node == expected


@pytest.mark.parametrize(
    ("cpu_per_gpu", "share"), [(0.0, 0.1), (6.0, 0.1), (10.8, 0.1), (12.0, 0.3), (18.0, 1.0)]
)
def test_scarce_gang_share_grows_with_cpu_pressure_above_calm(cpu_per_gpu, share):
    # the cluster has 12 cores per card: pressure is cpu_per_gpu / 12 (0.9 is calm)
    index = Placer(gang_cluster()).index
    assert scarce_gang_share(index, WorkloadMix(cpu_per_gpu=cpu_per_gpu)) == pytest.approx(share)


@pytest.mark.parametrize(("gang_models", "expected"), [(frozenset({"V"}), "v4"), (frozenset(), "v8")])
def test_scarce_gang_pinned_to_a_model_keeps_its_host_over_fgds_rank(gang_models, expected):
    # given a gang of 4 cards and 50 cores: only "v8" (8 V cards, 64 cores) can host it. A pod of one V
    # card and 20 cores leaves "v4" (32 cores) unable to host the typical pod, so FGD's rank prefers
    # "v8", which breaks the gang's only host (44 cores left).
    mix = WorkloadMix((Shape(20_000, 1000, 1),), (1.0,), gangs=((Shape(50_000, 1000, 4, gang_models), 0),))
    nodes = [make_node("v8", [1000] * 8, model="V", cpu=64_000), make_node("v4", [1000] * 4, model="V")]
    pod = req(1000, cpu_milli=20_000, models=frozenset({"V"}))
    assert choose_placement(nodes, pod, "fgd", mix).node == "v8"
    # when / then: pinned to a model, its host is kept before FGD's rank; unpinned, only FGD's ties see it
    assert choose_placement(nodes, pod, DEFAULT_POLICY, mix).node == expected
