"""Placements per second of the pure core on the Alibaba trace, one process.

Replays seed 42's arrival order (see trace_replay) through a Placer and times
only the placement decisions and their bookkeeping; loading, building the
index and loading the compiled functions (``placement.compiled``) are excluded. Reports the
median of --repeats runs per policy. ``--clock cpu`` counts the process's CPU time instead of
wall time: on a shared, loaded machine it leaves out the time the process waited for a core (it
still feels shared caches).

    python -m bench.placement_speed [--policies fgd-plus fgd best-fit] [--repeats 5] [--clock cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from scheduler_app.core.cluster import MILLI_PER_GPU
from scheduler_app.core.fragmentation import WorkloadMix
from scheduler_app.core.placement import DEFAULT_POLICY, Placer
from scheduler_app.core.placement.compiled import compile_all

from .trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods
from .trace_replay import arrival_order, shuffled_nodes

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def placements_per_second(
    nodes_file: Path, pods_file: Path, policy: str, seed: int = 42, clock: str = "wall"
) -> float:
    pods = load_pods(pods_file)
    nodes = shuffled_nodes(load_nodes(nodes_file), seed)
    order = arrival_order(pods, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU, seed)
    placer = Placer(nodes, policy, WorkloadMix.from_requests(pods))
    now = CLOCKS[clock]
    started = now()
    for pod in order:
        placer.place(pod)
    return len(order) / (now() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    parser.add_argument("--policies", nargs="+", default=[DEFAULT_POLICY, "fgd", "best-fit", "first-fit"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    compile_all()
    for policy in args.policies:
        runs = [
            placements_per_second(args.nodes, args.pods, policy, clock=args.clock)
            for _ in range(args.repeats)
        ]
        each = ", ".join(f"{r:.0f}" for r in runs)
        print(f"{policy:<12} median {statistics.median(runs):8.0f} placements/s  (runs: {each})")


if __name__ == "__main__":
    main()
