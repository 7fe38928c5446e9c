"""The placement policy and the pass decide exactly as recorded: speed work must not change a decision.

The records (data/*.json.gz) were made before the placement engine and the pass were made faster,
once fragmentation sums no longer depended on the batch a node state was scored in (before that,
exact ties were broken by rounding noise, which no cache can reproduce). The replays of seeds 7 and
2026 were recorded with the code before the running-sum fragmentation and the alike-card shortcut
(issue 11, placement speed). The fgd-plus replays were recorded again for one change meant to alter
decisions: CPU-only requests keep scarce gangs' hosts and take the tightest CPU (issue 11, variants).
The two variant replays (models pinned, CPU-heavy) were recorded with the code before the second
placement speed round (issue 11); the CPU-heavy one again when CPU-only requests began to rank by
the cards they strand where CPU runs out before GPU (issue 11, held-out variants).
Rewrite them only for such a change:

    PIN_DECISIONS_RECORD=1 pytest tests/scheduler_app/core/test_decisions_pinned.py
"""

import gzip
import json
import os
import random
from pathlib import Path

import pytest

from bench.trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
from bench.trace_replay import arrival_order, shuffled_nodes
from bench.variants import Variant, build_variant
from scheduler_app.core.cluster import MILLI_PER_GPU, GpuState, NodeState, RequestSpec
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import DEFAULT_POLICY, Placer, apply_placement
from scheduler_app.core.queueing import RunningAllocation, TeamQuota, plan_pass

DATA = Path(__file__).parent / "data"
RECORD = os.environ.get("PIN_DECISIONS_RECORD") == "1"


def check(name: str, decisions: list) -> None:
    """Compare with the record (or write it when recording); a mismatch names the first that differs."""
    path = DATA / f"{name}.json.gz"
    if RECORD:
        text = json.dumps(decisions, separators=(",", ":")).replace("],[", "],\n[")
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
        return
    recorded = json.loads(gzip.decompress(path.read_bytes()))
    first = next((i for i, (a, b) in enumerate(zip(decisions, recorded, strict=False)) if a != b), None)
    assert first is None, f"decision {first} differs: {decisions[first]} != recorded {recorded[first]}"
    assert len(decisions) == len(recorded)


@pytest.mark.parametrize(
    ("policy", "seed"),
    [(DEFAULT_POLICY, 42), ("fgd", 42), (DEFAULT_POLICY, 7), (DEFAULT_POLICY, 2026), ("fgd", 7)],
)
def test_trace_replay_places_every_pod_where_it_did(policy, seed):
    # given the Alibaba trace in the seed's arrival order and node order (bench.trace_replay), every pod
    # tried once
    pods = load_pods(DEFAULT_PODS)
    nodes = shuffled_nodes(load_nodes(DEFAULT_NODES), seed)
    order = arrival_order(pods, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU, seed)
    placer = Placer(nodes, policy, WorkloadMix.from_requests(pods))
    # when
    decisions = []
    for pod in order:
        placement = placer.place(pod)
        decisions.append(None if placement is None else [placement.node, *placement.gpus])
    # then
    assert sum(d is None for d in decisions) > 100  # the replay runs well past a full cluster
    check(f"trace_replay_{policy}" + ("" if seed == 42 else f"_seed{seed}"), decisions)


@pytest.mark.parametrize("variant", ["spec-33", "cpu-x3"])
def test_variant_replay_places_every_pod_where_it_did(variant):
    # given a workload variant of the trace (bench.variants, seed 42): pods and gangs pinned to GPU
    # models on a cluster of several models, or three times the CPU-only pods
    nodes = load_nodes(DEFAULT_NODES)
    pods = build_variant(load_pods(DEFAULT_PODS), nodes, Variant.parse(variant), 42)
    nodes = shuffled_nodes(nodes, 42)
    order = arrival_order(pods, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU, 42)
    placer = Placer(nodes, DEFAULT_POLICY, WorkloadMix.from_requests(pods))
    # when
    decisions = []
    for pod in order:
        placement = placer.place(pod)
        decisions.append(None if placement is None else [placement.node, *placement.gpus])
    # then
    assert sum(d is None for d in decisions) > 100
    check(f"variant_replay_{DEFAULT_POLICY}_{variant}", decisions)


POOL_CHOICES = [
    frozenset({"a100", "h100"}),
    frozenset({"a100"}),
    frozenset({"a100-spot"}),
    frozenset({"h100"}),
    frozenset({"a100-spot", "a100", "h100"}),
]


def busy_cluster(seed: int):
    """A cluster of two on-demand pools and a spot pool, half busy, with a queue of trace shapes over
    four teams (two with quotas): starts, borrowing, reclaims, reservations and backfill all happen."""
    rng = random.Random(seed)
    shapes = [p for p in load_pods(DEFAULT_PODS) if p.num_gpus]
    nodes = [
        NodeState(f"{pool}-{i:02d}", pool, cpu, 1_024_000, [GpuState(g, model, memory) for g in range(cards)])
        for pool, count, cards, model, memory, cpu in (
            ("a100", 40, 8, "A100", 81920, 128_000),
            ("a100-spot", 16, 8, "A100", 81920, 96_000),
            ("h100", 12, 4, "H100", 40960, 64_000),
        )
        for i in range(count)
    ]
    by_name = {n.name: n for n in nodes}
    teams = ["vision", "language", "speech", "infra"]
    quotas = [TeamQuota("vision", "a100", 64_000), TeamQuota("language", "a100", 48_000)]
    quotas.append(TeamQuota("vision", "h100", 8_000))

    def spec(i: int, submitted_at: float, pools: frozenset[str] = frozenset()) -> RequestSpec:
        shape = rng.choice(shapes)
        pools = pools or rng.choice(POOL_CHOICES)
        return RequestSpec(
            i,
            shape.gpu_milli,
            shape.num_gpus,
            min(shape.cpu_milli, 32_000),
            min(shape.memory_mib, 131_072),
            models=frozenset({"H100"}) if rng.random() < 0.05 else frozenset(),
            pools=pools,
            task_type=rng.choice(["training", "inference"]),
            priority=rng.choice([0, 0, 0, 5, -5]),
            team=rng.choice(teams if submitted_at >= 1000 else teams[2:]),
            max_duration_s=rng.choice([None, 600, 3600, 6 * 3600]),
            billing_mode="spot" if pools == frozenset({"a100-spot"}) else "on-demand",
            submitted_at=submitted_at,
        )

    running = []
    placer = Placer(nodes, "best-fit")
    for i in range(500):
        request = spec(i, float(i), frozenset({"a100"}) if i < 300 else frozenset())
        placement = placer.choose(request)
        if placement is None:
            continue
        apply_placement(by_name[placement.node], request, placement)
        placer.index.sync(placer.index.row[placement.node])
        borrowed = rng.random() < 0.7
        running.append(RunningAllocation(request, placement, float(i), borrowed))
    pending = [spec(1000 + i, 1000.0 + i) for i in range(700)]
    workload = WorkloadMix.from_requests([*pending, *(a.request for a in running)])
    return nodes, pending, running, quotas, workload


def plan_decisions(plan) -> list:
    return [
        *(["start", s.request.id, s.placement.node, list(s.placement.gpus), s.borrowed] for s in plan.starts),
        *(["preempt", p.allocation.request.id, p.for_request_id] for p in plan.preemptions),
        *(["reserve", r.request_id, r.node, list(r.gpus), r.start_at, r.firm] for r in plan.reservations),
        *(["wait", w.request_id, w.cause, w.ahead, w.estimated_start] for w in plan.waiting),
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_pass_on_a_busy_cluster_decides_as_it_did(seed):
    # given a busy three-pool cluster with quotas and 700 requests waiting
    nodes, pending, running, quotas, workload = busy_cluster(seed)
    # when one pass plans
    plan = plan_pass(nodes, pending, running, quotas, 5000.0, DEFAULT_POLICY, workload=workload)
    # then it starts, reclaims, reserves and explains exactly as recorded
    assert plan.starts and plan.preemptions and plan.reservations and plan.waiting
    check(f"busy_pass_seed{seed}", plan_decisions(plan))
