"""How long the request form's estimate takes: by default 8,000 GPUs (1,000 nodes x 8), 8,000 pending.

    python -m bench.estimate_speed [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_estimate]
                                   [--nodes 1000] [--estimates 50] [--profile 25]

Builds a scratch PostgreSQL database (created if missing, emptied each run) in
bulk: two pools (A100 on-demand, A100 spot), `--nodes` nodes of 8 cards nearly full
of running work with max durations, and one pending request per card, of mixed shapes
over four teams; runs one `run_scheduling_pass()` (it stores the state estimates
read), then times `estimate_request()` for mixed shapes (fractions, gangs, spot
with and without fallback, a named pool): validation, the stored state, the
pure core, the price. Target: under 100 ms. Prints the median and the p95, and the first
estimate apart (it loads the stored state and plans the turns, once per pass per process);
with --profile N, also the top N functions by cumulative time over the estimates (cProfile).
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
SHAPES = [(125, 1), (250, 1), (500, 1), (750, 1), (1000, 1), (1000, 2), (1000, 4), (1000, 8)]


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_estimate")
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of 8 cards; as many pending as cards")
    parser.add_argument("--estimates", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions (cumulative)")
    args = parser.parse_args()

    migrated_django(args.database_url)
    rng = random.Random(args.seed)
    user, teams = _reset_and_seed(rng, args.nodes)

    from scheduler_app.passes.estimates import estimate_request
    from scheduler_app.passes.run import run_scheduling_pass

    begin = time.perf_counter()
    result = run_scheduling_pass()
    print(
        f"setup pass: {time.perf_counter() - begin:.1f} s, started {result.started}, waiting {result.waiting}"
    )
    timings, outcomes = [], {"now": 0, "waits": 0}
    profile = cProfile.Profile() if args.profile else None
    for i in range(args.estimates):
        fields = _mixed_fields(rng, i)
        begin = time.perf_counter()
        if profile:
            profile.enable()
        estimate = estimate_request(user=user, team=teams[i % len(teams)], **fields)
        if profile:
            profile.disable()
        timings.append((time.perf_counter() - begin) * 1000)
        outcomes["now" if estimate.starts_now else "waits"] += 1
    first = timings[0]
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(0.95 * len(timings)))]
    print(f"estimates: {len(timings)} ({outcomes['now']} start now, {outcomes['waits']} wait)")
    print(f"first estimate after the pass (loads the state, plans the turns): {first:.0f} ms")
    print(
        f"estimate time: median {statistics.median(timings):.1f} ms, p95 {p95:.1f} ms "
        f"with {args.nodes * GPUS_PER_NODE} pending on {args.nodes * GPUS_PER_NODE} GPUs (target < 100 ms)"
    )
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)


def _mixed_fields(rng: random.Random, i: int) -> dict:
    milli, count = SHAPES[i % len(SHAPES)]
    fields = {"task_type": rng.choice(["training", "inference"]), "gpu_milli": milli, "num_gpus": count}
    if i % 5 == 1:
        fields |= {"billing_mode": "spot", "checkpoint_interval_s": 600}
        fields["allow_on_demand_fallback"] = i % 2 == 0
    elif i % 7 == 3:
        fields["pool_name"] = "a100"
    return fields


def _reset_and_seed(rng: random.Random, nodes: int):
    """The cluster in bulk: cards nearly full of running work, then the pending queue."""
    from django.utils import timezone

    from scheduler_app.choices import CapacityType, RequestState
    from scheduler_app.models import Allocation, GpuRequest, PassRecord, Pool

    empty_the_cluster()
    assert not PassRecord.objects.exists()
    on_demand = Pool.objects.create(name="a100", gpu_model="A100-80GB")
    spot = Pool.objects.create(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    gpus = bulk_a100_nodes([spot if n % 4 == 3 else on_demand for n in range(nodes)], GPUS_PER_NODE)
    user, teams = bench_user_in_teams()
    now = timezone.now()

    def request(i: int, **fields) -> GpuRequest:
        return GpuRequest(team=teams[i % 4], user=user, cpu_milli=1000, memory_mib=4096, **fields)

    running, pieces = [], []
    for i, gpu in enumerate(gpus):
        milli = rng.choice([1000, 1000, 1000, 875, 750])  # nearly full: an eighth or a quarter left at most
        running.append(
            request(
                i,
                name=f"running-{i}",
                gpu_milli=milli,
                state=RequestState.RUNNING,
                max_duration_s=rng.choice([3600, 4 * 3600, 12 * 3600]),
                created_at=now - dt.timedelta(hours=1),
            )
        )
        pieces.append((gpu, milli))
    running = GpuRequest.objects.bulk_create(running, batch_size=2000)
    Allocation.objects.bulk_create(
        (
            Allocation(
                request=request,
                gpu=gpu,
                milli=milli,
                gpu_memory_mib=81920 * milli // 1000,
                billing_mode="spot" if gpu.node.pool_id == spot.pk else "on-demand",
                started_at=now - dt.timedelta(minutes=rng.randint(1, 50)),
            )
            for request, (gpu, milli) in zip(running, pieces, strict=True)
        ),
        batch_size=2000,
    )
    pending = []
    for i in range(nodes * GPUS_PER_NODE):
        milli, count = rng.choice(SHAPES[2:])  # half cards and up: they wait for a card to free up
        pending.append(
            request(
                i,
                name=f"pending-{i}",
                gpu_milli=milli,
                num_gpus=count,
                max_duration_s=rng.choice([600, 3600, 6 * 3600]),
                created_at=now - dt.timedelta(seconds=nodes * GPUS_PER_NODE - i),
            )
        )
    GpuRequest.objects.bulk_create(pending, batch_size=2000)
    return user, teams


if __name__ == "__main__":
    main()
