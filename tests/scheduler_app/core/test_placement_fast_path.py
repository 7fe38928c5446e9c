"""The placement engine's shortcuts decide exactly as the plain computation does.

Shortcuts under test: fragmentation read from the sorted cards' running sums (nodes of one model),
a Placer's per-node and per-state score caches, alike cards scored once. The trace replays in
test_decisions_pinned.py pin whole runs (seed 42 and more seeds) to decisions recorded before them.
"""

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import FragmentationModel, Shape, WorkloadMix
from scheduler_app.core.placement import Placer

MODELS = ["A100", "T4"]


def per_card(model: FragmentationModel) -> FragmentationModel:
    """The same model made to count every node card by card (the path for nodes mixing models)."""
    plain = copy.copy(model)
    plain.shares_positive = False
    return plain


def test_fragmentation_from_running_sums_equals_the_card_by_card_count():
    # given random node states (some mixing models, some with missing card slots) and a mix with a
    # model constraint, a gang, a CPU-only shape and host memory
    rng = np.random.default_rng(3)
    mix = WorkloadMix(
        (
            Shape(2_000, 1000, 1),
            Shape(6_000, 450, 1),
            Shape(3_000, 1000, 2),
            Shape(1_000, 0, 0),
            Shape(0, 300, 1, frozenset({"T4"})),
        ),
        (0.3, 0.3, 0.1, 0.2, 0.1),
        (8_000.0, 0.0, 12_000.0, 4_000.0, 2_000.0),
    )
    k = 400
    gpu = rng.integers(0, 11, size=(k, 8)) * 100
    model = np.where(
        rng.random((k, 1)) < 0.7, rng.integers(0, 2, size=(k, 1)), rng.integers(0, 2, size=(k, 8))
    )
    cards = rng.integers(1, 9, size=k)
    missing = np.arange(8)[None, :] >= cards[:, None]
    gpu[missing], model[missing] = 0, -1
    cpu, mem = rng.integers(0, 20_000, size=k), rng.integers(0, 50_000, size=k)
    fast = FragmentationModel(mix, MODELS, host_aware=True)
    # when
    plain, host = fast.batch_pair(cpu, gpu, model, mem)
    reference_plain, reference_host = per_card(fast).batch_pair(cpu, gpu, model, mem)
    # then: the same bits, not just close
    assert (missing.any(axis=1) & (model[:, 0] >= 0)).any() and (plain > 0).any()
    assert np.array_equal(plain, reference_plain)
    assert np.array_equal(host, reference_host)


node_specs = st.lists(
    st.tuples(
        st.integers(1, 8),  # cards
        st.sampled_from(["A100", "T4", "mixed"]),
        st.sampled_from([8_000, 32_000, 96_000]),  # CPU milli
        st.sampled_from([64_000, 256_000]),  # memory MiB
    ),
    min_size=2,
    max_size=10,
)
request_specs = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 1, 1, 1, 2, 4]),  # cards
        st.sampled_from([100, 250, 300, 500, 1000]),  # milli per card (whole cards for gangs)
        st.sampled_from([0, 2_000, 8_000]),  # CPU milli
        st.sampled_from([0, 4_000, 32_000]),  # memory MiB
        st.sampled_from([frozenset(), frozenset(), frozenset({"T4"})]),
        st.sampled_from(["training", "inference"]),
        st.booleans(),  # release an earlier placement after this one
    ),
    min_size=5,
    max_size=50,
)


def make_nodes(specs) -> list[NodeState]:
    return [
        NodeState(
            f"n{i}",
            "default",
            cpu,
            memory,
            [
                GpuState(g, (MODELS[g % 2] if kind == "mixed" else kind), 40960 if g % 2 else 81920)
                for g in range(cards)
            ],
        )
        for i, (cards, kind, cpu, memory) in enumerate(specs)
    ]


def make_requests(specs) -> list[tuple[RequestSpec, bool]]:
    return [
        (
            RequestSpec(
                i,
                MILLI_PER_GPU if gpus > 1 else milli,
                gpus,
                cpu,
                memory,
                models=models if gpus else frozenset(),
                task_type=task,
            ),
            release,
        )
        for i, (gpus, milli, cpu, memory, models, task, release) in enumerate(specs)
    ]


@settings(max_examples=80, deadline=None)
@given(
    nodes=node_specs,
    stream=request_specs,
    policy=st.sampled_from(["fgd-plus", "fgd"]),
)
def test_a_placer_over_a_stream_decides_as_a_fresh_one_for_each_request(nodes, stream, policy):
    # given a small random cluster and a stream of requests, some released again later
    nodes = make_nodes(nodes)
    requests = make_requests(stream)
    mix = WorkloadMix.from_requests(r for r, _ in requests)
    placer = Placer(nodes, policy, mix)
    running = []
    for request, release in requests:
        # when one Placer (caches warm from every earlier request) and a fresh one both choose
        reference = Placer(copy.deepcopy(nodes), policy, mix).choose(request)
        placement = placer.place(request)
        # then they choose the same node and cards
        assert placement == reference
        if placement is not None:
            running.append((request, placement))
        if release and running:
            placer.release(*running.pop(0))
