"""Replay the Alibaba GPU trace the way the FGD paper's simulator does, and compare policies.

Method (hkust-adsl/kubernetes-scheduler-simulator, "tune ratio 1.3", seeds 42..51):
pods sorted by name then shuffled with the seed; then pods drawn with replacement
from the original list are appended until the next one would push the total GPU
request past 1.3 x cluster GPUs; node order is shuffled with the same seed. Each
pod is tried once, in order: no queue, no departures. After every pod we record
arrived GPU (sum of requests so far) and allocated GPU, in % of capacity. The
curve at x % arrived is the mean allocation over the pods whose arrived % rounds
to x, as the simulator's analysis does. The typical-shape mix for fgd policies
comes from the original (un-inflated) pod list. The first failure is the arrived % at the
first pod that could not be placed (and at the first multi-GPU pod), mean over the seeds that had
one ("-" if none failed).

``--bound`` adds, at 95 and 100 % arrived, the floor that no packing of the same pods, online or
offline, goes below (``bench.packing_bound``: a MILP relaxation solved with HiGHS, at most
``--bound-time-limit`` seconds a solve); the floor for packings that also place every CPU-only
pod, as the policies here do while they can; and each policy's distance to both. With
``--packing-time-limit S``, a real packing from the solver too (S seconds a level), to show how
tight the floors are: the best packing lies between.

``--consolidate 0 1 2 4``: when a pod fails to place, up to K moves of pods already placed may make
room for it (``scheduler_app.core.consolidation``: the fewest moves, any placed pod may move); a
table gives each K's unallocated GPU % at 95 and 100 % arrived and the moves made (these replays stop
just past 100 % arrived).

Several workloads in one call: ``--pods A.csv B.csv`` and/or ``--variants default cpu-x2 spec-33``
(``bench.variants``; each variant is built with the replay's seed, so seeds also vary the draw).

    python -m bench.trace_replay --seeds 42-51 --policies first-fit best-fit fgd fgd-plus
    python -m bench.trace_replay --variants all --seeds 42-44 --policies best-fit fgd fgd-plus
    python -m bench.trace_replay --seeds 42-44 --bound
    python -m bench.trace_replay --variants all --seeds 42-44 --policies fgd-plus --consolidate 0 1 2 4
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler_app.core.cluster import MILLI_PER_GPU, NodeState, Placement, RequestSpec
from scheduler_app.core.consolidation import Plan, Resident, fragmented, plan_moves
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import DEFAULT_POLICY, POLICIES, Placer

from .packing_bound import max_placed, offline_packing
from .trace import BASELINES, DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
from .variants import VARIANTS, Variant, build_variant

TUNE_RATIO = 1.3
CURVE_POINTS = range(0, 131)
REPORT_POINTS = (75, 80, 85, 90, 95, 100, 105, 110, 115, 120, 125, 130)
BOUND_POINTS = (95, 100)
CONSOLIDATION_STOP = 101.5  # arrived %: past the last sample the curve's point at 100 % averages


def arrival_order(pods: list[RequestSpec], capacity_milli: int, seed: int) -> list[RequestSpec]:
    """The shuffled trace, inflated with pods drawn with replacement up to TUNE_RATIO x capacity."""
    rng = np.random.default_rng(seed)
    by_name = sorted(pods, key=lambda p: str(p.id))
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    total = sum(p.total_milli() for p in order)
    target = TUNE_RATIO * capacity_milli
    while total < target:
        pod = by_name[int(rng.integers(len(by_name)))]
        if total + pod.total_milli() > target:
            break
        order.append(pod)
        total += pod.total_milli()
    return order


def shuffled_nodes(nodes: list[NodeState], seed: int) -> list[NodeState]:
    rng = np.random.default_rng(seed + 1_000_003)
    by_name = sorted(nodes, key=lambda n: n.name)
    return [by_name[i] for i in rng.permutation(len(by_name))]


@dataclass(frozen=True)
class Result:
    """One replay: allocated GPU % of capacity at each arrived % (0..130), and where pods first failed
    (arrived %, None if none did): any pod, a multi-GPU pod, a CPU-only pod."""

    curve: dict[int, float]
    first_failure: float | None
    first_gang_failure: float | None
    first_cpu_only_failure: float | None = None
    moves: int = 0  # with consolidation: placed pods moved, and pods placed thanks to moves
    consolidated: int = 0


def load_workload(pods: Path | Variant, nodes: list[NodeState], seed: int) -> list[RequestSpec]:
    """A pod file, or a variant of the default pod list built with the seed."""
    if isinstance(pods, Variant):
        return build_variant(load_pods(DEFAULT_PODS), nodes, pods, seed)
    return load_pods(pods)


def replay(
    nodes_file: Path, pods_source: Path | Variant, policy: str, seed: int, consolidate: int | None = None
) -> Result:
    """One policy and seed on one workload (a pod file or a variant); `consolidate`: K moves at most to
    place a pod that fails (0: none; the replay then stops past 100 % arrived too)."""
    nodes = load_nodes(nodes_file)
    pods = load_workload(pods_source, nodes, seed)
    nodes = shuffled_nodes(nodes, seed)
    capacity = sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU
    placer = Placer(nodes, policy, WorkloadMix.from_requests(pods))
    arrived = used = moves = consolidated = 0
    first = first_gang = first_cpu_only = None
    samples: list[tuple[float, float]] = []
    residents: list[Resident] = []
    for pod in arrival_order(pods, capacity, seed):
        arrived += pod.total_milli()
        if consolidate is not None and 100 * arrived / capacity > CONSOLIDATION_STOP:
            break
        placement = placer.place(pod)
        plan = None
        if placement is None and consolidate and fragmented(placer, pod):
            plan = plan_moves(placer, pod, residents, consolidate)
        if plan is not None:
            placement = carry_out(placer, pod, residents, plan)
            moves += len(plan.moves)
            consolidated += 1
        if placement is not None:
            used += pod.total_milli()
            if consolidate:
                residents.append(Resident(pod, placement))
        else:
            first = 100 * arrived / capacity if first is None else first
            if pod.num_gpus > 1 and first_gang is None:
                first_gang = 100 * arrived / capacity
            if not pod.num_gpus and first_cpu_only is None:
                first_cpu_only = 100 * arrived / capacity
        samples.append((100 * arrived / capacity, 100 * used / capacity))
    return Result(discrete_curve(samples), first, first_gang, first_cpu_only, moves, consolidated)


def carry_out(placer: Placer, pod: RequestSpec, residents: list[Resident], plan: Plan) -> Placement:
    """Make the plan's moves and place the pod, as the planner checked them; the pod's placement."""
    for move in plan.moves:
        placer.release(residents[move.resident].request, residents[move.resident].placement)
    placer.apply(pod, plan.placement)
    for move in plan.moves:
        placer.apply(residents[move.resident].request, move.to)
        residents[move.resident] = Resident(residents[move.resident].request, move.to)
    return plan.placement


def discrete_curve(samples: list[tuple[float, float]]) -> dict[int, float]:
    """Mean allocated % per rounded arrived %, falling back to a +-1 window (the simulator's merge)."""
    arrived = np.array([a for a, _ in samples])
    allocated = np.array([b for _, b in samples])
    curve = {}
    for x in CURVE_POINTS:
        hit = _bin(arrived, x)
        if hit.any():
            curve[x] = float(allocated[hit].mean())
    return curve


def _bin(arrived: np.ndarray, x: int) -> np.ndarray:
    """Which samples (arrived % after each pod) the curve averages at x % arrived."""
    rounded = np.round(arrived)
    hit = rounded == x
    return hit if hit.any() else (rounded >= x - 1) & (rounded <= x + 1)


@dataclass(frozen=True)
class Bound:
    """Floors under the curve at one arrived % (``bench.packing_bound``): the unallocated GPU % no
    packing of the pods arrived by then goes below, and the one for packings that also place every
    CPU-only pod arrived by `start` (None if none can), with the solver's largest gap and time.
    `start` is the arrived % of the first sample the curve averages there. `packed`: at the bin's
    last sample, a real packing from the solver of those CPU-only pods and the GPU pods arrived by
    then (``offline_packing``) and the floor for the same pods, as (floor, packing's unallocated %);
    the optimum for those pods lies between. None if not asked or no packing placed them all."""

    unallocated: float
    with_cpu_only: float | None
    start: float
    gap: float
    seconds: float
    packed: tuple[float, float] | None = None


def bound(
    nodes_file: Path,
    pods_source: Path | Variant,
    seed: int,
    x: int,
    time_limit_s: float,
    packing_time_limit_s: float = 0.0,
) -> Bound:
    """The curve at x % arrived averages allocated % over a bin of samples; each is at most what had
    arrived then and at most what a packing of the pods arrived by then places, which is at most
    max_placed() of the GPU pods arrived by the bin's last sample; where the packing must also place
    the CPU-only pods, those arrived by the bin's first sample. So the mean over the bin of those
    minima bounds the curve from above."""
    nodes = load_nodes(nodes_file)
    pods = load_workload(pods_source, nodes, seed)
    capacity = sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU
    order = arrival_order(pods, capacity, seed)
    arrived = np.cumsum([p.total_milli() for p in order])
    hit = _bin(100 * arrived / capacity, x)
    first, last = (int(i) for i in np.flatnonzero(hit)[[0, -1]])
    free = max_placed(nodes, order[: last + 1], time_limit_s)
    cpu_only = [p for p in order[: first + 1] if not p.num_gpus]
    placing = max_placed(nodes, order[: last + 1], time_limit_s, required=cpu_only)
    solves = [free] + ([placing] if placing else [])
    packed = None
    if packing_time_limit_s > 0:
        gpu_pods = [p for p in order[: last + 1] if p.num_gpus]
        placed = offline_packing(nodes, gpu_pods, packing_time_limit_s, required=cpu_only)
        if placed and placing:
            packed = (100 - 100 * placing.upper / capacity, 100 - 100 * placed / capacity)

    def floor(solved) -> float:
        return 100 - 100 * float(np.minimum(arrived[hit], solved.upper).mean()) / capacity

    return Bound(
        floor(free),
        floor(placing) if placing else None,
        100 * float(arrived[first]) / capacity,
        max(s.gap for s in solves),
        sum(s.seconds for s in solves),
        packed,
    )


def published() -> dict[str, dict[int, list[float]]]:
    """Published allocation curves per policy: {policy: {arrived %: [allocated % per seed]}}."""
    out: dict[str, dict[int, list[float]]] = {}
    if not BASELINES.exists():
        return out
    with open(BASELINES, newline="") as f:
        for row in csv.DictReader(f):
            if row["workload"] != "openb_pod_list_default":
                continue
            curve = out.setdefault(row["sc_policy"], {})
            for x in CURVE_POINTS:
                if row.get(str(x)):
                    curve.setdefault(x, []).append(float(row[str(x)]))
    return out


def _fmt(values: list[float]) -> str:
    unallocated = [100 - v for v in values]
    spread = statistics.stdev(unallocated) if len(unallocated) > 1 else 0.0
    return f"{statistics.mean(unallocated):5.2f}±{spread:4.2f}"


def _fmt_failure(values: list[float | None]) -> str:
    """Mean arrived % at the first failure over the seeds that had one, with how many did if not all."""
    failed = [v for v in values if v is not None]
    if not failed:
        return "-"
    text = f"{statistics.mean(failed):.1f}"
    return text if len(failed) == len(values) else f"{text} ({len(failed)}/{len(values)})"


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def parse_variants(text: str) -> list[Variant]:
    return list(VARIANTS) if text == "all" else [Variant.parse(text)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, nargs="*", default=None, help="pod CSVs (default: the trace's)")
    parser.add_argument(
        "--variants", nargs="*", default=[], help="bench.variants names (cpu-x2, spec-33, ...) or all"
    )
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument("--policies", nargs="+", default=["first-fit", "best-fit", "fgd", DEFAULT_POLICY])
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument(
        "--bound", action="store_true", help="also the floor no packing goes below, at 95 and 100 %% arrived"
    )
    parser.add_argument("--bound-time-limit", type=float, default=60.0, help="seconds per solve (default 60)")
    parser.add_argument(
        "--packing-time-limit",
        type=float,
        default=0.0,
        help="with --bound: seconds a level for a packing from the solver, to show how tight (default: none)",
    )
    parser.add_argument(
        "--consolidate",
        type=int,
        nargs="+",
        metavar="K",
        help="instead of the curves: each K's unallocated GPU %% at 95 and 100 %% arrived, K moves at most",
    )
    args = parser.parse_args()
    if args.consolidate and min(args.consolidate) < 0:
        parser.error("--consolidate takes K >= 0")
    unknown = set(args.policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; choose from {sorted(POLICIES)}")
    try:
        variants = [v for text in args.variants for v in parse_variants(text)]
    except ValueError as error:
        parser.error(str(error))
    workloads: list[Path | Variant] = [*(args.pods or ([] if variants else [DEFAULT_PODS])), *variants]
    if args.consolidate:
        print_consolidation(args, workloads)
        return

    started = time.perf_counter()
    runs = [(w, p, s) for w in workloads for p in args.policies for s in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {run: pool.submit(replay, args.nodes, *run) for run in runs}
        solves = (
            [(w, s, x) for w in workloads for s in args.seeds for x in BOUND_POINTS] if args.bound else []
        )
        bound_futures = {
            solve: pool.submit(bound, args.nodes, *solve, args.bound_time_limit, args.packing_time_limit)
            for solve in solves
        }
        results = {run: f.result() for run, f in futures.items()}
        bounds = {solve: f.result() for solve, f in bound_futures.items()}
    elapsed = time.perf_counter() - started

    seeds = f"{args.seeds[0]}..{args.seeds[-1]}"
    print(f"nodes={args.nodes.name} seeds={seeds} ({elapsed:.0f}s)")
    for workload in workloads:
        name = workload.name
        print(f"\n{name}: unallocated GPU % of capacity (mean±stdev over seeds) at arrived %;")
        print("first failure (arrived %, mean over seeds that had one): any pod, multi-GPU pod")
        header = "".join(f"{x:>12}" for x in REPORT_POINTS)
        print(f"{'policy':<22}{header}{'1st fail':>12}{'1st gang':>12}")
        for policy in args.policies:
            mine = [results[workload, policy, s] for s in args.seeds]
            cells = [_fmt([r.curve[x] for r in mine if x in r.curve]) for x in REPORT_POINTS]
            cells += [_fmt_failure([r.first_failure for r in mine])]
            cells += [_fmt_failure([r.first_gang_failure for r in mine])]
            print(f"{policy:<22}" + "".join(f"{c:>12}" for c in cells))
        if isinstance(workload, Path) and workload.resolve() == DEFAULT_PODS.resolve():
            for name, curve in published().items():
                cells = [_fmt(curve[x]) if x in curve else "-" for x in REPORT_POINTS]
                print(f"{'published ' + name:<22}" + "".join(f"{c:>12}" for c in cells))
        if args.bound:
            _print_bound(workload, args.policies, args.seeds, results, bounds)


def print_consolidation(args, workloads: list[Path | Variant]) -> None:
    started = time.perf_counter()
    runs = [
        (w, p, s, k) for w in workloads for p in args.policies for k in args.consolidate for s in args.seeds
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {run: pool.submit(replay, args.nodes, *run) for run in runs}
        results = {run: f.result() for run, f in futures.items()}
    elapsed = time.perf_counter() - started
    print(f"nodes={args.nodes.name} seeds={args.seeds[0]}..{args.seeds[-1]} ({elapsed:.0f}s)")
    for workload in workloads:
        print(f"\n{workload.name}: unallocated GPU % at 95 and 100 % arrived (mean±stdev over seeds) with up")
        print("to K moves of placed pods to place one that fails; pods placed thanks to moves, moves (mean)")
        print(f"{'policy':<12}{'K':>3}{'95 %':>12}{'100 %':>12}{'placed':>9}{'moves':>8}")
        for policy in args.policies:
            for k in args.consolidate:
                mine = [results[workload, policy, s, k] for s in args.seeds]
                unallocated = "".join(
                    f"{_fmt([r.curve[x] for r in mine if x in r.curve]):>12}" for x in BOUND_POINTS
                )
                placed = statistics.mean(r.consolidated for r in mine)
                moved = statistics.mean(r.moves for r in mine)
                print(f"{policy:<12}{k:>3}{unallocated}{placed:>9.1f}{moved:>8.1f}")


def _points(values: list[float]) -> str:
    """The mean to two places, a floor's rounding error shown as 0.00, not -0.00."""
    return f"{round(statistics.mean(values), 2) + 0.0:5.2f}"


def _print_bound(workload, policies, seeds, results, bounds) -> None:
    """The floors' rows, then each policy's distance to them (the seed's figure less the seed's floor;
    to the second only where the policy placed every CPU-only pod arrived by the bin's start)."""
    mine = {x: [bounds[workload, s, x] for s in seeds] for x in BOUND_POINTS}
    for label, of in (
        ("floor", lambda b: b.unallocated),
        ("floor, CPU-only placed", lambda b: b.with_cpu_only),
    ):
        cells = []
        for x in REPORT_POINTS:
            values = [of(b) for b in mine.get(x, [])]
            cells.append(_fmt([100 - v for v in values]) if values and None not in values else "-")
        print(f"{label:<22}" + "".join(f"{c:>12}" for c in cells))
    if all(b.packed is not None for bs in mine.values() for b in bs):
        print("at the last pod each floor counts, the floor and a real packing from the solver:")
        for label, i in (("  floor", 0), ("  solver packing", 1)):
            cells = [_fmt([100 - b.packed[i] for b in mine[x]]) if x in mine else "-" for x in REPORT_POINTS]
            print(f"{label:<22}" + "".join(f"{c:>12}" for c in cells))
    gap = max(b.gap for bs in mine.values() for b in bs)
    seconds = max(b.seconds for bs in mine.values() for b in bs)
    print(f"distance to the floors, points (solver gap <= {100 * gap:.3f} %, <= {seconds:.0f} s a level)")
    for policy in policies:
        cells = []
        for x in BOUND_POINTS:
            pairs = [(results[workload, policy, s], bounds[workload, s, x]) for s in seeds]
            above = [100 - r.curve[x] - b.unallocated for r, b in pairs]
            placed_all = [
                100 - r.curve[x] - b.with_cpu_only
                for r, b in pairs
                if b.with_cpu_only is not None
                and (r.first_cpu_only_failure is None or r.first_cpu_only_failure > b.start)
            ]
            second = f"{_points(placed_all)}" if len(placed_all) == len(pairs) else "    -"
            cells.append(f"{x} %: {_points(above)} / {second}")
        print(f"  {policy:<20}" + "   ".join(cells))


if __name__ == "__main__":
    main()
