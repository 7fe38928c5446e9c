"""Telemetry ingest: card samples stored per second on PostgreSQL from concurrent simulated agents.

    python -m bench.ingest [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_ingest]
        [--nodes 1250] [--gpus-per-node 8] [--agents 4] [--moments 10] [--seconds 20]

Builds a scratch database (recreated each run) with `--nodes` nodes of
`--gpus-per-node` cards (10,000 GPUs by default), then starts `--agents` processes. Each simulates
its share of the nodes at 1 Hz and sends each node's readings `--moments` seconds at a time, through
the ingest service the API calls (`telemetry.services.record_sample_moments`: every reading
validated, one row per card and time, the batch is the node's heartbeat), as fast as it can for
`--seconds`. Readings carry noisy utilization, memory, power, temperature and the node's network
throughput. Prints samples stored per second (counted in the database afterwards), each agent's
peak memory, and whether every row arrived. Target: at least 20,000 samples/s (10,000 GPUs at 1 Hz).
"""

import datetime as dt
import multiprocessing
import os
import random
import resource
import time

from bench.scratch_db import arguments, migrated_django, recreate_database


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_ingest")
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--moments", type=int, default=10, help="seconds of readings per request")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()

    recreate_database(args.database_url)  # fresh: a database from older migrations would not migrate
    migrated_django(args.database_url)
    node_ids = _rebuild_cluster(args.nodes, args.gpus_per_node)
    # Simulated time starts 50 minutes back, so the agents can run ahead of the clock for a while
    # and stay inside the ingest's acceptance window (an hour back, a minute ahead).
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=50)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    shares = [node_ids[i :: args.agents] for i in range(args.agents)]
    agents = [
        context.Process(target=_agent, args=(args, share, start, seed, results))
        for seed, share in enumerate(shares)
    ]
    for agent in agents:
        agent.start()
    reports = [results.get() for _ in agents]
    for agent in agents:
        agent.join()
    wall = max(r["finished"] for r in reports) - min(r["started"] for r in reports)

    from telemetry.models import GpuSample

    stored = GpuSample.objects.count()
    sent = sum(r["readings"] for r in reports)
    posts = sum(r["posts"] for r in reports)
    print(
        f"{args.nodes} nodes x {args.gpus_per_node} GPUs, {args.agents} agents, {args.moments} s per request"
        f": {posts} requests, {sent} readings sent, {stored} stored in {wall:.1f} s"
    )
    print(f"stored {stored / wall:,.0f} samples/s (target >= 20,000/s)")
    print("agent peak memory (MiB): " + ", ".join(f"{r['peak_mib']:.0f}" for r in reports))
    print("agent memory after the first second (MiB): " + ", ".join(f"{r['warm_mib']:.0f}" for r in reports))
    if stored != sent:
        raise SystemExit(f"{sent - stored} readings were not stored")
    _time_rollup(stored)


def _time_rollup(stored: int) -> None:
    """The upkeep's rollup over everything just stored: what one run costs per raw sample it reads."""
    from django.db.models import Max, Min

    from telemetry.models import GpuSample
    from telemetry.rollups import roll_up

    span = GpuSample.objects.aggregate(first=Min("sampled_at"), last=Max("sampled_at"))
    from django.conf import settings

    settings.TELEMETRY_ROLLUP_LOOKBACK_S = int((span["last"] - span["first"]).total_seconds()) + 120
    begin = time.perf_counter()
    written = roll_up(span["last"])
    seconds = time.perf_counter() - begin
    print(
        f"rollup of the {stored:,} samples: {written['minute']:,} minute and {written['hour']:,} hour rows "
        f"in {seconds:.1f} s ({stored / seconds:,.0f} samples/s)"
    )


def _rebuild_cluster(nodes: int, gpus_per_node: int) -> list[int]:
    """Empty the telemetry and inventory tables and add the cluster in bulk (registration is not measured)."""
    from django.db import connection

    from scheduler_app.choices import CapacityType
    from scheduler_app.models import Gpu, Node
    from scheduler_app.services.inventory import create_pool

    with connection.cursor() as cursor:
        cursor.execute(
            "truncate scheduler_app_gpusample, scheduler_app_nodesample, scheduler_app_gpurollup, "
            "scheduler_app_allocation, scheduler_app_gpurequest, scheduler_app_gpu, scheduler_app_node, "
            "scheduler_app_teamquota, scheduler_app_pool, scheduler_app_event cascade"
        )
    pool = create_pool(name="bench", gpu_model="A100-80GB", capacity_type=CapacityType.ON_DEMAND)
    created = Node.objects.bulk_create(
        Node(name=f"ingest-{n:05d}", pool=pool, cpu_milli=128_000, memory_mib=1_024_000) for n in range(nodes)
    )
    Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.name}-{i}", model="A100-80GB", memory_mib=81920)
        for node in created
        for i in range(gpus_per_node)
    )
    return [node.pk for node in created]


def _agent(args, node_ids: list[int], start: dt.datetime, seed: int, results) -> None:
    """One agent process: its nodes' readings, `args.moments` seconds a request, until time is up."""
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # DEBUG keeps the last 9,000 queries' SQL: megabytes with these arrays
    from scheduler_app.models import Node
    from telemetry import services as telemetry

    rng = random.Random(seed)
    nodes = list(Node.objects.filter(pk__in=node_ids).order_by("pk"))
    uuids = {node.pk: [f"GPU-{node.name}-{i}" for i in range(args.gpus_per_node)] for node in nodes}
    posts = readings = 0
    warm_mib = None
    started = time.time()
    deadline = time.perf_counter() + args.seconds
    second = 0
    while time.perf_counter() < deadline:
        for node in nodes:
            moments = [
                telemetry.SampleMoment(
                    start + dt.timedelta(seconds=second + m),
                    [_reading(rng, uuid) for uuid in uuids[node.pk]],
                    rng.randrange(200_000_000, 2_000_000_000),
                )
                for m in range(args.moments)
            ]
            readings += telemetry.record_sample_moments(node, moments)
            posts += 1
            if time.perf_counter() >= deadline:
                break
        second += args.moments
        if warm_mib is None:
            warm_mib = _peak_mib()
    results.put(
        {
            "posts": posts,
            "readings": readings,
            "started": started,
            "finished": time.time(),
            "peak_mib": _peak_mib(),
            "warm_mib": warm_mib or _peak_mib(),
        }
    )


def _reading(rng: random.Random, uuid: str) -> dict:
    util = min(100, max(0, int(rng.gauss(65, 15))))
    return {
        "uuid": uuid,
        "gpu_util_percent": util,
        "memory_used_mib": rng.randrange(20_000, 60_000),
        "power_mw": 100_000 + util * 3_000,
        "temperature_c": 45 + util // 4,
    }


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
