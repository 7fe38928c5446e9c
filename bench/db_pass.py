"""How long one database scheduling pass takes: N pending requests on N GPUs (N/8 nodes of 8 A100s).

    python -m bench.db_pass [--sizes 1000 8000] [--runs 3] [--profile 25]
                            [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench]

For each size N, builds a scratch PostgreSQL database (created if missing, emptied each
run) in bulk: N/8 nodes of 8 A100s and N pending requests whose shapes are drawn
(seeded) from the Alibaba trace's GPU pods, over four teams; then times
`run_scheduling_pass()` end to end: loading, the pure core and applying its decisions
in one transaction under row locks. Then, on the cluster that pass left (busy, the rest
still pending), it submits one request and times the pass that follows. --backlog F
seeds F x N pending requests (with F = 3 about 15,000 still wait after the first pass at
N = 8,000). Targets: at most 1 s at N = 1,000 and 5 s at N = 8,000. Prints every run and
the medians, wall clock and this process's CPU time (the database server's is not in it:
on a shared machine the CPU time moves less with the load); with --profile N, cProfile's
top N functions (cumulative) of one more full pass of each size and of the pass after a submit.
"""

import cProfile
import datetime as dt
import pstats
import random
import statistics
import time

from bench.scratch_db import (
    arguments,
    bench_user_in_teams,
    bulk_a100_nodes,
    empty_the_cluster,
    migrated_django,
)

GPUS_PER_NODE = 8
TARGET_S = {1000: 1.0, 8000: 5.0}


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000], help="pending = GPUs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions (cumulative)")
    parser.add_argument(
        "--backlog",
        type=float,
        default=1.0,
        help="pending requests per GPU (default 1); above about 2 many still wait after the first pass",
    )
    args = parser.parse_args()

    migrated_django(args.database_url)
    summary = []
    for size in args.sizes:
        full, small, full_cpu, small_cpu = [], [], [], []
        for run in range(args.runs):
            user, teams = _reset_and_seed(random.Random(args.seed + run), size, args.backlog)
            timing = _timed_pass()
            full.append(timing["seconds"])
            full_cpu.append(timing["cpu"])
            _submit_one(user, teams[0])
            after_submit = _timed_pass()
            small.append(after_submit["seconds"])
            small_cpu.append(after_submit["cpu"])
            print(
                f"N={size} run {run + 1}: pass {timing['seconds']:.2f} s ({timing['cpu']:.2f} s CPU here; "
                f"started {timing['started']}, waiting {timing['waiting']}); after one submit "
                f"{after_submit['seconds']:.2f} s ({after_submit['cpu']:.2f} s CPU here; "
                f"started {after_submit['started']})"
            )
        if args.profile:  # one more run, under the profiler: not in the medians
            user, teams = _reset_and_seed(random.Random(args.seed), size, args.backlog)
            for label in ("full pass", "pass after one submit"):
                if label != "full pass":
                    _submit_one(user, teams[0])
                profile = cProfile.Profile()
                _timed_pass(profile)
                print(f"N={size}, {label}:")
                pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
        target = TARGET_S.get(size)
        summary.append(
            f"N={size}: {round(size * args.backlog)} pending on {size} GPUs ({size // GPUS_PER_NODE} nodes): "
            f"median pass {statistics.median(full):.2f} s ({statistics.median(full_cpu):.2f} s CPU here)"
            + (f" (target <= {target:g} s)" if target else "")
            + f", median pass after one submit {statistics.median(small):.2f} s "
            f"({statistics.median(small_cpu):.2f} s CPU here)"
        )
    print("\n".join(summary))


def _reset_and_seed(rng: random.Random, size: int, backlog: float):
    """N/8 idle nodes of 8 A100s and N * backlog pending requests of trace shapes, in bulk."""
    from django.utils import timezone

    from bench.trace import load_pods
    from scheduler_app.choices import CapacityType
    from scheduler_app.models import GpuRequest, Pool
    from scheduler_app.services.requests import validated_request

    empty_the_cluster()
    pool = Pool.objects.create(name="a100", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    bulk_a100_nodes([pool] * (size // GPUS_PER_NODE), GPUS_PER_NODE)
    user, teams = bench_user_in_teams()
    shapes = [p for p in load_pods() if p.num_gpus]
    now = timezone.now()
    pending, count = [], round(size * backlog)
    for i in range(count):
        shape = rng.choice(shapes)
        pending.append(
            validated_request(
                user=user,
                team=teams[i % len(teams)],
                name=f"bench-{i}",
                task_type=rng.choice(["training", "inference"]),
                gpu_milli=shape.gpu_milli,
                num_gpus=shape.num_gpus,
                cpu_milli=min(shape.cpu_milli, 32_000),
                memory_mib=min(shape.memory_mib, 131_072),
                max_duration_s=rng.choice([600, 3600, 6 * 3600]),
                created_at=now - dt.timedelta(seconds=count - i),
            )
        )
    GpuRequest.objects.bulk_create(pending, batch_size=2000)
    return user, teams


def _submit_one(user, team) -> None:
    from scheduler_app.services.requests import submit_request

    fields = {"task_type": "training", "gpu_milli": 500, "num_gpus": 1, "max_duration_s": 600}
    submit_request(user=user, team=team, name="one-more", **fields)


def _timed_pass(profile: cProfile.Profile | None = None) -> dict:
    from scheduler_app.passes.run import run_scheduling_pass

    begin, begin_cpu = time.perf_counter(), time.process_time()
    if profile:
        profile.enable()
    result = run_scheduling_pass()
    if profile:
        profile.disable()
    return {
        "seconds": time.perf_counter() - begin,
        "cpu": time.process_time() - begin_cpu,
        "started": result.started,
        "waiting": result.waiting,
    }


if __name__ == "__main__":
    main()
