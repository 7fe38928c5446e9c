"""bench.packing_bound: the floor is never above a real packing, is the optimum where the model is
exact, and counts what indivisible pods leave idle."""

import itertools
import random

import pytest

from bench.packing_bound import _arcs, max_placed, offline_packing
from bench.trace_replay import bound, replay
from scheduler_app.core.cluster import GpuState, NodeState, RequestSpec
from scheduler_app.core.placement import POLICIES, Placer


def node(name, cpu, cards, model="A100", memory=1 << 20):
    return NodeState(name, "default", cpu, memory, [GpuState(i, model, 40960) for i in range(cards)])


def pod(i, milli, num_gpus=1, cpu=0, memory=0, models=()):
    return RequestSpec(f"p{i}", milli, num_gpus, cpu, memory, models=frozenset(models))


def fits_node(n, pods):
    """Whether the pods fit together on the empty node, trying every way to put slices on cards."""
    if sum(p.cpu_milli for p in pods) > n.cpu_milli or sum(p.memory_mib for p in pods) > n.memory_mib:
        return False
    if any(p.models and n.gpus[0].model not in p.models for p in pods if p.num_gpus):
        return False
    whole = sum(p.num_gpus for p in pods if p.num_gpus and p.gpu_milli == 1000)
    slices = [p.gpu_milli for p in pods if p.num_gpus and p.gpu_milli < 1000]
    for cards in itertools.product(range(len(n.gpus)), repeat=len(slices)):
        load = [0] * len(n.gpus)
        for card, milli in zip(cards, slices, strict=True):
            load[card] += milli
        if max(load, default=0) <= 1000 and whole <= sum(1 for x in load if not x):
            return True
    return False


def brute_force(nodes, pods):
    """The most GPU milli any packing places: every pod on a node or left out."""
    best = 0
    for where in itertools.product(range(len(nodes) + 1), repeat=len(pods)):
        on = [[p for p, w in zip(pods, where, strict=True) if w == j] for j in range(len(nodes))]
        if all(fits_node(n, ps) for n, ps in zip(nodes, on, strict=True)):
            best = max(best, sum(p.total_milli() for ps in on for p in ps))
    return best


def test_two_slices_over_a_card_leave_part_of_it_idle():
    """Two 600-milli pods cannot share a card: 400 of the 1,000 milli stay idle, whatever the packer."""
    result = max_placed([node("n", 8000, 1)], [pod(1, 600), pod(2, 600)])
    assert result.upper == 600
    assert result.incumbent == 600


def test_cpu_strands_cards_and_models_are_kept():
    """Each whole-card pod takes 5 of 8 cores: one per node, so half of the two-card node stays idle;
    a pod pinned to a model that is not there places nothing."""
    nodes = [node("n", 8000, 2)]
    assert max_placed(nodes, [pod(i, 1000, cpu=5000) for i in range(2)]).upper == 1000
    assert max_placed(nodes, [pod(1, 1000, models={"H100"})]).upper == 0


def test_arc_flow_admits_every_way_to_fill_a_card():
    """Arcs of each size start where non-increasing slices reach, and end by the card's top."""
    arcs = set(_arcs([6, 3], 10))
    assert arcs == {(0, 6), (0, 3), (6, 3), (3, 3)}


@pytest.mark.parametrize("seed", range(12))
def test_bound_is_the_optimum_where_every_node_is_its_own_type(seed):
    """With distinct nodes the model forgets nothing: its bound is the brute-force optimum."""
    rng = random.Random(seed)
    nodes = [node(f"n{j}", 4000 + 1000 * j, rng.choice([1, 2]), rng.choice(["A", "B"])) for j in range(2)]
    pods = []
    for i in range(rng.randint(3, 5)):
        gpus = rng.choice([1, 1, 1, 2])
        milli = 1000 if gpus > 1 else rng.choice([300, 450, 600, 700, 1000])
        models = rng.choice([(), (), ("A",), ("B",)])
        pods.append(pod(i, milli, gpus, cpu=rng.choice([0, 1000, 2500, 3000]), models=models))
    result = max_placed(nodes, pods)
    assert result.upper == brute_force(nodes, pods)
    assert result.optimal


@pytest.mark.parametrize("seed", range(3))
def test_no_policy_places_more_than_the_bound(seed):
    """Identical nodes (where the model may overestimate) under every policy, pods in random order."""
    rng = random.Random(seed)
    shapes = [(1000, 1), (1000, 2), (810, 1), (470, 1), (320, 1), (160, 1)]
    pods = []
    for i in range(60):
        milli, gpus = rng.choice(shapes)
        pods.append(pod(i, milli, gpus, cpu=rng.choice([2000, 4000, 12000]), memory=rng.choice([0, 65536])))
    nodes = [node(f"n{j}", 32000, 4, memory=262144) for j in range(6)] + [node("m", 16000, 2, "B")]
    upper = max_placed(nodes, pods).upper
    placed = {}
    for policy in POLICIES:
        placer = Placer(
            [node(n.name, n.cpu_milli, len(n.gpus), n.gpus[0].model, n.memory_mib) for n in nodes], policy
        )
        placed[policy] = sum(p.total_milli() for p in pods if placer.place(p) is not None)
    assert max(placed.values()) <= upper < sum(p.total_milli() for p in pods)


def test_replay_prints_a_floor_under_every_policy(tmp_path):
    """bench.trace_replay.bound on a small trace in the trace's format is below each policy's curve."""
    rng = random.Random(7)
    nodes_csv = tmp_path / "nodes.csv"
    rows = [f"n{j},{rng.choice([32000, 48000])},131072,2,{rng.choice(['T4', 'P100'])}" for j in range(5)]
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(rows) + "\n")
    pods_csv = tmp_path / "pods.csv"
    shapes = [(1, 230), (1, 160), (1, 110), (1, 50), (0, 0)]  # small, so every arrived % has a sample
    lines = []
    for i in range(60):
        gpus, milli = rng.choice(shapes)
        cpu = rng.choice([1000, 5000] if gpus else [500, 2000])
        lines.append(f"p{i:03},{cpu},4096,{gpus},{milli},")
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "\n".join(lines) + "\n")
    compared = 0
    for x in (95, 100):
        floor = bound(nodes_csv, pods_csv, 42, x, 30.0)
        assert 0 < floor.unallocated < floor.with_cpu_only
        for policy in POLICIES:
            result = replay(nodes_csv, pods_csv, policy, 42)
            assert floor.unallocated <= 100 - result.curve[x] + 1e-9
            if result.first_cpu_only_failure is None or result.first_cpu_only_failure > floor.start:
                assert floor.with_cpu_only <= 100 - result.curve[x] + 1e-9
                compared += 1
    assert compared


def test_required_cpu_only_pods_take_their_cpu():
    """A CPU-only pod that must be placed leaves room for one of the two 3-core GPU pods; one that
    cannot be placed at all leaves no floor."""
    nodes = [node("n", 8000, 2)]
    gpu_pods = [pod(1, 1000, cpu=3000), pod(2, 1000, cpu=3000)]
    assert max_placed(nodes, gpu_pods).upper == 2000
    assert max_placed(nodes, gpu_pods, required=[pod(3, 0, 0, cpu=4000)]).upper == 1000
    assert max_placed(nodes, gpu_pods, required=[pod(3, 0, 0, cpu=9000)]) is None
    assert max_placed(nodes, gpu_pods, required=[pod(3, 0, 0, cpu=5000), pod(4, 0, 0, cpu=5000)]) is None


def test_the_solvers_packing_repacks_what_the_policy_got_wrong():
    """In this order a policy puts the 600 first and the 500s find no room; the search repacks the
    card with the two 500s, keeping the CPU-only pod it must place."""
    nodes = [node("n", 8000, 1)]
    pods = [pod(1, 600), pod(2, 500), pod(3, 500)]
    cpu_only = [pod(4, 0, 0, cpu=2000)]
    assert offline_packing(nodes, pods, 0.0, required=cpu_only) == 600
    assert offline_packing(nodes, pods, 5.0, required=cpu_only) == 1000
    assert offline_packing(nodes, pods, 5.0, required=[pod(5, 0, 0, cpu=9000)]) == 0


@pytest.mark.parametrize("seed", range(6))
def test_the_solvers_packing_is_real_and_under_the_floor(seed):
    """Its packing passes the card-by-card check (inside offline_packing) and places at most the
    brute-force optimum, which the floor bounds."""
    rng = random.Random(100 + seed)
    nodes = [node(f"n{j}", 6000, 2, rng.choice(["A", "B"])) for j in range(2)]
    pods = [pod(i, rng.choice([300, 450, 600, 1000]), cpu=rng.choice([0, 2000, 3000])) for i in range(5)]
    packed = offline_packing(nodes, pods, 2.0)
    assert 0 < packed <= brute_force(nodes, pods) <= max_placed(nodes, pods).upper
