"""What-if at scale: one replay of a large cluster's recorded history, timed.

    python -m bench.what_if [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_whatif]
                            [--nodes 1000] [--requests 100000] [--days 7] [--target-p95 S]

Builds a scratch PostgreSQL database (emptied first): --nodes nodes of 8 A100s in 4 priced pools,
8 teams, and --requests finished requests over the last --days days (submit times uniform, waits
exponential with a 5-minute mean, runs of 10 minutes to 4 hours, shapes from an eighth of a card to
4 cards). The history is bulk-inserted in its final states (a seed, not state changes); nodes go
through register_node. Then runs `scheduler_app.whatif.replay.run` on the whole period in this process, as
the background task does, and prints the time to read the history, the progress every 10 %, the
total, and the result's headline figures.
"""

import datetime as dt
import random
import time

from bench.scratch_db import arguments, migrated_django, recreate_database, register_a100_nodes

GPUS_PER_NODE = 8
POOLS = ("a100-od", "a100-spot", "h100-od", "l4-od")
TEAMS = 8
# (milli per card, cards): the shapes drawn, whole cards twice as often as each fraction.
SHAPES = ((125, 1), (250, 1), (500, 1), (1000, 1), (1000, 1), (1000, 2), (1000, 4))
LONGEST_RUN = dt.timedelta(hours=4)


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_whatif")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--target-p95", type=float, default=None, help="seconds: also run the recommendation")
    args = parser.parse_args()
    if args.days * 24 <= 6 or args.requests < 1 or args.nodes < 1:
        parser.error("give at least one node and one request, over more than 6 hours (--days above 0.25)")

    recreate_database(args.database_url)
    migrated_django(args.database_url)
    started = time.perf_counter()
    start, end = _seed(args.nodes, args.requests, dt.timedelta(days=args.days), random.Random(1))
    seconds = time.perf_counter() - started
    print(f"seeded {args.nodes:,} nodes and {args.requests:,} past requests in {seconds:.0f} s")

    from scheduler_app.whatif import replay

    scenario = replay.parse_scenario(
        {"start": start.isoformat(), "end": end.isoformat(), "target_p95_s": args.target_p95}
    )
    started = time.perf_counter()
    history = replay.load_history(scenario)
    print(f"history read: {len(history.jobs):,} requests in {time.perf_counter() - started:.1f} s")
    started, shown = time.perf_counter(), [0]

    def progress(fraction: float) -> None:
        tenth = int(fraction * 10)
        if tenth > shown[0]:
            shown[0] = tenth
            print(f"  {tenth * 10} % at {time.perf_counter() - started:.0f} s", flush=True)

    result = replay.run(scenario, progress=progress)
    print(f"what-if run: {time.perf_counter() - started:.0f} s")
    for side in ("actual", "scenario"):
        figures = result[side]
        print(
            f"  {side}: p95 delay {figures['p95_delay_s']} s, mean {figures['mean_delay_s']} s, "
            f"utilization {figures['utilization']:.1%}, cost {figures['cost_usd']} USD"
        )
    if result["recommendation"] is not None:
        print(f"  recommendation: {result['recommendation']['message']}")


def _seed(
    nodes: int, requests: int, span: dt.timedelta, rng: random.Random
) -> tuple[dt.datetime, dt.datetime]:
    """The cluster and its history; returns the period the history covers (first to last submit)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from billing_app.models import PoolPrice
    from scheduler_app.choices import CapacityType, RequestState
    from scheduler_app.models import Allocation, Gpu, GpuRequest
    from scheduler_app.services.inventory import create_pool
    from teams.models import Team

    now = timezone.now().replace(microsecond=0)
    first = now - span
    user = get_user_model().objects.create_user("ops", password="bench-what-if", is_staff=True)
    teams = [Team.objects.create(name=f"Team {i}", slug=f"team-{i}") for i in range(TEAMS)]
    pools = []
    for name in POOLS:
        spot = CapacityType.SPOT if "spot" in name else CapacityType.ON_DEMAND
        pool = create_pool(name=name, gpu_model="A100-80GB", capacity_type=spot)
        since = first - dt.timedelta(days=1)
        PoolPrice.objects.create(pool=pool, usd_per_gpu_hour="2.50", effective_from=since)
        pools.append(pool)
    register_a100_nodes(pools, nodes, GPUS_PER_NODE)
    cards = list(Gpu.objects.order_by("pk").values_list("pk", flat=True))
    rows, slices = [], []
    # Every request has ended by now: submits stop early enough for the longest wait and run.
    submit_span = (span - LONGEST_RUN - dt.timedelta(hours=2)).total_seconds()
    for i in range(requests):
        submitted = first + dt.timedelta(seconds=rng.random() * submit_span)
        began = submitted + dt.timedelta(seconds=min(rng.expovariate(1 / 300), 7200))
        ended = began + dt.timedelta(seconds=rng.uniform(600, LONGEST_RUN.total_seconds()))
        milli, count = rng.choice(SHAPES)
        rows.append(
            GpuRequest(
                team=teams[rng.randrange(TEAMS)],
                user=user,
                name=f"job-{i}",
                gpu_milli=milli,
                num_gpus=count,
                state=RequestState.SUCCEEDED,
                created_at=submitted,
                scheduled_at=began,
                started_at=began,
                ended_at=ended,
            )
        )
        card = rng.randrange(len(cards) - GPUS_PER_NODE)
        slices.append([(cards[card + k], began, ended) for k in range(count)])
    saved = GpuRequest.objects.bulk_create(rows, batch_size=5000)
    Allocation.objects.bulk_create(
        [
            Allocation(
                request=request,
                gpu_id=gpu,
                milli=request.gpu_milli,
                gpu_memory_mib=40960,
                billing_mode=request.billing_mode,
                started_at=began,
                ended_at=ended,
            )
            for request, cuts in zip(saved, slices, strict=True)
            for gpu, began, ended in cuts
        ],
        batch_size=5000,
    )
    return min(r.created_at for r in rows), max(r.created_at for r in rows) + dt.timedelta(seconds=1)


if __name__ == "__main__":
    main()
