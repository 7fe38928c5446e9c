import numpy as np
import pytest

from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import FragmentationModel, Shape, WorkloadMix, node_fragmentation
from tests.scheduler_app.core.fragmentation_cases import MIX_WITH_MEMORY, MODELS


def node(free_milli, model="A100", cpu_free=16_000):
    gpus = [GpuState(i, model, 40_960, free_milli=f) for i, f in enumerate(free_milli)]
    return NodeState("n", "default", 32_000, 65_536, gpus, free_cpu_milli=cpu_free)


def test_fragmentation_matches_a_hand_checked_example():
    # given cards with 1000, 600 and 200 milli free (1800 idle) and a mix of
    # half whole-card, 30 % 500-milli and 20 % CPU-only requests
    mix = WorkloadMix(
        (Shape(4_000, 1000, 1), Shape(2_000, 500, 1), Shape(1_000, 0, 0)),
        (0.5, 0.3, 0.2),
    )
    # when
    frag = node_fragmentation(node([1000, 600, 200]), mix)
    # then: whole card: 600 + 200 unusable; 500-milli: 200 unusable; CPU-only: all 1800
    assert frag == pytest.approx(0.5 * 800 + 0.3 * 200 + 0.2 * 1800)


def test_a_shape_that_lacks_cpu_makes_all_idle_gpu_fragment():
    mix = WorkloadMix((Shape(8_000, 500, 1),), (1.0,))
    assert node_fragmentation(node([1000, 1000], cpu_free=4_000), mix) == pytest.approx(2000)


def test_a_shape_needing_another_model_makes_all_idle_gpu_fragment():
    mix = WorkloadMix((Shape(0, 500, 1, frozenset({"V100"})),), (1.0,))
    assert node_fragmentation(node([1000, 300]), mix) == pytest.approx(1300)


def test_multi_gpu_shape_counts_partly_used_cards_as_fragment():
    mix = WorkloadMix((Shape(0, 1000, 2),), (1.0,))
    assert node_fragmentation(node([1000, 1000, 400]), mix) == pytest.approx(400)
    assert node_fragmentation(node([1000, 400, 400]), mix) == pytest.approx(1800)


def test_vectorised_model_agrees_with_the_reference():
    # given random node states over two models and a mix with a model constraint
    rng = np.random.default_rng(7)
    mix = WorkloadMix(
        (
            Shape(2_000, 1000, 1),
            Shape(6_000, 450, 1),
            Shape(0, 1000, 4),
            Shape(1_000, 0, 0),
            Shape(0, 300, 1, frozenset({"T4"})),
        ),
        (0.3, 0.3, 0.1, 0.2, 0.1),
    )
    states = [
        node(
            rng.integers(0, 11, size=4) * 100,
            model=str(rng.choice(["A100", "T4"])),
            cpu_free=int(rng.integers(0, 9_000)),
        )
        for _ in range(50)
    ]
    models = ["A100", "T4"]
    # when
    batch = FragmentationModel(mix, models).batch(
        np.array([n.free_cpu_milli for n in states]),
        np.array([[g.free_milli for g in n.gpus] for n in states]),
        np.array([[models.index(g.model) for g in n.gpus] for n in states]),
    )
    # then
    assert batch == pytest.approx([node_fragmentation(n, mix) for n in states])


def test_workload_mix_keeps_the_most_popular_shapes_and_renormalises():
    # given 6 whole-card, 3 half-card and 1 odd request
    requests = (
        [RequestSpec(i, 1000, cpu_milli=4_000) for i in range(6)]
        + [RequestSpec(10 + i, 500, cpu_milli=2_000) for i in range(3)]
        + [RequestSpec(99, 130, cpu_milli=1_000)]
    )
    # when covering 90 %
    mix = WorkloadMix.from_requests(requests, coverage=0.9)
    # then the odd one is dropped and weights sum to one
    assert mix.shapes == (Shape(4_000, 1000, 1), Shape(2_000, 500, 1))
    assert mix.weights == pytest.approx((6 / 9, 3 / 9))


def test_empty_workload_mix_means_no_fragmentation():
    assert node_fragmentation(node([300, 1000]), WorkloadMix.from_requests([])) == 0


def test_host_aware_fragmentation_counts_cards_the_free_cpu_cannot_feed():
    # given two whole cards but CPU for only one more 4-core whole-card request
    mix = WorkloadMix((Shape(4_000, 1000, 1),), (1.0,))
    starved = node([1000, 1000], cpu_free=6_000)
    # then FGD sees both cards usable; host-aware sees one stranded
    assert node_fragmentation(starved, mix) == 0
    assert node_fragmentation(starved, mix, host_aware=True) == pytest.approx(1000)


def test_host_aware_fragmentation_also_counts_memory():
    mix = WorkloadMix((Shape(0, 500, 1),), (1.0,), memory_mib=(40_000.0,))
    gpus = [GpuState(i, "A100", 40_960) for i in range(3)]
    short_of_memory = NodeState("n", "default", 32_000, 65_536, gpus, free_memory_mib=50_000)
    # room for one 500-milli request: only the roomiest card counts as usable
    assert node_fragmentation(short_of_memory, mix, host_aware=True) == pytest.approx(2000)


def test_vectorised_host_aware_model_agrees_with_the_reference():
    # given random node states, some mixing two models on one node, and a mix with memory
    rng = np.random.default_rng(11)
    mix, models = MIX_WITH_MEMORY, MODELS
    states = []
    for _ in range(80):
        kinds = rng.choice(models, size=4) if rng.random() < 0.3 else [str(rng.choice(models))] * 4
        gpus = [
            GpuState(i, str(m), 40_960, free_milli=int(f))
            for i, (m, f) in enumerate(zip(kinds, rng.integers(0, 11, size=4) * 100, strict=True))
        ]
        states.append(
            NodeState(
                "n",
                "default",
                32_000,
                65_536,
                gpus,
                free_cpu_milli=int(rng.integers(0, 20_000)),
                free_memory_mib=int(rng.integers(0, 50_000)),
            )
        )
    model = FragmentationModel(mix, models, host_aware=True)
    # when
    batch = model.batch(
        np.array([n.free_cpu_milli for n in states]),
        np.array([[g.free_milli for g in n.gpus] for n in states]),
        np.array([[models.index(g.model) for g in n.gpus] for n in states]),
        np.array([n.free_memory_mib for n in states]),
    )
    # then
    assert batch == pytest.approx([node_fragmentation(n, mix, host_aware=True) for n in states])


def test_workload_mix_records_mean_memory_and_every_gang():
    requests = [RequestSpec(i, 1000, cpu_milli=4_000, memory_mib=1_000 * (i + 1)) for i in range(9)] + [
        RequestSpec(99, 1000, 8, cpu_milli=64_000, memory_mib=262_144)
    ]
    mix = WorkloadMix.from_requests(requests, coverage=0.9)
    # the gang is too rare for the mix, yet remembered with its memory
    assert mix.shapes == (Shape(4_000, 1000, 1),)
    assert mix.memory_mib == pytest.approx((5_000.0,))
    assert mix.gangs == ((Shape(64_000, 1000, 8), 262_144),)


def test_workload_mix_records_demand_pinned_to_models_and_cpu_per_gpu():
    requests = [
        RequestSpec(1, 1000, 2, cpu_milli=8_000, models=frozenset({"T4"})),
        RequestSpec(2, 500, 1, cpu_milli=4_000, models=frozenset({"A10", "T4"})),
        RequestSpec(3, 500, 1, cpu_milli=4_000),
        RequestSpec(4, 0, 0, cpu_milli=16_000),
    ]
    mix = WorkloadMix.from_requests(requests)
    # 3,000 milli-GPU asked in all: 2,000 pinned to T4, 500 to A10 or T4; 32 cores over 3,000 milli
    assert mix.pinned == (
        (frozenset({"A10", "T4"}), pytest.approx(500 / 3000)),
        (frozenset({"T4"}), pytest.approx(2 / 3)),
    )
    assert mix.cpu_per_gpu == pytest.approx(32_000 / 3_000)
