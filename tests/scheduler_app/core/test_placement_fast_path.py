"""The placement engine's shortcuts decide exactly as the plain computation does.

Shortcuts under test: the compiled fragmentation of a node state (the same bits in any batch), alike
cards scored once, a Placer's per-node and per-state score caches. The trace replays in
test_decisions_pinned.py pin whole runs (seed 42 and more seeds) to decisions recorded before them.
"""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import (
    FragmentationModel,
    WorkloadMix,
    card_increases,
    current_fragmentation,
    node_fragmentation,
)
from scheduler_app.core.placement import Placer
from tests.scheduler_app.core.fragmentation_cases import MIX_WITH_MEMORY, MODELS, random_states


def test_a_node_states_fragmentation_has_the_same_bits_alone_as_in_any_batch():
    # given random node states and a mix with a model constraint, a gang, a CPU-only shape and memory
    cpu, gpu, model, mem = random_states(np.random.default_rng(3), 400)
    fragmentation = FragmentationModel(MIX_WITH_MEMORY, MODELS, host_aware=True)
    # when scored as one batch and each alone
    plain, host = fragmentation.batch_pair(cpu, gpu, model, mem)
    alone = [
        fragmentation.batch_pair(cpu[k : k + 1], gpu[k : k + 1], model[k : k + 1], mem[k : k + 1])
        for k in range(400)
    ]
    # then the same bits, not just close (equal increases must tie), and as the reference counts
    assert np.array_equal(plain, [p[0] for p, _ in alone])
    assert np.array_equal(host, [h[0] for _, h in alone])
    reference = [
        node_fragmentation(
            NodeState(
                "n",
                "default",
                32_000,
                65_536,
                [
                    GpuState(c, MODELS[model[k, c]], 40_960, free_milli=int(gpu[k, c]))
                    for c in range(8)
                    if model[k, c] >= 0
                ],
                free_cpu_milli=int(cpu[k]),
                free_memory_mib=int(mem[k]),
            ),
            MIX_WITH_MEMORY,
            host_aware=True,
        )
        for k in range(400)
    ]
    assert host == pytest.approx(reference, abs=1e-4)  # (the weights are rounded to 2**-28)
    assert (model[:, 0] != model[:, 1]).any() and (host > plain).any()


def test_card_increases_score_each_distinct_card_state_once_as_the_batch_scores_it():
    # given random nodes and a one-card request that fits their cards with at least 300 free milli
    cpu, gpu, model, mem = random_states(np.random.default_rng(5), 60)
    cpu, mem = cpu + 1_000, mem + 1_000
    fragmentation = FragmentationModel(MIX_WITH_MEMORY, MODELS, host_aware=True)
    rows = np.arange(0, 60, 2)
    cards = gpu[rows] >= 300
    known, cached_plain, cached_host = np.zeros(60, dtype=bool), np.zeros(60), np.zeros(60)
    before = current_fragmentation(
        rows, np.arange(60), cpu, mem, gpu, model, fragmentation.kernel(), known, cached_plain, cached_host
    )
    # when
    picked = np.full((3, cards.size), -1, dtype=np.int64)
    plain, host = card_increases(
        rows, cards, (1_000, 1_000, 300), cpu, mem, gpu, model, fragmentation.kernel(), before, picked
    )
    position, card, free = picked[:, : len(plain)]
    # then every usable card is a candidate unless a lower card of its node has its free share and model
    expected = [
        (i, c)
        for i, j in enumerate(rows)
        for c in range(8)
        if cards[i, c]
        and not any(cards[i, d] and (gpu[j, d], model[j, d]) == (gpu[j, c], model[j, c]) for d in range(c))
    ]
    assert list(zip(position.tolist(), card.tolist(), strict=True)) == expected
    assert len(expected) < cards.sum()
    # ...and its increase is the batch's after-state minus the batch's state now, to the bit
    at = rows[position]
    after = gpu[at].copy()
    after[np.arange(len(at)), card] -= 300
    now_plain, now_host = fragmentation.batch_pair(cpu[at], gpu[at], model[at], mem[at])
    after_plain, after_host = fragmentation.batch_pair(cpu[at] - 1_000, after, model[at], mem[at] - 1_000)
    assert np.array_equal(free, gpu[at, card])
    assert np.array_equal(plain, after_plain - now_plain)
    assert np.array_equal(host, after_host - now_host)
    assert known[rows].all() and not known[rows + 1].any()


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
