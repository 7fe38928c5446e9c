"""Page sizes and times at 128, 1,024 and 8,000 GPUs: the cluster page's first paint and the reads
that grow with the cluster.

    python -m bench.page_sizes [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_bench_pages]
                               [--sizes 128,1024,8000] [--runs 5]

For each size, builds a scratch PostgreSQL database (emptied first): 4 pools, nodes of 8 A100s,
two teams, about 60 % of the cards held by running requests, 5 finished allocations per card as
history, one reading per card and a live tick. Running requests and history are bulk-inserted in
their states (a seed, not a state change: no pass places 5,000 requests in a useful time); nodes
go through register_node. Then times each page in process with Django's test client (no network,
templates cached, DEBUG off) and prints the median of --runs, the HTML's bytes and gzip'd bytes.
Targets: the cluster page under 300 KB and 300 ms at 8,000 GPUs.
"""

import datetime as dt
import gzip
import random
import statistics
import time

from bench.scratch_db import arguments, card_readings, migrated_django, register_a100_nodes

GPUS_PER_NODE = 8
POOLS = ("a100-od", "a100-spot", "h100-od", "l4-od")
HISTORY_PER_CARD = 5


def main() -> None:
    parser = arguments(__doc__, "gpu_portal_bench_pages")
    parser.add_argument("--sizes", default="128,1024,8000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    migrated_django(args.database_url)
    from django.test.utils import setup_test_environment

    setup_test_environment(debug=False)
    print("| GPUs | page | median ms | KB | gzip KB |")
    print("|---:|---|---:|---:|---:|")
    for gpus in (int(size) for size in args.sizes.split(",")):
        _seed(gpus, random.Random(gpus))
        for name, seconds, size, zipped in _measure(args.runs):
            print(f"| {gpus:,} | {name} | {seconds * 1000:.0f} | {size / 1024:.1f} | {zipped / 1024:.1f} |")


def _measure(runs: int):
    from django.test import Client

    from scheduler_app.live.ticker import tick
    from teams.models import Team

    slug = Team.objects.order_by("pk").first().slug
    member, operator = Client(), Client()
    member.login(username="member", password="bench-pages")
    operator.login(username="ops", password="bench-pages")
    pages = [
        ("cluster page (first paint)", member, "/cluster/"),
        ("cluster nodes, one pool, page 1 (50 nodes)", member, f"/cluster/nodes/?pool={POOLS[0]}"),
        ("cluster nodes, search", member, "/cluster/nodes/?node=node-00"),
        ("GET /api/v1/cluster/ (page 1, 50 nodes)", member, "/api/v1/cluster/"),
        ("GET /api/v1/cluster/?pool=…&state=ready", member, f"/api/v1/cluster/?pool={POOLS[1]}&state=ready"),
        ("operator nodes page (page 1)", operator, "/operator/nodes/"),
        ("team page (quota usage)", member, f"/teams/{slug}/"),
    ]
    for name, client, url in pages:
        client.get(url)  # warm: templates compiled, connections open
        timings = []
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(url)
            timings.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
        yield name, statistics.median(timings), len(response.content), len(gzip.compress(response.content))
    tick_times = []
    for _ in range(runs):
        started = time.perf_counter()
        tick()
        tick_times.append(time.perf_counter() - started)
    yield "live ticker: one tick (frame + delta)", statistics.median(tick_times), 0, 0


def _seed(gpus: int, rng: random.Random) -> None:
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.utils import timezone

    from scheduler_app.choices import CapacityType, RequestState
    from scheduler_app.live.ticker import tick
    from scheduler_app.models import Allocation, Gpu, GpuRequest
    from scheduler_app.services.inventory import create_pool
    from teams.choices import Role
    from teams.models import Membership, Team
    from telemetry.models import GpuSample

    with connection.cursor() as cursor:
        cursor.execute(
            "truncate scheduler_app_gpusample, scheduler_app_allocation, scheduler_app_event, "
            "scheduler_app_gpurequest, scheduler_app_gpu, scheduler_app_node, scheduler_app_teamquota, "
            "scheduler_app_pool, portal_membership, portal_team, auth_user cascade"
        )
    cache.clear()
    users = get_user_model()
    member = users.objects.create_user("member", password="bench-pages")
    users.objects.create_user("ops", password="bench-pages", is_staff=True)
    teams = [Team.objects.create(name=f"Team {i}", slug=f"team-{i}") for i in range(2)]
    Membership.objects.create(team=teams[0], user=member, role=Role.TEAM_ADMIN)
    pools = [
        create_pool(
            name=name,
            gpu_model="A100-80GB",
            capacity_type=CapacityType.SPOT if "spot" in name else CapacityType.ON_DEMAND,
        )
        for name in POOLS
    ]
    register_a100_nodes(pools, gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    now = timezone.now()
    cards = list(Gpu.objects.values_list("pk", flat=True))
    requests, allocations = [], []
    for card in cards:
        for h in range(HISTORY_PER_CARD + 1):
            running = h == HISTORY_PER_CARD
            if running and rng.random() > 0.6:
                continue
            started = now - dt.timedelta(hours=HISTORY_PER_CARD + 1 - h)
            requests.append(
                GpuRequest(
                    team=teams[rng.randrange(2)],
                    user=member,
                    name=f"job-{card}-{h}",
                    gpu_milli=500,
                    state=RequestState.RUNNING if running else RequestState.SUCCEEDED,
                    created_at=started,
                    scheduled_at=started,
                    started_at=started,
                    ended_at=None if running else started + dt.timedelta(minutes=50),
                )
            )
            allocations.append((card, started, None if running else started + dt.timedelta(minutes=50)))
    saved = GpuRequest.objects.bulk_create(requests, batch_size=5000)
    Allocation.objects.bulk_create(
        [
            Allocation(
                request=request,
                gpu_id=card,
                milli=500,
                gpu_memory_mib=40960,
                billing_mode=request.billing_mode,
                started_at=started,
                ended_at=ended,
            )
            for request, (card, started, ended) in zip(saved, allocations, strict=True)
        ],
        batch_size=5000,
    )
    GpuSample.objects.bulk_create(
        card_readings(cards, now, rng, power_mw=300_000, temperature_c=60), batch_size=5000
    )
    tick()


if __name__ == "__main__":
    main()
